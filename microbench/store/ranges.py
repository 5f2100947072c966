"""The range a stored number may take, decided by what it is, in one place.

A figure's nature comes from its row in :mod:`microbench.store.figures` (its unit): a rate is
positive and normal, a time zero or positive and normal, a share of a whole between 0 and 1, a
ratio (a CV, a utilisation against a peak) zero or positive and at most :data:`LARGEST_RATIO`,
an interval's end (``bound``) of either sign (older files hold arithmetic intervals, whose
low end can be negative), and any other amount (MB, J, W, counts) zero or positive and normal. Every one is at most
:data:`LARGEST`, so no reader shows ``inf%`` or a 300-digit cell. The numbers that are not
figures but that readers take statistics over (samples, trial values, a statistics block) are
declared in :data:`SERIES` by the keys that hold them.

``store/schema.validate_result`` applies this to every document read (``--compare``,
``--rerun``, ``--scaling-baseline``, ``microbench-node --baseline``, the report) and the node
check to its own samples (``node/program.py``) before its verdict: a tampered file is refused
whichever figure it tampers with, and a new figure of the registry is checked without an edit
here.

Example::

    problem = ranges.problem(("flops", "mfu"), 1e308)   # "is not a share or ratio ..."
"""
from __future__ import annotations

import functools
import math
import sys

from microbench.store.figures import FIGURES, FRACTION, MODEL, NODE, Figure, of_table

RATE, TIME, SHARE, RATIO, AMOUNT, BOUND = "rate", "time", "share", "ratio", "amount", "bound"
SMALLEST_NORMAL = sys.float_info.min
# No measurement reaches it (1e15 images/s, 31,000 years in ms, a zettabyte in MB), and a
# figure below it shown in percent or with a fixed number of decimals is a cell of ~20
# characters, where 1e308 is ``inf%`` or a 310-character cell.
LARGEST = 1e15
# A ratio that is no share of a whole can pass 1 (a CV; MFU against a peak a user gave or a
# probe measured below the datasheet), never a millionfold (a CV is at most sqrt(n - 1)).
LARGEST_RATIO = 1e6
# Units of a rate beyond "…/s": the result's own throughput unit and the data pipeline's.
_RATE_UNITS = ("{unit}", "{data unit}")

_STATS_TIMES = ("mean_ms", "median_ms", "std_ms", "min_ms", "max_ms", "p90_ms", "p95_ms",
                "p99_ms", "iqr_ms", "total_ms")
# Numbers that are no figure of the registry, by the keys that end their path: samples and
# the statistics taken over them, trial values, and the headline keys of the older formats
# whose names do not carry their unit.
SERIES: dict[tuple[str, ...], str] = {
    ("samples_ms",): TIME, ("stats", "cv"): RATIO,
    **{("stats", key): TIME for key in _STATS_TIMES},
    ("trials", "values"): RATE, ("per_trial", "throughput"): RATE,
    ("Time per mini-batch",): TIME, ("throughput", "ms_per_batch"): TIME,
    ("throughput", "us_per_sample"): TIME, ("throughput", "images_per_s"): RATE,
    ("throughput", "tokens_per_s"): RATE, ("throughput", "items_per_s"): RATE,
}
# The numbers a node check (or its baseline) keeps of each figure, under figures.<key>.
_NODE_NUMBERS = ("value", "median", "samples")


def nature(figure: Figure) -> str:
    """What ``figure`` is, by its unit (``whole``: a share of a whole, at most 1; ``bound``: an
    interval's end, of either sign)."""
    if figure.bound:
        return BOUND
    if figure.unit in ("ms", "s"):
        return TIME
    if figure.unit == FRACTION:
        return SHARE if figure.whole else RATIO
    if figure.unit.endswith("/s") or figure.unit in _RATE_UNITS:
        return RATE
    return AMOUNT


@functools.lru_cache(maxsize=1)
def _by_path() -> dict[tuple[str, ...], str]:
    """Every figure's JSON path (its table's documents), and the series, to its nature."""
    natures = {figure.path: nature(figure) for figure in FIGURES
               if figure.path is not None and figure.table != NODE}
    return {**natures, **SERIES}


