"""Settings: the frozen :class:`BenchConfig` the command line produces, and the :class:`RunSpec`
resolved from it once.

A config says what the user asked for (it is what a result file stores and what ``--rerun``
replays). A spec is everything derived from it: the model spec, the precision policy, the image
size, the launch (rank, world size, batch split), the device, the MFU peak, the result paths and
the baselines read from disk. :func:`resolve` builds it; every module downstream receives the spec
whole and resolves nothing again. A spawned worker of the manual launch gets the spec too
(:meth:`RunSpec.for_worker`), so it knows everything the parent knew.

Example::

    spec = resolve(BenchConfig(network="resnet50", batch_size=64, precision="amp-bf16"))
    spec.model.name, spec.precision.label, spec.device, spec.json_path
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field, replace
from typing import Mapping

import torch

from . import device as device_layer, distributed, flops, models, precision as precision_table
from . import preset
from .distributed import Launch
from .errors import BenchmarkError, UsageError
from .generation import GenerationShape
from .language import LanguageModelSpec

DEFAULT_NETWORK = "resnet50"
DEFAULT_OUTPUT_DIR = "results"
CSV_NAME = "benchmark_summary.csv"


@dataclass(frozen=True)
class BenchConfig:
    """One configuration as the user asked for it, validated. Passed whole; never mutated."""

    network: str = DEFAULT_NETWORK
    batch_size: int = 64
    image_size: int | None = None
    seq_len: int | None = None              # language models: --seq-len, --vocab-size, ...
    vocab_size: int | None = None
    kv_heads: int | None = None
    attention: str | None = None
    model_kwargs: tuple[str, ...] = ()
    mode: str = "training"                  # training | inference | generate
    prompt_len: int | None = None           # generate
    gen_len: int | None = None
    opt_step: int = 1
    iterations: int = 20
    warmup: int = 5
    repeat: int = 1                         # independent trials of this configuration
    telemetry_interval_ms: float = 100.0    # 0: no telemetry
    precision: str = "fp32"                 # a row of microbench.precision.TABLE
    tf32: bool = False                      # TF32 also outside autocast (--tf32 1)
    nhwc: bool = False
    compile: bool = False
    compile_options: dict = field(default_factory=dict)
    device: str = "auto"
    output_dir: str = DEFAULT_OUTPUT_DIR
    output_file: str | None = None
    csv_file: str | None = None
    write_files: bool = True
    quiet: bool = False
    seed: int = 0
    distributed_dataparallel: bool = False
    device_ids: tuple[int, ...] | None = None
    rank: int | None = None
    world_size: int | None = None
    dist_backend: str | None = None
    dist_url: str | None = None
    dist_timeout: float = 600.0
    ddp_bucket_cap_mb: float = 25.0
    ddp_static_graph: bool = False
    ddp_gradient_as_bucket_view: bool = False
    scaling_baseline: str | None = None
    autograd_profiler: bool = False
    kineto: bool = False
    profiler_schedule: tuple[int, int, int] = (1, 2, 2)
    profiler_output: str | None = None
    flops_prof_step: int | None = None
    peak_tflops: float | None = None
    capture_range: bool = False
    phase_timing: bool = True               # training: forward / backward / optimizer events
    optimizer_impl: str = "foreach"         # foreach | fused (SGD)
    cudnn_benchmark: bool = False           # cuDNN autotuner; MIOpen find mode on ROCm
    preset: str | None = None               # --preset fast: filled in by resolve()
    explicit: tuple[str, ...] = ()          # settings given on the command line (win over presets)
    notes: tuple[str, ...] = ()             # how older or workshop spellings were read


# torch.compile modes that capture CUDA (HIP) graphs: inductor warms up, records and only then
# replays, over the first iterations.
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
CUDA_GRAPH_WARMUP = 3


def validate(config: BenchConfig) -> None:
    """Rules that hold for every configuration, swept or not, and after a preset filled it in."""
    graphs = config.compile_options.get("mode") in CUDA_GRAPH_MODES
    if config.compile and graphs and config.warmup < CUDA_GRAPH_WARMUP:
        raise UsageError(f"compile mode '{config.compile_options['mode']}' records CUDA graphs "
                         f"during its first iterations: give --warmup {CUDA_GRAPH_WARMUP} or "
                         f"more so that none of them is timed")
    if config.compile and config.warmup < 1:
        raise UsageError("--compile needs --warmup of at least 1: compilation happens in the "
                         "first iteration and must not be timed")
    if config.opt_step > 1 and config.mode != "training":
        raise UsageError("--opt-step applies to training only")
    if (config.prompt_len or config.gen_len) and config.mode != "generate":
        raise UsageError("--prompt-len and --gen-len apply to --mode generate")


# Settings that may differ between the ranks of one job: who the process is and which GPUs it
# uses, where it writes (only rank 0 writes results; traces may go to node-local paths), how it
# finds the others, and what only rank 0 reads or prints.
PER_RANK_FIELDS = ("rank", "device_ids", "device", "output_dir", "output_file", "csv_file",
                   "write_files", "quiet", "dist_url", "scaling_baseline", "profiler_output",
                   "notes")


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
    plot: str | None = None

    @property
    def is_sweep(self) -> bool:
        return len(self.configs) > 1


@dataclass(frozen=True)
class Gate:
    """``--compare``: the baseline result, read before anything is written, and the tolerance."""

    path: str
    tolerance_pct: float
    baseline: dict


@dataclass(frozen=True)
class RunSpec:
    """A configuration resolved for this process: everything a run needs, derived once."""

    config: BenchConfig
    model: models.ModelSpec | LanguageModelSpec   # configured: input size, sequence length
    precision: precision_table.Precision
    launch: Launch
    device: torch.device
    peak: flops.PeakChoice
    json_path: str | None              # None with --no-files
    csv_path: str | None
    notes: tuple[str, ...]
    compare: Gate | None = None
    scaling_baseline_img_s: float | None = None
    generation: GenerationShape | None = None     # --mode generate
    # A problem this rank found before the run (a baseline it cannot read) in a multi-process
    # job: raised when the ranks meet, so that the others stop too instead of waiting for it.
    problem: BenchmarkError | None = None
    # The result's name without .json, --no-files too (traces are named after it); rank 0's
    # choice (report.files.claim_result_path) reaches the other ranks through distributed.agree.
    result_name: str = ""

    @property
    def batch_size(self) -> int:
        """Images (clips, sequences) per iteration on this process."""
        return self.launch.local_batch

    @property
    def training(self) -> bool:
        return self.config.mode == "training"

    def check(self) -> None:
        """Settings that may not suit the model (a sweep records this as the row's failure)."""
        self.model.check()
        if self.model.family == "language":
            compute = self.precision.autocast_dtype or self.precision.model_dtype
            self.model.check_attention(self.device, compute)

    def settings(self) -> dict:
        """What every rank of a job must agree on (compared by ``distributed.agree``): the
        configuration without what may differ per process, and what it resolved to."""
        config = {key: value for key, value in dataclasses.asdict(self.config).items()
                  if key not in PER_RANK_FIELDS}
        return {**config, "input_shape": self.model.input_shape(self.batch_size),
                "world_size": self.launch.world_size, "local_batch": self.launch.local_batch,
                "device_type": self.device.type}

    def for_worker(self, index: int) -> "RunSpec":
        """The spec of worker ``index`` of a manual launch that starts one per --device_ids."""
        launch = distributed.worker_launch(self.launch, index, self.config.device_ids)
        return replace(_derive(self.config, launch), compare=self.compare,
                       scaling_baseline_img_s=self.scaling_baseline_img_s)

    def with_batch_size(self, batch_size: int) -> "RunSpec":
        """The same run at another batch size (single process: the largest-batch search)."""
        config = replace(self.config, batch_size=batch_size)
        launch = replace(self.launch, local_batch=batch_size, global_batch=batch_size)
        return replace(_derive(config, launch), compare=self.compare,
                       scaling_baseline_img_s=self.scaling_baseline_img_s)


def resolve(config: BenchConfig, plan: Plan | None = None,
            environ: Mapping[str, str] | None = None, check: bool = True) -> RunSpec:
    """Resolve ``config`` for this process: launch, model, precision, device, paths, baselines.

    Input files (the --compare and --scaling-baseline results) are read here, on global rank 0
    only (other nodes need not see them), before anything runs or is written; in a multi-process
    job a problem with them is kept in ``spec.problem`` and raised on every rank when the ranks
    meet (distributed.agree). ``check=False``
    leaves :meth:`RunSpec.check` to the caller (a sweep row fails alone).
    """
    launch = distributed.detect(config, environ)
    spec = _derive(config, launch)
    if check:
        spec.check()
    if not launch.is_main:
        return spec
    try:
        return _read_baselines(spec, plan)
    except BenchmarkError as error:
        if not launch.distributed:
            raise
        return replace(spec, problem=error)


def _read_baselines(spec: RunSpec, plan: Plan | None) -> RunSpec:
    from .report import compare          # results on disk are the report package's format
    gate = None
    if plan is not None and plan.compare:
        gate = Gate(plan.compare, plan.tolerance_pct, compare.load_result(plan.compare))
        compare.check_same_configuration(compare.planned_identity(spec), gate.baseline,
                                         gate.path)
    baseline = None
    if spec.config.scaling_baseline:
        baseline = compare.scaling_baseline(spec.config.scaling_baseline, spec)
    return replace(spec, compare=gate, scaling_baseline_img_s=baseline)


def _derive(config: BenchConfig, launch: Launch) -> RunSpec:
    model = models.resolve(config.network, models.ModelOptions(
        image_size=config.image_size, seq_len=config.seq_len, vocab_size=config.vocab_size,
        kv_heads=config.kv_heads, attention=config.attention, model_kwargs=config.model_kwargs))
    device, notice = device_layer.select(config.device,
                                         launch.device_index if launch.distributed else None)
    preset_notes = []
    if config.preset is not None:
        config = preset.apply(config, model.family, device, launch.world_size)
        preset_notes.append(f"--preset {config.preset} chose: {preset.as_flags(config)} (explicit "
                            f"flags win; these flags reproduce the run without the preset)")
        validate(config)
    if config.nhwc and model.channels_last is None:
        raise UsageError(f"--nhwc (channels-last) applies to image models; {model.name} reads "
                         f"token ids")
    policy = precision_table.lookup(config.precision, config.tf32)
    notes = ([notice] if notice else []) + list(config.notes) + preset_notes
    notes += _slow_precision_notes(policy, device)
    if device_layer.is_gpu(device):
        policy, tf32_note = precision_table.on_rocm(policy, torch.version.hip,
                                                    model.family != "language", os.environ)
        notes += [tf32_note] if tf32_note else []
    if config.flops_prof_step is not None and launch.distributed:
        notes.append(f"DeepSpeed's profile of iteration {config.flops_prof_step} is printed by "
                     f"rank 0 only; the other ranks run that iteration unprofiled, and every "
                     f"rank leaves it out of its statistics")
    name = _json_name(config, model, policy, launch.world_size)
    json_path = csv_path = None
    if config.write_files:
        json_path = os.path.join(config.output_dir, name)
        csv_path = config.csv_file or os.path.join(config.output_dir, CSV_NAME)
    return RunSpec(config=config, model=model, precision=policy, launch=launch, device=device,
                   peak=flops.choose_peak(device, policy.peak_key, config.peak_tflops),
                   json_path=json_path, csv_path=csv_path, notes=tuple(notes),
                   result_name=name.removesuffix(".json"),
                   generation=_generation_shape(config, model))


def _slow_precision_notes(policy: precision_table.Precision, device: torch.device) -> list[str]:
    """A note when the precision asked for is known to be slow on this device: the CPU runs
    FP16 14-26x slower than FP32 (no FP16 instructions, so every operation converts); on a CPU
    with AMX, BF16 autocast was 1.6x faster than FP32 (resnet18, 2 cores)."""
    half = policy.autocast_dtype or (policy.model_dtype if policy.is_half else None)
    reason = device_layer.slow_half_reason(device, half) if half is not None else None
    if reason is None:
        return []
    if device_layer.is_gpu(device):
        faster = "--precision amp-fp16" if half == torch.bfloat16 else "FP32 (--precision fp32)"
    elif half == torch.float16 and device_layer.cpu_has_fast_bf16():
        faster = "--precision amp-bf16 (and FP32)"
    else:
        faster = "FP32 (--precision fp32)"
    return [f"{policy.label} is slow on this device: {reason}. That is the hardware, not the "
            f"benchmark; {faster} is faster here"]


# Default prompt and generation lengths: up to 128 tokens each, within the model's positions.
DEFAULT_PROMPT_LEN = 128
DEFAULT_GEN_LEN = 128


def _generation_shape(config: BenchConfig, model) -> GenerationShape | None:
    if config.mode != "generate":
        return None
    if not getattr(model, "can_generate", False):
        raise UsageError(f"--mode generate runs the llama_* presets (static KV cache), not "
                         f"{model.name}")
    prompt = config.prompt_len or min(DEFAULT_PROMPT_LEN, model.seq_len // 2)
    generated = config.gen_len or min(DEFAULT_GEN_LEN, model.seq_len - prompt + 1)
    shape = GenerationShape(prompt, generated)
    if prompt < 1 or generated < 1 or shape.positions > model.seq_len:
        raise UsageError(f"a {prompt}-token prompt and {generated} generated tokens need "
                         f"{shape.positions} positions, but {model.name} has {model.seq_len}: "
                         f"pass --seq-len {shape.positions} or shorter --prompt-len/--gen-len")
    return shape


def _json_name(config: BenchConfig, model, policy: precision_table.Precision,
               world_size: int) -> str:
    """``--output-file NAME`` gets ``.json`` appended as the older tool did (scripts then read
    NAME.json). The default is built from what usually tells configurations apart: model, mode,
    precision, layout, compile mode, sequence and attention, profilers, the batch and the world
    size. Settings it leaves out are told apart by report.files.claim_result_path, which never
    lets one configuration's result replace another's."""
    if config.output_file:
        name = config.output_file
        return name if name.endswith(".json") else name + ".json"
    parts = [model.name.replace(":", "-"), config.mode, policy.name]
    if config.nhwc:
        parts.append("nhwc")
    if config.compile:
        mode = config.compile_options.get("mode")
        parts.append(f"compile-{mode}" if mode else "compile")
    if getattr(model, "tokens_per_item", None) is not None:
        parts.append(f"{model.attention}-s{model.seq_len}")
    parts += [tag for flag, tag in ((config.autograd_profiler, "autograd"),
                                    (config.kineto, "kineto"),
                                    (config.flops_prof_step is not None, "flops")) if flag]
    parts.append(f"b{config.batch_size}")
    if world_size > 1:
        parts.append(f"w{world_size}")
    return "_".join(parts) + ".json"

