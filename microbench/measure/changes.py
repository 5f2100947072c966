"""Where a series of runs' throughputs steps up or down, and whether each step is beyond noise.

Two stages, so that a noisy night is not a change:

1. **Candidates** from ruptures (C. Truong, L. Oudre, N. Vayatis, *Selective review of offline
   change point detection methods*, Signal Processing 167, 2020): ``KernelCPD`` with the linear
   kernel, which is the least-squares (``l2``) cost solved exactly by PELT (Killick, Fearnhead &
   Eckley, JASA 2012), in C: 10,000 runs in a fraction of a second. It works on the logarithms
   of the throughputs (noise is multiplicative: :mod:`.stats`). Its penalty is
   ``4 * sigma^2 * ln(n)``, twice the BIC's ``2 sigma^2 ln n`` (Lavielle, Signal Processing 85,
   2005), with ``sigma`` the noise estimated from the median absolute difference of successive
   runs, which a step moves by one difference only. Segments are at least two runs long.
2. **Confirmation** of each candidate with the gate's own test (:func:`.stats.gate`: Welch's t
   on log throughput, the ratio's 95% interval) between the runs since the previous candidate
   and those up to the next one, each run one sample (its headline: spread within a run is not
   spread between runs). A candidate is a change when that interval excludes 1, with at least
   two runs on each side; the least significant failing candidate is dropped and its
   neighbours tested again over the joined runs, until every candidate left is confirmed.

Example::

    for change in changes([100, 101, 99, 100, 97, 96, 97, 98]):
        change.index, change.verdict.ratio, change.verdict.ci95     # 4, 0.97, (0.95, 0.99)
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from microbench.measure import stats
from microbench.platform import process

# The penalty per change, in units of sigma^2 * ln(n): see the module docstring.
PENALTY = 4.0
# Fewer runs than this a side and the gate's test has no spread to judge: a point ratio.
MIN_RUNS_A_SIDE = 2
# Median absolute deviation to standard deviation for normal noise (1 / Phi^-1(3/4)).
_MAD_TO_SD = 1.4826
# Runs of identical values estimate no noise; the penalty needs some. And headlines that differ
# only in their last bits (one value stored through two roundings) differ by no speed.
_NOISE_FLOOR = 1e-9


@dataclass(frozen=True)
class Change:
    """A confirmed change: the first run after it (``index``), the runs compared on each side
    (``start`` to ``index``, ``index`` to ``stop``) and the gate's verdict after/before."""

    index: int
    start: int
    stop: int
    verdict: stats.GateVerdict


def noise(logs: Sequence[float]) -> float:
    """The standard deviation of one run's log throughput, from successive differences (each
    the difference of two runs' noise, sqrt(2) sigma wide), by their median absolute
    deviation: robust to the steps and outliers it is meant to judge. Where most differences
    are equal (values rounded to a few levels) that is zero, and their standard deviation is
    taken instead: a zero penalty would make every run a candidate."""
    differences = sorted(b - a for a, b in zip(logs, logs[1:]))
    middle = _median(differences)
    spread = _median(sorted(abs(d - middle) for d in differences)) * _MAD_TO_SD
    if spread == 0 and len(differences) > 1:
        spread = statistics.stdev(differences)
    return max(spread / math.sqrt(2), _NOISE_FLOOR)


def _median(ordered: Sequence[float]) -> float:
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


def candidates(values: Sequence[float]) -> list[int]:
    """The indices where ruptures puts a new segment's first run."""
    if len(values) < 2 * MIN_RUNS_A_SIDE:
        return []
    with process.imports_checked():         # one line where they cannot load (ulimit -v)
        process.blas_within_address_limit()
        import numpy
        import ruptures
    logs = [math.log(value) for value in values]
    penalty = PENALTY * noise(logs) ** 2 * math.log(len(logs))
    found = ruptures.KernelCPD(kernel="linear", min_size=MIN_RUNS_A_SIDE).fit(
        numpy.asarray(logs).reshape(-1, 1))
    return [int(index) for index in found.predict(pen=penalty)[:-1]]


def _test(values: Sequence[float], start: int, index: int, stop: int) -> Change:
    verdict = stats.gate(values[start:index], values[index:stop], tolerance_pct=0.0)
    return Change(index, start, stop, verdict)


def _is_confirmed(change: Change) -> bool:
    enough = min(change.index - change.start, change.stop - change.index) >= MIN_RUNS_A_SIDE
    beyond_rounding = abs(math.log(change.verdict.ratio)) > _NOISE_FLOOR
    return enough and beyond_rounding and change.verdict.verdict in ("faster", "slower")


def _tested(values: Sequence[float], points: list[int], position: int) -> Change:
    """The candidate at ``position`` tested between its neighbours in ``points``."""
    start = points[position - 1] if position > 0 else 0
    stop = points[position + 1] if position + 1 < len(points) else len(values)
    return _test(values, start, points[position], stop)


def changes(values: Sequence[float]) -> list[Change]:
    """The confirmed changes of a series of positive throughputs, oldest first. Dropping a
    candidate changes the sides of its two neighbours only, so only they are tested again."""
    points = candidates(values)
    tested = [_tested(values, points, position) for position in range(len(points))]
    while True:
        failing = [position for position, change in enumerate(tested)
                   if not _is_confirmed(change)]
        if not failing:
            return tested
        weakest = max(failing, key=lambda position: (tested[position].verdict.p_value is None,
                                                     tested[position].verdict.p_value or 0.0))
        del points[weakest], tested[weakest]
        for position in (weakest - 1, weakest):
            if 0 <= position < len(points):
                tested[position] = _tested(values, points, position)
