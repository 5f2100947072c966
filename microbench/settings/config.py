"""Settings: the frozen :class:`BenchConfig` the command line produces, one schema per setting.

A config says what the user asked for: it is what a result file stores and what ``--rerun``
replays. Each field declares, once, how it is spelled on the command line and how it behaves
(:func:`setting`): its flag, type, range, help and --help section, whether it is a switch,
whether ``--rerun`` replays it, whether the ranks of a job may differ in it, whether ``--preset``
may choose it, and whether it is a sweep axis. The parser (``cli.build_parser``, which walks
these declarations), the command line's configs (``cli.to_config``), ``--rerun``
(:mod:`microbench.plan.rerun`), the preset's reproduce-it line (``preset.as_flags``), rank
agreement and result identity all read that declaration, so a new flag is its field here (and
its line in docs/flags.md, which tests/test_docs.py asks for).

Everything derived from a config (the model spec, precision policy, launch, device, paths) is
resolved once into a :class:`~microbench.plan.spec.RunSpec` by :func:`microbench.plan.spec.resolve`.

Example::

    config = BenchConfig(network="resnet50", batch_size=64, precision="amp-bf16")
    flags = spelled(config, replayed_fields())    # ['--network=resnet50', '--batch-size=64', ...]
"""
from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from microbench.platform.errors import UsageError
# argtypes' checks named as fields are (device_ids, dist_url, profiler_schedule) are read through
# the module, so that a field's declaration never reads as naming itself.
from microbench.settings import argtypes, quantization
from microbench.settings.argtypes import (MAX_BATCH, MAX_BUCKET_CAP_MB, MAX_DATA_IMAGES,
                                          MAX_DIST_TIMEOUT_S, MAX_IMAGE_SIZE, MAX_ITERATIONS,
                                          MAX_PEAK_BANDWIDTH, MAX_PEAK_TFLOPS, MAX_PREFETCH,
                                          MAX_RANKS, MAX_SEED, MAX_SEQ_LEN, MAX_TELEMETRY_MS,
                                          MAX_TRIALS, MAX_VOCAB, MAX_WARMUP, MAX_WORKERS,
                                          MIN_DIST_TIMEOUT_S, bounded_int, choices,
                                          finite_float, keyword_dict, label_text, list_of,
                                          name_list, path_text, positive_int, positive_ints,
                                          zero_or_one)
from microbench.settings.flags import Flag
from microbench.settings.model_options import ATTENTION_IMPLS
from microbench.settings.precision import CHOICES, FP8_RECIPES, modes_help

DEFAULT_NETWORK = "resnet50"
DEFAULT_OUTPUT_DIR = "results"
CSV_NAME = "benchmark_summary.csv"

# How a setting appears on the command line.
VALUE = "value"             # --flag VALUE (lists comma-separated, booleans as 0/1)
SWITCH = "switch"           # --flag turns it on (off by default)
INVERSE = "inverse"         # --flag turns it off (on by default), e.g. --no-phases
DERIVED = "derived"         # computed from other flags by cli.to_config (precision, notes...)


# --preset's names (plan/preset.py says what each chooses), --mode's kinds of run and
# --parallel's strategies: named here, once, below torch, so that the command line's choices
# (and its --help, which must answer without torch: issue 45) and the result schema's enums
# (store/schema.py, read by microbench-report without torch) read the same names as the code
# that runs them. Each mode is the scenario of the module of its name in microbench/scenarios
# (SCENARIOS, built from this tuple, in its order); each strategy the Strategy of the module of
# its name there too (parallel.STRATEGIES; tests/test_structure.py checks both).
PRESETS = ("fast",)
MODES = ("training", "inference", "generate")
PARALLEL = ("ddp", "fsdp", "hsdp")
# The strategy a result names for a training run of one process without --parallel fsdp.
ONE_PROCESS = "single"


