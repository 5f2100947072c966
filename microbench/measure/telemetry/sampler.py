"""Telemetry samples and the thread that takes them.

:class:`Sample` is one reading and :class:`Source` the protocol a vendor's source implements (value
types: the other modules of the package import them). A :class:`Sampler` takes one sample when
started, one every ``interval_s`` on a daemon thread, and one when stopped, so the samples span the
region from its first step to its final synchronisation. A source that fails ends the sampling,
never the benchmark: ``error`` says why.

Example::

    sampler = Sampler(source, interval_s=0.1)
    sampler.start()                 # just before the first timed step
    run_timed_loop()                # ends with a device synchronisation
    samples = sampler.stop()        # every sample, in order
"""
from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable, Protocol, runtime_checkable

from microbench.platform.errors import UsageError


# ---------------------------------------------------------------- sample

# The numeric fields of a Sample that the report gives min / median / max for.
QUANTITIES = ("sm_clock_mhz", "memory_clock_mhz", "power_w", "temperature_c", "utilization_pct")


@dataclass(frozen=True)
class Sample:
    """One reading; any field is None where the device does not expose it."""

    t_s: float                                   # monotonic seconds
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    utilization_pct: float | None = None
    throttle_reasons: tuple[str, ...] | None = None   # active throttling reasons; () = none
    energy_j: float | None = None                # cumulative counter, joules

    def to_dict(self, origin_s: float = 0.0) -> dict:
        """Plain JSON types; t_s counts from origin_s."""
        values = asdict(self)
        values["t_s"] = self.t_s - origin_s
        if self.throttle_reasons is not None:
            values["throttle_reasons"] = list(self.throttle_reasons)
        return values


@runtime_checkable
class Source(Protocol):
    """One GPU seen through a vendor library."""

    name: str                           # library and version, e.g. "NVML 12.575.51"
    device_label: str                   # which GPU, and how it was matched to the torch device
    max_sm_clock_mhz: float | None

    def read(self) -> Sample: ...

    def close(self) -> None: ...


# ---------------------------------------------------------------- sampler

DEFAULT_INTERVAL_S = 0.1


class Sampler:
    """Reads a source every ``interval_s`` on a daemon thread, from start() to stop().

    ``clock`` stamps samples; ``wait(timeout)`` sleeps between samples and returns True to end the
    loop (default: the stop event's wait, so stop() ends it at once). Tests pass a fake clock and
    wait, or call sample_now() themselves, and never sleep.
    """

    def __init__(self, source: Source, interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic,
                 wait: Callable[[float], bool] | None = None):
        if not interval_s > 0:
            raise UsageError(f"telemetry interval must be positive, got {interval_s}")
        self.interval_s = interval_s
        self.error: str | None = None          # the first failure that ended sampling early
        self._source = source
        self._clock = clock
        self._stop = threading.Event()
        self._wait = wait if wait is not None else self._stop.wait
        self._samples: list[Sample] = []
        self._thread: threading.Thread | None = None

    def sample_now(self) -> Sample:
        stamp = self._clock()
        sample = replace(self._source.read(), t_s=stamp)
        self._samples.append(sample)
        return sample

    def start(self) -> None:
        if self._thread is not None:
            raise UsageError("telemetry sampler already started")
        self._stop.clear()
        self._samples, self.error = [], None
        self._safe_sample()
        self._thread = threading.Thread(target=self._run, name="microbench-telemetry", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._wait(self.interval_s) and self.error is None:
            self._safe_sample()

    def _safe_sample(self) -> None:
        if self.error is not None:
            return
        try:
            self.sample_now()
        except Exception as error:  # a failing sensor ends sampling, never the benchmark
            self.error = f"{type(error).__name__}: {error}"

    def stop(self) -> list[Sample]:
        """Ends the thread, takes a final sample and returns every sample in order."""
        if self._thread is None:
            raise UsageError("telemetry sampler was not started")
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._safe_sample()
        return list(self._samples)

    @property
    def samples(self) -> list[Sample]:
        return list(self._samples)
