"""Command line -> a :class:`~microbench.config.Plan` of frozen BenchConfigs.

Flags keep the older tool's spellings (``--batch-size``, ``--fp16 1``, ``--compileContext``,
``--distributed_dataparallel``...) beside kebab-case aliases. Validation happens here, so a bad
value fails before any model is built: one line on stderr, exit 2.
"""
from __future__ import annotations

import argparse
import ast
import difflib
import inspect
import itertools
import sys
from dataclasses import replace
from typing import Any, NoReturn, Sequence

from . import __version__, precision as precision_table
from .preset import PRESETS
from .config import DEFAULT_NETWORK, DEFAULT_OUTPUT_DIR, BenchConfig, Plan, validate
from .errors import EXIT_USAGE, UsageError


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line, exit 2 (docs/architecture.md, "Errors")."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def _positive_int(text: str) -> int:
    value = _int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be zero or more, got {text}")
    return value


def _names(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"empty name in '{text}'")
    return names


def _positive_ints(text: str) -> list[int]:
    return [_positive_int(part) for part in text.split(",")]


MODES = ("training", "inference", "generate")


def _modes(text: str) -> list[str]:
    modes = _names(text)
    for mode in modes:
        if mode not in MODES:
            raise argparse.ArgumentTypeError(f"invalid choice '{mode}' (choose from "
                                             f"{', '.join(MODES)})")
    return modes


