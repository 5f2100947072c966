"""The phases of one benchmark run: build, warm up, time, collect.

The timed region holds the steps and nothing else: one device-event mark before the first step
and one after each step, no host synchronisation until the loop is over. Warm-up (and the
compilation inside its first iteration) is timed apart and never enters the statistics.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from . import device as device_layer, generation as generation_mod, precision as precision_mod
from . import noise, profilers, telemetry as telemetry_mod, workload as workload_mod
from .config import RunSpec
from .errors import OutOfMemory, UsageError
from .timing import Measurement, make_recorder


@dataclass
class ProcessResult:
    """What one process measured; :class:`microbench.summary.Summary` reads it."""

    times: Measurement
    losses: list[float]
    warmup_s: float
    first_iteration_s: float | None      # includes compilation when --compile is on
    peak_allocated_mb: float | None
    peak_reserved_mb: float | None
    parameters: int
    flops_per_iteration: int | None = None
    profile_reports: list[str] = field(default_factory=list)
    phases: tuple[Measurement, ...] | None = None     # training: forward, backward, optimizer
    generation: generation_mod.GenerationTimes | None = None
    telemetry: telemetry_mod.TelemetryReport | None = None   # clocks, power, energy while timed


def _compile_wrapper(config) -> Callable[[torch.nn.Module], torch.nn.Module] | None:
    if not config.compile:
        return None
    return lambda model: torch.compile(model, **config.compile_options)


def warm_up(step: Callable[[], object], iterations: int, device: torch.device,
            clock: Callable[[], float] = time.perf_counter) -> tuple[float, float | None]:
    """Run the warm-up iterations; return their total wall time and the first one's."""
    if iterations == 0:
        return 0.0, None
    start = clock()
    step()
    device_layer.synchronize(device)
    first = clock() - start
    for _ in range(iterations - 1):
        step()
    device_layer.synchronize(device)
    return clock() - start, first


@dataclass
class Timed:
    """What a timed loop measured: iteration times, the steps' outputs (losses), and where the
    workload has them, the phase split of each iteration or the generation's token times."""

    times: Measurement
    outputs: list
    phases: tuple[Measurement, ...] | None = None      # forward, backward, optimizer
    generation: generation_mod.GenerationTimes | None = None
    deepspeed_profile: str | None = None              # --flops-prof-step, rank 0

    def join(self, later: "Timed") -> "Timed":
        """Two segments of one loop (around an excluded iteration) as one."""
        def merged(first, second):
            return Measurement(first.samples_ms + second.samples_ms)
        phases = generation = None
        if self.phases is not None:
            phases = tuple(merged(a, b) for a, b in zip(self.phases, later.phases))
        if self.generation is not None:
            ours, theirs = self.generation, later.generation
            generation = generation_mod.GenerationTimes(merged(ours.prefill, theirs.prefill),
                                                        merged(ours.decode, theirs.decode),
                                                        merged(ours.e2e, theirs.e2e))
        return Timed(merged(self.times, later.times), self.outputs + later.outputs, phases,
                     generation)


def timed_loop(step: Callable[[], torch.Tensor | None], iterations: int, device: torch.device,
               time_fn: Callable[[], float] | None = None,
               around_step: Callable[[int], object] | None = None,
               first_index: int = 0, phases: workload_mod.PhaseMarks | None = None) -> Timed:
    """The timed region: ``iterations`` steps between device-event marks.

    ``around_step(i)`` is a context per iteration (a named ROCTX/NVTX range); the loop is chosen
    once, so the plain loop carries no per-iteration branch. With ``phases``, the step marks the
    end of its forward and backward passes on the same recorder, so each iteration's interval is
    cut in three that add up to it exactly.
    """
    per_step = len(phases.NAMES) if phases is not None else 1
    recorder = make_recorder(device, iterations * per_step + 1, time_fn)
    outputs: list = [None] * iterations
    if phases is not None:
        phases.record_on(recorder)
    try:
        recorder.mark()
        if around_step is None:
            for index in range(iterations):
                outputs[index] = step()
                recorder.mark()
        else:
            for index in range(iterations):
                with around_step(first_index + index):
                    outputs[index] = step()
                recorder.mark()
    finally:
        if phases is not None:
            phases.stop()
    intervals = recorder.intervals_ms()
    if phases is None:
        return Timed(Measurement(intervals), outputs)
    split = tuple(Measurement(intervals[i::per_step]) for i in range(per_step))
    iterations_ms = (sum(intervals[i:i + per_step]) for i in range(0, len(intervals), per_step))
    return Timed(Measurement(iterations_ms), outputs, phases=split)


