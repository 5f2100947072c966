"""``microbench-report --history``'s tables: each series (one run identity over time) with its
confirmed changes, as text, markdown or JSON; the page (:mod:`microbench.report.page`) lays out
the same rows.

A change's row: the last result before it and the first after (each by its ``--label``, or
when it ran), the level on each side (the geometric mean of the runs the gate compared), the
change in percent with the 95% interval of the ratio (Welch's t on log throughput), and what
else changed there, most likely first. Under each series: the files of those results and the
fields that stayed the same. Everything here is read from :mod:`microbench.store.history`'s
values; nothing is computed but the wording.

Example::

    sys.stdout.write(render(past, "markdown"))
"""
from __future__ import annotations

import json

from microbench.measure import stats
from microbench.platform import safe_text, units, writing
from microbench.platform.text_table import Column, render as render_columns
from microbench.settings.argtypes import label_problem
from microbench.store import ranges
from microbench.store.entry import Entry
from microbench.store.provenance import FLAG, KIND_OF
from microbench.store.history import WANDERS, History, Series, Shift, Step

FORMATS = ("text", "markdown", "json")
# The figures of the host around each result's timed region (store/figures.py, issue 64) that
# the JSON keeps beside each result's throughput: a change may be the host's, not the code's.
HOST_FIGURES = ("host_load_per_core", "host_others_cpu_pct", "host_loaded")
# What-changed cells name this many fields; the rest are counted (all are in the notes).
SHOWN_SHIFTS = 3


def point_name(entry: Entry) -> str:
    """A result as a point of its series: its label (one --label would accept), else when it
    ran (to the minute)."""
    if entry.label and not label_problem(entry.label):
        return entry.label
    return (entry.time_utc or "?").replace("T", " ")[:16]


def shift_text(shift: Shift) -> str:
    """``torch 2.14.1 → 2.15.0``; a field that varies on both sides is marked ``~``."""
    mark = " ~" if shift.steadiness == WANDERS else ""
    return f"{shift.name} {_value(shift.before)} → {_value(shift.after)}{mark}"


def _value(value: object) -> str:
    return "none" if value is None else str(value)


def change_text(step: Step) -> str:
    """``-9.8% (95% interval -10.3% to -9.3%)``."""
    verdict = step.change.verdict
    low, high = verdict.ci95 or (verdict.ratio, verdict.ratio)
    if any(ranges.ratio_problem(value) for value in (verdict.ratio, low, high)):
        return f"not shown: {ranges.BEYOND_RATIO}"
    return (f"{_percent(verdict.ratio)} (95% interval {_percent(low)} to "
            f"{_percent(high)}, p = {verdict.p_value:.2g})")


def _percent(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}%"


def changed_cell(step: Step) -> str:
    shown = [shift_text(shift) for shift in step.changed[:SHOWN_SHIFTS]]
    rest = len(step.changed) - SHOWN_SHIFTS
    if rest > 0:
        shown.append(f"{rest} more")
    return "; ".join(shown) or "nothing recorded changed"


COLUMNS = (Column("#", numeric=True), Column("last before"), Column("first after"),
           Column("before", numeric=True), Column("after", numeric=True), Column("change"),
           Column("what changed (most likely first)"))


def change_rows(series: Series) -> list[list[str]]:
    return [[str(number), point_name(step.before), point_name(step.after),
             units.rate(step.levels[0]), units.rate(step.levels[1]), change_text(step),
             changed_cell(step)] for number, step in enumerate(series.steps, 1)]


def heading(series: Series) -> str:
    first, newest = series.entries[0], series.entries[-1]
    count = len(series.steps)
    return (f"{series.title} [{series.unit}]: {len(series.entries)} results from "
            f"{point_name(first)} to {point_name(newest)}; "
            f"{count} confirmed change{'s' if count != 1 else ''}")


def regression_line(series: Series, tolerance_pct: float) -> str | None:
    if series.regression is None:
        return None
    step = series.steps[-1]
    return (f"REGRESSION: slower by {-(series.regression.ratio - 1) * 100:.1f}% since "
            f"{point_name(step.after)} (beyond the {tolerance_pct:g}% tolerance, confirmed); "
            f"the newest result, {units.rate(series.values[-1])} {series.unit}, is still "
            f"below the level before it ({units.rate(step.levels[0])})")


