"""Stored results over time (``microbench-report --history``): each run identity's series, its
confirmed changes of speed, and what else changed at each.

* **Series:** the results the gate would compare with each other (the same
  :data:`microbench.settings.identity.GATE`: network, mode, precision, batch per device, input
  size, compile, parallelism, device model, world size, ...) and of one unit form a series;
  two workloads are never mixed. A series is ordered by when each run ran (``by="time"``) or
  by its ``--label`` (``by="label"``: digits compared as numbers, so ``n9`` comes before
  ``n10``), ties by time. Results without what the order needs, failed rows, op bench and node
  rows and the older tool's results (no identity recorded) are left out, counted on one line.
* **Changes:** :func:`microbench.measure.changes.changes` on the series' headlines: found by
  ruptures, each confirmed by the gate's test between the runs on its two sides.
* **What changed:** the environment fields (:mod:`.provenance`) whose value in the last run
  before a change differs from the first run after it, most likely first: a field that held
  one value on each side before one that varies within a side, then by kind (a flag, then
  the software, the driver, clocks and power, the tool, the host); and those that did not.
* **Regression:** a series whose last confirmed change is ``slower`` beyond ``tolerance_pct``
  (the gate's verdict on the runs before and after it) and whose newest result is still below
  the level before it by more than the tolerance.

Everything is computed in one pass over the entries read (grouping by a key, one sort per
series); 10,000 results take well under a second here, reading them is the rest.

Example::

    found = collection.read(collection.input_files(["nightly/"]))
    past = history(found.entries, by="time", tolerance_pct=5.0)
    for series in past.series:
        series.title, [step.changed[0].name for step in series.steps], series.regression
"""
from __future__ import annotations

import datetime
import re
from collections import defaultdict
from dataclasses import dataclass, field

from microbench.measure import changes, stats
from microbench.settings.argtypes import label_problem
from microbench.store.collection import HEADLINE_SETTINGS
from microbench.store.entry import MODEL, Entry
from microbench.store.provenance import FIELDS, KIND_OF, KINDS

BY_TIME, BY_LABEL = "time", "label"
ORDERS = (BY_TIME, BY_LABEL)
# How steadily a field changed at a change: one value on each side, no value shared by the two
# sides, or values that come back on both sides (a clock that wanders).
HELD, SWITCHED, WANDERS = 0, 1, 2
_FIELD_ORDER = {name: index for index, (name, _, _) in enumerate(FIELDS)}
MEASURED_PEAK = "measured peak"          # entry.model_settings: measured by each run
# The settings a series' title names, where a result records them.
_TITLE = tuple(name for name in HEADLINE_SETTINGS if name not in ("torch", "op", "op type",
                                                                 "shapes", "dtype"))


@dataclass(frozen=True)
class Shift:
    """A field whose value differs between the last run before a change and the first after."""

    name: str
    kind: str
    before: object
    after: object
    steadiness: int                    # HELD, SWITCHED or WANDERS


@dataclass(frozen=True)
class Step:
    """A confirmed change of a series and what else changed there."""

    change: changes.Change
    before: Entry                      # the last result before the change
    after: Entry                       # the first result after it
    changed: tuple[Shift, ...]         # most likely first
    unchanged: tuple[str, ...]         # fields recorded on both sides with the same value
    levels: tuple[float, float]        # the geometric mean of the runs compared on each side


@dataclass(frozen=True)
class Series:
    """The results of one run identity, in order, with their confirmed changes."""

    title: str
    unit: str
    entries: tuple[Entry, ...]
    values: tuple[float, ...]          # each result's headline, in ``unit``
    steps: tuple[Step, ...]
    regression: stats.GateVerdict | None   # the last change's verdict, where it is a regression


@dataclass
class History:
    series: list[Series] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)     # what was left out, one line each


def _natural(text: str) -> tuple:
    """A label's sort key: runs of ASCII digits as numbers (``n9`` before ``n10``), the rest
    as text. A run is compared by its length without leading zeros, then digit by digit: no
    int() (which refuses 4,300 digits, and digits of other scripts that str.isdigit accepts)."""
    return tuple((0, len(part.lstrip("0")), part.lstrip("0")) if part.isascii()
                 and part.isdigit() else (1, 0, part)
                 for part in re.split(r"([0-9]+)", text) if part)


def run_time(entry: Entry) -> float | None:
    """When ``entry`` ran, in seconds since the epoch (a time without an offset is UTC, as
    ``time_utc`` names it); None where it is no ISO 8601 time. Compared as times, not as text:
    ``2026-01-01T23:00:00-05:00`` comes after ``2026-01-02T01:00:00+00:00``."""
    try:
        when = datetime.datetime.fromisoformat(entry.time_utc or "")
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.timezone.utc)
        return when.timestamp()
    except (TypeError, ValueError, OverflowError):
        return None


def _order_key(by: str):
    if by == BY_LABEL:
        return lambda entry: (_natural(entry.label), run_time(entry) or 0.0, entry.source)
    return lambda entry: (run_time(entry), entry.source)


def _why_left_out(entry: Entry, by: str) -> str | None:
    if entry.table != MODEL or not entry.configuration:
        return ("no run identity recorded (the older tool's results, op bench and node check "
                "rows, an A/B side whose own result file was not found)")
    if not entry.measured or not entry.figures.get("throughput"):
        return "not measured (a sweep's failed row)"
    if by == BY_LABEL and not entry.label:
        return "no --label (--by label)"
    if by == BY_LABEL and label_problem(entry.label):
        return f"a --label the tool does not accept: {label_problem(entry.label)} (--by label)"
    if by == BY_TIME and run_time(entry) is None:
        return "no time of the run recorded (an ISO 8601 time, env.time_utc)"
    return None