def _choices(allowed: Sequence[str]):
    def parse(text: str) -> list[str]:
        values = _names(text)
        for value in values:
            if value not in allowed:
                raise argparse.ArgumentTypeError(f"invalid choice '{value}' (choose from "
                                                 f"{', '.join(allowed)})")
        return values
    return parse


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got '{text}'") from None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        description="Benchmark PyTorch training and inference of a model on a GPU (ROCm or CUDA) "
                    "or the CPU: warm-up apart, device-event timing, every sample kept.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")

    model = parser.add_argument_group("model and workload")
    model.add_argument("--network", type=_names, default=[DEFAULT_NETWORK], metavar="NAME[,NAME]",
                       help="model to run: any torchvision classification, segmentation or video "
                            "model, shufflenet, xception, or an older alias (SqueezeNet, "
                            "resnext50); a comma-separated list sweeps")
    model.add_argument("--list-networks", action="store_true",
                       help="print the model names and exit")
    model.add_argument("--batch-size", type=_positive_ints, default=[64], metavar="N[,N]",
                       help="images (or clips) per iteration; a comma-separated list sweeps")
    model.add_argument("--image-size", type=_positive_int, default=None, metavar="PX",
                       help="input height and width (default: the model's native size, e.g. "
                            "224, 299 for inception_v3, 112 for r3d_18)")
    model.add_argument("--mode", type=_modes, default=["training"], metavar="MODE[,MODE]",
                       help="training: forward, loss, backward, SGD step; inference: forward "
                            "in inference mode with the model in eval(); generate (llama_*): "
                            "prefill a prompt, then decode token by token with a KV cache; a "
                            "comma-separated list sweeps")
    model.add_argument("--opt-step", type=_positive_int, default=1, metavar="N",
                       help="training: accumulate gradients over N iterations per optimizer step")
    model.add_argument("--seed", type=int, default=0, help="seed for weights and inputs")

    timing = parser.add_argument_group("timing")
    timing.add_argument("--iterations", type=_positive_int, default=20, metavar="N",
                        help="timed iterations (each one is a sample)")
    timing.add_argument("--warmup", type=_non_negative_int, default=5, metavar="N",
                        help="untimed warm-up iterations before the timed ones")
    timing.add_argument("--repeat", type=_positive_int, default=1, metavar="N",
                        help="independent trials (fresh model, optimizer and inputs each); the "
                             "headline is their median, with a 95%% confidence interval; in a "
                             "sweep the trials of all configurations interleave")
    timing.add_argument("--telemetry-interval", type=_non_negative_float, default=100.0,
                        metavar="MS",
                        help="sample clocks, power, temperature, throttling and energy every MS "
                             "milliseconds during the timed region (NVML or amdsmi); 0: off")
    timing.add_argument("--no-phases", action="store_true",
                        help="training: do not split iterations into forward, backward and "
                             "optimizer with two extra device events each")

    precision = parser.add_argument_group("precision")
    precision.add_argument("--fp16", type=int, choices=(0, 1), default=0,
                           help="1: whole network in FP16 (norm layers FP32) with FP32 master "
                                "weights")
    precision.add_argument("--amp", action="store_true",
                           help="automatic mixed precision: autocast (+ gradient scaling for fp16)")
    precision.add_argument("--amp-dtype", choices=("fp16", "bf16"), default="fp16",
                           help="autocast type for --amp; bf16 needs no gradient scaling")
    precision.add_argument("--amp-opt-level", type=int, choices=(0, 1, 2, 3), default=None,
                           help="older APEX level, mapped: 0 fp32, 1 --amp, 2 and 3 --fp16 1")
    precision.add_argument("--tf32", type=int, choices=(0, 1), default=0,
                           help="1: allow TF32 for FP32 matmuls and convolutions; 0 keeps IEEE FP32")

    fast = parser.add_argument_group("the fast path")
    fast.add_argument("--preset", choices=PRESETS, default=None,
                      help="fast: the levers that measured fastest for this model family and "
                           "device (channels-last, BF16/FP16 AMP, fused optimizer, "
                           "torch.compile, cudnn.benchmark; DDP bucket views); explicit flags "
                           "win, and the run prints the flags that reproduce it")
    fast.add_argument("--optimizer-impl", choices=("foreach", "fused"), default="foreach",
                      help="training: SGD's multi-tensor (foreach, PyTorch's own choice on GPUs) "
                           "or fused kernel; fused also takes AMP's scale and inf check on the "
                           "device, removing GradScaler's host sync")
    fast.add_argument("--cudnn-benchmark", type=int, choices=(0, 1), default=0,
                      help="1: let cuDNN (MIOpen's find mode on ROCm) time convolution "
                           "algorithms and keep the fastest; 0: its heuristics (PyTorch's "
                           "default). MIOPEN_FIND_ENFORCE=3 also tunes on ROCm")

    layout = parser.add_argument_group("memory layout and compilation")
    layout.add_argument("--nhwc", action="store_true",
                        help="channels-last memory format for model and input")
    layout.add_argument("--compile", action="store_true", help="torch.compile the model")
    layout.add_argument("--compileContext", "--compile-context", dest="compile_context",
                        default=None, metavar="DICT",
                        help="torch.compile keyword arguments as a Python dict literal, e.g. "
                             "\"{'mode': 'max-autotune', 'fullgraph': 'True'}\"")

    device = parser.add_argument_group("device")
    device.add_argument("--device", default="auto", metavar="DEV",
                        help="auto (GPU when there is one, else CPU), cuda, cuda:N or cpu; "
                             "ROCm GPUs are 'cuda' too")

    output = parser.add_argument_group("output")
    output.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR, metavar="DIR",
                        help="where the JSON result and the CSV summary go")
    output.add_argument("--output-file", default=None, metavar="NAME",
                        help="JSON result file name (default: built from network, mode, "
                             "precision and batch size)")
    output.add_argument("--csv-file", default=None, metavar="PATH",
                        help="CSV to append one row to (default: <output-dir>/benchmark_summary.csv)")
    output.add_argument("--no-files", action="store_true",
                        help="write no JSON or CSV, only print")
    output.add_argument("--quiet", action="store_true", help="no per-iteration lines")
    _add_language_args(parser)
    _add_distributed_args(parser)
    _add_profiler_args(parser)
    _add_sweep_args(parser)
    return parser


COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune",
                 "max-autotune-no-cudagraphs")


