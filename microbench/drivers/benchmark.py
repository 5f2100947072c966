"""The phases of one benchmark run: build, warm up, time, collect.

The timed region holds the steps and nothing else: one device-event mark before the first step
and one after each step, no host synchronisation until the loop is over. Warm-up (and the
compilation inside its first iteration) is timed apart and never enters the statistics.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import time
from typing import TYPE_CHECKING, Callable, Sequence, cast

import torch

from microbench.measure import compile_watch, host_load, library_log
from microbench.ops import peaks
from microbench.steps import low_precision, quant_layout
from microbench.settings import compile_options
from microbench.platform import devices, noise
from microbench.settings import precision
from microbench.measure import profilers
from microbench.measure import telemetry
from microbench.platform.errors import OutOfMemory, UsageError
from microbench.measure.results import ProcessResult, Timed
from microbench.measure.telemetry.sampler import Sample
from microbench.scenarios.base import Scenario
from microbench.scenarios.strategy import Wrap
from microbench.scenarios.views import Work
from microbench.settings.config import BenchConfig

if TYPE_CHECKING:
    from microbench.plan.spec import RunSpec


def _compile_wrapper(config: BenchConfig, device: torch.device) -> Wrap | None:
    if not config.compile:
        return None
    options = config.compile_options
    if config.quantize != "none":       # torchao's settings, for this run's graph only
        options = quant_layout.quantized_compile_options(options, "forward")
    if config.precision == "fp8" and options.get("backend", "inductor") == "inductor":
        settings = low_precision.fp8_compile_settings(config.fp8_recipe)
        if settings:                    # on this run's graphs, not the whole process
            options = compile_options.with_inductor_settings(options, settings)
    # Before this process's first compile: the CPU's int8 lowering out of a GPU's graphs.
    quant_layout.keep_out_cpu_int8_lowering(devices.is_gpu(device))

    def compiled(model: torch.nn.Module) -> torch.nn.Module:
        # torch.compile of a module is an OptimizedModule, a Module (its stub: any callable)
        return cast(torch.nn.Module, torch.compile(model, **options))
    return compiled


def warm_up(step: Callable[[], object], iterations: int, device: torch.device,
            clock: Callable[[], float] = time.perf_counter) -> tuple[float, float | None]:
    """Run the warm-up iterations; return their total wall time and the first one's."""
    if iterations == 0:
        return 0.0, None
    start = clock()
    step()
    devices.synchronize(device)
    first = clock() - start
    for _ in range(iterations - 1):
        step()
    devices.synchronize(device)
    return clock() - start, first


def measure(config: BenchConfig, scenario: Scenario, work: Work, device: torch.device,
            is_main: bool,
            time_fn: Callable[[], float] | None = None,
            rejoin: Callable[[], None] = lambda: None) -> Timed:
    """The timed iterations, with the profilers that wrap them. With --flops-prof-step N the
    loop is timed in two segments around iteration N, which DeepSpeed profiles (on rank 0;
    the other ranks run it unprofiled, since DDP needs every rank to step); then every rank
    waits for its device and meets the others (``rejoin``), so the time rank 0 spends printing
    the profile is charged to no rank's samples."""
    around = profilers.iteration_range(device) if config.autograd_profiler else None
    loop = scenario.loop(work, device, time_fn, around)
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


