"""Settings: the frozen :class:`BenchConfig` the command line produces, one schema per setting.

A config says what the user asked for: it is what a result file stores and what ``--rerun``
replays. Each field declares, once, how it is spelled on the command line and how it behaves
(:func:`setting`): its flag, whether it is a switch, whether ``--rerun`` replays it, whether the
ranks of a job may differ in it, whether ``--preset`` may choose it, and whether it is a sweep
axis. The command line (``cli.to_config``), ``--rerun`` (:mod:`microbench.plan.rerun`), the preset's
reproduce-it line (``preset.as_flags``), rank agreement and result identity all read that
declaration, so adding a flag touches its field here and its ``add_argument`` line in ``cli.py``.

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

DEFAULT_NETWORK = "resnet50"
DEFAULT_OUTPUT_DIR = "results"
CSV_NAME = "benchmark_summary.csv"

# How a setting appears on the command line.
VALUE = "value"             # --flag VALUE (lists comma-separated, booleans as 0/1)
SWITCH = "switch"           # --flag turns it on (off by default)
INVERSE = "inverse"         # --flag turns it off (on by default), e.g. --no-phases
DERIVED = "derived"         # computed from other flags by cli.to_config (precision, notes...)


def setting(default: Any = None, *, flag: str | None = None, kind: str = VALUE,
            dest: str | None = None, replayed: bool = True, per_rank: bool = False,
            preset: bool = False, axis: int = 0, label: str | None = None,
            nargs: bool = False, factory: Callable[[], Any] | None = None,
            measured: bool | None = None) -> Any:
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

    A new sweep axis is its field here, ``setting(default, axis=N, label="word")``, and its
    flag in ``cli.py`` (a list type: ``argtypes.choices``, ``list_of``, or ``choices=``).
    """
    metadata = {"flag": flag, "kind": kind, "dest": dest, "replayed": replayed,
                "per_rank": per_rank, "preset": preset, "axis": axis, "label": label,
                "nargs": nargs, "measured": replayed if measured is None else measured}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class BenchConfig:
    """One configuration as the user asked for it, validated. Passed whole; never mutated."""

    network: str = setting(DEFAULT_NETWORK, axis=10)
    batch_size: int = setting(64, axis=120)
    image_size: int | None = setting()
    seq_len: int | None = setting(axis=60)            # language models
    vocab_size: int | None = setting()
    kv_heads: int | None = setting()
    attention: str | None = setting(axis=50)
    model_kwargs: tuple[str, ...] = setting((), nargs=True)
    mode: str = setting("training", axis=20)          # MODES: microbench.scenarios
    prompt_len: int | None = setting()                # generate
    gen_len: int | None = setting()
    opt_step: int = setting(1)
    iterations: int = setting(20)
    warmup: int = setting(5)
    repeat: int = setting(1)                          # independent trials of this configuration
    trials: str = setting("processes")                # where trials run: microbench.drivers.trials
    # How many trials: --max-noise adds them until the interval is narrow enough or a limit
    # stops it; --discard-throttled re-runs a throttled one (microbench.measure.stats).
    max_noise_pct: float | None = setting(flag="--max-noise", dest="max_noise")
    max_trials: int = setting(20)
    time_limit_s: float | None = setting(flag="--time-limit", dest="time_limit")
    discard_throttled: bool = setting(False, kind=SWITCH)
    telemetry_interval_ms: float = setting(100.0, flag="--telemetry-interval",
                                           dest="telemetry_interval")   # 0: no telemetry
    precision: str = setting("fp32", kind=DERIVED, preset=True,   # settings.precision.TABLE
                             axis=30)
    tf32: bool = setting(False, kind=DERIVED, preset=True)        # TF32 also outside autocast
    # --precision fp8's scaling recipe (torchao's Float8 training) and, for inference and
    # generate, the weight quantization (torchao's quantize_): microbench.steps.low_precision.
    fp8_recipe: str = setting("tensorwise")                       # tensorwise | rowwise
    quantize: str = setting("none", axis=110)                     # none | int8wo | int4wo | ...
    quant_layout: str = setting("auto")                           # auto | tinygemm | ...
    nhwc: bool = setting(False, kind=SWITCH, preset=True)
    compile: bool = setting(False, kind=SWITCH, preset=True, axis=40)   # --compile-mode's list
    compile_options: dict = setting(flag="--compileContext", kind=DERIVED,
                                    dest="compile_context", preset=True, factory=dict)
    device: str = setting("auto", per_rank=True)
    output_dir: str = setting(DEFAULT_OUTPUT_DIR, replayed=False, per_rank=True)
    output_file: str | None = setting(replayed=False, per_rank=True)
    csv_file: str | None = setting(replayed=False, per_rank=True)
    write_files: bool = setting(True, flag="--no-files", kind=INVERSE, dest="no_files",
                                replayed=False, per_rank=True)
    quiet: bool = setting(False, kind=SWITCH, replayed=False, per_rank=True)
    # The user's name for this run (a nightly date, a commit): what microbench-report --history
    # orders by with --by label. Not replayed: a rerun is another run, with a label of its own.
    label: str | None = setting(replayed=False)
    seed: int = setting(0)
    distributed_dataparallel: bool = setting(False, flag="--distributed_dataparallel",
                                             kind=SWITCH, replayed=False)
    device_ids: tuple[int, ...] | None = setting(flag="--device_ids", replayed=False,
                                                 per_rank=True)
    rank: int | None = setting(replayed=False, per_rank=True)
    world_size: int | None = setting(replayed=False)
    dist_backend: str | None = setting(replayed=False)
    dist_url: str | None = setting(replayed=False, per_rank=True)
    dist_timeout: float = setting(600.0, measured=False)
    ddp_bucket_cap_mb: float = setting(25.0)
    ddp_static_graph: bool = setting(False, kind=SWITCH, preset=True)
    ddp_gradient_as_bucket_view: bool = setting(False, kind=SWITCH, preset=True)
    # A strategy's other keywords, its one dict flag (--ddp-options; field <name>_options): the
    # keywords it takes are an allow-list in its module, scenarios/<name>.py.
    ddp_options: dict = setting(preset=True, factory=dict)
    scaling_baseline: str | None = setting(replayed=False, per_rank=True)
    autograd_profiler: bool = setting(False, flag="--autograd-profiler", kind=SWITCH)
    kineto: bool = setting(False, kind=SWITCH)
    profiler_schedule: tuple[int, int, int] = setting((1, 2, 2))
    profiler_output: str | None = setting(replayed=False, per_rank=True)
    flops_prof_step: int | None = setting()
    peak_tflops: float | None = setting(measured=False)          # MFU's denominator only
    peak_bandwidth: float | None = setting(measured=False)       # GB/s, MBU's denominator
    measure_peaks: bool | None = setting()        # None: on for GPUs, off on the CPU (spec)
    capture_range: bool = setting(False, kind=SWITCH)
    phase_timing: bool = setting(True, flag="--no-phases", kind=INVERSE, dest="no_phases")
    optimizer_impl: str = setting("foreach", preset=True)     # foreach | fused (SGD)
    cudnn_benchmark: bool = setting(False, preset=True)       # MIOpen find mode on ROCm
    preset: str | None = setting()                            # --preset fast
    # The input pipeline (microbench.data; scenarios/feeding.py runs it). synthetic: tensors
    # made once on the device, no pipeline; the other settings apply to loader and folder only.
    data: str = setting("synthetic")                          # synthetic | loader | folder
    data_format: str = setting("jpeg")                        # the generated set's codec
    data_cache: str | None = setting(replayed=False, per_rank=True)   # None: the user's cache
    data_images: int = setting(4096)                          # the generated set's size
    data_dir: str | None = setting()                          # --data folder
    decode: str = setting("cpu", axis=70)                     # cpu | gpu
    transforms: str = setting("cpu")                          # normalise and cast: cpu | gpu
    workers: int | None = setting(axis=80)                    # None: the cores available
    pin_memory: bool = setting(True)
    prefetch_factor: int = setting(2)
    # Training beyond one device's memory (issue 24): sharding, recomputation and the optimizer
    # (microbench.steps.sharding, activation_checkpointing, optim; scenarios/training.py checks them).
    parallel: str = setting("ddp", axis=90)                   # PARALLEL: ddp | fsdp (FSDP2)
    reshard_after_forward: bool = setting(True)               # fsdp: free block params after fwd
    activation_checkpointing: str = setting("none", axis=100)    # none | full | selective
    optimizer: str = setting("sgd")                           # sgd | adamw (optim.RECIPES)
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