def _add_language_args(parser: argparse.ArgumentParser) -> None:
    from .archs.llama import ATTENTION_IMPLS
    group = parser.add_argument_group(
        "language models (llama_tiny, llama_medium, llama_1b, hf:<model_type>)")
    group.add_argument("--seq-len", type=_positive_ints, default=None, metavar="N[,N]",
                       help="tokens per sequence (default: the preset's; 512 for hf:); with "
                            "--mode generate, the positions of the KV cache; a list sweeps")
    group.add_argument("--vocab-size", type=_positive_int, default=None, metavar="N",
                       help="vocabulary size (default: the preset's)")
    group.add_argument("--kv-heads", type=_positive_int, default=None, metavar="N",
                       help="key/value heads (grouped-query attention); must divide the heads")
    group.add_argument("--attention", type=_choices(ATTENTION_IMPLS), default=None,
                       metavar="IMPL[,IMPL]",
                       help="eager (matmul-softmax-matmul), sdpa (PyTorch chooses the kernel; "
                            "the default), or scaled_dot_product_attention pinned to flash, "
                            "efficient or math; a list sweeps")
    group.add_argument("--model-kwargs", nargs="+", default=(), metavar="KEY=VALUE",
                       help="hf:<model_type>: overrides of the transformers config, e.g. "
                            "hidden_size=1024 num_hidden_layers=8")
    group.add_argument("--prompt-len", type=_positive_int, default=None, metavar="N",
                       help="--mode generate: prompt tokens per sequence (default: 128, or half "
                            "the sequence length)")
    group.add_argument("--gen-len", type=_positive_int, default=None, metavar="N",
                       help="--mode generate: tokens generated per sequence (default: 128, "
                            "within the sequence length)")


def _add_sweep_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "sweeps, capacity and comparisons (lists in --network, --batch-size and --mode sweep too)")
    group.add_argument("--precision", type=_choices(precision_table.CHOICES), default=None,
                       metavar="P[,P]",
                       help="precision mode(s): " + "; ".join(
                           f"{row.name} ({row.older_flags})" for row in precision_table.TABLE)
                       + "; amp = amp-fp16. One value is a single run's precision; a list "
                         "sweeps. Replaces --fp16/--amp/--tf32")
    group.add_argument("--compile-mode", type=_choices(COMPILE_MODES), default=None,
                       metavar="M[,M]",
                       help="compile modes to run: none, default, reduce-overhead, "
                            "max-autotune, max-autotune-no-cudagraphs")
    group.add_argument("--find-max-batch", action="store_true",
                       help="find the largest batch that fits (doubling, then bisecting), and "
                            "benchmark it")
    group.add_argument("--memory-budget-gb", type=_positive_float, default=None, metavar="GB",
                       help="with --find-max-batch: pretend the GPU has only this much memory")
    group.add_argument("--max-batch-limit", type=_positive_int, default=65536, metavar="N",
                       help="with --find-max-batch: stop growing at this batch")
    group.add_argument("--compare", default=None, metavar="BASELINE.json",
                       help="compare with a result of the same configuration; exit 5 when "
                            "throughput regressed beyond --tolerance")
    group.add_argument("--tolerance", type=float, default=5.0, metavar="PCT",
                       help="allowed throughput regression for --compare, in percent")
    group.add_argument("--plot", default=None, metavar="FILE.png",
                       help="plot a sweep: throughput and memory against batch size, or bars "
                            "per configuration")


def _schedule(text: str) -> tuple[int, int, int]:
    try:
        wait, warmup, active = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be WAIT,WARMUP,ACTIVE like 1,2,2, got '{text}'") \
            from None
    if wait < 0 or warmup < 0 or active < 1:
        raise argparse.ArgumentTypeError("needs WAIT >= 0, WARMUP >= 0 and ACTIVE >= 1")
    return wait, warmup, active


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got '{text}'") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number, zero or more, got {text}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got '{text}'") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _add_profiler_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "profiling (never inside the timed statistics: separate passes or excluded iterations)")
    group.add_argument("--autograd_profiler", "--autograd-profiler", action="store_true",
                       help="ROCTX/NVTX ranges per operator and per iteration during the timed "
                            "pass, then operator tables (device time, CPU time, memory) from a "
                            "separate profiled pass")
    group.add_argument("--kineto", action="store_true",
                       help="torch.profiler pass after the timed one; Chrome traces "
                            "trace<step>.json and an operator table")
    group.add_argument("--profiler-schedule", type=_schedule, default=(1, 2, 2),
                       metavar="W,U,A", help="--kineto schedule: wait, warmup, active steps")
    group.add_argument("--profiler-output", default=None, metavar="PATH",
                       help="directory (or file-name prefix) for --kineto traces (default: "
                            "--output-dir)")
    group.add_argument("--flops-prof-step", type=_non_negative_int, default=None, metavar="N",
                       help="run DeepSpeed's FLOPS profiler on timed iteration N (0-based, "
                            "below --iterations); that iteration is left out of the statistics")
    group.add_argument("--peak-tflops", type=_positive_float, default=None, metavar="T",
                       help="dense peak TFLOP/s to compute MFU against (default: the built-in "
                            "table for known GPUs; unknown otherwise)")
    group.add_argument("--capture-range", action="store_true",
                       help="start the device profiler API just before the timed iterations and "
                            "stop it after (nsys --capture-range=cudaProfilerApi, rocprofv3 "
                            "--selected-regions)")