def setting(default: Any = None, *, flag: str | None = None, kind: str = VALUE,
            dest: str | None = None, replayed: bool = True, per_rank: bool = False,
            preset: bool = False, axis: int = 0, label: str | None = None,
            nargs: bool = False, factory: Callable[[], Any] | None = None,
            measured: bool | None = None, group: str | None = None,
            help: str | Callable[[], str] | None = None, aliases: tuple[str, ...] = (),
            type: Callable[[str], Any] | None = None,
            choices: Sequence[Any] | Callable[[], Sequence[Any]] | None = None,
            metavar: str | None = None, before: str | None = None,
            flag_default: Any = None) -> Any:
    """A :class:`BenchConfig` field and its command-line schema.

    ``flag``: its canonical spelling (default ``--`` + the field name in kebab case); ``dest``:
    the argparse destination that holds it (default: the field name); ``replayed``: whether
    ``--rerun`` repeats it (output locations and the launch belong to each invocation);
    ``per_rank``: whether the ranks of one job may differ in it; ``preset``: whether ``--preset``
    may choose it; ``axis``: a sweep axis, its place in a sweep's nesting (lowest outermost; the
    batch size, last, varies fastest; 0: not an axis): its flag takes a comma-separated list
    and sweeps it (the config holds one value; precision's list flag is --precision,
    compile's --compile-mode, both read by ``cli``); ``label``: how a labelled axis is shown in
    run names, sweep labels and figures (``label-value``, ``label=value``, ``label value``;
    :mod:`microbench.plan.naming` spells the older axes by hand); ``nargs``: the flag takes
    several words (``--model-kwargs a=1 b=2``); ``measured``: whether it changes what a run
    measures (default: ``replayed``; False for a setting replayed but only shown, such as a
    peak that is only a denominator): ``--ab`` refuses a B that differs in none of these.

    The flag as argparse takes it (:class:`~microbench.settings.flags.Flag`): ``group``, its
    --help section (a key of ``flags.GROUPS``); ``help``; ``aliases`` (older or timm's
    spellings); ``type`` (an ``argtypes`` check, which holds the range) or ``choices``;
    ``metavar``; ``before``: the destination it is listed ahead of, where --help does not list
    it in field order; ``flag_default``: what a derived setting's flag holds when not given
    (the others' is the field's default). ``help`` and ``choices`` written from a table (kinds
    of run, quantization formats) are a function of nothing, read when the parser is built,
    so that a row a test adds is offered. A derived setting without ``help`` has no flag.

    A new sweep axis is its field here, ``setting(default, axis=N, label="word")`` with a list
    type (``argtypes.list_of``, or ``choices=``, which becomes a comma-separated list's).
    """
    metadata = {"flag": flag, "kind": kind, "dest": dest, "replayed": replayed,
                "per_rank": per_rank, "preset": preset, "axis": axis, "label": label,
                "nargs": nargs, "measured": replayed if measured is None else measured,
                "group": group, "help": help, "aliases": aliases, "type": type,
                "choices": choices, "metavar": metavar, "before": before,
                "flag_default": flag_default}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class BenchConfig:
    """One configuration as the user asked for it, validated. Passed whole; never mutated."""

    network: str = setting(
        DEFAULT_NETWORK, axis=10, group="model", aliases=("--model",), type=name_list,
        metavar="NAME[,NAME]",
        help="model to run: any torchvision classification, segmentation or video model, "
             "shufflenet, xception, or an older alias (SqueezeNet, resnext50), "
             "llama_tiny/llama_medium/llama_1b, hf:<model_type>; a comma-separated list "
             "sweeps. --model is timm's spelling")
    batch_size: int = setting(
        64, axis=120, group="model", type=positive_ints, metavar="N[,N]",
        help=f"images (or clips) per iteration, at most {MAX_BATCH:,}; a comma-separated list "
             f"sweeps")
    image_size: int | None = setting(
        group="model", aliases=("--img-size",), type=bounded_int(1, MAX_IMAGE_SIZE),
        metavar="PX",
        help="input height and width (default: the model's native size, e.g. 224, 299 for "
             "inception_v3, 112 for r3d_18); --img-size is timm's spelling")
    # Language models.
    seq_len: int | None = setting(
        axis=60, group="language", type=list_of(bounded_int(1, MAX_SEQ_LEN)), metavar="N[,N]",
        help="tokens per sequence (default: the preset's; 512 for hf:); with --mode generate, "
             "the positions of the KV cache; a list sweeps")
    vocab_size: int | None = setting(
        group="language", type=bounded_int(1, MAX_VOCAB), metavar="N",
        help="vocabulary size (default: the preset's)")
    kv_heads: int | None = setting(
        group="language", type=positive_int, metavar="N",
        help="key/value heads (grouped-query attention); must divide the heads")
    attention: str | None = setting(
        axis=50, group="language", choices=ATTENTION_IMPLS, metavar="IMPL[,IMPL]",
        help="eager (matmul-softmax-matmul), sdpa (PyTorch chooses the kernel; the default), "
             "or scaled_dot_product_attention pinned to flash, efficient or math; a list "
             "sweeps")
    model_kwargs: tuple[str, ...] = setting(
        (), nargs=True, group="language", metavar="KEY=VALUE",
        help="hf:<model_type>: overrides of the transformers config, e.g. hidden_size=1024 "
             "num_hidden_layers=8")
    mode: str = setting(                              # MODES: microbench.scenarios
        "training", axis=20, group="model", choices=lambda: MODES, metavar="MODE[,MODE]",
        help="training: forward, loss, backward, SGD step; inference: forward in inference "
             "mode with the model in eval(); generate (llama_*): prefill a prompt, then decode "
             "token by token with a KV cache; a comma-separated list sweeps")
    prompt_len: int | None = setting(                 # generate
        group="language", type=bounded_int(1, MAX_SEQ_LEN), metavar="N",
        help="--mode generate: prompt tokens per sequence (default: 128, or half the "
             "sequence length)")
    gen_len: int | None = setting(
        group="language", type=bounded_int(1, MAX_SEQ_LEN), metavar="N",
        help="--mode generate: tokens generated per sequence (default: 128, within the "
             "sequence length)")
    opt_step: int = setting(
        1, group="model", type=bounded_int(1, MAX_ITERATIONS), metavar="N",
        help="training: accumulate gradients over N iterations per optimizer step")
    iterations: int = setting(
        20, group="timing", type=bounded_int(1, MAX_ITERATIONS), metavar="N",
        help=f"timed iterations (each one is a sample), at most {MAX_ITERATIONS:,}")
    warmup: int = setting(
        5, group="timing", type=bounded_int(0, MAX_WARMUP), metavar="N",
        help=f"untimed warm-up iterations before the timed ones, at most {MAX_WARMUP:,}")
    repeat: int = setting(                            # independent trials of this configuration
        1, group="timing", type=bounded_int(1, MAX_TRIALS), metavar="N",
        help="independent trials (fresh model, optimizer and inputs each); the headline is "
             "their geometric mean, with its 95%% confidence interval and a 95%% prediction "
             "interval for the next run; in a sweep the trials of all configurations "
             "interleave (default: 1; with --max-noise: the fewest trials, at least 3)")
    trials: str = setting(                            # where trials run: microbench.drivers.trials
        "processes", group="timing", choices=("processes", "in-process"),
        help="with --repeat: run each trial in a fresh worker process with its own seed "
             "(processes: the compiler, autotuning and allocator start cold each time, as they "
             "do between runs) or all of them in this process (in-process)")
    # How many trials: --max-noise adds them until the interval is narrow enough or a limit
    # stops it; --discard-throttled re-runs a throttled one (microbench.measure.stats).
    max_noise_pct: float | None = setting(
        flag="--max-noise", dest="max_noise", group="timing", type=finite_float(0, 100),
        metavar="PCT",
        help="add trials until the 95%% CI's half-width is below PCT percent of the headline, "
             "or --max-trials or --time-limit stops it (the run says which)")
    max_trials: int = setting(
        20, group="timing", type=bounded_int(2, MAX_TRIALS), metavar="N",
        help="with --max-noise: the most trials (default: 20)")
    time_limit_s: float | None = setting(
        flag="--time-limit", dest="time_limit", group="timing",
        type=finite_float(0, MAX_DIST_TIMEOUT_S), metavar="S",
        help="with --max-noise: start no trial after S seconds of trials (default: none)")
    discard_throttled: bool = setting(
        False, kind=SWITCH, group="timing",
        help="re-run a trial whose SM clock fell below 75%% of its maximum or that saw a "
             "throttle reason (telemetry), at most 3 times a run; the discarded trials stay in "
             "the JSON")
    telemetry_interval_ms: float = setting(           # 0: no telemetry
        100.0, flag="--telemetry-interval", dest="telemetry_interval", group="timing",
        type=finite_float(0, MAX_TELEMETRY_MS, True), metavar="MS",
        help="sample clocks, power, temperature, throttling and energy every MS milliseconds "
             "during the timed region (NVML or amdsmi); 0: off")
    # settings.precision.TABLE; the older flags that also set it are cli.PLAN_FLAGS'.
    precision: str = setting(
        "fp32", kind=DERIVED, preset=True, axis=30, group="precision", choices=CHOICES,
        metavar="P[,P]",
        help=f"the precision mode: {modes_help()}; amp = amp-fp16 (default: fp32). "
             f"A comma-separated list sweeps")
    tf32: bool = setting(                             # TF32 also outside autocast
        False, kind=DERIVED, preset=True, group="precision", type=int, choices=(0, 1),
        flag_default=0,
        help="1: allow TF32 for FP32 matmuls and convolutions; 0 keeps IEEE FP32")
    # --precision fp8's scaling recipe (torchao's Float8 training) and, for inference and
    # generate, the weight quantization (torchao's quantize_): microbench.steps.low_precision.
    fp8_recipe: str = setting(
        "tensorwise", group="precision", choices=FP8_RECIPES,
        help="with --precision fp8: torchao's scaling recipe, tensorwise (one scale per "
             "tensor; FP8 all-gather under --parallel fsdp) or rowwise (one per row)")
    # Their choices and help are the quantization table's rows, read when the parser is built.
    quantize: str = setting(
        "none", axis=110, group="precision", choices=lambda: tuple(quantization.FORMATS),
        metavar="Q[,Q]",
        help=lambda: f"inference and generate: quantize the BF16 weights with torchao's "
                     f"quantize_: {quantization.quantize_help()}. Picks --precision bf16 "
                     f"unless given; a list sweeps; needs torchao")
    quant_layout: str = setting(
        "auto", group="precision", choices=lambda: tuple(quantization.LAYOUTS),
        help=lambda: f"with --quantize: the weights' packing, which picks the kernel: "
                     f"{quantization.layout_help()}. A layout a format does not have, or this "
                     f"device cannot run, is refused")
    nhwc: bool = setting(
        False, kind=SWITCH, preset=True, group="layout", aliases=("--channels-last",),
        help="channels-last memory format for model and input (--channels-last is timm's "
             "spelling)")
    compile: bool = setting(                          # --compile-mode's list
        False, kind=SWITCH, preset=True, axis=40, group="layout",
        help="torch.compile the model")
    compile_options: dict = setting(
        flag="--compileContext", kind=DERIVED, dest="compile_context", preset=True,
        factory=dict, group="layout", aliases=("--compile-context",), metavar="DICT",
        help="torch.compile keyword arguments as a Python dict literal, e.g. \"{'mode': "
             "'max-autotune', 'fullgraph': 'True'}\"; read as literals, never run. Keys: "
             "fullgraph, dynamic, disable, mode, backend, options; 'options' takes only "
             "inductor performance settings from an allow-list (README), none that names a "
             "program, a path or a file to write")
    device: str = setting(
        "auto", per_rank=True, group="device", metavar="DEV",
        help="auto (GPU when there is one, else CPU), cuda, cuda:N or cpu; ROCm GPUs are "
             "'cuda' too")
    output_dir: str = setting(
        DEFAULT_OUTPUT_DIR, replayed=False, per_rank=True, group="output", type=path_text,
        metavar="DIR",
        help="where the JSON result and the CSV summary go")
    output_file: str | None = setting(
        replayed=False, per_rank=True, group="output", type=path_text, metavar="NAME",
        help="JSON result file name inside --output-dir, no directory part (default: built "
             "from network, mode, precision and batch size)")
    csv_file: str | None = setting(
        replayed=False, per_rank=True, group="output", type=path_text, metavar="PATH",
        help="CSV to append one row to (default: <output-dir>/benchmark_summary.csv)")
    write_files: bool = setting(
        True, flag="--no-files", kind=INVERSE, dest="no_files", replayed=False, per_rank=True,
        group="output",
        help="write no JSON or CSV, only print")
    quiet: bool = setting(
        False, kind=SWITCH, replayed=False, per_rank=True, group="output",
        help="no per-iteration lines")
    # The user's name for this run (a nightly date, a commit): what microbench-report --history
    # orders by with --by label. Not replayed: a rerun is another run, with a label of its own.
    label: str | None = setting(
        replayed=False, group="output", type=label_text, metavar="TEXT",
        help="a name for this run stored in its result (a nightly date, a commit), which "
             "microbench-report --history --by label orders by (default: none)")
    seed: int = setting(
        0, group="model", type=bounded_int(0, MAX_SEED), metavar="N",
        help="seed for weights and inputs (0 to 2**63-1)")
    distributed_dataparallel: bool = setting(
        False, flag="--distributed_dataparallel", kind=SWITCH, replayed=False,
        group="distributed", aliases=("--distributed-dataparallel",),
        help="manual launch, one process per node or GPU started by hand; needs --rank, "
             "--world-size, --dist-backend and --dist-url")
    device_ids: tuple[int, ...] | None = setting(
        flag="--device_ids", replayed=False, per_rank=True, group="distributed",
        aliases=("--device-ids",), type=argtypes.device_ids, metavar="IDS",
        help="manual launch: GPUs of this process (e.g. 0,1); one worker each")
    rank: int | None = setting(
        replayed=False, per_rank=True, group="distributed", type=bounded_int(0, MAX_RANKS - 1),
        metavar="N",
        help="manual launch: rank of this process")
    world_size: int | None = setting(
        replayed=False, group="distributed", type=bounded_int(1, MAX_RANKS), metavar="N",
        help="manual launch: number of processes")
    dist_backend: str | None = setting(
        replayed=False, group="distributed", choices=("nccl", "gloo"),
        help="process-group backend (default: nccl on GPUs, which is RCCL on ROCm; gloo on the "
             "CPU)")
    dist_url: str | None = setting(
        replayed=False, per_rank=True, group="distributed", type=argtypes.dist_url, metavar="URL",
        help="rendezvous address: tcp://HOST:PORT (e.g. tcp://10.0.0.1:29500), env:// "
             "(MASTER_ADDR and MASTER_PORT) or file:///shared/path")
    dist_timeout: float = setting(
        600.0, measured=False, group="distributed", metavar="S",
        type=finite_float(MIN_DIST_TIMEOUT_S, MAX_DIST_TIMEOUT_S, low_inclusive=True),
        help="seconds that rendezvous and collectives may wait for other ranks")
    ddp_bucket_cap_mb: float = setting(
        25.0, group="distributed", type=finite_float(0, MAX_BUCKET_CAP_MB), metavar="MB",
        help="DistributedDataParallel gradient bucket size")
    ddp_static_graph: bool = setting(
        False, kind=SWITCH, preset=True, group="distributed",
        help="DistributedDataParallel static_graph=True")
    ddp_gradient_as_bucket_view: bool = setting(
        False, kind=SWITCH, preset=True, group="distributed",
        help="DistributedDataParallel gradient_as_bucket_view=True")
    # A strategy's other keywords, its one dict flag (--ddp-options; field <name>_options): the
    # keywords it takes are an allow-list in its module, scenarios/<name>.py.
    ddp_options: dict = setting(
        preset=True, factory=dict, group="distributed", type=keyword_dict, metavar="DICT",
        help="DistributedDataParallel's other keywords as a dict literal, e.g. "
             "\"{'broadcast_buffers': False}\" (the allowed ones: docs/flags.md)")
    scaling_baseline: str | None = setting(
        replayed=False, per_rank=True, group="distributed", type=path_text,
        metavar="FILE.json",
        help="a single-device result of the same configuration; adds scaling efficiency to "
             "the summary")
    autograd_profiler: bool = setting(
        False, flag="--autograd-profiler", kind=SWITCH, group="profiling",
        aliases=("--autograd_profiler",),
        help="a ROCTX/NVTX range per timed iteration (a range per operator would slow the "
             "timed pass, so those come in a separate marked pass after it), then operator "
             "tables (device time, CPU time, memory) from another separate pass")
    kineto: bool = setting(
        False, kind=SWITCH, group="profiling",
        help="torch.profiler pass after the timed one; Chrome traces "
             "<result>_trace<step>.json and an operator table")
    profiler_schedule: tuple[int, int, int] = setting(
        (1, 2, 2), group="profiling", type=argtypes.profiler_schedule, metavar="W,U,A",
        help="--kineto schedule: wait, warmup, active steps")
    profiler_output: str | None = setting(
        replayed=False, per_rank=True, group="profiling", type=path_text, metavar="PATH",
        help="directory (or file-name prefix) for --kineto traces (default: --output-dir)")
    flops_prof_step: int | None = setting(
        group="profiling", type=bounded_int(0, MAX_ITERATIONS), metavar="N",
        help="run DeepSpeed's FLOPS profiler on timed iteration N (0-based, below "
             "--iterations); that iteration is left out of the statistics")
    peak_tflops: float | None = setting(              # MFU's denominator only
        measured=False, group="profiling", type=finite_float(0, MAX_PEAK_TFLOPS), metavar="T",
        help="dense peak TFLOP/s to compute MFU against (default: the built-in table for "
             "known GPUs; unknown otherwise)")
    peak_bandwidth: float | None = setting(           # GB/s, MBU's denominator
        measured=False, group="profiling", type=finite_float(0, MAX_PEAK_BANDWIDTH),
        metavar="GB/S",
        help="peak memory bandwidth in GB/s to compute generation's MBU against (default: the "
             "built-in table for known GPUs; unknown otherwise)")
    measure_peaks: bool | None = setting(             # None: on for GPUs, off on the CPU (spec)
        group="profiling", type=zero_or_one, metavar="{0,1}",
        help="1: before the timed region, outside it, once per process, measure this device's "
             "dense GEMM TFLOP/s at the run's compute dtype and its copy GB/s (the op bench's "
             "matmul and copy), so MFU and MBU are printed against the measured peak beside "
             "the datasheet's; 0: the datasheet only (default: 1 on GPUs, 0 on the CPU)")
    capture_range: bool = setting(
        False, kind=SWITCH, group="profiling",
        help="start the device profiler API just before the timed iterations and stop it "
             "after (nsys --capture-range=cudaProfilerApi, rocprofv3 --selected-regions)")
    phase_timing: bool = setting(
        True, flag="--no-phases", kind=INVERSE, dest="no_phases", group="timing",
        help="training: do not split iterations into forward, backward and optimizer with two "
             "extra device events each")
    optimizer_impl: str = setting(                    # foreach | fused (SGD)
        "foreach", preset=True, group="fast", choices=("foreach", "fused"),
        help="training: SGD's multi-tensor (foreach, PyTorch's own choice on GPUs) or fused "
             "kernel; fused also takes AMP's scale and inf check on the device, removing "
             "GradScaler's host sync")
    cudnn_benchmark: bool = setting(                  # MIOpen find mode on ROCm
        False, preset=True, group="fast", type=zero_or_one, metavar="{0,1}",
        help="1: let cuDNN (MIOpen's find mode on ROCm) time convolution algorithms and keep "
             "the fastest; 0: its heuristics (PyTorch's default). MIOPEN_FIND_ENFORCE=3 also "
             "tunes on ROCm")
    preset: str | None = setting(                     # --preset fast
        group="fast", choices=PRESETS, before="optimizer_impl",
        help="fast: the levers that measured fastest for this model family and device "
             "(channels-last, BF16/FP16 AMP, fused optimizer, torch.compile, cudnn.benchmark; "
             "DDP bucket views); explicit flags win, and the run prints the flags that "
             "reproduce it")
    # The input pipeline (microbench.data; scenarios/feeding.py runs it). synthetic: tensors
    # made once on the device, no pipeline; the other settings apply to loader and folder only.
    data: str = setting(
        "synthetic", group="data", choices=("synthetic", "loader", "folder"),
        help="synthetic: inputs made once on the device, no loading; loader: a generated image "
             "set (a token corpus for language models) made once into --data-cache; folder: "
             "your images in --data-dir")
    data_format: str = setting(                       # the generated set's codec
        "jpeg", group="data", choices=("jpeg", "png"),
        help="--data loader: the generated set's format")
    data_cache: str | None = setting(                 # None: the user's cache
        replayed=False, per_rank=True, group="data", type=path_text, metavar="DIR",
        help="--data loader: where generated sets are made once and reused (default: "
             "$XDG_CACHE_HOME or ~/.cache, /micro_benchmarking_pytorch)")
    data_images: int = setting(                       # the generated set's size
        4096, group="data", type=bounded_int(1, MAX_DATA_IMAGES), metavar="N",
        help="--data loader: images of the generated set (sequences of a language model's "
             "corpus)")
    data_dir: str | None = setting(                   # --data folder
        group="data", type=path_text, metavar="DIR",
        help="--data folder: a tree of JPEG, PNG or WebP images, in class folders "
             "(ImageFolder's layout) or flat")
    decode: str = setting(                            # cpu | gpu
        "cpu", axis=70, group="data", choices=("cpu", "gpu"), metavar="WHERE[,WHERE]",
        help="where images are decoded: cpu (torchvision.io in the loader workers) or gpu "
             "(torchvision.io.decode_jpeg on the device; JPEG only, needs --transforms gpu); "
             "a list sweeps")
    transforms: str = setting(                        # normalise and cast: cpu | gpu
        "cpu", group="data", choices=("cpu", "gpu"),
        help="where normalisation and the cast to the input dtype run: in the workers (cpu) "
             "or after the copy to the device (gpu, which also copies uint8, a quarter of the "
             "bytes)")
    workers: int | None = setting(                    # None: the cores available
        axis=80, group="data", type=list_of(bounded_int(0, MAX_WORKERS)), metavar="N[,N]",
        help="loader worker processes per rank; 0 loads in the main process (default: the "
             "cores this process may use, os.sched_getaffinity, shared by the ranks of a "
             "host); a list sweeps")
    pin_memory: bool = setting(
        True, group="data", type=zero_or_one, metavar="{0,1}",
        help="1: batches in pinned (page-locked) host memory, copied to the GPU without "
             "blocking; 0: pageable memory")
    prefetch_factor: int = setting(
        2, group="data", type=bounded_int(1, MAX_PREFETCH), metavar="N",
        help="batches each worker keeps in flight")
    # Training beyond one device's memory (issue 24): sharding, recomputation and the optimizer
    # (microbench.steps.sharding, activation_checkpointing, optim; scenarios/training.py checks them).
    parallel: str = setting(                          # PARALLEL: ddp | fsdp | hsdp (FSDP2)
        "ddp", axis=90, group="sharding", choices=lambda: PARALLEL, metavar="MODE[,MODE]",
        help="training with several processes (or fsdp with one): ddp replicates the model on "
             "every rank; fsdp shards parameters, gradients and optimizer state over the ranks "
             "with FSDP2 (fully_shard per transformer block and at the root; llama_* presets, "
             "built on the meta device and materialised shard by shard); hsdp shards inside "
             "each group of --hsdp-shard-size ranks and replicates across the groups (FSDP2 on "
             "a 2-D device mesh); a list sweeps (default: ddp)")
    reshard_after_forward: bool = setting(            # fsdp, hsdp: free block params after fwd
        True, group="sharding", type=zero_or_one, metavar="{0,1}",
        help="fsdp, hsdp: 1 frees a block's gathered parameters after its forward and gathers "
             "them again for its backward (less memory); 0 keeps them (default: 1)")
    hsdp_shard_size: int | None = setting(            # hsdp: ranks of a shard group
        group="sharding", type=bounded_int(1, MAX_RANKS), metavar="N",
        help="hsdp: the ranks each shard group spans (parameters sharded inside a group, "
             "replicated across groups); it must divide the world size (default: the ranks of "
             "one node, torchrun's LOCAL_WORLD_SIZE)")
    activation_checkpointing: str = setting(          # none | full | selective
        "none", axis=100, group="sharding", choices=("none", "full", "selective"),
        metavar="MODE[,MODE]",
        help="language models in training: full recomputes each transformer block in the "
             "backward; selective keeps attention and every other projection (torchtitan's op "
             "policy); a list sweeps (default: none)")
    optimizer: str = setting(                         # sgd | adamw (optim.RECIPES)
        "sgd", group="sharding", choices=("sgd", "adamw"),
        help="training: sgd (momentum 0.9, torchvision's ImageNet recipe) or adamw "
             "(torchtitan's Llama 3 recipe, the one LLM throughput is quoted with); "
             "--optimizer-impl picks foreach or fused (default: sgd)")
    # Settings given on the command line (they win over a preset's choices), and notes on how
    # older or workshop spellings were read.
    explicit: tuple[str, ...] = setting((), kind=DERIVED, replayed=False)
    notes: tuple[str, ...] = setting((), kind=DERIVED, replayed=False, per_rank=True)

    @property
    def trials_in_workers(self) -> bool:
        """Whether each trial runs in a fresh worker process (microbench.drivers.trials)."""
        return self.several_trials and self.trials == "processes"

    @property
    def several_trials(self) -> bool:
        """Whether this run may measure more than one trial."""
        return self.repeat > 1 or self.max_noise_pct is not None


