"""What the timed region looked like from the GPU's management library: :class:`TelemetryReport`.

:func:`summarize` builds the report of one GPU over one timed region from its samples;
:func:`combine` pools the reports of several ranks or trials into one. The report gives min /
median / max of each quantity, the energy (by counter, or estimated) and energy per item,
throttling, one-line warnings when the SM clock fell more than :data:`SM_CLOCK_DROP_WARN` below
its maximum or a throttle reason was active, and its JSON block (the CSV reads its cells from it). Where telemetry
was not available it says why.

Example::

    report = summarize(sampler.stop(), source, items=images, timed_s=seconds)
    report = combine([report_rank0, report_rank1])      # every rank, every trial
    for line in report.warnings():
        print(line)
    result["telemetry"] = report.to_dict()      # the CSV's cells come from here (store.figures)

Its parts, here too: the statistics of the samples (:func:`quantity_stats`: min / median / max
per quantity; :func:`clock_reference` and :func:`clock_drop`: how far the SM clock fell below
the device's maximum, else the highest sample, said which), and the energy (by the device's
counter read at both ends of the region; where it is missing, stood still or went back, power
integrated over the sample times by the trapezoid rule and labelled an estimate,
:data:`ENERGY_TRAPEZOID`, never passed off as measured).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Iterable, Mapping, Sequence

from microbench.measure.telemetry.sampler import QUANTITIES, Sample, Source


# ---------------------------------------------------------------- stats

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
    """A :class:`Stat` (or None) for each of :data:`~microbench.measure.telemetry.sampler.QUANTITIES`."""
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


# ---------------------------------------------------------------- energy

ENERGY_COUNTER = "counter"
ENERGY_TRAPEZOID = "power x time (trapezoid over samples), estimated"


def counter_energy_j(samples: Sequence[Sample]) -> float | None:
    """Energy counter advance from the first to the last sample that has one; None when the
    counter is missing, stood still, or went back (reset or wrap)."""
    readings = [s.energy_j for s in samples if s.energy_j is not None]
    if len(readings) < 2 or readings[-1] <= readings[0]:
        return None
    return readings[-1] - readings[0]


def power_energy_j(samples: Sequence[Sample]) -> float | None:
    """Trapezoid of power over time, over the intervals with a power reading at both ends."""
    total, intervals = 0.0, 0
    for a, b in zip(samples, samples[1:]):
        if a.power_w is not None and b.power_w is not None:
            total += (a.power_w + b.power_w) / 2.0 * (b.t_s - a.t_s)
            intervals += 1
    return total if intervals else None


def choose_energy(counter: float | None,
                  trapezoid: float | None) -> tuple[float | None, str | None]:
    """(energy, basis): the counter where it has a reading, else a positive power integral."""
    if counter is not None:
        return counter, ENERGY_COUNTER
    if trapezoid is not None and trapezoid > 0:
        return trapezoid, ENERGY_TRAPEZOID
    return None, None


def total_energy(parts: Sequence[tuple[float | None, str | None]]
                 ) -> tuple[float | None, str | None]:
    """(energy, basis) of several (energy, basis) parts: the sum where every part is known,
    estimated if any part was."""
    energy = sum_known(e for e, _ in parts)
    if energy is None:
        return None, None
    estimated = any(basis == ENERGY_TRAPEZOID for _, basis in parts)
    return energy, ENERGY_TRAPEZOID if estimated else ENERGY_COUNTER


def per_item_and_per_joule(energy_j: float | None,
                           items: float | None) -> tuple[float | None, float | None]:
    """(joules per item, items per joule); None where either side is unknown or zero."""
    if not energy_j or not items:
        return None, None
    return energy_j / items, items / energy_j


def sum_known(values: Iterable[float | None]) -> float | None:
    """The sum where every value is known (and there is one); else None, never a partial sum."""
    given = list(values)
    known = [value for value in given if value is not None]
    return math.fsum(known) if given and len(known) == len(given) else None


# ---------------------------------------------------------------- report

# More than this fractional drop of the SM clock below its maximum during timing is reported.
SM_CLOCK_DROP_WARN = 0.10


@dataclass(frozen=True)
class TelemetryReport:
    """What the timed region looked like from the GPU's management library."""

    available: bool
    reason: str | None = None                  # why not, when not available
    source_name: str | None = None
    device_label: str | None = None
    items: float | None = None
    timed_s: float | None = None
    samples: tuple[Sample, ...] = ()
    stats: Mapping[str, Stat | None] = field(default_factory=dict)
    max_sm_clock_mhz: float | None = None      # the reference the drop is measured against
    sm_clock_reference: str | None = None      # "device maximum" or "highest sample"
    sm_clock_drop: float | None = None         # 1 - min / max_sm_clock_mhz
    counter_energy_j: float | None = None
    power_energy_j: float | None = None
    energy_j: float | None = None
    energy_basis: str | None = None            # ENERGY_COUNTER, ENERGY_TRAPEZOID or None
    joules_per_item: float | None = None
    items_per_joule: float | None = None
    throttle_reasons_seen: tuple[str, ...] = ()
    throttle_reported: bool = False            # whether any sample could read the reasons

    @classmethod
    def unavailable(cls, note: str) -> TelemetryReport:
        return cls(available=False, reason=note)

    def stat(self, quantity: str) -> Stat | None:
        return self.stats.get(quantity)

    @property
    def energy_estimated(self) -> bool:
        return self.energy_basis == ENERGY_TRAPEZOID

    @property
    def throttled(self) -> bool | None:
        return bool(self.throttle_reasons_seen) if self.throttle_reported else None

    def warnings(self) -> list[str]:
        lines = []
        clock = self.stats.get("sm_clock_mhz")
        if (self.sm_clock_drop is not None and self.sm_clock_drop > SM_CLOCK_DROP_WARN
                and clock is not None):               # a drop is measured from the clock's
            low = clock.min
            lines.append(f"telemetry: SM clock fell {self.sm_clock_drop:.1%} below its "
                         f"{self.sm_clock_reference} "
                         f"({low:.0f} of {self.max_sm_clock_mhz:.0f} MHz) during timing")
        if self.throttle_reasons_seen:
            reasons = ", ".join(self.throttle_reasons_seen)
            lines.append(f"telemetry: throttling during timing: {reasons}")
        return lines

    def to_dict(self) -> dict:
        """Plain JSON types; sample times count from the first sample."""
        if not self.available:
            return {"available": False, "reason": self.reason}
        origin = self.samples[0].t_s if self.samples else 0.0
        return {
            "available": True, "source": self.source_name, "device": self.device_label,
            "items": self.items, "timed_s": self.timed_s, "sample_count": len(self.samples),
            "stats": {q: None if s is None else asdict(s) for q, s in self.stats.items()},
            "max_sm_clock_mhz": self.max_sm_clock_mhz,
            "sm_clock_reference": self.sm_clock_reference,
            "sm_clock_drop": self.sm_clock_drop,
            "energy_j": self.energy_j, "energy_basis": self.energy_basis,
            "energy_estimated": self.energy_estimated,
            "counter_energy_j": self.counter_energy_j, "power_energy_j": self.power_energy_j,
            "joules_per_item": self.joules_per_item, "items_per_joule": self.items_per_joule,
            "throttle_reasons_seen": list(self.throttle_reasons_seen), "throttled": self.throttled,
            "warnings": self.warnings(),
            "samples": [s.to_dict(origin) for s in self.samples],
        }