def _loop(work, device: torch.device, time_fn, around):
    """The timed loop of this workload, as a function of (iterations, index of the first)."""
    if isinstance(work, generation_mod.GenerationWorkload):
        def generate(iterations: int, first_index: int) -> Timed:
            times = generation_mod.timed_generation(work, iterations, device, time_fn)
            return Timed(times.e2e, [], generation=times)
        return generate
    return lambda iterations, first_index: timed_loop(work.step, iterations, device, time_fn,
                                                      around, first_index, work.phases)


def measure(config, work, device: torch.device, is_main: bool,
            time_fn: Callable[[], float] | None = None,
            rejoin: Callable[[], None] = lambda: None) -> Timed:
    """The timed iterations, with the profilers that wrap them. With --flops-prof-step N the
    loop is timed in two segments around iteration N, which DeepSpeed profiles (on rank 0;
    the other ranks run it unprofiled, since DDP needs every rank to step); then every rank
    waits for its device and meets the others (``rejoin``), so the time rank 0 spends printing
    the profile is charged to no rank's samples."""
    around = profilers.iteration_range(device) if config.autograd_profiler else None
    loop = _loop(work, device, time_fn, around)
    with profilers.capture_range(config.capture_range, device):
        if config.flops_prof_step is None:
            return loop(config.iterations, 0)
        split = config.flops_prof_step
        before, profile = loop(split, 0), None
        if is_main:
            profile = profilers.deepspeed_profile_step(work.eager_model, work.step, device, split)
        else:
            work.step()
        rejoin()
        after = loop(config.iterations - split - 1, split + 1)
    return dataclasses.replace(before.join(after), deepspeed_profile=profile)


def profiled_passes(config, work: workload_mod.Workload, device: torch.device,
                    is_main: bool, rank: int, world_size: int, stem: str = "") -> list[str]:
    """Profiler passes after the timed one, on every rank; reports to print on rank 0."""
    reports = []
    if config.autograd_profiler:
        profilers.operator_range_pass(work.step, device)
        reports.append(profilers.operator_tables(work.step, device))
    if config.kineto:
        output = profilers.trace_output(config)
        files, table = profilers.kineto_pass(
            work.step, device, profilers.KinetoSchedule(*config.profiler_schedule), output,
            rank, world_size, stem)
        where = ", ".join(files) + (f" (and the other {world_size - 1} ranks' files beside it)"
                                    if world_size > 1 else "")
        reports.append(f"Kineto profile of a separate pass (schedule wait/warmup/active = "
                       f"{'/'.join(map(str, config.profiler_schedule))}; not part of the timed "
                       f"statistics)\n{table}\nChrome traces: {where}")
    return reports if is_main else []


def out_of_memory(spec: RunSpec) -> OutOfMemory:
    device = spec.device
    total = device_layer.total_memory_bytes(device) if device_layer.is_gpu(device) else None
    where = f"{device} ({device_layer.device_name(device)}" + (
        f", {total / 1e9:.1f} GB)" if total else ")")
    return OutOfMemory(f"out of memory on {where} running {spec.model.name} at batch size "
                       f"{spec.batch_size}: try a smaller --batch-size, --amp or --fp16 1 to halve "
                       f"activation memory, or --mode inference")


def batch_norm_needs_more_values(error: BaseException) -> UsageError | None:
    """Batch norm in training mode cannot normalise a single value per channel."""
    if isinstance(error, ValueError) and "more than 1 value per channel" in str(error):
        return UsageError(f"batch normalisation in training needs more than one value per "
                          f"channel ({error}): use a larger --batch-size or --image-size")
    return None


def build_workload(spec: RunSpec, wrap: Callable[[torch.nn.Module], torch.nn.Module] | None = None,
                   count_flops: bool = True):
    """The workload of ``spec``, compiled when asked, inside ``wrap`` (DDP) if given."""
    return workload_mod.build(spec, _compose(wrap, _compile_wrapper(spec.config)), count_flops)


