"""Statistics over trials, on ``scipy.stats``: the headline and its intervals, A/B, the gate,
when to stop adding trials, and which trials ran throttled.

Why logarithms. Throughput is a positive rate whose run-to-run noise is multiplicative (a clock
a few percent lower slows everything a few percent), so every figure here works on
``log(throughput)``: the headline is the **geometric mean** of the trials (the exponential of
the mean log), and its intervals are Student-t intervals on the logs, mapped back. Such an
interval is never negative, always contains the headline, and is of the same statistic as the
headline (the median with a t interval of the mean, as earlier versions printed, was neither).
Bootstrapping the median was the alternative; with the usual 3 to 10 trials its percentile
interval can only fall on the trials' own values and under-covers, so it is not used.

* :class:`TrialStats`: headline, 95% confidence interval of the geometric mean
  (``exp(m +- t * s / sqrt(n))``) and 95% prediction interval for one more invocation
  (``exp(m +- t * s * sqrt(1 + 1/n))``; Hahn & Meeker, *Statistical Intervals*, 2nd ed.,
  section 4.6); one trial gives no interval, and says so.
* :class:`Comparison`: a ratio and its interval in words, the same in the report, ``--compare``
  and ``--ab``: ``faster`` / ``slower`` (the interval excludes 1, the ratio beyond the
  tolerance), ``same within N%`` (the whole interval inside +-N%), else ``no difference
  detected (interval a-b)``.
* :func:`paired_ab`: the throughput ratio B/A paired by round, its 95% interval (t on the
  log ratios) and its :class:`Comparison`.
* :func:`gate`: ``--compare``: a regression is ``slower``: the drop beyond the tolerance AND
  the ratio's 95% interval (Welch's t test on log throughput) below 1; with one sample on a
  side the point ratio against the tolerance, said so.
* :class:`StoppingRule`: ``--max-noise``: add trials until the interval's half-width is below a
  percentage of the headline, or ``--max-trials`` / ``--time-limit`` stops it (clock injectable).
* :func:`throttle_reason` / :class:`DiscardPolicy`: a trial whose SM clock fell below 75% of its
  maximum or had a throttle reason active is flagged; ``--discard-throttled`` re-runs it, a
  bounded number of times, keeping it on record as discarded.

Example::

    spread = TrialStats((5082.0, 4828.0, 5178.0, 4934.0, 5284.0))
    spread.headline, spread.ci95, spread.prediction95, spread.method
    paired_ab([100, 101, 99], [110, 112, 109]).verdict          # 'faster'
    gate([100, 101, 99], [80, 81, 79], tolerance_pct=5).regression   # True
"""
from __future__ import annotations

import math
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

from microbench.platform import units

if TYPE_CHECKING:
    from microbench.measure.telemetry import TelemetryReport

LEVEL = 0.95
ALPHA = 1 - LEVEL

CI_METHOD = "95% CI of the geometric mean (Student t on log throughput)"
PREDICTION_METHOD = "95% prediction interval for one more invocation (Student t on log throughput)"
ONE_TRIAL = "one trial: no interval (run --repeat 2 or more)"

# A trial during which the SM clock fell below this fraction of its maximum is flagged.
THROTTLED_CLOCK_FRACTION = 0.75


# The largest x whose exp() is a float: beyond it, exp() raises OverflowError instead of giving
# infinity (a ratio of two stored headlines 1e300 apart would otherwise crash a report).
_LARGEST_EXP = math.log(sys.float_info.max)


def _exp(x: float) -> float:
    return math.exp(x) if x <= _LARGEST_EXP else math.inf


def _t(dof: int) -> float:
    """Two-sided 95% quantile of Student's t with ``dof`` degrees of freedom."""
    return float(_scipy_stats().t.ppf(1 - ALPHA / 2, dof))


def _scipy_stats():
    """scipy.stats, imported when an interval or a test is computed: it takes most of a second,
    which microbench-report --help and the model benchmark's refusals need not wait for."""
    from scipy import stats
    return stats


def _logs(values: Sequence[float]) -> list[float]:
    if not values or any(not (value > 0 and math.isfinite(value)) for value in values):
        raise ValueError(f"throughputs must be positive and finite: {list(values)!r}")
    return [math.log(value) for value in values]


def _mean_sd(logs: Sequence[float]) -> tuple[float, float]:
    mean = math.fsum(logs) / len(logs)
    if len(logs) < 2:
        return mean, 0.0
    return mean, math.sqrt(math.fsum((x - mean) ** 2 for x in logs) / (len(logs) - 1))


def _around(center_log: float, half_log: float, headline: float) -> tuple[float, float]:
    """``exp(center -+ half)``, widened by rounding to contain ``headline`` exactly."""
    return (min(_exp(center_log - half_log), headline),
            max(_exp(center_log + half_log), headline))


