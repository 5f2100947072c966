"""The one chart stack, and the only module that imports matplotlib: what every chart is drawn
with (:func:`check_path`, :class:`Point`, :func:`new_figure`, :func:`fixed_ticks`,
:func:`write_figure`), and ``microbench-report --plot FILE``'s chart of stored results; the
sweep's ``--plot`` (:mod:`microbench.output.sweep_plot`) draws its live rows with the same parts.

The report's chart: one metric of the report's rows across the setting that varies, with error
bars that say what they are.

The x axis is ``--x SETTING`` or, by default, for each panel, among the settings that vary
inside it: for op bench rows the op (then its shapes or dtype) where it varies, else the
setting of the work that splits the most rows: a number (batch,
sequence length, image size, devices, workers) before a name (precision, quantize, network), each
in the order of how many rows it sets apart; never how the work was measured (repeat,
iterations, warm-up, seed: a chart "by repeat" says nothing); else when the rows ran; else a
bar per row (a setting that splits only the panels would stack a panel's rows on one point).
Rows that differ in other settings too become separate series (lines over a numeric axis,
grouped bars over names). Throughput is drawn in each row's own unit: rows in images/s and
rows in tokens/s get a panel each. Metrics and their error bars:

* ``throughput`` (model results; the default): the headline; bars from the lowest to the
  highest trial where a result has trials (``--repeat``), else from the 10th to the 90th
  percentile of the per-iteration rate (work of one iteration over its time), the same bars as
  a sweep's ``--plot``;
* ``latency``: the median iteration time (an op's median call time), bars from the 10th to the
  90th percentile of the iteration times;
* ``mfu`` (model results): MFU, with throughput's bars scaled to it (MFU is proportional to
  throughput: FLOPs per iteration times iterations per second over the peak);
* ``gbs`` and ``tflops`` (op bench rows): GB/s and TFLOP/s, bars from the 10th-90th percentile
  of the call times.

Beyond throughput and latency, the metrics are the figures the registry charts
(:mod:`microbench.store.figures`: ``chart``, the axis label, and ``bars``); a figure charted
without bars is drawn as its points.

A row that was not measured, or does not know the metric, gets no point; the footnote names it.
The subtitle names what every row shares (network, precision, image size, device, PyTorch...).
The file is written whole or not at all; its suffix names the format.

Example::

    figure = build_figure(table, "throughput")          # a matplotlib Figure
    write_chart(table, "throughput", None, "batch.png")
"""
from __future__ import annotations

import io
import json
import os
import statistics
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from microbench.platform import process, safe_text
from microbench.platform.errors import BenchmarkError, UsageError
from microbench.platform import writing
from microbench.store.collection import FILE, HEADLINE_SETTINGS, RUN_AT, setting_value
from microbench.store import figures
from microbench.store.entry import MODEL, OP, Entry
from microbench.output.table import Table, format_setting

if TYPE_CHECKING:           # the one module that imports matplotlib names its types too
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# Series of rows drawn as one line or one colour of bars: label -> (row number, entry).
Series = dict[str, list[tuple[int, Entry]]]

# --metric: the headline and the median time, drawn here with their own bars, then every figure
# the registry charts (figures.FIGURES' ``chart``: MFU, an op's GB/s and TFLOP/s), each for the
# results of its table.
CHARTED = {figure.key: figure for figure in figures.charted()}
METRICS = {"throughput": (MODEL,), "latency": (MODEL, OP),
           **{key: (figure.table,) for key, figure in CHARTED.items()}}
DEFAULT_METRIC = {MODEL: "throughput", OP: "latency"}
LOW_PERCENTILE, HIGH_PERCENTILE = 10, 90     # the per-iteration percentiles a one-trial bar spans
# Characters per inch of figure width: where a footnote wraps, where a subtitle wraps or how wide
# it needs the figure to be (DejaVu Sans at matplotlib's x-small and small sizes, with room).
FOOTNOTE_CHARS_PER_INCH = 17
SUBTITLE_CHARS_PER_INCH = 13
INCH_PER_LINE = 0.19         # height of one line of small text
# Characters of a panel's title (medium size) that fit the narrowest panel (7 inches less the
# y label's margin), with room.
PANEL_TITLE_CHARS = 60
# An op bench chart is drawn per op: these before any number (iterations, warm-up...).
_OP_AXES = ("op", "shapes", "dtype")
# How the work was measured, not what it was: never a default x axis (--x may name one).
_PROCEDURE = frozenset({
    "repeat", "iterations", "warmup", "seed", "trials", "max-noise", "max-trials", "time-limit",
    "discard-throttled", "telemetry-interval", "autograd-profiler", "kineto", "profiler-schedule",
    "flops-prof-step", "peak-tflops", "peak-bandwidth", "measure-peaks", "capture-range",
    "no-phases", "dist-timeout", "host", "tool", "measured peak", RUN_AT, FILE})
