"""The :class:`RunSpec`: a configuration resolved once for this process.

A spec is everything derived from a :class:`~microbench.settings.config.BenchConfig`: the model spec, the
kind of run (its scenario), the precision policy, the launch (rank, world size, batch split), the
device and its model name, the MFU peak and the result paths. :func:`resolve` builds it; every
module downstream receives the spec whole and resolves nothing again. Files named by the user
(``--compare``, ``--scaling-baseline``) are read by the runner right after, not here. A spawned
worker of the manual launch gets the spec too (:meth:`RunSpec.for_worker`).

Example::

    spec = resolve(BenchConfig(network="resnet50", batch_size=64, precision="amp-bf16"))
    spec.model.name, spec.scenario.unit, spec.precision.label, spec.json_path
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Mapping

import torch

from microbench.platform import devices, distributed
from microbench.measure import flops
from microbench.steps import low_precision, quant_layout
from microbench.settings import identity
from microbench.models import registry
from microbench.settings.precision import Precision, lookup
from microbench.plan import naming, preset
from microbench import scenarios
from microbench.scenarios import parallel
from microbench.settings.config import CSV_NAME, BenchConfig, validate
from microbench.platform.distributed import Launch
from microbench.platform.errors import BenchmarkError, UsageError
from microbench.models.family import ModelFamily
from microbench.models.language import LanguageModelSpec
from microbench.store.baseline import Gate


@dataclass(frozen=True)
class RunSpec:
    """A configuration resolved for this process: everything a run needs, derived once."""

    config: BenchConfig
    model: ModelFamily                            # configured: input size, sequence length
    scenario: scenarios.Scenario                  # the kind of run: its work, loop and unit
    parallel: parallel.Strategy                   # none, DDP or FSDP: chosen here, once
    precision: Precision
    launch: Launch
    device: torch.device
    device_name: str                              # the device's model, e.g. NVIDIA H200
    peak: flops.PeakChoice
    bandwidth: flops.BandwidthPeak                # what MBU divides by
    json_path: str | None              # None with --no-files
    csv_path: str | None
    notes: tuple[str, ...]
    compare: Gate | None = None        # --compare's baseline (store.baseline reads it)
    scaling_baseline_img_s: float | None = None
    # A problem this rank found before the run (a baseline it cannot read) in a multi-process
    # job: raised when the ranks meet, so that the others stop too instead of waiting for it.
    problem: BenchmarkError | None = None
    # The result's name without .json, --no-files too (traces are named after it); rank 0's
    # choice (output.files.claim_result_path) reaches the other ranks through distributed.agree.
    result_name: str = ""
    # --measure-peaks resolved: probe this device's GEMM and copy rates before timing
    # (microbench.ops.peaks), on by default on GPUs, off on the CPU.
    measure_peaks: bool = False
    # The second peak MFU is shown against (--precision fp8: the BF16 peak); None: no second.
    second_peak: flops.PeakChoice | None = None
    # --quantize and --quant-layout resolved for this device (None: not quantized).
    quant: quant_layout.QuantPlan | None = None

    @property
    def batch_size(self) -> int:
        """Images (clips, sequences) per iteration on this process."""
        return self.launch.local_batch

    def check(self) -> None:
        """Settings that may not suit the model (a sweep records this as the row's failure)."""
        self.model.check()
        self.scenario.check_spec(self)
        if isinstance(self.model, LanguageModelSpec):      # reads_tokens: its attention
            compute = self.precision.autocast_dtype or self.precision.model_dtype
            self.model.check_attention(self.device, compute)

    def settings(self) -> dict:
        """What every rank of a job must agree on (compared by ``distributed.agree``)."""
        mine = identity.of_spec(self)
        return {name: mine.get(name) for name in identity.agreement_fields()}

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


def resolve(config: BenchConfig, environ: Mapping[str, str] | None = None,
            check: bool = True) -> RunSpec:
    """Resolve ``config`` for this process: launch, model, scenario, precision, device, paths.

    ``check=False`` leaves :meth:`RunSpec.check` to the caller (a sweep row fails alone).
    """
    spec = _derive(config, distributed.detect(
        config, environ, lambda launch: parallel.strategy_of(config, launch).data_parallel(
            config, launch)))
    if check:
        spec.check()
    return spec


def _derive(config: BenchConfig, launch: Launch) -> RunSpec:
    model = registry.resolve(config.network, registry.ModelOptions(
        image_size=config.image_size, seq_len=config.seq_len, vocab_size=config.vocab_size,
        kv_heads=config.kv_heads, attention=config.attention, model_kwargs=config.model_kwargs))
    device, notice = devices.select(config.device,
                                         launch.device_index if launch.distributed else None)
    preset_notes = []
    if config.preset is not None:
        kind = scenarios.kind_of(config.mode)
        config = preset.apply(config, model, device, launch.world_size,
                              kind.updates_weights, half_weights=kind.fast_half_weights)
        preset_notes.append(f"--preset {config.preset} chose: {preset.as_flags(config)} (explicit "
                            f"flags win; these flags reproduce the run without the preset)")
        preset_notes += [note for note in [preset.cpu_note(config, device)] if note]
        validate(config)
    # FP8 and quantization: refused before anything is built; the quantized layouts resolved.
    quant = low_precision.check(config, device)
    if config.nhwc and model.channels_last is None:
        raise UsageError(f"--nhwc (channels-last) applies to image models; {model.name} reads "
                         f"token ids")
    policy = lookup(config.precision, config.tf32)
    notes = ([notice] if notice else []) + list(config.notes) + preset_notes
    notes += _slow_precision_notes(policy, device)
    notes += _eager_low_precision_notes(config, policy)
    policy, tf32_note = devices.tf32_on_rocm(policy, devices.rocm_version(device),
                                                  not model.reads_tokens, os.environ)
    notes += [tf32_note] if tf32_note else []
    if config.flops_prof_step is not None and launch.distributed:
        notes.append(f"DeepSpeed's profile of iteration {config.flops_prof_step} is printed by "
                     f"rank 0 only; the other ranks run that iteration unprofiled, and every "
                     f"rank leaves it out of its statistics")
    strategy = parallel.strategy_of(config, launch)
    strategy.mesh(config, launch)       # a mesh the launch cannot form: refused here, once
    if policy.fp8 and config.compile:
        notes.append(low_precision.fp8_compile_note(strategy.shards))
    name = _json_name(config, model, policy, launch.world_size, strategy)
    json_path = csv_path = None
    if config.write_files:
        json_path = os.path.join(config.output_dir, name)
        csv_path = config.csv_file or os.path.join(config.output_dir, CSV_NAME)
    return RunSpec(config=config, model=model, scenario=scenarios.for_config(config, model),
                   parallel=strategy, precision=policy, launch=launch, device=device,
                   device_name=devices.device_name(device),
                   peak=flops.choose_peak(device, policy.peak_key, config.peak_tflops),
                   bandwidth=flops.choose_bandwidth(device, config.peak_bandwidth),
                   json_path=json_path, csv_path=csv_path, notes=tuple(notes),
                   result_name=name.removesuffix(".json"),
                   measure_peaks=_measure_peaks(config, device), quant=quant,
                   second_peak=(flops.choose_peak(device, policy.second_peak_key, None)
                                if policy.second_peak_key else None))


def _measure_peaks(config: BenchConfig, device: torch.device) -> bool:
    """--measure-peaks as given, else on for a GPU (a probe of well under a second, against a
    datasheet that may describe another SKU) and off on the CPU (no datasheet to check, and a
    second of two busy cores is more than a short CPU run's timed region)."""
    if config.measure_peaks is not None:
        return bool(config.measure_peaks)
    return devices.is_gpu(device)


def _eager_low_precision_notes(config: BenchConfig, policy: Precision) -> list[str]:
    """FP8 or quantized weights without --compile: torchao's work runs as separate eager
    kernels, which the compiled recipes it is measured with (torchao's, gpt-fast's) fuse."""
    if config.compile:
        return []
    notes = []
    if policy.fp8:
        notes.append("FP8 without --compile runs torchao's scaling and casts as separate eager "
                     "kernels, often slower than BF16: add --compile (--preset fast picks it)")
    if config.quantize != "none":
        notes.append(f"--quantize {config.quantize} without --compile runs torchao's quantized "
                     f"weights eagerly (a Python dispatch in every linear layer; int8 casts its "
                     f"weights on every call), often slower than BF16: add --compile (--preset "
                     f"fast picks it; on the CPU compiling takes minutes)")
    return notes


def _slow_precision_notes(policy: Precision, device: torch.device) -> list[str]:
    """A note when the precision asked for is known to be slow on this device: the CPU runs
    FP16 14-26x slower than FP32 (no FP16 instructions, so every operation converts); on a CPU
    with AMX, BF16 autocast was 1.6x faster than FP32 (resnet18, 2 cores)."""
    half = policy.autocast_dtype or (policy.model_dtype if policy.is_half else None)
    reason = devices.slow_half_reason(device, half) if half is not None else None
    if reason is None:
        return []
    if devices.is_gpu(device):
        faster = "--precision amp-fp16" if half == torch.bfloat16 else "FP32 (--precision fp32)"
    elif half == torch.float16 and devices.cpu_has_fast_bf16():
        faster = "--precision amp-bf16 (and FP32)"
    else:
        faster = "FP32 (--precision fp32)"
    return [f"{policy.label} is slow on this device: {reason}. That is the hardware, not the "
            f"benchmark; {faster} is faster here"]


def _json_name(config: BenchConfig, model: ModelFamily, policy: Precision,
               world_size: int, strategy: parallel.Strategy) -> str:
    """``--output-file NAME`` gets ``.json`` appended as the older tool did (scripts then read
    NAME.json). The default is built from what usually tells configurations apart
    (:func:`microbench.plan.naming.run_name`: model, mode, precision, layout, compile mode,
    sequence and attention, profilers, the batch and the world size). Settings it leaves out
    are told apart by output.files.claim_result_path, which never lets one configuration's
    result replace another's."""
    if config.output_file:
        name = config.output_file
        return name if name.endswith(".json") else name + ".json"
    return naming.run_name(naming.Described(config, model, policy, strategy), world_size) + ".json"