# ---------------------------------------------------------------- the schema, read back

@dataclass(frozen=True)
class Setting:
    """One field's schema (see :func:`setting`)."""

    name: str
    default: Any
    flag: str
    kind: str
    dest: str
    replayed: bool
    per_rank: bool
    preset: bool
    axis: int
    label: str | None
    nargs: bool
    measured: bool
    group: str | None
    help: str | Callable[[], str] | None
    aliases: tuple[str, ...]
    type: Callable[[str], Any] | None
    choices: Sequence[Any] | Callable[[], Sequence[Any]] | None
    metavar: str | None
    before: str | None
    flag_default: Any

    def as_flag(self) -> Flag | None:
        """Its flag as the parser takes it (None: a derived setting with no flag of its own).
        Made when the parser is built, so that what a test adds is offered: a sweep axis
        (``dataclasses.replace(SCHEMA[name], axis=N)``), a row of a table the choices or the
        help read (a function of nothing, called here)."""
        if self.help is None:
            return None
        if self.kind in (SWITCH, INVERSE):
            words: dict[str, Any] = dict(action="store_true")
        else:
            allowed = _now(self.choices)
            words = dict(default=self._parsed_default(), type=self.type, choices=allowed)
            if self.axis and allowed:             # a sweep axis's list, each value one of them
                words.update(type=choices(allowed), choices=None)
        return Flag(self.flag, self.group, _now(self.help), aliases=self.aliases,
                    dest=self.dest, metavar=self.metavar, nargs="+" if self.nargs else None,
                    before=self.before, **words)

    def _parsed_default(self) -> Any:
        """What argparse holds when the flag is not given: a derived setting's own (its
        derivation reads it), else the default (a one-value list for a sweep axis)."""
        if self.kind == DERIVED:
            return self.flag_default
        return [self.default] if self.axis and self.default is not None else self.default


