"""Statistics of the samples: min / median / max of each quantity, and how far the SM clock fell
below its reference (the device's maximum, else the highest sample, and the report says which).

Example::

    stats = quantity_stats(samples)             # {"power_w": Stat(min, median, max) or None, ...}
    reference, kind = clock_reference(source.max_sm_clock_mhz, stats["sm_clock_mhz"])
    clock_drop(stats["sm_clock_mhz"], reference)   # 0.15 for 1700 MHz against 2000 MHz
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterable, Sequence

from microbench.measure.telemetry.sample import QUANTITIES, Sample


@dataclass(frozen=True)
class Stat:
    min: float
    median: float
    max: float


def stat_of(values: Iterable[float | None]) -> Stat | None:
    """Min, median and max of the known values; None when none is known."""
    present = sorted(v for v in values if v is not None)
    if not present:
        return None
    return Stat(present[0], statistics.median(present), present[-1])


def quantity_stats(samples: Sequence[Sample]) -> dict[str, Stat | None]:
    """A :class:`Stat` (or None) for each of :data:`~microbench.measure.telemetry.sample.QUANTITIES`."""
    return {q: stat_of(getattr(s, q) for s in samples) for q in QUANTITIES}


def clock_reference(device_max: float | None,
                    observed: Stat | None) -> tuple[float | None, str | None]:
    """The device's maximum SM clock; the highest sample when the library does not say."""
    if device_max:
        return device_max, "device maximum"
    if observed is not None and observed.max > 0:
        return observed.max, "highest sample"
    return None, None


def clock_drop(observed: Stat | None, reference: float | None) -> float | None:
    """1 - lowest clock / reference, never below 0; None where either is unknown."""
    if observed is None or not reference:
        return None
    return max(0.0, 1.0 - observed.min / reference)