def notes(series: Series) -> list[str]:
    """Per change: its files, every field that changed, and those that did not."""
    lines = []
    for number, step in enumerate(series.steps, 1):
        lines.append(f"change {number}: last before {step.before.source}, first after "
                     f"{step.after.source}; compared {step.change.index - step.change.start} "
                     f"run(s) before with {step.change.stop - step.change.index} after")
        if len(step.changed) > SHOWN_SHIFTS:
            lines.append(f"change {number} also: "
                         f"{'; '.join(map(shift_text, step.changed[SHOWN_SHIFTS:]))}")
        lines.append(f"change {number}, the same on both sides: {_unchanged(step)}")
    return lines


def _unchanged(step: Step) -> str:
    fields = [name for name in step.unchanged if KIND_OF.get(name) != FLAG]
    flags = len(step.unchanged) - len(fields)
    return ", ".join(fields + ([f"{flags} flags"] if flags else [])) or "nothing recorded"


def _footer(past: History) -> list[str]:
    return [f"- {line}" for line in (
        "levels: the geometric mean of the runs compared on each side of a change; change: "
        "after/before, its 95% interval by Welch's t on log throughput (each run one sample, "
        "as the --compare gate tests)",
        "a change is found by ruptures (KernelCPD, linear kernel) and kept only where that "
        "interval excludes no change, with at least two runs on each side",
        "~: a field whose value varies on both sides (a clock), less likely the cause")] + \
        [f"- {line}" for line in past.lines]


def render_text(past: History, tolerance_pct: float, terminal: bool = False) -> str:
    out = []
    for series in past.series:
        out.append(safe_text.terminal(heading(series)))
        line = regression_line(series, tolerance_pct)
        out += [safe_text.terminal(line)] if line else []
        if series.steps:
            rows = [[safe_text.terminal(cell) for cell in row] for row in change_rows(series)]
            out.append(render_columns(COLUMNS, rows, terminal).rstrip("\n"))
            out += [f"  {safe_text.terminal(note)}" for note in notes(series)]
        out.append("")
    out += [safe_text.terminal(line) for line in _footer(past)]
    return "\n".join(out).rstrip("\n") + "\n"


def render_markdown(past: History, tolerance_pct: float) -> str:
    out = []
    for series in past.series:
        out += [f"**{safe_text.markdown(heading(series))}**", ""]
        line = regression_line(series, tolerance_pct)
        out += [f"**{safe_text.markdown(line)}**", ""] if line else []
        if series.steps:
            out.append("| " + " | ".join(column.heading for column in COLUMNS) + " |")
            out.append("|" + "|".join("---:" if column.numeric else "---"
                                      for column in COLUMNS) + "|")
            out += ["| " + " | ".join(safe_text.markdown(cell) for cell in row) + " |"
                    for row in change_rows(series)]
            out += [""] + [f"- {safe_text.markdown(note)}" for note in notes(series)] + [""]
    out += [safe_text.markdown(line) for line in _footer(past)]
    return "\n".join(out).rstrip("\n") + "\n"


def _step_json(step: Step) -> dict:
    verdict = step.change.verdict
    return {"last_before": step.before.source, "first_after": step.after.source,
            "before_level": step.levels[0], "after_level": step.levels[1],
            "ratio": ranges.checked_ratio(verdict.ratio),
            "ci95": [ranges.checked_ratio(end) for end in verdict.ci95] if verdict.ci95 else None,
            "p_value": verdict.p_value, "method": verdict.method,
            "changed": [{"field": shift.name, "kind": shift.kind, "before": shift.before,
                         "after": shift.after, "varies": shift.steadiness == WANDERS}
                        for shift in step.changed],
            "unchanged": list(step.unchanged)}


def render_json(past: History) -> str:
    document = {"series": [{
        "title": series.title, "unit": series.unit,
        "results": [{"file": entry.source, "label": entry.label or None,
                     "time_utc": entry.time_utc, "throughput": value,
                     **{key: entry.figures.get(key) for key in HOST_FIGURES}}
                    for entry, value in zip(series.entries, series.values)],
        "changes": [_step_json(step) for step in series.steps],
        "regression": series.regression is not None} for series in past.series],
        "notes": past.lines, "confidence_level": stats.LEVEL}
    # Strict JSON: a number that is no float (NaN, infinity) is null, never ``Infinity``.
    return json.dumps(writing.json_safe(document), indent=1, allow_nan=False) + "\n"


def render(past: History, format_: str, tolerance_pct: float, terminal: bool = False) -> str:
    if format_ == "markdown":
        return render_markdown(past, tolerance_pct)
    if format_ == "json":
        return render_json(past)
    return render_text(past, tolerance_pct, terminal)