def _now(value: Any) -> Any:
    """A declaration's value, read from its table now where it is a function of nothing."""
    return value() if callable(value) else value


def _read_schema() -> dict[str, Setting]:
    schema = {}
    for item in dataclasses.fields(BenchConfig):
        meta = item.metadata
        # A field without a default has a factory (setting() gives one or the other); mypy
        # does not narrow the MISSING sentinel.
        default = (item.default if item.default is not dataclasses.MISSING
                   else item.default_factory())  # type: ignore[operator]
        if meta["kind"] != DERIVED and not (meta["help"] and meta["group"]):
            raise TypeError(f"setting {item.name} declares no help or group for --help")
        schema[item.name] = Setting(
            name=item.name, default=default,
            flag=meta["flag"] or "--" + item.name.replace("_", "-"), kind=meta["kind"],
            dest=meta["dest"] or item.name, replayed=meta["replayed"],
            per_rank=meta["per_rank"], preset=meta["preset"], axis=meta["axis"],
            label=meta["label"], nargs=meta["nargs"], measured=meta["measured"],
            group=meta["group"], help=meta["help"], aliases=meta["aliases"], type=meta["type"],
            choices=meta["choices"], metavar=meta["metavar"], before=meta["before"],
            flag_default=meta["flag_default"])
    return schema


