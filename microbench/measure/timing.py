"""Clocks and measurements.

The clock is chosen once per device: device events on a GPU (CUDA and HIP alike, through
:mod:`microbench.platform.devices`), ``time.perf_counter`` on the CPU. A recorder takes one timestamp per
``mark()`` into storage allocated up front, so the timed loop allocates nothing for timing and
never waits for the device; timestamps are read only after the loop, with one synchronisation.

A :class:`Measurement` keeps every raw sample and derives its statistics on demand; measurements
of several processes can be merged.

Example::

    recorder = make_recorder(torch.device("cuda"), marks=iterations + 1)
    recorder.mark()
    for _ in range(iterations):
        step()
        recorder.mark()
    times = Measurement(recorder.intervals_ms())
    print(times.median, times.p99, times.cv)
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import torch

from microbench.platform import devices

# A run whose coefficient of variation passes this is flagged as noisy in the summary.
# torch.utils.benchmark warns on IQR/median; we report std/mean because users quote it.
NOISY_CV_THRESHOLD = 0.05


class EventRecorder:
    """Timestamps as device events recorded on the current stream."""

    def __init__(self, marks: int):
        self._events = [devices.timing_event() for _ in range(marks)]
        self._count = 0

    def mark(self) -> None:
        self._events[self._count].record()
        self._count += 1

    def intervals_ms(self) -> list[float]:
        """Milliseconds between consecutive marks; waits for the device once."""
        recorded = self._events[: self._count]
        if len(recorded) < 2:
            return []
        recorded[-1].synchronize()
        return [a.elapsed_time(b) for a, b in zip(recorded, recorded[1:])]


# The host clock of timed regions on the CPU, looked up when a recorder is made (tests replace it
# with a fake clock, so that what is done with timings never depends on how busy the machine is).
HOST_CLOCK: Callable[[], float] = time.perf_counter


class HostRecorder:
    """Timestamps from a host clock (:data:`HOST_CLOCK` unless ``time_fn`` is given)."""

    def __init__(self, marks: int, time_fn: Callable[[], float] | None = None):
        self._stamps = [0.0] * marks
        self._time_fn = time_fn or HOST_CLOCK
        self._count = 0

    def mark(self) -> None:
        self._stamps[self._count] = self._time_fn()
        self._count += 1

    def intervals_ms(self) -> list[float]:
        stamps = self._stamps[: self._count]
        return [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:])]


# What marks the timed loop's iterations: device events on a GPU, the host clock otherwise.
Recorder = EventRecorder | HostRecorder


def make_recorder(device: torch.device, marks: int,
                  time_fn: Callable[[], float] | None = None) -> Recorder:
    """The recorder for ``device``: device events on a GPU, the host clock otherwise.

    ``time_fn`` forces a host recorder with that clock (tests inject a fake clock).
    """
    if time_fn is not None:
        return HostRecorder(marks, time_fn)
    if devices.is_gpu(device):
        return EventRecorder(marks)
    return HostRecorder(marks)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default method)."""
    if not sorted_values:
        return math.nan
    position = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    weight = position - low
    return sorted_values[low] * (1 - weight) + sorted_values[high] * weight


@dataclass(frozen=True)
class Measurement:
    """Raw samples in milliseconds, with statistics derived from them."""

    samples_ms: tuple[float, ...]

    def __init__(self, samples_ms: Iterable[float]):
        object.__setattr__(self, "samples_ms", tuple(float(s) for s in samples_ms))

    @classmethod
    def merge(cls, measurements: Iterable["Measurement"]) -> "Measurement":
        return cls(s for m in measurements for s in m.samples_ms)

    @property
    def count(self) -> int:
        return len(self.samples_ms)

    @property
    def total_ms(self) -> float:
        return math.fsum(self.samples_ms)

    @property
    def mean(self) -> float:
        return self.total_ms / self.count if self.count else math.nan

    @property
    def std(self) -> float:
        """Sample standard deviation (n - 1); 0 for a single sample."""
        if self.count < 2:
            return 0.0
        mean = self.mean
        return math.sqrt(math.fsum((s - mean) ** 2 for s in self.samples_ms) / (self.count - 1))

    @property
    def _sorted(self) -> list[float]:
        return sorted(self.samples_ms)

    @property
    def median(self) -> float:
        return percentile(self._sorted, 50)

    @property
    def min(self) -> float:
        return min(self.samples_ms) if self.samples_ms else math.nan

    @property
    def max(self) -> float:
        return max(self.samples_ms) if self.samples_ms else math.nan

    def percentile(self, q: float) -> float:
        return percentile(self._sorted, q)

    @property
    def p90(self) -> float:
        return self.percentile(90)

    @property
    def p95(self) -> float:
        return self.percentile(95)

    @property
    def p99(self) -> float:
        return self.percentile(99)

    @property
    def iqr(self) -> float:
        ordered = self._sorted
        return percentile(ordered, 75) - percentile(ordered, 25)

    @property
    def cv(self) -> float:
        """Coefficient of variation, std / mean."""
        return self.std / self.mean if self.count and self.mean > 0 else math.nan

    @property
    def is_noisy(self) -> bool:
        return self.cv > NOISY_CV_THRESHOLD

    def stats(self) -> dict[str, float]:
        ordered = self._sorted
        return {
            "count": self.count,
            "mean_ms": self.mean,
            "median_ms": percentile(ordered, 50),
            "std_ms": self.std,
            "min_ms": self.min,
            "max_ms": self.max,
            "p90_ms": percentile(ordered, 90),
            "p95_ms": percentile(ordered, 95),
            "p99_ms": percentile(ordered, 99),
            "iqr_ms": percentile(ordered, 75) - percentile(ordered, 25),
            "cv": self.cv,
            "total_ms": self.total_ms,
        }

    def __str__(self) -> str:
        return (f"{self.count} samples: median {self.median:.3f} ms, mean {self.mean:.3f} ms, "
                f"std {self.std:.3f} ms (CV {self.cv:.1%})")


def time_calls(fn: Callable[[], object], iterations: int, device: torch.device,
               between: Callable[[], object] | None = None,
               time_fn: Callable[[], float] | None = None) -> Measurement:
    """Time ``iterations`` calls of ``fn`` one by one (op-level benchmarks).

    ``between`` runs before each call outside the timed interval (e.g. an L2 cache flush).
    """
    recorder = make_recorder(device, 2 * iterations, time_fn)
    for _ in range(iterations):
        if between is not None:
            between()
        recorder.mark()
        fn()
        recorder.mark()
    intervals = recorder.intervals_ms()
    return Measurement(intervals[0::2])