def summarize(samples: Sequence[Sample], source: Source, items: float | None,
              timed_s: float | None) -> TelemetryReport:
    """The report over ``samples``; ``items`` (images, tokens) processed in ``timed_s``."""
    samples = tuple(samples)
    stats = quantity_stats(samples)
    reference, reference_kind = clock_reference(source.max_sm_clock_mhz, stats["sm_clock_mhz"])
    counter = counter_energy_j(samples)
    trapezoid = power_energy_j(samples)
    energy, basis = choose_energy(counter, trapezoid)
    per_item, per_joule = per_item_and_per_joule(energy, items)
    return TelemetryReport(
        available=True, source_name=source.name, device_label=source.device_label,
        items=items, timed_s=timed_s, samples=samples, stats=stats,
        max_sm_clock_mhz=reference, sm_clock_reference=reference_kind,
        sm_clock_drop=clock_drop(stats["sm_clock_mhz"], reference),
        counter_energy_j=counter, power_energy_j=trapezoid, energy_j=energy, energy_basis=basis,
        joules_per_item=per_item, items_per_joule=per_joule,
        throttle_reasons_seen=tuple(sorted({r for s in samples for r in s.throttle_reasons or ()})),
        throttle_reported=any(s.throttle_reasons is not None for s in samples),
    )


def combine(reports: Sequence[TelemetryReport]) -> TelemetryReport:
    """Several GPUs' (or trials') reports as one: samples pooled for the statistics, energy and
    items summed, the clock drop against the highest reference, throttle reasons united."""
    available = [report for report in reports if report.available]
    if not available:
        return reports[0]
    if len(available) == 1:
        return available[0]
    samples = tuple(s for report in available for s in report.samples)
    stats = quantity_stats(samples)
    reference, reference_kind = _highest_clock_reference(available)
    energy, basis = total_energy([(r.energy_j, r.energy_basis) for r in available])
    items = math.fsum(r.items or 0.0 for r in available) or None
    per_item, per_joule = per_item_and_per_joule(energy, items)
    return TelemetryReport(
        available=True, source_name=available[0].source_name,
        device_label=f"{len(available)} measurements ({available[0].device_label}, ...)",
        items=items, timed_s=math.fsum(r.timed_s or 0.0 for r in available), samples=samples,
        stats=stats, max_sm_clock_mhz=reference,
        sm_clock_reference=reference_kind,
        sm_clock_drop=clock_drop(stats["sm_clock_mhz"], reference),
        counter_energy_j=sum_known(r.counter_energy_j for r in available),
        power_energy_j=sum_known(r.power_energy_j for r in available),
        energy_j=energy, energy_basis=basis,
        joules_per_item=per_item, items_per_joule=per_joule,
        throttle_reasons_seen=tuple(sorted({x for r in available
                                            for x in r.throttle_reasons_seen})),
        throttle_reported=any(r.throttle_reported for r in available))


def _highest_clock_reference(
        reports: Sequence[TelemetryReport]) -> tuple[float | None, str | None]:
    """The highest SM clock reference of ``reports``, with its own kind ("device maximum" or
    "highest sample"), so the label names the reference the drop is measured against."""
    known = [r for r in reports if r.max_sm_clock_mhz]
    if not known:
        return None, None
    highest = max(known, key=lambda r: r.max_sm_clock_mhz or 0.0)
    return highest.max_sm_clock_mhz, highest.sm_clock_reference


def energy_counter_vs_power(report: TelemetryReport) -> float | None:
    """Counter energy / trapezoid of power over time, for checking the counter on a GPU.

    Expect about 1 on a long steady run, not exactly: the samples see power only every interval,
    and NVML's power reading is itself a 1 s average on Ampere (but GA100) and newer (NVML API
    reference, nvmlDeviceGetPowerUsage), so it lags on short runs.
    """
    if report.counter_energy_j is None or not report.power_energy_j:
        return None
    if not math.isfinite(report.power_energy_j):
        return None
    return report.counter_energy_j / report.power_energy_j