SCHEMA: dict[str, Setting] = _read_schema()
PRESET_FIELDS = tuple(name for name, item in SCHEMA.items() if item.preset)


def sweep_axes() -> tuple[str, ...]:
    """The settings a sweep varies, outermost first (read on each call: a test may add one)."""
    return tuple(sorted((name for name, item in SCHEMA.items() if item.axis),
                        key=lambda name: SCHEMA[name].axis))


def replayed_fields() -> tuple[str, ...]:
    return tuple(name for name, item in SCHEMA.items() if item.replayed)


def measured_fields() -> tuple[str, ...]:
    """The settings that change what a run measures (not where it writes or what it shows)."""
    return tuple(name for name, item in SCHEMA.items() if item.measured)


def field_of_dest(dest: str) -> str | None:
    """The config field an argparse destination sets (None for plan-level flags)."""
    for name, item in SCHEMA.items():
        if item.dest == dest:
            return name
    return None


# ---------------------------------------------------------------- spelling settings as flags

def flag_words(name: str, value: Any) -> list[str]:
    """The command-line words that set field ``name`` to ``value`` (none for the default).

    Precision and TF32 are spelled together (:func:`precision_words`); a value this tool never
    writes (a list where a number belongs, a string switch) is a UsageError, so an edited result
    file cannot smuggle anything past the command line's checks.
    """
    item = SCHEMA[name]
    comparable = tuple(value) if isinstance(value, list) else value
    if comparable == item.default:
        return []
    if item.kind == SWITCH:
        return [item.flag] if value is True else _refuse(name, value)
    if item.kind == INVERSE:
        return [item.flag] if value is False else _refuse(name, value)
    if item.nargs:
        return [item.flag, *_words(name, value)]
    if isinstance(value, bool):
        return [f"{item.flag}={int(value)}"]
    if isinstance(value, (list, tuple)):
        return [f"{item.flag}={','.join(map(str, _scalars(name, value)))}"]
    if isinstance(value, dict):             # a strategy's keywords: a flat literal
        return [f"{item.flag}={_keywords(name, value)!r}"]
    if isinstance(value, list) or value is None:
        return _refuse(name, value)
    return [f"{item.flag}={value}"]


