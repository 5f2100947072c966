"""Energy over the timed region: by the device's counter where it has one, else estimated.

The counter (NVML's total energy, amdsmi's energy accumulator) is read at both ends of the region;
where it is missing, stood still or went back, power is integrated over the sample times by the
trapezoid rule and the result is labelled an estimate (:data:`ENERGY_TRAPEZOID`), never passed off
as measured. Sums over several GPUs or trials stay estimates if any part was one.

Example::

    energy, basis = choose(counter_energy_j(samples), power_energy_j(samples))
    per_item, per_joule = per_item_and_per_joule(energy, items=images)
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

from microbench.measure.telemetry.sample import Sample

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


def choose(counter: float | None, trapezoid: float | None) -> tuple[float | None, str | None]:
    """(energy, basis): the counter where it has a reading, else a positive power integral."""
    if counter is not None:
        return counter, ENERGY_COUNTER
    if trapezoid is not None and trapezoid > 0:
        return trapezoid, ENERGY_TRAPEZOID
    return None, None


def total(parts: Sequence[tuple[float | None, str | None]]) -> tuple[float | None, str | None]:
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
    values = list(values)
    return math.fsum(values) if values and all(v is not None for v in values) else None