# Past the ten colours of matplotlib's cycle, series take tab20's twenty, then a marker each.
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def require_matplotlib() -> None:
    """matplotlib importable, or one line, exit 4 (not installed, or broken inside its import:
    process.import_optional)."""
    process.import_optional("matplotlib", "--plot", "pip install matplotlib")


def check_path(path: str, flag: str = "--plot") -> None:
    """Before anything runs or is read: matplotlib is there, the suffix is a format it writes,
    the file can be written."""
    require_matplotlib()
    from matplotlib.backend_bases import FigureCanvasBase
    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = os.path.splitext(path)[1].lstrip(".").lower()
    if suffix not in formats:
        raise UsageError(f"{flag} {path}: the suffix names the format; use one of "
                         f"{', '.join('.' + name for name in sorted(formats))}")
    writing.check_target(path, flag)


def new_figure(width: float, height: float) -> Figure:
    """An empty matplotlib Figure of ``width`` x ``height`` inches (no pyplot: no GUI state)."""
    require_matplotlib()
    from matplotlib.figure import Figure
    return Figure(figsize=(width, height))


@dataclass(frozen=True)
class Frame:
    """A figure laid out as every chart of this tool is (:func:`frame`, then :func:`finish`):
    its panels, the subtitle above them, the footnote below them."""

    figure: Any
    axes: list
    subtitle: str               # wrapped to the figure's width
    footnote: str


def _lines(text: str) -> int:
    return text.count("\n") + 1 if text else 0


def frame(panels: int, width: float, panel_height: float, subtitle: str, notes: Sequence[str] = (),
          side_by_side: bool = False) -> Frame:
    """A figure ``width`` inches wide of ``panels`` axes, one above the other (or side by side),
    each ``panel_height`` high, with room above for ``subtitle`` (what every point shares) and
    below for the footnote of ``notes`` (what the points and bars are, what was not drawn), both
    wrapped to the width. Draw on ``.axes``; then :func:`finish` places the texts."""
    wrapped = textwrap.fill(subtitle, int(width * SUBTITLE_CHARS_PER_INCH),
                            break_on_hyphens=False)
    footnote = "\n".join(textwrap.fill(text, int(width * FOOTNOTE_CHARS_PER_INCH),
                                       break_on_hyphens=False) for text in notes if text)
    rows, columns = (1, panels) if side_by_side else (panels, 1)
    height = panel_height * rows + INCH_PER_LINE * (_lines(wrapped) + _lines(footnote) + 2)
    figure = new_figure(width, height)
    axes = figure.subplots(rows, columns, squeeze=False)
    return Frame(figure, list(axes.flat), wrapped, footnote)


def finish(drawn: Frame) -> Figure:
    """The subtitle at the top and the footnote at the bottom of the frame's figure, and the
    panels laid out between them; returns the figure."""
    figure = drawn.figure
    height = figure.get_figheight()
    title = figure.suptitle(drawn.subtitle, fontsize="small",
                            y=1 - 0.5 * INCH_PER_LINE / height, va="top")
    title.set_in_layout(False)       # its room is kept below (matplotlib versions differ)
    if drawn.footnote:
        figure.text(0.01, 0.4 * INCH_PER_LINE / height, drawn.footnote, fontsize="x-small",
                    ha="left", va="bottom", color="0.25")
    top = 1 - (_lines(drawn.subtitle) + 0.4) * INCH_PER_LINE / height
    foot = _lines(drawn.footnote)
    bottom = (foot + 0.8) * INCH_PER_LINE / height if foot else 0
    figure.tight_layout(rect=(0, bottom, 1, top))
    return figure