def run(spec: RunSpec, on_phase: Callable[[str], None] = lambda message: None,
        wrap: Callable[[torch.nn.Module], torch.nn.Module] | None = None,
        before_timing: Callable[[], None] = lambda: None,
        monitor: "Monitor | None" = None,
        rejoin: Callable[[], None] = lambda: None) -> ProcessResult:
    """Build, warm up and time one configuration on this process's device.

    ``wrap`` goes around the model before compilation (DDP); ``before_timing`` runs just before
    the timed region (a barrier across ranks); ``monitor`` samples telemetry during it;
    ``rejoin`` brings the ranks together after an excluded (profiled) iteration.
    """
    config, device, launch = spec.config, spec.device, spec.launch
    precision_mod.apply_tf32(spec.precision.tf32)
    device_layer.set_conv_autotuner(config.cudnn_benchmark)
    try:
        work = build_workload(spec, wrap)
        on_phase("compiling and warming up" if config.compile else "warming up")
        with noise.captured() if config.compile else contextlib.nullcontext():
            warmup_s, first_s = warm_up(work.step, config.warmup, device)
        device_layer.reset_peak_memory(device)
        on_phase(f"timing {config.iterations} iterations")
        before_timing()
        sampler = monitor.start() if monitor is not None else None
        try:
            timed = measure(config, work, device, launch.is_main, rejoin=rejoin)
        finally:
            samples = sampler.stop() if sampler is not None else None
        report = monitor.report(samples, items_timed(spec, timed.times.count),
                                timed.times.total_ms / 1e3) if monitor is not None else None
        allocated, reserved = device_layer.peak_memory_mb(device)
        with noise.captured():                     # Kineto's tracepoints and probes
            reports = profiled_passes(config, work, device, launch.is_main, launch.rank,
                                      launch.world_size, trace_stem(spec))
        if timed.deepspeed_profile:
            reports.insert(0, timed.deepspeed_profile)
    except Exception as error:                       # noqa: BLE001 (re-raised unless expected)
        if not _is_expected(error):
            raise
        raise expected_failure(error, spec) from None
    losses = [float(loss) for loss in timed.outputs if loss is not None]
    return ProcessResult(times=timed.times, losses=losses, warmup_s=warmup_s,
                         first_iteration_s=first_s, peak_allocated_mb=allocated,
                         peak_reserved_mb=reserved, parameters=work.parameters,
                         flops_per_iteration=work.flops_per_iteration, profile_reports=reports,
                         phases=timed.phases, generation=timed.generation, telemetry=report)


def trace_stem(spec: RunSpec) -> str:
    """Traces are named after the run's result (the name it would have with --no-files)."""
    return spec.result_name


def items_timed(spec: RunSpec, iterations: int) -> int:
    """What energy is shared out over: images (clips), or tokens for language models (generated
    tokens in generation)."""
    per_iteration = spec.batch_size
    if spec.generation is not None:
        per_iteration *= spec.generation.gen_len
    elif spec.model.tokens_per_item is not None:
        per_iteration *= spec.model.tokens_per_item
    return per_iteration * iterations


class Monitor:
    """This process's telemetry source (opened once, used by every trial) and its interval."""

    def __init__(self, device: torch.device, interval_s: float):
        self.source, self.note = (telemetry_mod.open_source(device) if interval_s > 0
                                  else (None, "telemetry: off (--telemetry-interval 0)"))
        self.interval_s = interval_s

    def start(self):
        if self.source is None:
            return None
        sampler = telemetry_mod.Sampler(self.source, self.interval_s)
        sampler.start()
        return sampler

    def report(self, samples, items: int, timed_s: float) -> telemetry_mod.TelemetryReport:
        if self.source is None or samples is None:
            return telemetry_mod.TelemetryReport.unavailable(self.note)
        return telemetry_mod.summarize(samples, self.source, items, timed_s)

    def close(self) -> None:
        if self.source is not None:
            self.source.close()


def _is_expected(error: BaseException) -> bool:
    return device_layer.is_out_of_memory(error) or batch_norm_needs_more_values(error) is not None


def expected_failure(error: BaseException, spec: RunSpec) -> Exception:
    """The BenchmarkError an expected torch failure stands for (out of memory, a batch too
    small for batch norm); ``error`` itself when it is not one of those."""
    if device_layer.is_out_of_memory(error):
        return out_of_memory(spec)
    return batch_norm_needs_more_values(error) or error


def release(spec: RunSpec, reset_compiler: bool = False) -> None:
    """Free what the last run left behind, so the next one starts clean."""
    gc.collect()
    if reset_compiler and spec.config.compile:
        torch._dynamo.reset()
    device_layer.empty_cache(spec.device)


def _compose(inner, outer):
    """Apply ``inner`` then ``outer`` (either may be None)."""
    if inner is None:
        return outer
    if outer is None:
        return inner
    return lambda model: outer(inner(model))