def _device_ids(text: str) -> tuple[int, ...]:
    try:
        ids = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated GPU indices like 0,1, "
                                         f"got '{text}'") from None
    if len(set(ids)) != len(ids) or min(ids) < 0:
        raise argparse.ArgumentTypeError(f"must list distinct non-negative indices, got '{text}'")
    return ids


def _add_distributed_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "multi-GPU and multi-node (torchrun and srun need none of the manual flags)")
    group.add_argument("--distributed_dataparallel", "--distributed-dataparallel",
                       action="store_true",
                       help="manual launch, one process per node or GPU started by hand; needs "
                            "--rank, --world-size, --dist-backend and --dist-url")
    group.add_argument("--device_ids", "--device-ids", type=_device_ids, default=None,
                       metavar="IDS",
                       help="manual launch: GPUs of this process (e.g. 0,1); one worker each")
    group.add_argument("--rank", type=_non_negative_int, default=None,
                       help="manual launch: rank of this process")
    group.add_argument("--world-size", type=_positive_int, default=None,
                       help="manual launch: number of processes")
    group.add_argument("--dist-backend", choices=("nccl", "gloo"), default=None,
                       help="process-group backend (default: nccl on GPUs, which is RCCL on "
                            "ROCm; gloo on the CPU)")
    group.add_argument("--dist-url", default=None, metavar="URL",
                       help="rendezvous address, e.g. tcp://10.0.0.1:29500")
    group.add_argument("--dist-timeout", type=float, default=600.0, metavar="S",
                       help="seconds that rendezvous and collectives may wait for other ranks")
    group.add_argument("--ddp-bucket-cap-mb", type=float, default=25.0, metavar="MB",
                       help="DistributedDataParallel gradient bucket size")
    group.add_argument("--ddp-static-graph", action="store_true",
                       help="DistributedDataParallel static_graph=True")
    group.add_argument("--ddp-gradient-as-bucket-view", action="store_true",
                       help="DistributedDataParallel gradient_as_bucket_view=True")
    group.add_argument("--scaling-baseline", default=None, metavar="FILE.json",
                       help="a single-device result of the same configuration; adds scaling "
                            "efficiency to the summary")


# torch.compile's own keyword arguments; anything else in --compileContext is a usage error.
def _compile_keywords() -> set[str]:
    import torch
    return {name for name in inspect.signature(torch.compile).parameters if name != "model"}


# Inductor option names the workshop guide uses, and the real inductor options they mean.
WORKSHOP_INDUCTOR_OPTIONS = {
    "matmul-padding": "shape_padding",     # "Pad input tensors of matmul/bmm/addmm"
    "static-memory": "memory_planning",    # "pooled allocations for non-output tensors"
}