@dataclass(frozen=True)
class TrialStats:
    """The trials' throughputs of one configuration and what they say."""

    values: tuple[float, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(float(v) for v in self.values))
        _logs(self.values)

    @property
    def count(self) -> int:
        return len(self.values)

    @property
    def headline(self) -> float:
        """The geometric mean of the trials (one trial: its value)."""
        if self.count == 1:
            return self.values[0]
        return _exp(_mean_sd(_logs(self.values))[0])

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def mean(self) -> float:
        return math.fsum(self.values) / self.count

    @property
    def std(self) -> float:
        return _mean_sd(self.values)[1]

    @property
    def cv(self) -> float:
        return self.std / self.mean if self.count > 1 else math.nan

    def _interval(self, scale: float) -> tuple[float, float] | None:
        if self.count < 2:
            return None
        center, sd = _mean_sd(_logs(self.values))
        return _around(center, _t(self.count - 1) * sd * scale, self.headline)

    @property
    def ci95(self) -> tuple[float, float] | None:
        """95% confidence interval of the geometric mean; None with one trial."""
        return self._interval(1 / math.sqrt(self.count))

    @property
    def prediction95(self) -> tuple[float, float] | None:
        """95% prediction interval of one more invocation's throughput; None with one trial."""
        return self._interval(math.sqrt(1 + 1 / self.count))

    @property
    def half_width_pct(self) -> float | None:
        """The confidence interval's larger half-width, in percent of the headline."""
        ci = self.ci95
        if ci is None:
            return None
        return max(self.headline - ci[0], ci[1] - self.headline) / self.headline * 100

    @property
    def method(self) -> str:
        return CI_METHOD if self.count > 1 else ONE_TRIAL

    def to_dict(self) -> dict:
        ci, pi = self.ci95, self.prediction95
        return {"trials": self.count, "values": list(self.values),
                "headline": self.headline, "headline_statistic": (
                    "geometric mean of the trials" if self.count > 1 else "the one trial"),
                "median": self.median, "mean": self.mean, "std": self.std, "cv": self.cv,
                "min": min(self.values), "max": max(self.values),
                "ci95_low": ci[0] if ci else None, "ci95_high": ci[1] if ci else None,
                "ci95_method": self.method,
                "prediction95_low": pi[0] if pi else None,
                "prediction95_high": pi[1] if pi else None,
                "prediction95_method": PREDICTION_METHOD if pi else ONE_TRIAL}


# ---------------------------------------------------------------- a ratio in words

# The smallest change that matters, in percent, where no --tolerance was given (the report).
DEFAULT_TOLERANCE_PCT = 5.0
NO_DIFFERENCE = "no difference detected"
VERDICTS = ("faster", "slower", "same within N%", NO_DIFFERENCE)
POINT_RATIO = "one trial on a side: the point ratio, noise not tested"


def ratio_text(value: float) -> str:
    """Three decimals where they hold two significant digits (``0.760``, ``0.010``); below
    0.01, two significant digits (``0.00042``), never ``0.000`` for a bound that is positive."""
    if value < 0.01:
        return units.significant(value, 2)
    return f"{value:.3f}" if value < 10 else f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"


@dataclass(frozen=True)
class Comparison:
    """A speed ratio (above 1: faster) with its 95% interval, in words: the one wording of the
    report (``--baseline``), ``--compare`` and ``--ab``.

    ``faster`` / ``slower``: the interval excludes 1 and the ratio is beyond the tolerance;
    ``same within N%``: the whole interval lies inside +-N%; otherwise ``no difference
    detected`` (an interval too wide to tell, or a change that is real but smaller than the
    tolerance while the interval reaches beyond it). Without an interval (one trial on a side)
    the point ratio against the tolerance decides faster or slower, and nothing is called the
    same."""

    ratio: float
    interval: tuple[float, float] | None
    tolerance_pct: float

    @property
    def verdict(self) -> str:
        tolerance = self.tolerance_pct / 100
        low, high = self.interval or (self.ratio, self.ratio)
        if low > 1 and self.ratio > 1 + tolerance:
            return "faster"
        if high < 1 and self.ratio < 1 - tolerance:
            return "slower"
        if self.interval is not None and 1 - tolerance <= low and high <= 1 + tolerance:
            return f"same within {self.tolerance_pct:g}%"
        return NO_DIFFERENCE

    @property
    def text(self) -> str:
        """The verdict and what it rests on, once: ``slower (interval 0.781-0.822)``."""
        if self.interval is None:
            return f"{self.verdict} ({POINT_RATIO})"
        low, high = self.interval
        return f"{self.verdict} (interval {ratio_text(low)}-{ratio_text(high)})"