def _read_schema() -> dict[str, Setting]:
    schema = {}
    for item in dataclasses.fields(BenchConfig):
        meta = item.metadata
        # A field without a default has a factory (setting() gives one or the other); mypy
        # does not narrow the MISSING sentinel.
        default = (item.default if item.default is not dataclasses.MISSING
                   else item.default_factory())  # type: ignore[operator]
        schema[item.name] = Setting(
            name=item.name, default=default,
            flag=meta["flag"] or "--" + item.name.replace("_", "-"), kind=meta["kind"],
            dest=meta["dest"] or item.name, replayed=meta["replayed"],
            per_rank=meta["per_rank"], preset=meta["preset"], axis=meta["axis"],
            label=meta["label"], nargs=meta["nargs"], measured=meta["measured"])
    return schema


SCHEMA: dict[str, Setting] = _read_schema()
PRESET_FIELDS = tuple(name for name, item in SCHEMA.items() if item.preset)


def sweep_axes() -> tuple[str, ...]:
    """The settings a sweep varies, outermost first (read on each call: a test may add one)."""
    return tuple(sorted((name for name, item in SCHEMA.items() if item.axis),
                        key=lambda name: SCHEMA[name].axis))
# --preset's names (plan/preset.py says what each chooses), --mode's kinds of run and
# --parallel's strategies: named here, once, below torch, so that the command line's choices
# (and its --help, which must answer without torch: issue 45) and the result schema's enums
# (store/schema.py, read by microbench-report without torch) read the same names as the code
# that runs them. Each mode is the scenario of the module of its name in microbench/scenarios
# (SCENARIOS, built from this tuple, in its order); each strategy the Strategy of the module of
# its name there too (parallel.STRATEGIES; tests/test_structure.py checks both).
PRESETS = ("fast",)
MODES = ("training", "inference", "generate")
PARALLEL = ("ddp", "fsdp")
# The strategy a result names for a training run of one process without --parallel fsdp.
ONE_PROCESS = "single"


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