def _literal_booleans(value: Any) -> Any:
    """'True'/'False' strings become booleans (the older tool used bool(str), always True)."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if isinstance(value, dict):
        return {key: _literal_booleans(item) for key, item in value.items()}
    return value


def _inductor_options(options: Any, notes: list[str]) -> dict:
    if not isinstance(options, dict):
        raise UsageError("--compileContext: 'options' must be a dict of inductor options")
    import torch._inductor
    known = set(torch._inductor.list_options())
    resolved = {}
    for key, value in options.items():
        name = WORKSHOP_INDUCTOR_OPTIONS.get(key, str(key).replace("-", "_"))
        if name not in known:
            close = difflib.get_close_matches(name, known, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise UsageError(f"--compileContext: unknown inductor option '{key}'{hint}")
        if name != key:
            notes.append(f"compile option '{key}' is inductor's '{name}'")
        resolved[name] = value
    return resolved


def parse_compile_context(text: str | None) -> tuple[dict, list[str]]:
    """Parse ``--compileContext``: Python literals only, never evaluated as code."""
    if text is None or not text.strip():
        return {}, []
    try:
        context = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise UsageError(f"--compileContext must be a Python dict literal such as "
                         f"\"{{'mode': 'max-autotune'}}\", got: {text}") from None
    if not isinstance(context, dict):
        raise UsageError(f"--compileContext must be a dict, got {type(context).__name__}")
    context = _literal_booleans(context)
    unknown = sorted(set(map(str, context)) - _compile_keywords())
    if unknown:
        raise UsageError(f"--compileContext: {', '.join(unknown)} not torch.compile arguments "
                         f"(allowed: {', '.join(sorted(_compile_keywords()))})")
    if "mode" in context and "options" in context:
        raise UsageError("--compileContext: torch.compile takes 'mode' or 'options', not both")
    notes: list[str] = []
    if "options" in context:
        context["options"] = _inductor_options(context["options"], notes)
    return context, notes


def _check(config: BenchConfig) -> BenchConfig:
    """Rules that hold for every configuration, swept or not (config.validate)."""
    validate(config)
    return config


def to_config(args: argparse.Namespace) -> BenchConfig:
    """The configuration of a single run (the first value of any list flag)."""
    compile_options, compile_notes = parse_compile_context(args.compile_context)
    if args.compile_context and not args.compile:
        raise UsageError("--compileContext needs --compile")
    if args.flops_prof_step is not None:
        if args.flops_prof_step >= args.iterations:
            raise UsageError(f"--flops-prof-step {args.flops_prof_step} must be below "
                             f"--iterations {args.iterations} (it is a 0-based iteration index)")
        if args.iterations < 2:
            raise UsageError("--flops-prof-step needs --iterations of at least 2: the profiled "
                             "iteration is left out of the statistics")
    if args.dist_timeout <= 0:
        raise UsageError("--dist-timeout must be a positive number of seconds")
    for name in ("output_file", "csv_file"):
        value = getattr(args, name)
        if value is not None and not value.strip():
            raise UsageError(f"--{name.replace('_', '-')} must not be empty")
    precision, precision_notes = _precision(args)
    return _check(BenchConfig(
        network=args.network[0], batch_size=args.batch_size[0], image_size=args.image_size,
        seq_len=args.seq_len[0] if args.seq_len else None, vocab_size=args.vocab_size,
        kv_heads=args.kv_heads, attention=args.attention[0] if args.attention else None,
        model_kwargs=tuple(args.model_kwargs), prompt_len=args.prompt_len, gen_len=args.gen_len,
        phase_timing=not args.no_phases, optimizer_impl=args.optimizer_impl,
        cudnn_benchmark=bool(args.cudnn_benchmark), preset=args.preset,
        explicit=tuple(sorted(getattr(args, "explicit", ()))),
        mode=args.mode[0], opt_step=args.opt_step, iterations=args.iterations, warmup=args.warmup,
        repeat=args.repeat, telemetry_interval_ms=args.telemetry_interval,
        precision=precision, tf32=bool(args.tf32), nhwc=args.nhwc, compile=args.compile,
        compile_options=compile_options, notes=tuple(precision_notes + compile_notes),
        device=args.device,
        output_dir=args.output_dir, output_file=args.output_file, csv_file=args.csv_file,
        write_files=not args.no_files, quiet=args.quiet, seed=args.seed,
        distributed_dataparallel=args.distributed_dataparallel, device_ids=args.device_ids,
        rank=args.rank, world_size=args.world_size, dist_backend=args.dist_backend,
        dist_url=args.dist_url, dist_timeout=args.dist_timeout,
        ddp_bucket_cap_mb=args.ddp_bucket_cap_mb, ddp_static_graph=args.ddp_static_graph,
        ddp_gradient_as_bucket_view=args.ddp_gradient_as_bucket_view,
        scaling_baseline=args.scaling_baseline, autograd_profiler=args.autograd_profiler,
        kineto=args.kineto, profiler_schedule=args.profiler_schedule,
        profiler_output=args.profiler_output, flops_prof_step=args.flops_prof_step,
        peak_tflops=args.peak_tflops, capture_range=args.capture_range))


def _precision(args: argparse.Namespace) -> tuple[str, list[str]]:
    """The precision mode of the first configuration: --precision, else the older flags."""
    if args.precision:
        if args.fp16 or args.amp or args.tf32 or args.amp_opt_level is not None:
            raise UsageError("--precision replaces --fp16, --amp, --tf32 and --amp-opt-level: "
                             "use one or the other")
        return precision_table.lookup(args.precision[0]).name, []
    return precision_table.from_older_flags(args.fp16, args.amp, args.amp_dtype,
                                            args.amp_opt_level, bool(args.tf32))


def _sweep_values(args: argparse.Namespace) -> list[dict]:
    """One dict of changes per configuration: network x mode x precision x compile x batch."""
    if args.compile_mode and (args.compile or args.compile_context):
        raise UsageError("--compile-mode replaces --compile and --compileContext: use one")
    axes = [
        [dict(network=network) for network in args.network],
        [dict(mode=mode) for mode in args.mode],
        [_precision_change(name) for name in args.precision or [None]],
        [_compile_change(mode) for mode in args.compile_mode or [None]],
        [dict(attention=name) for name in args.attention or [None]],
        [dict(seq_len=length) for length in args.seq_len or [None]],
        [dict(batch_size=batch) for batch in args.batch_size],
    ]
    return [{key: value for part in combination for key, value in part.items()}
            for combination in itertools.product(*axes)]


def _precision_change(name: str | None) -> dict:
    if name is None:
        return {}
    row = precision_table.lookup(name)
    return dict(precision=row.name, tf32=row.tf32)


def _compile_change(mode: str | None) -> dict:
    if mode is None:
        return {}
    return dict(compile=mode != "none",
                compile_options={} if mode in ("none", "default") else {"mode": mode})


def to_plan(args: argparse.Namespace) -> Plan:
    base = to_config(args)
    configs = tuple(_check(replace(base, **change)) for change in _sweep_values(args))
    plan = Plan(configs=configs, find_max_batch=args.find_max_batch,
                memory_budget_gb=args.memory_budget_gb, max_batch_limit=args.max_batch_limit,
                compare=args.compare, tolerance_pct=args.tolerance, plot=args.plot)
    if plan.is_sweep and args.output_file:
        raise UsageError("--output-file names one file, but a sweep writes one result per "
                         "configuration: drop it")
    if plan.is_sweep and (args.compare or args.find_max_batch):
        raise UsageError("--compare and --find-max-batch take one configuration, not a sweep")
    if args.memory_budget_gb is not None and not args.find_max_batch:
        raise UsageError("--memory-budget-gb goes with --find-max-batch")
    if args.tolerance < 0:
        raise UsageError("--tolerance must be zero or more (percent)")
    return plan


# Command-line destinations and the config fields they set, where the names differ (a preset
# must not overrule what the user gave).
_PRESET_FIELDS = {"amp": "precision", "fp16": "precision", "amp_dtype": "precision",
                  "amp_opt_level": "precision", "compile_context": "compile_options",
                  "compile_mode": "compile", "no_phases": "phase_timing"}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.explicit = _given(parser, argv)
    return args


def _given(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The config fields the user set on the command line: parse again with every default
    suppressed, so that only given options appear."""
    silent = build_parser()
    for action in silent._actions:
        action.default = argparse.SUPPRESS
    given = set(vars(silent.parse_args(argv)))
    return {_PRESET_FIELDS.get(name, name) for name in given} | (
        {"compile_options"} if "compile_mode" in given else set())