def precision_words(precision: Any, tf32: bool) -> list[str]:
    """``--precision`` names every mode; TF32 beside a mixed or FP16 mode (FP32 work outside
    autocast) has only the older spelling."""
    if not isinstance(precision, str):
        return _refuse("precision", precision)
    if not tf32 or precision in ("fp32", "tf32"):
        return [f"--precision={'tf32' if tf32 else precision}"]
    older = {"fp16": ["--fp16=1"], "amp-fp16": ["--amp"],
             "amp-bf16": ["--amp", "--amp-dtype=bf16"]}.get(precision)
    return (older + ["--tf32=1"]) if older else _refuse("precision", precision)


def compile_words(compile_: Any, options: Any) -> list[str]:
    """torch.compile as flags: ``--compile``, ``--compile-mode MODE`` when a mode is all the
    options hold, else ``--compile --compileContext`` with a dict literal."""
    if compile_ is not True:
        return [] if compile_ is False else _refuse("compile", compile_)
    if not isinstance(options, dict):
        return _refuse("compile_options", options)
    if not options:
        return ["--compile"]
    if set(options) == {"mode"} and isinstance(options["mode"], str):
        return [f"--compile-mode={options['mode']}"]
    return ["--compile", f"--compileContext={options!r}"]


def spelled(config: BenchConfig | dict, names: tuple[str, ...]) -> list[str]:
    """The flags that set ``names`` of ``config`` (a config, or a stored config dict), in the
    schema's order; precision with TF32, and compile with its options, spelled together."""
    values = config if isinstance(config, dict) else dataclasses.asdict(config)
    words: list[str] = []
    for name in names:
        if name not in values or name in ("tf32", "compile_options"):
            continue
        if name == "precision":
            words += precision_words(values[name], bool(values.get("tf32")))
        elif name == "compile":
            words += compile_words(values[name], values.get("compile_options", {}))
        else:
            words += flag_words(name, values[name])
    return words