def from_zero(axis: Axes, headroom: float = 0.1) -> None:
    """The y axis from 0 to the top of what is drawn (error bars included) plus ``headroom``
    of it, so that no point or bar sits on the frame."""
    axis.relim()
    axis.autoscale_view()
    top = axis.get_ylim()[1]
    axis.set_ylim(0, top * (1 + headroom) if top > 0 else 1)


def fixed_ticks(axis: Axes, values: Sequence[float], text: Callable[[float], str],
                log2: bool = False) -> None:
    """Ticks at exactly ``values`` on the x axis, written by ``text(value)``; ``log2``: doubling
    steps evenly spaced, with half a doubling of margin each side so end bars are not clipped."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    if log2:
        axis.set_xscale("log", base=2)
        axis.set_xlim(values[0] / 2 ** 0.5, values[-1] * 2 ** 0.5)
    axis.xaxis.set_major_locator(FixedLocator(values))
    axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: text(value)))
    axis.xaxis.set_minor_locator(NullLocator())


def figure_bytes(build: Callable[[], Figure], image_format: str) -> bytes:
    """The figure ``build()`` makes, as ``image_format`` bytes, with every text drawn literally:
    a ``$`` in a name read from a result file would start mathtext (``$\\frac{$`` crashes the
    drawing) and control characters would reach matplotlib's warnings. Built and drawn under
    those settings, so text made by a layout pass (tick labels) is literal too. A drawing that
    matplotlib still cannot finish is :class:`DrawingFailed` (one line, not a traceback)."""
    import warnings
    import matplotlib
    try:
        with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}), \
                warnings.catch_warnings():
            # A glyph the font lacks is drawn as a box; the warning would quote the character.
            warnings.filterwarnings("ignore", message="Glyph .* missing from font")
            figure = build()
            from matplotlib.text import Text        # every artist that draws text is one
            for text in [artist for artist in figure.findobj() if isinstance(artist, Text)]:
                text.set_parse_math(False)
                text.set_text(safe_text.terminal(text.get_text(), keep="\n"))
            image = io.BytesIO()
            figure.savefig(image, dpi=120, format=image_format)
    except BenchmarkError:
        raise
    except (ValueError, RuntimeError, OverflowError, KeyError, IndexError) as error:
        raise DrawingFailed(f"matplotlib could not draw the chart ({type(error).__name__}: "
                            f"{' '.join(str(error).split())[:200]})") from None
    return image.getvalue()


def write_figure(build: Callable[[], Figure], path: str) -> None:
    """Write the figure ``build()`` makes to ``path`` whole or not at all, in the format its
    suffix names."""
    writing.write_whole(path, figure_bytes(build, os.path.splitext(path)[1].lstrip(".").lower()))


class DrawingFailed(BenchmarkError):
    """Matplotlib could not draw the chart (its text is drawn literally, so this is a
    matplotlib limit, not a name read from a file): one line, exit 1; the page says so."""


# ---------------------------------------------------------------- points

@dataclass(frozen=True)
class Point:
    """A plotted value and the ends of its error bar (None: no bar), in the chart's unit."""

    value: float
    low: float | None = None
    high: float | None = None

    def bar(self) -> tuple[float, float]:
        """Distances below and above the point (clamped: a skewed sample may put the headline
        outside the percentile range, and a bar never points backwards)."""
        if self.low is None or self.high is None:
            return 0.0, 0.0
        return max(0.0, self.value - self.low), max(0.0, self.high - self.value)

    @property
    def below(self) -> float:
        return self.bar()[0]

    @property
    def above(self) -> float:
        return self.bar()[1]


def _time_percentiles(samples: Sequence[float]) -> tuple[float, float] | None:
    """The 10th and 90th percentile of the samples, interpolated linearly between closest
    ranks (numpy's default, as microbench.measure.timing.percentile)."""
    if not samples:
        return None
    if len(samples) == 1:
        return samples[0], samples[0]
    cuts = statistics.quantiles(samples, n=10, method="inclusive")
    return cuts[0], cuts[-1]


def _throughput_point(entry: Entry) -> Point | None:
    value = entry.figures.get("throughput")
    if value is None:
        return None
    if len(entry.trial_values) >= 2:
        return Point(value, min(entry.trial_values), max(entry.trial_values))
    times = _time_percentiles(entry.samples_ms)
    if times is None or not entry.work_per_iteration or times[0] <= 0:
        return Point(value)
    # A rate's low percentile is the time's high one: work / p90(time) = p10(rate).
    return Point(value, entry.work_per_iteration / (times[1] / 1e3),
                 entry.work_per_iteration / (times[0] / 1e3))


def _scaled(point: Point | None, value: float | None, reference: float | None) -> Point | None:
    """A figure proportional to the point's quantity, with the point's bars scaled to it."""
    if value is None:
        return None
    if point is None or point.low is None or point.high is None or not reference:
        return Point(value)
    return Point(value, value * point.low / reference, value * point.high / reference)


def measured_point(entry: Entry) -> Point:
    """The throughput point of an entry that was measured (every row a sweep's or a history's
    chart draws)."""
    point = point_of(entry, "throughput")
    if point is None:
        raise ValueError(f"{entry.source}: not measured, no throughput to draw")
    return point


def point_of(entry: Entry, metric: str) -> Point | None:
    """The plotted value of an entry and its bar; None when the entry does not know it."""
    if not entry.measured:
        return None
    values = entry.figures
    if metric == "throughput":
        return _throughput_point(entry)
    bars = CHARTED[metric].bars if metric in CHARTED else None
    if bars == figures.THROUGHPUT_BARS:          # proportional to throughput (MFU)
        return _scaled(_throughput_point(entry), values.get(metric), values.get("throughput"))
    median = values.get("p50_ms" if entry.table == MODEL else "median_ms")
    times = _time_percentiles(entry.samples_ms)
    if metric == "latency":
        if median is None:
            return None
        return Point(median, *times) if times else Point(median)
    if bars == figures.CALL_TIME_BARS:
        # Work over the median time (GB/s, TFLOP/s): the bars are the times' inverted.
        rate = Point(1 / median, 1 / times[1], 1 / times[0]) if median and times else None
        return _scaled(rate, values.get(metric), 1 / median if median else None)
    value = values.get(metric)
    return None if value is None else Point(value)


# ---------------------------------------------------------------- axis, series, labels

def _label(metric: str, table: Table, unit: str | None = None) -> str:
    if metric in CHARTED:
        return CHARTED[metric].chart or metric          # charted figures name their axis
    return {"throughput": f"throughput [{unit or _main_unit(table)}]",
            "latency": "median iteration time [ms]" if table.group.table == MODEL
            else "median time per call [ms]"}[metric]


def _numeric(entries: Sequence[Entry], name: str) -> bool:
    values = [setting_value(e, name) for e in entries if e.measured]
    return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                for v in values)