@functools.lru_cache(maxsize=1)
def _node_natures() -> dict[str, str]:
    return {figure.key: nature(figure) for figure in of_table(NODE)}


@functools.lru_cache(maxsize=4096)      # a document's numbers sit under a few dozen key paths
def nature_at(keys: tuple[str, ...]) -> str | None:
    """The nature of the number a document holds under ``keys`` (object keys from the top,
    list positions left out), None where it is no figure or series (a seed, a setting)."""
    node = _node_nature(keys)
    if node is not None:
        return node
    by_path = _by_path()
    for length in range(len(keys), 0, -1):      # the longest declared path wins
        found = by_path.get(keys[-length:])
        if found is not None:
            return found
    return None


def _node_nature(keys: tuple[str, ...]) -> str | None:
    """A node check's figure (its value, its peers' median, its samples; a recheck's and a
    baseline's too): the keys pass ``figures.<key>`` and end in one of those numbers."""
    if "figures" not in keys or keys[-1] not in _NODE_NUMBERS:
        return None
    at = len(keys) - 1 - keys[::-1].index("figures")
    return _node_natures().get(keys[at + 1]) if at + 1 < len(keys) else None


def problem(keys: tuple[str, ...], value: float) -> str | None:
    """Why ``value`` under ``keys`` is out of its range, or None (no nature: any finite)."""
    return problem_of(nature_at(keys), value)


def problem_of(kind: str | None, value: float) -> str | None:
    """Why ``value`` cannot be a number of this nature, or None; ``value`` is finite."""
    if kind is None:
        return None
    if kind == BOUND:
        value = abs(value)
    if value > (LARGEST_RATIO if kind == RATIO else 1.0 if kind == SHARE else LARGEST):
        return f"is beyond any {kind} a run measures"
    if kind == RATE and not value >= SMALLEST_NORMAL:
        return "is not a positive normal number (a rate)"
    if value != 0 and not value >= SMALLEST_NORMAL:
        sign = "" if kind == BOUND else "positive "
        return f"is not zero or a {sign}normal number (a {kind})"
    return None


# ---------------------------------------------------------------- ratios of two figures

# Two figures each in range can be 1e323 apart (1e15 and 2.3e-308): their quotient is no float,
# or a 300-digit cell. A ratio of two runs' speeds is checked as a figure is: within LARGEST
# either way (no two runs of a table differ a quadrillionfold), finite, or unknown.
BEYOND_RATIO = (f"beyond any ratio of two runs (a factor over 10^{round(math.log10(LARGEST))} "
                f"either way)")


def ratio_problem(value: float | None) -> str | None:
    """Why ``value`` cannot be a ratio of two runs' speeds (None: an unknown ratio is no
    problem), or None."""
    if value is None or (math.isfinite(value) and 1 / LARGEST <= value <= LARGEST):
        return None
    return BEYOND_RATIO


def checked_ratio(value: float | None) -> float | None:
    """``value`` where it is a ratio of two runs' speeds, else None (shown as unknown)."""
    return None if ratio_problem(value) else value


def ratio_of(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator`` (two figures of one kind: speeds, times) where both are
    known and their ratio is in range, else None; the division never gives infinity."""
    if not numerator or not denominator:
        return None
    try:
        return checked_ratio(numerator / denominator)
    except (OverflowError, ZeroDivisionError):
        return None


@functools.lru_cache(maxsize=1)
def _derived() -> tuple[Figure, ...]:
    """The figures a reader computes (a scale, a fallback): a stored one is the number at its
    path, which the walk over the document checked already."""
    return tuple(figure for figure in of_table(MODEL) if figure.reader is not None)


def read_problem(document: dict, where: str) -> str | None:
    """The first figure of a run's result, as its reader derives it (store/figures.py: a
    headline in tokens/s, an interval end, MBU), out of its range; ``where``: the document's
    JSON path. Its stored numbers are checked first (:func:`problem`)."""
    for figure in _derived():
        value = figure.read(document)
        if value is None:
            continue
        why = "is not a finite number" if not math.isfinite(value) else \
            problem_of(nature(figure), value)
        if why is not None:
            return f"{where}: its {figure.key} as read {why} ({value:.6g})"
    return None