def as_command_line(words: list[str]) -> str:
    """Flags as a user would type them in a shell: ``--flag value``, quoted where needed."""
    parts = []
    for word in words:
        flag, _, value = word.partition("=")
        parts += [flag, shlex.quote(value)] if value else [flag]
    return " ".join(parts)


def _keywords(name: str, value: dict) -> dict:
    if not all(isinstance(key, str) and key.isidentifier()
               and isinstance(item, (bool, int, float, str)) for key, item in value.items()):
        return _refuse(name, value)
    return value


def _words(name: str, value: Any) -> list[str]:
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(item, str) and not item.startswith("-") for item in value):
        return _refuse(name, value)
    return list(value)


def _scalars(name: str, value: Sequence[Any]) -> Sequence[Any]:
    if not all(isinstance(item, (int, float, str)) and not isinstance(item, bool)
               for item in value):
        return _refuse(name, value)
    return value


def _refuse(name: str, value: Any):
    raise UsageError(f"stored setting {name} = {value!r} is not a value this tool writes")


# ---------------------------------------------------------------- rules of every configuration

# torch.compile modes that capture CUDA (HIP) graphs: inductor warms up, records and only then
# replays, over the first iterations.
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
CUDA_GRAPH_WARMUP = 3


def validate(config: BenchConfig) -> None:
    """Rules that hold for every configuration, swept or not, and after a preset filled it in
    (the kind of run adds its own: ``microbench.scenarios``)."""
    _validate_trial_count(config)
    graphs = config.compile_options.get("mode") in CUDA_GRAPH_MODES
    if config.compile and graphs and config.warmup < CUDA_GRAPH_WARMUP:
        raise UsageError(f"compile mode '{config.compile_options['mode']}' records CUDA graphs "
                         f"during its first iterations: give --warmup {CUDA_GRAPH_WARMUP} or "
                         f"more so that none of them is timed")
    if config.compile and config.warmup < 1:
        raise UsageError("--compile needs --warmup of at least 1: compilation happens in the "
                         "first iteration and must not be timed")
    if config.flops_prof_step is not None:
        if config.flops_prof_step >= config.iterations:
            raise UsageError(f"--flops-prof-step {config.flops_prof_step} must be below "
                             f"--iterations {config.iterations} (it is a 0-based iteration "
                             f"index)")
        if config.iterations < 2:
            raise UsageError("--flops-prof-step needs --iterations of at least 2: the profiled "
                             "iteration is left out of the statistics")