def compared(ratio: float, interval: tuple[float, float] | None,
             tolerance_pct: float = DEFAULT_TOLERANCE_PCT) -> Comparison:
    # a stored interval may be a list (JSON): kept as a pair
    return Comparison(ratio, (interval[0], interval[1]) if interval is not None else None,
                      tolerance_pct)


# ---------------------------------------------------------------- A/B, paired by round


class _Ruled:
    """What a verdict that holds a :class:`Comparison` shows of it."""

    comparison: Comparison

    @property
    def ratio(self) -> float:
        return self.comparison.ratio

    @property
    def ci95(self) -> tuple[float, float] | None:
        return self.comparison.interval


@dataclass(frozen=True)
class ABResult(_Ruled):
    """B against A: the ratio of throughputs B/A (>1: B is faster), paired by round."""

    a: tuple[float, ...]
    b: tuple[float, ...]
    comparison: Comparison
    method: str

    @property
    def verdict(self) -> str:
        return self.comparison.verdict

    def to_dict(self) -> dict:
        return {"ratio": self.ratio, "ci95": list(self.ci95) if self.ci95 else None,
                "verdict": self.verdict, "tolerance_pct": self.comparison.tolerance_pct,
                "level": LEVEL, "method": self.method,
                "rounds": len(self.a), "a": list(self.a), "b": list(self.b)}


def paired_ab(a: Sequence[float], b: Sequence[float],
              tolerance_pct: float = DEFAULT_TOLERANCE_PCT) -> ABResult:
    """The ratio B/A of ``b[i] / a[i]`` over rounds (geometric mean), its 95% interval by
    Student t on the log ratios, and the verdict in :class:`Comparison`'s words."""
    if len(a) != len(b) or not a:
        raise ValueError(f"A/B needs as many B trials as A trials, at least one: "
                         f"{len(a)} and {len(b)}")
    diffs = [lb - la for la, lb in zip(_logs(a), _logs(b))]
    center, sd = _mean_sd(diffs)
    ratio = _exp(center)
    if len(diffs) < 2:
        return ABResult(tuple(a), tuple(b), compared(ratio, None, tolerance_pct), "one round")
    interval = _around(center, _t(len(diffs) - 1) * sd / math.sqrt(len(diffs)), ratio)
    return ABResult(tuple(a), tuple(b), compared(ratio, interval, tolerance_pct),
                    f"95% CI of the ratio B/A paired by round (Student t on log ratios, "
                    f"{len(diffs)} rounds)")


# ---------------------------------------------------------------- the --compare gate

@dataclass(frozen=True)
class GateVerdict(_Ruled):
    """This run against a baseline: throughput ratio now/baseline and whether it regressed."""

    comparison: Comparison             # now/baseline, its 95% interval (None on one sample)
    p_value: float | None              # two-sided Welch on log throughput; None on one sample
    method: str

    @property
    def tolerance_pct(self) -> float:
        return self.comparison.tolerance_pct

    @property
    def drop_pct(self) -> float:
        """(1 - ratio) * 100: positive when slower."""
        return (1 - self.ratio) * 100

    @property
    def regression(self) -> bool:
        return self.comparison.verdict == "slower"

    @property
    def significant(self) -> bool | None:
        return None if self.p_value is None else self.p_value < ALPHA

    @property
    def verdict(self) -> str:
        return self.comparison.verdict

    def to_dict(self) -> dict:
        return {"ratio": self.ratio, "drop_pct": self.drop_pct,
                "tolerance_pct": self.tolerance_pct, "p_value": self.p_value,
                "ci95": list(self.ci95) if self.ci95 else None, "regression": self.regression,
                "verdict": self.verdict, "method": self.method}


def gate(baseline: Sequence[float], current: Sequence[float],
         tolerance_pct: float) -> GateVerdict:
    """Whether ``current`` regressed against ``baseline`` (trial throughputs of each): the
    ratio of their headlines (geometric means) with its 95% interval (Welch's t on the logs),
    in :class:`Comparison`'s words; a regression is ``slower``: the drop beyond
    ``tolerance_pct`` and the interval below 1 (Welch's test significant at 5%, two-sided).
    With one sample on either side nothing tests the noise: the point ratio against the
    tolerance decides, and the wording says so."""
    ours, theirs = TrialStats(tuple(current)), TrialStats(tuple(baseline))
    ratio = ours.headline / theirs.headline
    if ours.count < 2 or theirs.count < 2:
        return GateVerdict(compared(ratio, None, tolerance_pct), None,
                           f"{theirs.count} baseline and {ours.count} current "
                           f"trial{'s' if ours.count > 1 else ''}")
    with warnings.catch_warnings():     # near-identical trials: scipy warns, the test holds
        warnings.simplefilter("ignore", RuntimeWarning)
        both = _scipy_stats().ttest_ind(_logs(ours.values), _logs(theirs.values), equal_var=False)
        interval = both.confidence_interval(LEVEL)
    p_value = float(both.pvalue)
    if math.isnan(p_value):             # no spread on either side and equal: nothing differs
        p_value = 1.0
    low, high = ((interval.low, interval.high) if not math.isnan(interval.low)
                 else (math.log(ratio), math.log(ratio)))     # no spread on either side
    ci = (min(_exp(low), ratio), max(_exp(high), ratio))
    return GateVerdict(compared(ratio, ci, tolerance_pct), p_value,
                       f"Welch's t test on log throughput ({theirs.count} baseline, "
                       f"{ours.count} current trials), p = {p_value:.3g}")