def _groups(entries: list[Entry], by: str, lines: list[str]) -> list[list[Entry]]:
    groups: dict[tuple[str, str], list[Entry]] = defaultdict(list)
    left_out: dict[str, int] = defaultdict(int)
    for entry in entries:
        why = _why_left_out(entry, by)
        if why is None:
            groups[(entry.configuration, entry.unit)].append(entry)
        else:
            left_out[why] += 1
    lines += [f"history: left out {count} result(s): {why}" for why, count in left_out.items()]
    key = _order_key(by)
    return [sorted(members, key=key) for members in groups.values()]


def _steadiness(name: str, before: list[Entry], after: list[Entry]) -> int:
    seen_before = {repr(entry.environment.get(name)) for entry in before}
    seen_after = {repr(entry.environment.get(name)) for entry in after}
    if len(seen_before) == 1 and len(seen_after) == 1:
        return HELD
    return SWITCHED if not seen_before & seen_after else WANDERS


def _kind_rank(name: str) -> tuple[int, int]:
    return KINDS.index(KIND_OF.get(name, KINDS[-1])), _FIELD_ORDER.get(name, len(FIELDS))


def what_changed(before: list[Entry], after: list[Entry]) -> tuple[tuple[Shift, ...],
                                                                     tuple[str, ...]]:
    """The fields that differ between ``before[-1]`` and ``after[0]``, most likely first, and
    those recorded on both with the same value (in the order of their kinds)."""
    last, first = before[-1].environment, after[0].environment
    names = sorted(set(last) | set(first), key=_kind_rank)
    shifts = [Shift(name, KIND_OF.get(name, KINDS[-1]), last.get(name), first.get(name),
                    _steadiness(name, before, after))
              for name in names if last.get(name) != first.get(name)]
    shifts.sort(key=lambda shift: (shift.steadiness, _kind_rank(shift.name)))
    unchanged = tuple(name for name in names
                      if last.get(name) is not None and last.get(name) == first.get(name))
    return tuple(shifts), unchanged


def _level(values: list[float]) -> float:
    """A segment's level: the geometric mean, the gate's headline."""
    return stats.TrialStats(tuple(values)).headline


def _step(entries: list[Entry], values: list[float], change: changes.Change) -> Step:
    before, after = entries[change.start:change.index], entries[change.index:change.stop]
    shifts, unchanged = what_changed(before, after)
    levels = (_level(values[change.start:change.index]), _level(values[change.index:change.stop]))
    return Step(change, before[-1], after[0], shifts, unchanged, levels)


def _regression(values: list[float], steps: list[Step],
                tolerance_pct: float) -> stats.GateVerdict | None:
    """The last change's verdict at ``tolerance_pct`` where it is a regression and the newest
    result is still below the level before it by more than the tolerance."""
    if not steps:
        return None
    change = steps[-1].change
    verdict = stats.gate(values[change.start:change.index], values[change.index:change.stop],
                         tolerance_pct)
    still_below = values[-1] < steps[-1].levels[0] * (1 - tolerance_pct / 100)
    return verdict if verdict.regression and still_below else None


def _title(entry: Entry) -> str:
    parts = []
    for name in _TITLE:
        value = entry.settings.get(name)
        if value is not None:
            parts.append(f"{value}" if name in ("network", "mode", "precision", "device")
                         else f"{name} {value}")
    return " · ".join(parts)


def _series(entries: list[Entry], tolerance_pct: float) -> Series:
    values = [entry.figures["throughput"] for entry in entries]
    steps = [_step(entries, values, change) for change in changes.changes(values)]
    return Series(_title(entries[0]), entries[0].unit, tuple(entries), tuple(values),
                  tuple(steps), _regression(values, steps, tolerance_pct))


def _distinct_titles(series: list[Series]) -> list[Series]:
    """Series whose titles coincide (they differ in a setting the title leaves out: the
    optimizer, FP8's recipe...) get the settings their first results differ in."""
    by_title: dict[str, list[Series]] = defaultdict(list)
    for one in series:
        by_title[one.title].append(one)
    named = []
    for one in series:
        alike = by_title[one.title]
        if len(alike) > 1:
            extra = _differing_settings(one, alike)
            one = Series(f"{one.title} · {extra}", one.unit, one.entries, one.values,
                         one.steps, one.regression) if extra else one
        named.append(one)
    return named


def _names_the_work(name: str) -> bool:
    """A setting of the work the title leaves out (not a flag or an environment field that
    may change within a series, nor the peak a run measured)."""
    return (name not in _TITLE and name not in KIND_OF and f"--{name}" not in KIND_OF
            and name != MEASURED_PEAK)


def _differing_settings(one: Series, alike: list[Series]) -> str:
    mine = one.entries[0].settings
    differ = [name for name in mine if _names_the_work(name)
              and any(other.entries[0].settings.get(name) != mine[name] for other in alike)]
    return " · ".join(f"{name} {mine[name]}" for name in differ)


def history(entries: list[Entry], by: str = BY_TIME,
            tolerance_pct: float = stats.DEFAULT_TOLERANCE_PCT) -> History:
    """The series of ``entries`` (as :func:`microbench.store.collection.read` gives them),
    largest first, each with its confirmed changes and its regression at ``tolerance_pct``."""
    past = History()
    groups = _groups(entries, by, past.lines)
    series = [_series(members, tolerance_pct) for members in groups]
    series.sort(key=lambda one: (-len(one.entries), one.title))
    past.series = _distinct_titles(series)
    return past