# --max-noise measures at least this many trials: two give an interval as wide as t(1) = 12.7
# makes it, which would stop on luck as often as on a steady device.
MIN_NOISE_TRIALS = 3


def min_noise_trials(config: BenchConfig) -> int:
    return max(MIN_NOISE_TRIALS, config.repeat)


def _validate_trial_count(config: BenchConfig) -> None:
    if config.max_noise_pct is None:
        given = [flag for name, flag in (("max_trials", "--max-trials"),
                                         ("time_limit_s", "--time-limit"))
                 if name in config.explicit]
        if given:
            raise UsageError(f"{' and '.join(given)} {'go' if len(given) > 1 else 'goes'} with "
                             f"--max-noise")
    elif config.max_trials < min_noise_trials(config):
        raise UsageError(f"--max-trials {config.max_trials} is below the "
                         f"{min_noise_trials(config)} trials --max-noise measures first "
                         f"(--repeat, at least {MIN_NOISE_TRIALS})")


# --ab's rounds (A then B) when --repeat is not given.
AB_ROUNDS = 5


@dataclass(frozen=True)
class ABPlan:
    """``--ab FLAGS``: B's flags as typed and B's configuration (microbench.drivers.ab runs both)."""

    flags: str
    config: BenchConfig
    fail_if_slower: bool = False


@dataclass(frozen=True)
class Plan:
    """What one invocation does: one configuration or a sweep of them, and what follows."""

    configs: tuple[BenchConfig, ...]
    find_max_batch: bool = False
    memory_budget_gb: float | None = None
    max_batch_limit: int = 65536
    batch_granularity: int = 8
    compare: str | None = None
    tolerance_pct: float = 5.0
    compare_any_config: bool = False
    ab: ABPlan | None = None           # --ab: B's flags and configuration
    fail_if: str | None = None         # --fail-if slower | never (None: --compare's gate fails)
    plot: str | None = None

    @property
    def is_sweep(self) -> bool:
        return len(self.configs) > 1
