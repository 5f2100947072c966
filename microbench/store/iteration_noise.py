"""Whether a ratio of two results lies within their own noise, where a side has one trial.

A comparison with two trials or more a side tests the spread between runs
(:func:`microbench.measure.stats.gate`, :func:`~microbench.measure.stats.paired_ab`). With one
trial on a side nothing measured that spread, and the point ratio alone once decided: two runs
whose iterations varied by 32% and 75% (a loaded 2-core host, issue 64) gave "faster" at 1.116
while their median iterations said 29% slower, and ``--fail-if slower`` would fail CI on such
noise. The only spread such a side has is its own iterations', so the rule is:

* each side's spread is its iteration CV (``timing.stats.cv``; from ``samples_ms`` where the
  document states none), as a standard deviation of log time, ``s = sqrt(ln(1 + CV^2))``
  (the lognormal's; noise on a rate is multiplicative, as in :mod:`microbench.measure.stats`);
* the :class:`NoiseBand` is ``exp(+-z * sqrt(s_a^2 + s_b^2))`` with ``z`` the two-sided 95%
  normal quantile: where 95% of the ratios of one iteration of each run would fall;
* a ratio inside the band is ``within noise``: no change is claimed, and no gate fails on it;
  outside it the point ratio against the tolerance decides, as before.

Why not the interval of the mean (``s / sqrt(n)``): iterations of one run are not independent
draws of its speed (a host's load or a clock that stays low moves a whole run), and spread within
a run is not spread between runs (docs/trials.md), so the mean's interval would be far too
narrow; the per-iteration band is what a run's own samples can vouch for. A side that records no
iteration spread (the older tool's result) adds none to the band; with none on either side there
is no band and the point ratio decides, said so.

Example::

    band = band_of((baseline_entry, current_entry))      # None: no side knows its spread
    band.holds(1.116), band.text          # True, '0.236-4.243 (iteration CV 32% and 75%)'
    words(stats.compared(1.116, None), (baseline_entry, current_entry))   # 'within noise (...)'
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Protocol

from microbench.measure import stats
from microbench.store import ranges

WITHIN_NOISE = "within noise"
# The two-sided normal quantile at the level every verdict of the tool states (95%).
_Z = statistics.NormalDist().inv_cdf(1 - stats.ALPHA / 2)


class Measured(Protocol):
    """What the rule reads of a stored result (a :class:`~microbench.store.entry.Entry`)."""

    @property
    def figures(self) -> dict: ...

    @property
    def samples_ms(self) -> tuple[float, ...]: ...


def iteration_cv(entry: Measured) -> float | None:
    """The run's coefficient of variation of its iteration times, as its document states it,
    else from its samples; None where it records neither."""
    cv = entry.figures.get("cv")
    samples = entry.samples_ms
    if cv is None and len(samples) >= 2 and statistics.fmean(samples) > 0:
        cv = statistics.stdev(samples) / statistics.fmean(samples)
    if cv is None or not math.isfinite(cv) or cv < 0:
        return None
    return float(cv)


@dataclass(frozen=True)
class NoiseBand:
    """The ratios two results may show by their iterations' noise alone (module docstring)."""

    cvs: tuple[float, ...]             # each side's iteration CV, of the sides that state one

    @property
    def half_width(self) -> float:
        """Half the band's width in log ratio: z times the log ratio's standard deviation."""
        variance = math.fsum(math.log1p(min(cv, ranges.LARGEST_RATIO) ** 2)
                             for cv in self.cvs)
        return _Z * math.sqrt(variance)

    @property
    def low(self) -> float:
        return math.exp(-self.half_width)

    @property
    def high(self) -> float:
        return math.exp(self.half_width)

    def holds(self, ratio: float) -> bool:
        return self.low <= ratio <= self.high

    @property
    def range_text(self) -> str:
        """``0.236-4.243``."""
        return f"{stats.ratio_text(self.low)}-{stats.ratio_text(self.high)}"

    @property
    def spread_text(self) -> str:
        """``iteration CV 32% and 75%``."""
        spreads = " and ".join(f"{cv * 100:.3g}%" for cv in self.cvs)
        return f"iteration CV {spreads}"

    @property
    def text(self) -> str:
        """``0.236-4.243 (iteration CV 32% and 75%)``."""
        return f"{self.range_text} ({self.spread_text})"

    def to_dict(self) -> dict:
        return {"low": self.low, "high": self.high, "iteration_cv": list(self.cvs),
                "level": stats.LEVEL}


def band_of(entries: Iterable[Measured]) -> NoiseBand | None:
    """The band of the entries compared, from those that state their iteration spread; None
    where none does."""
    cvs = tuple(cv for cv in map(iteration_cv, entries) if cv is not None)
    return NoiseBand(cvs) if cvs else None


def within(comparison: stats.Comparison, entries: Iterable[Measured]) -> NoiseBand | None:
    """The band, where the comparison rests on one trial a side (it has no interval) and its
    ratio lies inside the band: no change is claimed. None otherwise."""
    if comparison.interval is not None:
        return None
    band = band_of(entries)
    return band if band is not None and band.holds(comparison.ratio) else None


def words(comparison: stats.Comparison, entries: Iterable[Measured]) -> str:
    """The comparison in words under the rule: with trials, its own; with one trial a side,
    ``within noise`` inside the band, else the point ratio's verdict beyond it."""
    if comparison.interval is not None:
        return comparison.text
    band = band_of(entries)
    if band is None:
        return comparison.text
    if band.holds(comparison.ratio):
        return (f"{WITHIN_NOISE} (one trial on a side: the ratio lies inside {band.text}, "
                f"the range their iterations' own spread allows; run --repeat 2 or more to "
                f"test it)")
    # The point ratio's own words first, as before (scripts may read them), then the band.
    return f"{comparison.text}, beyond {band.text}, the range their iterations' own spread allows"


@dataclass(frozen=True)
class GateWithinNoise(stats.GateVerdict):
    """``--compare``'s verdict where a side has one trial and the ratio lies within the band:
    never a regression (``--fail-if slower`` passes), whatever the point ratio says."""

    band: NoiseBand = NoiseBand(())

    @property
    def regression(self) -> bool:
        return False

    @property
    def verdict(self) -> str:
        return WITHIN_NOISE

    def to_dict(self) -> dict:
        return {**super().to_dict(), "noise_band": self.band.to_dict()}


def ruled(verdict: stats.GateVerdict, entries: Iterable[Measured]) -> stats.GateVerdict:
    """The gate's verdict under the rule (``entries``: the baseline's and this run's)."""
    band = within(verdict.comparison, entries)
    if band is None:
        return verdict
    return GateWithinNoise(verdict.comparison, verdict.p_value, verdict.method, band)
