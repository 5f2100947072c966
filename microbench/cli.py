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
import io
import itertools
import math
import os
import re
import shutil
import sys
import tokenize
from dataclasses import replace
from typing import Any, Callable, NoReturn, Sequence

from . import __version__, precision as precision_table, rerun
from .preset import PRESETS
from .config import DEFAULT_NETWORK, DEFAULT_OUTPUT_DIR, BenchConfig, Plan, validate
from .errors import EXIT_USAGE, UsageError


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line, exit 2 (docs/architecture.md, "Errors")."""

    def error(self, message: str) -> NoReturn:
        from .process import env_rank_prefix
        self.exit(EXIT_USAGE, f"{env_rank_prefix()}{self.prog}: error: {message} (see --help)\n")


# Upper bounds far above any real run; a larger value is a typo, and would reach torch as an
# attempt to allocate petabytes, an integer overflow or a loop that never ends.
MAX_ITERATIONS = 10**7
MAX_WARMUP = 10**6
MAX_BATCH = 2**20
MAX_IMAGE_SIZE = 16384
MAX_SEED = 2**63 - 1                # torch.manual_seed takes 64 bits
MAX_RANKS = 2**20
MAX_DEVICE_INDEX = 1023
MAX_DIST_TIMEOUT_S = 10**7          # 115 days: still a finite timedelta for every backend
MAX_BUCKET_CAP_MB = 10**6
MAX_MEMORY_GB = 10**6
MAX_PEAK_TFLOPS = 10**7
MAX_PROFILER_STEPS = 10**4
MAX_TRIALS = 1000
MAX_TELEMETRY_MS = 60_000
MAX_SEQ_LEN = 2**20
MAX_VOCAB = 2**24


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high]."""
    def parse(text: str) -> int:
        value = _int(text)
        if not low <= value <= high:
            what = {1: "a positive integer", 0: "zero or more"}.get(low, f"at least {low}")
            raise argparse.ArgumentTypeError(f"must be {what}, at most {high:,}; got {text}")
        return value
    return parse


def finite_float(low: float, high: float, low_inclusive: bool = False) -> Callable[[str], float]:
    """An argparse type, the one check of every float flag: a number (float() also takes 'nan'
    and 'inf', which no flag means), finite, above ``low`` (or equal, if ``low_inclusive``) and
    at most ``high``."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got '{text}'") from None
        above = value >= low if low_inclusive else value > low
        if not (math.isfinite(value) and above and value <= high):
            what = ("zero or more" if low == 0 and low_inclusive else
                    "positive" if low == 0 else f"above {low:g}")
            raise argparse.ArgumentTypeError(f"must be a finite number, {what}, at most "
                                             f"{high:g}; got {text}")
        return value
    return parse


_positive_int = bounded_int(1, MAX_BATCH)
_non_negative_int = bounded_int(0, MAX_ITERATIONS)


def _names(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"empty name in '{text}'")
    return names


def _positive_ints(text: str) -> list[int]:
    return [_positive_int(part) for part in text.split(",")]


def _list_of(parse_one: Callable[[str], int]) -> Callable[[str], list[int]]:
    return lambda text: [parse_one(part) for part in text.split(",")]


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


class HelpFormatter(argparse.HelpFormatter):
    """Each default shown once, spelled as the user would type it (``64``, ``1,2,2``), and
    none for switches (off unless given) or where the help text already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (default is None or default is False or default == () or default == argparse.SUPPRESS
                or not action.option_strings or "default" in text.lower()):
            return text
        return f"{text} (default: {_as_typed(default)})"


