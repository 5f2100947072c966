"""Telemetry during each part of the node check: the clocks, power and its limit, temperature
and throttle reasons the device's management library reported while the part ran.

The readings come from the telemetry sources (``measure/telemetry``: NVML, amdsmi) through the
same ``Sampler`` a benchmark run uses; on the CPU there is no source and every field is None.
"""
from __future__ import annotations

import contextlib
import statistics
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Iterator, Sequence

from microbench.measure.telemetry import Sampler
from microbench.measure.telemetry.sampler import Sample

if TYPE_CHECKING:
    from microbench.measure.telemetry.sampler import Source

# Readings a part takes: often enough to catch a short throttle in a part of a second or two.
SAMPLE_INTERVAL_S = 0.05
# A GPU that runs at its board's power limit under a full GEMM is doing what it was rated to
# do (H100s and MI300Xs reach it on large matrix products): these reasons flag a GPU only when
# its limit is below the default (someone capped it), never by themselves.
POWER_LIMIT_REASONS = frozenset({"sw_power_cap", "ppt_power_limit", "power"})


@dataclass(frozen=True)
class PartTelemetry:
    """What the device said during one part; None where it does not say."""

    samples: int = 0
    sm_clock_mhz: float | None = None          # median of the readings
    memory_clock_mhz: float | None = None
    power_w_max: float | None = None
    temperature_c_max: float | None = None
    throttle_reasons: tuple[str, ...] | None = None   # every reason seen; () none

    def to_dict(self) -> dict:
        document = asdict(self)
        reasons = self.throttle_reasons
        document["throttle_reasons"] = None if reasons is None else list(reasons)
        return document


def of_samples(samples: Sequence[Sample]) -> PartTelemetry:
    def median(name: str) -> float | None:
        values = [getattr(s, name) for s in samples if getattr(s, name) is not None]
        return statistics.median(values) if values else None

    def highest(name: str) -> float | None:
        values = [getattr(s, name) for s in samples if getattr(s, name) is not None]
        return max(values) if values else None

    reported = [s.throttle_reasons for s in samples if s.throttle_reasons is not None]
    reasons = tuple(sorted({r for rs in reported for r in rs})) if reported else None
    return PartTelemetry(samples=len(samples), sm_clock_mhz=median("sm_clock_mhz"),
                         memory_clock_mhz=median("memory_clock_mhz"),
                         power_w_max=highest("power_w"),
                         temperature_c_max=highest("temperature_c"), throttle_reasons=reasons)


class Watch:
    """The result of :func:`watched`: the part's telemetry once the block has ended."""

    telemetry: PartTelemetry | None = None


@contextlib.contextmanager
def watched(source: Source | None) -> Iterator[Watch]:
    """Sample ``source`` (None: nothing to read) while the block runs (the sampler reads once
    more as it stops, so that a part shorter than the interval is read too)."""
    watch = Watch()
    if source is None:
        yield watch
        return
    sampler = Sampler(source, SAMPLE_INTERVAL_S)
    sampler.start()
    try:
        yield watch
    finally:
        watch.telemetry = of_samples(sampler.stop())


def throttling(parts: Sequence[PartTelemetry | None], capped: bool | None) -> tuple[str, ...]:
    """The throttle reasons that flag a GPU, seen during any part: every reason but the power
    limit's, which counts only on a board capped below its default limit (``capped``)."""
    seen = {r for part in parts if part is not None and part.throttle_reasons
            for r in part.throttle_reasons}
    return tuple(sorted(r for r in seen if capped or r not in POWER_LIMIT_REASONS))
