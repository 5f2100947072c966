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

from . import models, precision as precision_mod, workload as workload_mod
from .cli import BenchConfig
from .errors import OutOfMemory
from .timing import Measurement, make_recorder, synchronize


@dataclass
class RunResult:
    """What one process measured. Report writers turn it into lines and files."""

    config: BenchConfig
    spec: models.ModelSpec
    precision: precision_mod.Precision
    device: torch.device
    env: dict
    image_size: int
    batch_size: int                      # images per iteration on this process
    times: Measurement
    losses: list[float]
    warmup_s: float
    first_iteration_s: float | None      # includes compilation when --compile is on
    peak_allocated_mb: float | None
    peak_reserved_mb: float | None
    parameters: int
    notes: list[str] = field(default_factory=list)

    @property
    def throughput(self) -> float:
        """Images per second over the summed timed wall time."""
        return self.batch_size * self.times.count / (self.times.total_ms / 1e3)

    @property
    def compile_s(self) -> float | None:
        return self.first_iteration_s if self.config.compile else None


def _compile_wrapper(config: BenchConfig) -> Callable[[torch.nn.Module], torch.nn.Module] | None:
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
    synchronize(device)
    first = clock() - start
    for _ in range(iterations - 1):
        step()
    synchronize(device)
    return clock() - start, first


def timed_loop(step: Callable[[], torch.Tensor | None], iterations: int, device: torch.device,
               time_fn: Callable[[], float] | None = None) -> tuple[Measurement, list]:
    """The timed region: ``iterations`` steps between device-event marks."""
    recorder = make_recorder(device, iterations + 1, time_fn)
    outputs: list = [None] * iterations
    recorder.mark()
    for index in range(iterations):
        outputs[index] = step()
        recorder.mark()
    return Measurement(recorder.intervals_ms()), outputs


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device) -> tuple[float | None, float | None]:
    """Peak allocated and reserved since the last reset; unknown (None) on the CPU."""
    if device.type != "cuda":
        return None, None
    return (torch.cuda.max_memory_allocated(device) / 2**20,
            torch.cuda.max_memory_reserved(device) / 2**20)


def out_of_memory(config: BenchConfig, batch_size: int, device: torch.device, env: dict) -> OutOfMemory:
    where = f"{device} ({env['device_name']}" + (
        f", {env['device_memory_gb']} GB)" if "device_memory_gb" in env else ")")
    return OutOfMemory(f"out of memory on {where} running {config.network} at batch size "
                       f"{batch_size}: try a smaller --batch-size, --amp or --fp16 1 to halve "
                       f"activation memory, or --mode inference")


def is_out_of_memory(error: BaseException) -> bool:
    if isinstance(error, torch.OutOfMemoryError):
        return True
    # The CPU allocator raises a plain RuntimeError.
    return isinstance(error, RuntimeError) and "can't allocate memory" in str(error)


def run(config: BenchConfig, device: torch.device, env: dict, precision: precision_mod.Precision,
        batch_size: int, on_phase: Callable[[str], None] = lambda message: None,
        wrap: Callable[[torch.nn.Module], torch.nn.Module] | None = None,
        before_timing: Callable[[], None] = lambda: None) -> RunResult:
    """Build, warm up and time one configuration on ``device``.

    ``wrap`` goes around the model before compilation (DDP); ``before_timing`` runs just before
    the timed region (a barrier across ranks).
    """
    spec = models.resolve(config.network)
    image_size = config.image_size or spec.image_size
    spec.check_image_size(image_size)
    precision_mod.apply_tf32(precision.tf32)
    try:
        work = workload_mod.build(spec, image_size, batch_size, config.mode, precision, device,
                                  nhwc=config.nhwc, opt_step=config.opt_step, seed=config.seed,
                                  wrap=_compose(wrap, _compile_wrapper(config)))
        on_phase("compiling and warming up" if config.compile else "warming up")
        warmup_s, first_s = warm_up(work.step, config.warmup, device)
        reset_peak_memory(device)
        before_timing()
        times, outputs = timed_loop(work.step, config.iterations, device)
        allocated, reserved = peak_memory_mb(device)
    except Exception as error:                       # noqa: BLE001 (re-raised unless OOM)
        if is_out_of_memory(error):
            raise out_of_memory(config, batch_size, device, env) from None
        raise
    losses = [float(loss) for loss in outputs if loss is not None]
    return RunResult(config=config, spec=spec, precision=precision, device=device, env=env,
                     image_size=image_size, batch_size=batch_size, times=times, losses=losses,
                     warmup_s=warmup_s, first_iteration_s=first_s, peak_allocated_mb=allocated,
                     peak_reserved_mb=reserved, parameters=work.parameters)


def _compose(inner, outer):
    """Apply ``inner`` then ``outer`` (either may be None)."""
    if inner is None:
        return outer
    if outer is None:
        return inner
    return lambda model: outer(inner(model))