def _as_typed(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(_as_typed(item) for item in value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).replace("%", "%%")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        description="Benchmark PyTorch training and inference of a model on a GPU (ROCm or CUDA) "
                    "or the CPU: warm-up apart, device-event timing, every sample kept.",
        formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")

    model = parser.add_argument_group("model and workload")
    model.add_argument("--network", "--model", type=_names, default=[DEFAULT_NETWORK], metavar="NAME[,NAME]",
                       help="model to run: any torchvision classification, segmentation or video "
                            "model, shufflenet, xception, or an older alias (SqueezeNet, "
                            "resnext50), llama_tiny/llama_medium/llama_1b, hf:<model_type>; a "
                            "comma-separated list sweeps. --model is timm's spelling")
    model.add_argument("--list-networks", action="store_true",
                       help="print the model names and exit")
    model.add_argument("--batch-size", type=_positive_ints, default=[64], metavar="N[,N]",
                       help=f"images (or clips) per iteration, at most {MAX_BATCH:,}; a "
                            f"comma-separated list sweeps")
    model.add_argument("--image-size", "--img-size", type=bounded_int(1, MAX_IMAGE_SIZE), default=None,
                       metavar="PX",
                       help="input height and width (default: the model's native size, e.g. "
                            "224, 299 for inception_v3, 112 for r3d_18); --img-size is timm's "
                            "spelling")
    model.add_argument("--mode", type=_modes, default=["training"], metavar="MODE[,MODE]",
                       help="training: forward, loss, backward, SGD step; inference: forward "
                            "in inference mode with the model in eval(); generate (llama_*): "
                            "prefill a prompt, then decode token by token with a KV cache; a "
                            "comma-separated list sweeps")
    model.add_argument("--opt-step", type=bounded_int(1, MAX_ITERATIONS), default=1, metavar="N",
                       help="training: accumulate gradients over N iterations per optimizer step")
    model.add_argument("--seed", type=bounded_int(0, MAX_SEED), default=0, metavar="N",
                       help="seed for weights and inputs (0 to 2**63-1)")
    model.add_argument("--rerun", default=None, metavar="RESULT.json",
                       help="repeat the run a result file stores: its configuration, as flags, "
                            "with the flags given here added or replacing them (output "
                            "locations and the launch are this invocation's)")

    timing = parser.add_argument_group("timing")
    timing.add_argument("--iterations", type=bounded_int(1, MAX_ITERATIONS), default=20,
                        metavar="N", help=f"timed iterations (each one is a sample), at most "
                                          f"{MAX_ITERATIONS:,}")
    timing.add_argument("--warmup", type=bounded_int(0, MAX_WARMUP), default=5, metavar="N",
                        help=f"untimed warm-up iterations before the timed ones, at most "
                             f"{MAX_WARMUP:,}")
    timing.add_argument("--repeat", type=bounded_int(1, MAX_TRIALS), default=1, metavar="N",
                        help="independent trials (fresh model, optimizer and inputs each); the "
                             "headline is their median, with a 95%% confidence interval; in a "
                             "sweep the trials of all configurations interleave")
    timing.add_argument("--telemetry-interval", type=finite_float(0, MAX_TELEMETRY_MS, True),
                        default=100.0, metavar="MS",
                        help="sample clocks, power, temperature, throttling and energy every MS "
                             "milliseconds during the timed region (NVML or amdsmi); 0: off")
    timing.add_argument("--no-phases", action="store_true",
                        help="training: do not split iterations into forward, backward and "
                             "optimizer with two extra device events each")

    precision = parser.add_argument_group(
        "precision (--precision names the mode; --fp16, --amp, --amp-dtype, --amp-opt-level "
        "and --tf32 are the older spellings of the same modes)")
    precision.add_argument("--precision", type=_choices(precision_table.CHOICES), default=None,
                           metavar="P[,P]",
                           help="the precision mode: " + "; ".join(
                               f"{row.name} ({row.older_flags})" for row in precision_table.TABLE)
                           + "; amp = amp-fp16 (default: fp32). A comma-separated list sweeps")
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
    layout.add_argument("--nhwc", "--channels-last", action="store_true",
                        help="channels-last memory format for model and input (--channels-last "
                             "is timm's spelling)")
    layout.add_argument("--compile", action="store_true", help="torch.compile the model")
    layout.add_argument("--compileContext", "--compile-context", dest="compile_context",
                        default=None, metavar="DICT",
                        help="torch.compile keyword arguments as a Python dict literal, e.g. "
                             "\"{'mode': 'max-autotune', 'fullgraph': 'True'}\"; read as "
                             "literals, never run. Keys: fullgraph, dynamic, disable, mode, "
                             "backend, options; 'options' takes only inductor performance "
                             "settings from an allow-list (README), none that names a program, "
                             "a path or a file to write")

    device = parser.add_argument_group("device")
    device.add_argument("--device", default="auto", metavar="DEV",
                        help="auto (GPU when there is one, else CPU), cuda, cuda:N or cpu; "
                             "ROCm GPUs are 'cuda' too")

    output = parser.add_argument_group("output")
    output.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR, metavar="DIR",
                        help="where the JSON result and the CSV summary go")
    output.add_argument("--output-file", default=None, metavar="NAME",
                        help="JSON result file name inside --output-dir, no directory part "
                             "(default: built from network, mode, precision and batch size)")
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
    group.add_argument("--seq-len", type=_list_of(bounded_int(1, MAX_SEQ_LEN)), default=None,
                       metavar="N[,N]",
                       help="tokens per sequence (default: the preset's; 512 for hf:); with "
                            "--mode generate, the positions of the KV cache; a list sweeps")
    group.add_argument("--vocab-size", type=bounded_int(1, MAX_VOCAB), default=None, metavar="N",
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
    group.add_argument("--prompt-len", type=bounded_int(1, MAX_SEQ_LEN), default=None, metavar="N",
                       help="--mode generate: prompt tokens per sequence (default: 128, or half "
                            "the sequence length)")
    group.add_argument("--gen-len", type=bounded_int(1, MAX_SEQ_LEN), default=None, metavar="N",
                       help="--mode generate: tokens generated per sequence (default: 128, "
                            "within the sequence length)")


def _add_sweep_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "sweeps, capacity and comparisons (lists in --network, --batch-size, --mode, --precision, "
        "--seq-len and --attention sweep too)")
    group.add_argument("--compile-mode", type=_choices(COMPILE_MODES), default=None,
                       metavar="M[,M]",
                       help="compile modes to run: none, default, reduce-overhead, "
                            "max-autotune, max-autotune-no-cudagraphs")
    group.add_argument("--find-max-batch", action="store_true",
                       help="find the largest batch that fits (doubling, then bisecting), and "
                            "benchmark it")
    group.add_argument("--memory-budget-gb", type=finite_float(0, MAX_MEMORY_GB), default=None,
                       metavar="GB",
                       help="with --find-max-batch: on a GPU, cap PyTorch's allocator as if the "
                            "GPU had only this much memory; on the CPU (where it is required), "
                            "the process's peak resident memory")
    group.add_argument("--max-batch-limit", type=bounded_int(1, MAX_BATCH), default=65536,
                       metavar="N",
                       help="with --find-max-batch: stop growing at this batch")
    group.add_argument("--batch-granularity", type=bounded_int(1, MAX_BATCH), default=8,
                       metavar="N",
                       help="with --find-max-batch: stop bisecting at a multiple of N (1: the "
                            "exact largest batch, at the cost of more probes)")
    group.add_argument("--compare", default=None, metavar="BASELINE.json",
                       help="compare with a result of the same configuration; exit 5 when "
                            "throughput regressed beyond --tolerance")
    group.add_argument("--tolerance", type=finite_float(0, 100, low_inclusive=True),
                       default=5.0, metavar="PCT",
                       help="allowed throughput regression for --compare, in percent (0 to 100)")
    group.add_argument("--plot", default=None, metavar="FILE.png",
                       help="plot a sweep: throughput and memory against batch size, or bars "
                            "per configuration; the suffix names the format (png, svg, pdf...)")