def lower_by_rank(reference: Sequence[float], current: Sequence[float]) -> float:
    """The one-sided p-value that ``current`` lies below ``reference`` by rank (Mann-Whitney U),
    1.0 when either side has fewer than two samples. The node check asks it beside the gate:
    a GPU shared with another process gives bimodal samples (the few calls that ran alone are
    as fast as a healthy GPU's), whose wide spread of logs hides from Welch's t a median two
    thirds below; ranks are not moved by how far those few calls lie."""
    if len(reference) < 2 or len(current) < 2:
        return 1.0
    test = _scipy_stats().mannwhitneyu(list(current), list(reference), alternative="less")
    return 1.0 if math.isnan(test.pvalue) else float(test.pvalue)


# ---------------------------------------------------------------- --max-noise

@dataclass
class StoppingRule:
    """``--max-noise PCT``: fed one trial's throughput at a time (:meth:`add`), says when to
    stop (:meth:`reason`): the interval's half-width below ``max_noise_pct`` of the headline
    (at least ``min_trials``), ``max_trials`` reached, or ``time_limit_s`` since the rule was
    made spent (``clock``: seconds, injectable)."""

    max_noise_pct: float
    max_trials: int
    time_limit_s: float | None = None
    min_trials: int = 3
    clock: Callable[[], float] = time.monotonic
    values: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def add(self, throughput: float) -> None:
        self.values.append(throughput)

    @property
    def stats(self) -> TrialStats | None:
        return TrialStats(tuple(self.values)) if self.values else None

    def reason(self) -> str | None:
        """Why to stop now, or None to run another trial."""
        spread = self.stats
        if spread is not None and spread.count >= max(2, self.min_trials):
            half = spread.half_width_pct
            if half is not None and half < self.max_noise_pct:
                return (f"noise target met: the 95% CI's half-width is {half:.2f}% of the "
                        f"headline after {spread.count} trials (--max-noise "
                        f"{self.max_noise_pct:g})")
        count = len(self.values)
        noise = "" if spread is None or spread.count < 2 else \
            f"; the 95% CI's half-width is still {spread.half_width_pct:.2f}%"
        if count >= self.max_trials:
            return f"--max-trials {self.max_trials} reached{noise}"
        elapsed = self.clock() - self.started
        if self.time_limit_s is not None and elapsed >= self.time_limit_s:
            return f"--time-limit {self.time_limit_s:g} s reached after {count} trials{noise}"
        return None


# ---------------------------------------------------------------- throttled trials

def throttle_reason(telemetry: TelemetryReport | None) -> str | None:
    """Why a trial counts as throttled, from its telemetry report (``sm_clock_drop``,
    ``stats['sm_clock_mhz']``, ``max_sm_clock_mhz``, ``throttle_reasons_seen``), or None."""
    if telemetry is None:
        return None
    reasons = []
    drop = getattr(telemetry, "sm_clock_drop", None)
    if drop is not None and drop > 1 - THROTTLED_CLOCK_FRACTION:
        reasons.append(f"SM clock fell to {1 - drop:.0%} of its maximum")
    seen = tuple(getattr(telemetry, "throttle_reasons_seen", ()) or ())
    if seen:
        reasons.append(f"throttle reasons {', '.join(seen)}")
    return "; ".join(reasons) or None


@dataclass
class DiscardPolicy:
    """``--discard-throttled``: a throttled trial is re-run, at most ``max_reruns`` times over
    the whole run; every discarded trial stays on record with its reason."""

    max_reruns: int
    discarded: list[tuple[int, str]] = field(default_factory=list)   # (trial index, reason)

    def rerun(self, index: int, telemetry: TelemetryReport | None) -> bool:
        """Whether trial ``index`` (just measured) is to be discarded and measured again."""
        reason = throttle_reason(telemetry)
        if reason is None or len(self.discarded) >= self.max_reruns:
            return False
        self.discarded.append((index, reason))
        return True

    @property
    def exhausted(self) -> bool:
        return len(self.discarded) >= self.max_reruns
