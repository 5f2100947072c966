"""The phases of one benchmark run: build, warm up, time, collect.

The timed region holds the steps and nothing else: one device-event mark before the first step
and one after each step, no host synchronisation until the loop is over. Warm-up (and the
compilation inside its first iteration) is timed apart and never enters the statistics.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from . import device as device_layer, precision as precision_mod, profilers
from . import workload as workload_mod
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


def timed_loop(step: Callable[[], torch.Tensor | None], iterations: int, device: torch.device,
               time_fn: Callable[[], float] | None = None,
               around_step: Callable[[int], object] | None = None,
               first_index: int = 0) -> tuple[Measurement, list]:
    """The timed region: ``iterations`` steps between device-event marks.

    ``around_step(i)`` is a context per iteration (a named ROCTX/NVTX range); the loop is chosen
    once, so the plain loop carries no per-iteration branch.
    """
    recorder = make_recorder(device, iterations + 1, time_fn)
    outputs: list = [None] * iterations
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
    return Measurement(recorder.intervals_ms()), outputs


def measure(config, work: workload_mod.Workload, device: torch.device,
            is_main: bool, time_fn: Callable[[], float] | None = None) -> tuple[Measurement, list]:
    """The timed iterations, with the profilers that wrap them. With --flops-prof-step N the
    loop is timed in two segments around iteration N, which DeepSpeed profiles (on rank 0;
    the other ranks run it unprofiled, since DDP needs every rank to step)."""
    around = profilers.iteration_range(device) if config.autograd_profiler else None
    with profilers.capture_range(config.capture_range, device):
        if config.flops_prof_step is None:
            return timed_loop(work.step, config.iterations, device, time_fn, around)
        split = config.flops_prof_step
        before, outputs_before = timed_loop(work.step, split, device, time_fn, around)
        if is_main:
            profilers.deepspeed_profile_step(work.eager_model, work.step, device, split)
        else:
            work.step()
        after, outputs_after = timed_loop(work.step, config.iterations - split - 1, device,
                                          time_fn, around, first_index=split + 1)
    return (Measurement(before.samples_ms + after.samples_ms), outputs_before + outputs_after)


def profiled_passes(config, work: workload_mod.Workload, device: torch.device,
                    is_main: bool, rank: int, world_size: int) -> list[str]:
    """Profiler passes after the timed one, on every rank; reports to print on rank 0."""
    reports = []
    if config.autograd_profiler:
        profilers.operator_range_pass(work.step, device)
        reports.append(profilers.operator_tables(work.step, device))
    if config.kineto:
        output = profilers.trace_output(config)
        files, table = profilers.kineto_pass(
            work.step, device, profilers.KinetoSchedule(*config.profiler_schedule), output,
            rank, world_size)
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
                   count_flops: bool = True) -> workload_mod.Workload:
    config = spec.config
    return workload_mod.build(spec.model, spec.image_size, spec.batch_size, config.mode,
                              spec.precision, spec.device, nhwc=config.nhwc,
                              opt_step=config.opt_step, seed=config.seed,
                              wrap=_compose(wrap, _compile_wrapper(config)),
                              count_flops=count_flops)


def run(spec: RunSpec, on_phase: Callable[[str], None] = lambda message: None,
        wrap: Callable[[torch.nn.Module], torch.nn.Module] | None = None,
        before_timing: Callable[[], None] = lambda: None) -> ProcessResult:
    """Build, warm up and time one configuration on this process's device.

    ``wrap`` goes around the model before compilation (DDP); ``before_timing`` runs just before
    the timed region (a barrier across ranks).
    """
    config, device, launch = spec.config, spec.device, spec.launch
    precision_mod.apply_tf32(spec.precision.tf32)
    try:
        work = build_workload(spec, wrap)
        on_phase("compiling and warming up" if config.compile else "warming up")
        warmup_s, first_s = warm_up(work.step, config.warmup, device)
        device_layer.reset_peak_memory(device)
        on_phase(f"timing {config.iterations} iterations")
        before_timing()
        times, outputs = measure(config, work, device, launch.is_main)
        allocated, reserved = device_layer.peak_memory_mb(device)
        reports = profiled_passes(config, work, device, launch.is_main, launch.rank,
                                  launch.world_size)
    except Exception as error:                       # noqa: BLE001 (re-raised unless expected)
        if not _is_expected(error):
            raise
        raise expected_failure(error, spec) from None
    losses = [float(loss) for loss in outputs if loss is not None]
    return ProcessResult(times=times, losses=losses, warmup_s=warmup_s, first_iteration_s=first_s,
                         peak_allocated_mb=allocated, peak_reserved_mb=reserved,
                         parameters=work.parameters, flops_per_iteration=work.flops_per_iteration,
                         profile_reports=reports)


def _is_expected(error: BaseException) -> bool:
    return device_layer.is_out_of_memory(error) or batch_norm_needs_more_values(error) is not None


def expected_failure(error: BaseException, spec: RunSpec) -> Exception:
    """The BenchmarkError an expected torch failure stands for (out of memory, a batch too
    small for batch norm); ``error`` itself when it is not one of those."""
    if device_layer.is_out_of_memory(error):
        return out_of_memory(spec)
    return batch_norm_needs_more_values(error) or error


def _compose(inner, outer):
    """Apply ``inner`` then ``outer`` (either may be None)."""
    if inner is None:
        return outer
    if outer is None:
        return inner
    return lambda model: outer(inner(model))