def _schedule(text: str) -> tuple[int, int, int]:
    try:
        wait, warmup, active = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be WAIT,WARMUP,ACTIVE like 1,2,2, got '{text}'") \
            from None
    if wait < 0 or warmup < 0 or active < 1 or max(wait, warmup, active) > MAX_PROFILER_STEPS:
        raise argparse.ArgumentTypeError(f"needs WAIT >= 0, WARMUP >= 0 and ACTIVE >= 1, each "
                                         f"at most {MAX_PROFILER_STEPS}")
    return wait, warmup, active


def _add_profiler_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "profiling (never inside the timed statistics: separate passes or excluded iterations)")
    group.add_argument("--autograd_profiler", "--autograd-profiler", action="store_true",
                       help="a ROCTX/NVTX range per timed iteration (a range per operator "
                            "would slow the timed pass, so those come in a separate marked pass "
                            "after it), then operator tables (device time, CPU time, memory) "
                            "from another separate pass")
    group.add_argument("--kineto", action="store_true",
                       help="torch.profiler pass after the timed one; Chrome traces "
                            "<result>_trace<step>.json and an operator table")
    group.add_argument("--profiler-schedule", type=_schedule, default=(1, 2, 2),
                       metavar="W,U,A", help="--kineto schedule: wait, warmup, active steps")
    group.add_argument("--profiler-output", default=None, metavar="PATH",
                       help="directory (or file-name prefix) for --kineto traces (default: "
                            "--output-dir)")
    group.add_argument("--flops-prof-step", type=bounded_int(0, MAX_ITERATIONS), default=None,
                       metavar="N",
                       help="run DeepSpeed's FLOPS profiler on timed iteration N (0-based, "
                            "below --iterations); that iteration is left out of the statistics")
    group.add_argument("--peak-tflops", type=finite_float(0, MAX_PEAK_TFLOPS), default=None,
                       metavar="T",
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
    if len(set(ids)) != len(ids) or min(ids) < 0 or max(ids) > MAX_DEVICE_INDEX:
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
    group.add_argument("--rank", type=bounded_int(0, MAX_RANKS - 1), default=None, metavar="N",
                       help="manual launch: rank of this process")
    group.add_argument("--world-size", type=bounded_int(1, MAX_RANKS), default=None, metavar="N",
                       help="manual launch: number of processes")
    group.add_argument("--dist-backend", choices=("nccl", "gloo"), default=None,
                       help="process-group backend (default: nccl on GPUs, which is RCCL on "
                            "ROCm; gloo on the CPU)")
    group.add_argument("--dist-url", default=None, metavar="URL",
                       help="rendezvous address, e.g. tcp://10.0.0.1:29500")
    group.add_argument("--dist-timeout", type=finite_float(0, MAX_DIST_TIMEOUT_S), default=600.0,
                       metavar="S",
                       help="seconds that rendezvous and collectives may wait for other ranks")
    group.add_argument("--ddp-bucket-cap-mb", type=finite_float(0, MAX_BUCKET_CAP_MB),
                       default=25.0, metavar="MB",
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

# The inductor options --compileContext may set: performance settings only. Inductor has
# hundreds of options, and some name a program to run (cpp.cxx, cuda.cuda_cxx), a directory to
# take code from (cutlass_dir, rocm.ck_dir) or a file to write (trace.debug_dir,
# profile_bandwidth_output); a command line that passes them through lets a result file or a
# CI variable run any program. An allow-list keeps new such options out too. Options missing
# from the installed PyTorch are unknown, as before.
INDUCTOR_ALLOWED = frozenset({
    "max_autotune", "max_autotune_pointwise", "max_autotune_gemm", "max_autotune_gemm_backends",
    "max_autotune_conv_backends", "max_autotune_gemm_search_space", "coordinate_descent_tuning",
    "coordinate_descent_check_all_directions", "coordinate_descent_search_radius",
    "epilogue_fusion", "epilogue_fusion_first", "pattern_matcher", "shape_padding",
    "comprehensive_padding", "padding_alignment_bytes", "memory_planning", "memory_pool",
    "freezing", "layout_optimization", "force_layout_optimization", "keep_output_stride",
    "aggressive_fusion", "benchmark_kernel", "benchmark_fusion", "benchmark_epilogue_fusion",
    "split_reductions", "conv_1x1_as_mm", "fallback_random", "cpp_wrapper",
    "search_autotune_cache", "reorder_for_locality", "reorder_for_peak_memory",
    "reorder_for_compute_comm_overlap", "combo_kernels", "permute_fusion", "use_mixed_mm",
    "emulate_precision_casts", "max_fusion_size", "max_pointwise_cat_inputs",
    "unroll_reductions_threshold", "realize_opcount_threshold", "size_asserts", "nan_asserts",
    "implicit_fallbacks", "dynamic_scale_rblock", "assume_aligned_inputs", "online_softmax",
    "triton.cudagraphs", "triton.cudagraph_trees", "triton.cudagraph_skip_dynamic_graphs",
    "triton.autotune_pointwise", "triton.autotune_cublasLt", "triton.max_tiles",
    "triton.tiling_prevents_pointwise_fusion", "triton.unique_kernel_names",
    "triton.persistent_reductions", "triton.multi_kernel", "triton.divisible_by_16",
    "triton.prefer_nd_tiling", "triton.enable_persistent_tma_matmul",
    "cpp.threads", "cpp.simdlen", "cpp.min_chunk_size", "cpp.dynamic_threads",
    "cpp.enable_tiling_heuristics", "cpp.weight_prepack",
})
# A string value is a short word list (max_autotune_gemm_backends: "ATEN,TRITON"), never a path.
_SAFE_STRING = re.compile(r"[A-Za-z0-9_,.+-]{1,64}")
# Bounds on the literal, checked before ast.literal_eval: a deeply nested or huge literal would
# end in RecursionError or MemoryError there. Ours nest two deep ({'options': {...}}).
MAX_COMPILE_CONTEXT_CHARS = 4096
MAX_COMPILE_CONTEXT_DEPTH = 4


def _literal_booleans(value: Any) -> Any:
    """'True'/'False' strings become booleans (the older tool used bool(str), always True)."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if isinstance(value, dict):
        return {key: _literal_booleans(item) for key, item in value.items()}
    return value


def _check_scalar(where: str, value: Any, default: Any) -> Any:
    """An inductor option's value: the type of its default, bounded, a string never a path
    or a program."""
    kinds = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}
    allowed = kinds.get(type(default), (bool, int, float, str))
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        raise UsageError(f"--compileContext: {where} must be "
                         f"{' or '.join(kind.__name__ for kind in allowed)}, got {value!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and \
            not (math.isfinite(value) and abs(value) <= 2**31):
        raise UsageError(f"--compileContext: {where} is out of range: {value!r}")
    if isinstance(value, str) and (not _SAFE_STRING.fullmatch(value) or shutil.which(value)):
        raise UsageError(f"--compileContext: {where} must be a short word list such as "
                         f"'ATEN,TRITON', not a path or a program: {value!r}")
    return value


def _inductor_options(options: Any, notes: list[str]) -> dict:
    if not isinstance(options, dict):
        raise UsageError("--compileContext: 'options' must be a dict of inductor options")
    import torch._inductor
    import torch._inductor.config as inductor_config
    known = set(torch._inductor.list_options())
    defaults = inductor_config.get_config_copy()
    resolved = {}
    for key, value in options.items():
        name = WORKSHOP_INDUCTOR_OPTIONS.get(key, str(key).replace("-", "_"))
        if name not in known:
            close = difflib.get_close_matches(name, known & INDUCTOR_ALLOWED, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise UsageError(f"--compileContext: unknown inductor option '{key}'{hint}")
        if name not in INDUCTOR_ALLOWED:
            raise UsageError(f"--compileContext: inductor option '{key}' is not allowed: only "
                             f"performance settings that run no program and write no file "
                             f"are (see README, --compileContext)")
        if name != key:
            notes.append(f"compile option '{key}' is inductor's '{name}'")
        resolved[name] = _check_scalar(f"option '{key}'", value, defaults.get(name))
    return resolved


def _check_literal_shape(text: str) -> None:
    """Size and nesting depth of the literal, counted on its tokens (brackets inside strings
    do not count) before anything recursive parses it."""
    if len(text) > MAX_COMPILE_CONTEXT_CHARS:
        raise UsageError(f"--compileContext is {len(text)} characters long; at most "
                         f"{MAX_COMPILE_CONTEXT_CHARS}")
    depth = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.OP and token.string in "([{":
                depth += 1
                if depth > MAX_COMPILE_CONTEXT_DEPTH:
                    raise UsageError(f"--compileContext nests more than "
                                     f"{MAX_COMPILE_CONTEXT_DEPTH} levels deep; it takes a dict "
                                     f"such as \"{{'options': {{'max_autotune': True}}}}\"")
            elif token.type == tokenize.OP and token.string in ")]}":
                depth -= 1
    except (tokenize.TokenError, SyntaxError):
        pass                                 # malformed: literal_eval says so below


def _compile_modes() -> set[str]:
    import torch._inductor
    return set(torch._inductor.list_mode_options())


def _compile_backends() -> set[str]:
    import torch._dynamo
    return {name for name in torch._dynamo.list_backends(exclude_tags=())
            if "TESTING" not in name and "minifier" not in name}


def _one_of(allowed: Callable[[], set[str]]) -> Callable[[str, Any], Any]:
    def check(key: str, value: Any) -> Any:
        if value is not None and value not in allowed():
            raise UsageError(f"--compileContext: '{key}' must be one of "
                             f"{', '.join(sorted(allowed()))}, got {value!r}")
        return value
    return check


def _boolean(none_allowed: bool) -> Callable[[str, Any], Any]:
    def check(key: str, value: Any) -> Any:
        if not (isinstance(value, bool) or (none_allowed and value is None)):
            raise UsageError(f"--compileContext: '{key}' must be True or False"
                             f"{' or None' if none_allowed else ''}, got {value!r}")
        return value
    return check


# torch.compile's arguments that --compileContext may set, each with its check of the value.
COMPILE_ARGUMENTS = {
    "fullgraph": _boolean(False), "dynamic": _boolean(True), "disable": _boolean(False),
    "mode": _one_of(_compile_modes), "backend": _one_of(_compile_backends),
}


def parse_compile_context(text: str | None) -> tuple[dict, list[str]]:
    """Parse ``--compileContext``: Python literals only, never evaluated as code, every key and
    value checked."""
    if text is None or not text.strip():
        return {}, []
    _check_literal_shape(text)
    try:
        context = ast.literal_eval(text.strip())
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        raise UsageError(f"--compileContext must be a Python dict literal such as "
                         f"\"{{'mode': 'max-autotune'}}\", got: {text[:200]}") from None
    if not isinstance(context, dict):
        raise UsageError(f"--compileContext must be a dict, got {type(context).__name__}")
    context = _literal_booleans(context)
    unknown = sorted(set(map(str, context)) - _compile_keywords())
    if unknown:
        raise UsageError(f"--compileContext: {', '.join(unknown)} not torch.compile arguments "
                         f"(allowed: {', '.join(sorted(COMPILE_ARGUMENTS) + ['options'])})")
    unsupported = sorted(set(context) - set(COMPILE_ARGUMENTS) - {"options"})
    if unsupported:
        raise UsageError(f"--compileContext: {', '.join(unsupported)} cannot be set here "
                         f"(allowed: {', '.join(sorted(COMPILE_ARGUMENTS) + ['options'])})")
    if "mode" in context and "options" in context:
        raise UsageError("--compileContext: torch.compile takes 'mode' or 'options', not both")
    notes: list[str] = []
    for key, check in COMPILE_ARGUMENTS.items():
        if key in context:
            check(key, context[key])
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
    for name in ("output_file", "csv_file", "output_dir", "plot", "profiler_output"):
        value = getattr(args, name)
        if value is not None and not value.strip():
            raise UsageError(f"--{name.replace('_', '-')} must not be empty")
    if args.output_file is not None:
        _check_file_name(args.output_file)
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
        compile_options=compile_options,
        notes=tuple(getattr(args, "rerun_notes", []) + precision_notes + compile_notes),
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


def _check_file_name(name: str) -> None:
    """--output-file is a name inside --output-dir: results stay where the user said they go
    (a name like ../../x.json or /etc/x would write elsewhere)."""
    separators = {"/", "\\", os.sep} | ({os.altsep} if os.altsep else set())
    if any(sep in name for sep in separators) or name in (".", "..") or os.path.isabs(name):
        raise UsageError(f"--output-file {name!r} must be a file name, not a path: put the "
                         f"directory in --output-dir")
    if "\0" in name:
        raise UsageError("--output-file must not hold a NUL character")


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
                batch_granularity=args.batch_granularity,
                compare=args.compare, tolerance_pct=args.tolerance, plot=args.plot)
    if plan.is_sweep and args.output_file:
        raise UsageError("--output-file names one file, but a sweep writes one result per "
                         "configuration: drop it")
    if plan.is_sweep and (args.compare or args.find_max_batch):
        raise UsageError("--compare and --find-max-batch take one configuration, not a sweep")
    if args.memory_budget_gb is not None and not args.find_max_batch:
        raise UsageError("--memory-budget-gb goes with --find-max-batch")
    if args.plot and not plan.is_sweep:
        raise UsageError("--plot draws a sweep, and this is one configuration: give a list to "
                         "--batch-size, --network, --mode, --precision or --compile-mode")
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
    rerun_notes: list[str] = []
    if args.rerun is not None:
        # The stored configuration's flags first, so that the flags given now replace them.
        path = args.rerun
        stored, rerun_notes = rerun.flags_of(path)
        argv = stored + _without_rerun(argv)
        args = parser.parse_args(argv)
        rerun_notes.insert(0, f"--rerun {path}: {' '.join(stored)}")
    args.rerun_notes = rerun_notes
    args.explicit = _given(parser, argv)
    return args


def _without_rerun(argv: list[str]) -> list[str]:
    kept, skip = [], False
    for token in argv:
        if skip:
            skip = False
        elif token == "--rerun":
            skip = True
        elif not token.startswith("--rerun="):
            kept.append(token)
    return kept


def _given(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The config fields the user set on the command line: parse again with every default
    suppressed, so that only given options appear."""
    silent = build_parser()
    for action in silent._actions:
        action.default = argparse.SUPPRESS
    given = set(vars(silent.parse_args(argv)))
    return {_PRESET_FIELDS.get(name, name) for name in given} | (
        {"compile_options"} if "compile_mode" in given else set())
