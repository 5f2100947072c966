"""``microbench-report --history --plot FILE``'s chart (and the page's): a panel per series, each
result's throughput in the order of the series with its bar, the level between changes, and
each confirmed change marked and labelled with its size and what changed first.

Drawn in :mod:`microbench.output.chart`'s frame (:func:`~microbench.output.chart.frame`,
:func:`~microbench.output.chart.finish`), which imports matplotlib; this module does not. Bars
are the report chart's (:func:`~microbench.output.chart.point_of`): the lowest to the highest
trial where a result has trials, else the 10th to 90th percentile of its per-iteration rate.

Example::

    write_history_chart(past, "history.png")
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from microbench.output import chart
from microbench.output.history_table import change_text, point_name, shift_text
from microbench.store.history import History, Series

if TYPE_CHECKING:
    from microbench.output.chart import Axes

# A figure of more panels than this is too tall to read; the largest series are drawn.
MAX_PANELS = 12
# Ticks on the x axis: every result's name would overlap beyond this many.
MAX_TICKS = 8
WIDTH_INCHES = 9.0
PANEL_INCHES = 3.4


def _ticks(series: Series) -> list[int]:
    count = len(series.entries)
    step = max(1, -(-count // MAX_TICKS))
    return list(range(0, count, step))


def _draw_points(axis: Axes, series: Series) -> None:
    points = [chart.measured_point(entry) for entry in series.entries]
    axis.errorbar(range(len(points)), [point.value for point in points],
                  yerr=[[point.below for point in points], [point.above for point in points]],
                  fmt="o", markersize=3, capsize=2, color="C0", ecolor="0.6", label="result")


def _draw_levels(axis: Axes, series: Series) -> None:
    """Each segment's level as a line over its runs (the geometric mean the gate compared)."""
    bounds = [0, *[step.change.index for step in series.steps], len(series.entries)]
    levels = [step.levels[0] for step in series.steps] + \
        ([series.steps[-1].levels[1]] if series.steps else [])
    for start, stop, level in zip(bounds, bounds[1:], levels):
        axis.hlines(level, start - 0.4, stop - 0.6, colors="C1", linewidth=1.5)


def _draw_changes(axis: Axes, series: Series) -> None:
    for number, step in enumerate(series.steps, 1):
        where = step.change.index - 0.5
        axis.axvline(where, color="C3", linestyle="--", linewidth=1)
        cause = shift_text(step.changed[0]) if step.changed else "nothing recorded changed"
        axis.annotate(f"{number}: {change_text(step).split(' (')[0]}\n{cause}",
                      xy=(where, 1.0), xycoords=("data", "axes fraction"),
                      xytext=(3, -3), textcoords="offset points", va="top", ha="left",
                      fontsize="x-small", color="C3")


def _draw_series(axis: Axes, series: Series) -> None:
    _draw_points(axis, series)
    _draw_levels(axis, series)
    _draw_changes(axis, series)
    ticks = _ticks(series)
    chart.fixed_ticks(axis, ticks, lambda value: point_name(series.entries[int(value)]))
    axis.tick_params(axis="x", labelsize="x-small", labelrotation=20)
    axis.set_ylabel(series.unit)
    axis.set_title(series.title, fontsize="small")
    _room_for_labels(axis)


def _room_for_labels(axis: Axes) -> None:
    """The y axis around what is drawn, not from zero (a 3% change must be seen), with room
    above the points for the changes' labels."""
    axis.relim()
    axis.autoscale_view()
    low, high = axis.get_ylim()
    span = (high - low) or abs(high) or 1.0
    axis.set_ylim(low - 0.05 * span, high + 0.45 * span)


def _notes(past: History, drawn: list[Series]) -> list[str]:
    notes = ["Points: each result's throughput in the order of the series, bars from its "
             "lowest to highest trial (one trial: the 10th to 90th percentile of its "
             "per-iteration rate); lines: the level between changes (geometric mean); dashed: "
             "a confirmed change, its size and the field most likely behind it."]
    left = len(past.series) - len(drawn)
    if left:
        notes.append(f"{left} more series not drawn (the {len(drawn)} with the most results "
                     f"are); the table lists every one.")
    return notes


def build_history_figure(past: History):
    drawn = past.series[:MAX_PANELS]
    drawn_frame = chart.frame(len(drawn), WIDTH_INCHES, PANEL_INCHES,
                              "Throughput over time, per run identity", _notes(past, drawn))
    for axis, series in zip(drawn_frame.axes, drawn):
        _draw_series(axis, series)
    return chart.finish(drawn_frame)


def history_chart_bytes(past: History, image_format: str) -> bytes:
    return chart.figure_bytes(lambda: build_history_figure(past), image_format)


def write_history_chart(past: History, path: str) -> None:
    chart.write_figure(lambda: build_history_figure(past), path)