def profiled_passes(config: BenchConfig, work: Work, device: torch.device,
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


def out_of_memory(spec: "RunSpec") -> OutOfMemory:
    device = spec.device
    total = devices.total_memory_bytes(device) if devices.is_gpu(device) else None
    where = f"{device} ({devices.device_name(device)}" + (
        f", {total / 1e9:.1f} GB)" if total else ")")
    # Only advice that changes something: no --amp for a run already in half precision, no
    # --mode inference for a run that already is one.
    advice = ["a smaller --batch-size"]
    if spec.precision.model_dtype == torch.float32 and spec.precision.autocast_dtype is None:
        advice.append("--amp or --fp16 1 to halve activation memory")
    if spec.scenario.updates_weights:
        advice.append("--mode inference")
    return OutOfMemory(f"out of memory on {where} running {spec.model.name} at batch size "
                       f"{spec.batch_size}: try {', or '.join(advice)}")


def batch_norm_needs_more_values(error: BaseException) -> UsageError | None:
    """Batch norm in training mode cannot normalise a single value per channel."""
    if isinstance(error, ValueError) and "more than 1 value per channel" in str(error):
        return UsageError(f"batch normalisation in training needs more than one value per "
                          f"channel ({error}): use a larger --batch-size or --image-size")
    return None


def build_workload(spec: "RunSpec",
                   wrap: Callable[[torch.nn.Module], torch.nn.Module] | None = None,
                   count_flops: bool = True) -> Work:
    """The work of ``spec``'s scenario, compiled when asked, inside ``wrap`` (DDP) if given."""
    return spec.scenario.build(spec, _compose(wrap, _compile_wrapper(spec.config, spec.device)),
                               count_flops)


def run(spec: "RunSpec", on_phase: Callable[..., None] = lambda phase, timed=False: None,
        wrap: Callable[[torch.nn.Module], torch.nn.Module] | None = None,
        before_timing: Callable[[], None] = lambda: None,
        monitor: "Monitor | None" = None,
        rejoin: Callable[[], None] = lambda: None,
        host: host_load.Probe | None = None) -> ProcessResult:
    """Build, warm up and time one configuration on this process's device.

    ``wrap`` goes around the model before compilation (DDP); ``before_timing`` runs just before
    the timed region (a barrier across ranks); ``monitor`` samples telemetry during it;
    ``rejoin`` brings the ranks together after an excluded (profiled) iteration; ``host``
    reads the host's load just before the timed region and just after it (issue 64).
    """
    config, device, launch = spec.config, spec.device, spec.launch
    host = host if host is not None else host_load.Probe.for_launcher(launch.launcher)
    precision.apply_tf32(spec.precision.tf32)
    devices.set_conv_autotuner(config.cudnn_benchmark)
    work = None
    # torch's and torchao's log records (torchao's import logs one) go into the result, not
    # onto the console (issue 45), from the peak probe to the profiled passes.
    library = library_log.LibraryLogWatch()
    try:
        with library.during():
            measured = measure_peaks(spec, monitor, on_phase)
            work = build_workload(spec, wrap)
            watch = compile_watch.CompileWatch(device, config.compile_options)
            watching = watch.during if config.compile else lambda phase: contextlib.nullcontext()
            on_phase("compiling and warming up" if config.compile else "warming up")
            with noise.captured() if config.compile else contextlib.nullcontext(), \
                    watching("warm-up"):
                warmup_s, first_s = warm_up(work.step, config.warmup, device)
            # With an input pipeline: the model alone and the loader alone, then the fed step.
            work = spec.scenario.before_timing(spec, work, on_phase)
            devices.reset_peak_memory(device)
            on_phase(f"timing {config.iterations} iterations", timed=True)
            # Read before the ranks meet and after the loop: nothing inside the timed region.
            host_before = host.read()
            before_timing()
            sampler = monitor.start() if monitor is not None else None
            try:
                with watching("timed"):
                    timed = measure(config, spec.scenario, work, device, launch.is_main,
                                    rejoin=rejoin)
            finally:
                samples = sampler.stop() if sampler is not None else None
            host_during = host.between(host_before, host.read())
            units = spec.scenario.units_per_iteration(spec.batch_size) * timed.times.count
            report = monitor.report(samples, units, timed.times.total_ms / 1e3) \
                if monitor is not None else None
            allocated, reserved = devices.peak_memory_mb(device)
            with noise.captured():                     # Kineto's tracepoints and probes
                reports = profiled_passes(config, work, device, launch.is_main, launch.rank,
                                          launch.world_size, trace_stem(spec))
            detail = spec.scenario.after_timing(spec, work, timed.detail)
            if timed.deepspeed_profile:
                reports.insert(0, timed.deepspeed_profile)
    except Exception as error:                       # noqa: BLE001 (re-raised unless expected)
        if not _is_expected(error):
            raise
        raise expected_failure(error, spec) from None
    finally:
        if work is not None:                    # the loader's workers stopped, whatever happened
            spec.scenario.release_inputs(work)
    losses = [float(loss) for loss in timed.outputs if loss is not None]
    return ProcessResult(times=timed.times, losses=losses, warmup_s=warmup_s,
                         first_iteration_s=first_s, peak_allocated_mb=allocated,
                         peak_reserved_mb=reserved, parameters=work.parameters,
                         flops_per_iteration=work.flops_per_iteration, profile_reports=reports,
                         detail=detail, telemetry=report, pid=os.getpid(),
                         seed=config.seed, data=spec.scenario.input_measured(work),
                         sharded=spec.scenario.sharded_state(work),
                         lowp=work.lowp, peaks=measured,
                         compiler=watch.report() if config.compile else None,
                         library_log=library.report(), host_load=host_during)


def measure_peaks(spec: "RunSpec", monitor: "Monitor | None",
                  on_phase: Callable[..., None]) -> peaks.MeasuredPeaks | None:
    """--measure-peaks: this device's GEMM and copy rates, measured once per process before the
    model is built (its memory is all free then, and nothing of the probe stays allocated);
    with TF32 as the run set it, the telemetry source read meanwhile."""
    if not spec.measure_peaks:
        return None
    on_phase("measuring peaks: a matrix product and a device copy")
    compute = peaks.probe_dtype(spec.precision, spec.device)    # FP8 for --precision fp8
    source = monitor.source if monitor is not None else None
    return peaks.once(spec.device, compute, spec.precision.peak_key, source)


def trace_stem(spec: "RunSpec") -> str:
    """Traces are named after the run's result (the name it would have with --no-files)."""
    return spec.result_name


class Monitor:
    """This process's telemetry source (opened once, used by every trial) and its interval."""

    def __init__(self, device: torch.device, interval_s: float):
        self.source, self.note = (telemetry.open_source(device) if interval_s > 0
                                  else (None, "telemetry: off (--telemetry-interval 0)"))
        self.interval_s = interval_s

    def start(self):
        if self.source is None:
            return None
        sampler = telemetry.Sampler(self.source, self.interval_s)
        sampler.start()
        return sampler

    def report(self, samples: Sequence[Sample] | None, items: int,
               timed_s: float) -> telemetry.TelemetryReport:
        if self.source is None or samples is None:
            return telemetry.TelemetryReport.unavailable(self.note)
        return telemetry.summarize(samples, self.source, items, timed_s)

    def close(self) -> None:
        if self.source is not None:
            self.source.close()


def _is_expected(error: BaseException) -> bool:
    return devices.is_out_of_memory(error) or batch_norm_needs_more_values(error) is not None


def expected_failure(error: BaseException, spec: "RunSpec") -> BaseException:
    """The BenchmarkError an expected torch failure stands for (out of memory, a batch too
    small for batch norm); ``error`` itself when it is not one of those."""
    if devices.is_out_of_memory(error):
        return out_of_memory(spec)
    return batch_norm_needs_more_values(error) or error


def release(spec: "RunSpec", reset_compiler: bool = False) -> None:
    """Free what the last run left behind, so the next one starts clean."""
    gc.collect()
    if reset_compiler and spec.config.compile:
        torch._dynamo.reset()
    devices.empty_cache(spec.device)


def _compose(inner: Wrap | None, outer: Wrap | None) -> Wrap | None:
    """Apply ``inner`` then ``outer`` (either may be None)."""
    if inner is None:
        return outer
    if outer is None:
        return inner
    first, then = inner, outer
    return lambda model: then(first(model))