def choose_x(table: Table, wanted: str | None, entries: Sequence[Entry] | None=None) -> str:
    """The setting across which the metric is drawn (see the module docstring); with
    ``entries`` (a panel's rows), one that varies among them, else ``#`` (a bar per row): a
    setting that varies only between panels would stack the panel's rows on one point."""
    varying = [name for name in table.group.varying if name != FILE]
    if wanted is not None:
        names = {name.replace(" ", "-"): name for name in varying}
        name = names.get(wanted.replace("_", "-").replace(" ", "-"))
        if name is None:
            raise UsageError(f"--x {wanted}: not a setting that varies across these results "
                             f"(they vary in: {', '.join(varying) or 'nothing'})")
        return name
    if entries is not None:
        varying = [name for name in varying if len(_known(entries, name)) > 1]
    settings = [name for name in varying if name not in _PROCEDURE]
    if table.group.table == OP:
        per_op = [name for name in _OP_AXES if name in settings]
        if per_op:
            return per_op[0]
    # varying is ordered by the rows each setting sets apart (collection._group).
    numeric = [name for name in settings if _numeric(table.group.entries, name)]
    return (numeric or settings or [name for name in varying if name == RUN_AT] or ["#"])[0]


def _style(number: int, count: int) -> dict:
    """Series ``number``'s colour (and marker), distinct for up to 20 series and by marker
    beyond: matplotlib's own cycle repeats after ten."""
    if count <= 10:
        return {"color": f"C{number}"}
    from matplotlib import colormaps
    return {"color": colormaps["tab20"](number % 20),
            "marker": _MARKERS[(number // 20) % len(_MARKERS)]}


# Settings whose values name themselves (fp32, NHWC, resnet50); others are shown with their
# name (batch 64, compile max-autotune, torch 2.9.0).
_SELF_NAMING = frozenset({"network", "mode", "precision", "layout", "device", "attention", "op",
                          "op type", "shapes", "dtype"})


def _series_label(entry: Entry, names: Sequence[str]) -> str:
    """What a series differs in; settings that do not apply to the row are left out."""
    parts = []
    for name in names:
        value = setting_value(entry, name)
        if value is not None:
            text = _drawn_setting(value)
            parts.append(text if name in _SELF_NAMING else f"{name} {text}")
    return " · ".join(parts)


def _units(table: Table) -> list[str | None]:
    """The throughput units of the measured rows (images/s, tokens/s), most rows' first: each
    gets a panel of its own, so that no row is left out for its unit."""
    units_ = [entry.unit for entry in table.group.entries if entry.measured]
    ordered = sorted(dict.fromkeys(units_), key=lambda unit: -units_.count(unit))
    return [*ordered] or [None]


def _main_unit(table: Table) -> str | None:
    return _units(table)[0]


def _drawn(table: Table, entry: Entry, metric: str) -> bool:
    return point_of(entry, metric) is not None


def _shared(entries: Sequence[Entry], name: str) -> object:
    """The value every entry has for a setting; None where they differ or do not say."""
    values = {json.dumps(setting_value(e, name), default=str) for e in entries}
    return setting_value(entries[0], name) if len(values) == 1 else None


def _known(entries: Sequence[Entry], name: str) -> set[str]:
    """The distinct known values of a setting (a row that does not record it has none)."""
    return {json.dumps(setting_value(e, name), default=str) for e in entries
            if setting_value(e, name) is not None}


def _subtitle(entries: Sequence[Entry]) -> str:
    """What every drawn row shares, so that a reader knows what the points are of."""
    shared = [(name, _shared(entries, name)) for name in HEADLINE_SETTINGS] if entries else []
    return " · ".join(f"{name} {_drawn_setting(value)}" for name, value in shared
                      if value is not None)


def _drawn_setting(value: object) -> str:
    """A setting as the chart draws it: a name from a file with its controls escaped."""
    return safe_text.terminal(format_setting(value))


def _bars_note(table: Table, metric: str) -> str:
    entries = [entry for entry in table.group.entries if _drawn(table, entry, metric)]
    with_trials = any(len(entry.trial_values) >= 2 for entry in entries)
    without = any(len(entry.trial_values) < 2 for entry in entries)
    spread = (f"the {LOW_PERCENTILE}th to {HIGH_PERCENTILE}th percentile of the per-iteration "
              f"rate (work of one iteration over its time)")
    if metric == "latency":
        return (f"Error bars: the {LOW_PERCENTILE}th to {HIGH_PERCENTILE}th percentile of the "
                f"iteration times.")
    bars = CHARTED[metric].bars if metric in CHARTED else None
    if bars == figures.CALL_TIME_BARS:
        return (f"Error bars: the rate at the {HIGH_PERCENTILE}th and {LOW_PERCENTILE}th "
                f"percentile of the call times.")
    if bars == figures.NO_BARS:
        return "Points: each result's figure, without error bars."
    parts = []
    if with_trials:
        parts.append("the lowest to the highest trial (results with --repeat)")
    if without:
        parts.append(spread + (" (results of one trial)" if with_trials else ""))
    scaled = f" scaled to {_label(metric, table).split(' [')[0]}" if metric in CHARTED else ""
    return f"Points: each result's headline; error bars{scaled}: {'; '.join(parts)}."


def _why_not_drawn(table: Table, entry: Entry, metric: str) -> str:
    if not entry.measured:
        return entry.status
    return f"{metric} unknown"


def _missing_note(table: Table, metric: str) -> str:
    missing = [f"#{index} ({_why_not_drawn(table, entry, metric)})"
               for index, entry in table.rows if not _drawn(table, entry, metric)]
    return f"Not drawn: {', '.join(missing)}." if missing else ""


def nothing_drawn(table: Table, metric: str) -> str | None:
    """Why a chart of ``metric`` would have no point at all (an empty chart), or None."""
    if any(_drawn(table, entry, metric) for entry in table.group.entries):
        return None
    return (f"no row has a known {metric} "
            f"({'; '.join(_why_not_drawn(table, e, metric) for e in table.group.entries[:3])})")


# ---------------------------------------------------------------- the figure

@dataclass(frozen=True)
class Panel:
    """One panel's rows: its throughput unit (None: one panel), its x setting and its series."""

    unit: str | None
    x: str
    series: dict


def _panels(table: Table, metric: str, wanted_x: str | None) -> list[Panel]:
    """A panel per throughput unit (images/s above tokens/s), or one; each across the setting
    that varies inside it, its rows split into series by the other settings that do."""
    drawn = [entry for entry in table.group.entries if _drawn(table, entry, metric)]
    units_ = [unit for unit in _units(table) if any(e.unit == unit for e in drawn)] \
        if metric == "throughput" else [None]
    panels = []
    for unit in units_ or [None]:
        members = [(index, entry) for index, entry in table.rows
                   if unit is None or entry.unit == unit]
        mine = [entry for _, entry in members if _drawn(table, entry, metric)]
        x = choose_x(table, wanted_x, mine)
        others = [name for name in table.group.varying
                  if name not in (x, FILE) and len(_known(mine, name)) > 1]
        series: dict[str, list[tuple[int, Entry]]] = {}
        for index, entry in members:
            series.setdefault(_series_label(entry, others), []).append((index, entry))
        panels.append(Panel(unit, x, series))
    return panels


def _panel_title(table: Table, metric: str, panel: Panel, shared_by_all: str,
                 several: bool) -> str:
    """What the panel draws, and with several panels its unit and what its rows share,
    wrapped to the panel's width (a centred line wider than the panel is cut at both edges)."""
    entries = [entry for members in panel.series.values() for _, entry in members]
    title = f"{_label(metric, table, panel.unit).split(' [')[0]} by " \
            f"{'row' if panel.x == '#' else panel.x}"
    if not several:
        return title
    shared = [part for part in _subtitle(entries).split(" · ")
              if part and part not in shared_by_all.split(" · ")]
    return "\n".join([f"{title} ({panel.unit})", *_joined_to_width(shared, PANEL_TITLE_CHARS)])


def _joined_to_width(parts: list[str], width: int) -> list[str]:
    """``parts`` joined by `` · `` into lines of at most ``width`` characters, broken between
    parts (a setting's name and value stay on one line); a longer part is wrapped alone."""
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += " · " + part
        else:
            lines.extend(textwrap.wrap(part, width, break_on_hyphens=False) or [part])
    return lines


def build_figure(table: Table, metric: str, wanted_x: str | None = None):
    """The figure of ``metric`` across the varying setting (a matplotlib Figure): one panel,
    or for throughput one per unit (images/s above tokens/s)."""
    require_matplotlib()
    if table.group.table not in METRICS[metric]:
        raise UsageError(f"--metric {metric} applies to "
                         f"{' and '.join(METRICS[metric])} results, not to these")
    panels = _panels(table, metric, wanted_x)
    drawn = [entry for entry in table.group.entries if _drawn(table, entry, metric)]
    notes = [_bars_note(table, metric), _missing_note(table, metric)]
    # Wide enough for the legend beside the axes (characters of its longest label).
    labels = [label for panel in panels if len(panel.series) > 1 for label in panel.series]
    longest = max(map(len, labels)) if labels else 0
    width = 7.0 + (0.065 * longest + 0.6 if longest else 0)
    drawn_frame = frame(len(panels), width, 4.0 if len(panels) == 1 else 3.2, _subtitle(drawn),
                        notes)
    for axis, panel in zip(drawn_frame.axes, panels):
        entries = [entry for members in panel.series.values() for _, entry in members]
        if panel.x != "#" and _numeric(entries, panel.x):
            _draw_lines(axis, table, panel.series, metric, panel.x)
        else:
            _draw_bars(axis, table, panel.series, metric, panel.x)
        axis.set_ylabel(_label(metric, table, panel.unit))
        from_zero(axis)
        axis.set_title(_panel_title(table, metric, panel, _subtitle(drawn), len(panels) > 1),
                       fontsize="medium")
        if len(panel.series) > 1:           # beside the axes, so that it hides no point
            axis.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0),
                        borderaxespad=0)
    return finish(drawn_frame)


def _points(table: Table, members: list[tuple[int, Entry]], metric: str
            ) -> list[tuple[int, Entry, Point]]:
    found = [(index, entry, point_of(entry, metric)) for index, entry in members]
    return [(index, entry, point) for index, entry, point in found if point is not None]


def _scale(metric: str) -> float:
    """A fraction is drawn in percent."""
    return 100.0 if metric in CHARTED and CHARTED[metric].unit == figures.FRACTION else 1.0


def _draw_lines(axis: Axes, table: Table, series: Series, metric: str, x: str) -> None:
    values = sorted({setting_value(e, x) for members in series.values() for _, e in members
                     if e.measured})
    for number, (label, members) in enumerate(series.items()):
        drawn = sorted(_points(table, members, metric), key=lambda item: setting_value(item[1], x))
        if not drawn:
            continue
        scale = _scale(metric)
        bars = [point.bar() for _, _, point in drawn]
        axis.errorbar([setting_value(entry, x) for _, entry, _ in drawn],
                      [point.value * scale for _, _, point in drawn],
                      yerr=[[low * scale for low, _ in bars], [high * scale for _, high in bars]],
                      capsize=3, label=label or None,
                      **{"marker": "o", **_style(number, len(series))})
    fixed_ticks(axis, values, lambda value: f"{value:g}",
                log2=bool(values) and values[0] > 0 and values[-1] / values[0] >= 4)
    axis.set_xlabel(x)


def _draw_bars(axis: Axes, table: Table, series: Series, metric: str, x: str) -> None:
    def category(index: int, entry: Entry) -> str:
        return f"#{index}" if x == "#" else _drawn_setting(setting_value(entry, x))
    rows = sorted((item for members in series.values() for item in members),
                  key=lambda item: item[0])
    categories = list(dict.fromkeys(category(i, e) for i, e in rows))
    width = 0.8 / max(1, len(series))
    for number, (label, members) in enumerate(series.items()):
        drawn = _points(table, members, metric)
        if not drawn:
            continue
        scale = _scale(metric)
        offset = (number - (len(series) - 1) / 2) * width
        bars = [point.bar() for _, _, point in drawn]
        axis.bar([categories.index(category(i, e)) + offset for i, e, _ in drawn],
                 [point.value * scale for _, _, point in drawn], width=width,
                 yerr=[[low * scale for low, _ in bars], [high * scale for _, high in bars]],
                 capsize=3, label=label or None,
                 color=_style(number, len(series))["color"],
                 hatch=(None, "//", "..", "xx")[(number // 20) % 4] if len(series) > 20 else None)
    rotate = len(categories) > 4 or max(map(len, categories)) > 12
    axis.set_xticks(range(len(categories)), categories, rotation=30 if rotate else 0,
                    ha="right" if rotate else "center", fontsize="small")
    axis.set_xlabel("row" if x == "#" else x)


def chart_bytes(table: Table, metric: str, wanted_x: str | None, image_format: str) -> bytes:
    return figure_bytes(lambda: build_figure(table, metric, wanted_x), image_format)


def write_chart(table: Table, metric: str, wanted_x: str | None, path: str) -> None:
    """Draw and write ``path`` whole or not at all (its suffix names the format)."""
    write_figure(lambda: build_figure(table, metric, wanted_x), path)


def plotted_table(tables: list[Table], metric: str | None) -> tuple[Table, str]:
    """The table a chart draws (the first whose kind the metric applies to) and the metric."""
    for table in tables:
        chosen = metric or DEFAULT_METRIC.get(table.group.table)    # a node check: none
        if chosen is not None and table.group.table in METRICS[chosen]:
            return table, chosen
    if metric is None:
        raise UsageError("--plot draws model and op bench results; none were read (a node "
                         "check draws its own: microbench-node --plot)")
    raise UsageError(f"--metric {metric} applies to {' and '.join(METRICS[metric])} results; "
                     f"none were read")

