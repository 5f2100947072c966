"""The report's tables: columns chosen from what the rows hold, a baseline, and four renderings.

A :class:`Table` is one :class:`~.collection.Group` laid out: ``#``, the settings that vary, then
the figures some row knows. Model results show throughput (named in its unit: images/s, clips/s,
tokens/s) with the 95% confidence interval its result file states where there are trials,
iteration-time percentiles, time to first token and inter-token latency for generation, MFU and
MBU, energy per unit of throughput and peak memory; op bench rows show median time, CV, GB/s,
TFLOP/s and the share of the datasheet peak. A figure no row knows gets no column, and a note
says so. Rows are numbered across tables, so ``--baseline 3`` names one row.

Against a baseline each row gets its speed ratio (throughput over the baseline's; for ops, the
baseline's median time over the row's). :func:`versus` is the one place where a row meets its
baseline: where both have trials, the comparison gate's verdict
(:func:`microbench.measure.stats.gate`, both ways, at --compare's default tolerance) and the
ratio's interval; otherwise the ratio of the headlines alone, called that, and ``within noise``
where it lies inside the band the two rows' iteration spread allows
(:mod:`microbench.store.iteration_noise`, the rule ``--compare`` gates by). A sweep's comparison
table takes its speedup from it too, marked ``*`` where the noise does not tell it from 1.

Renderings: aligned text for the terminal, GitHub markdown (pastes into an issue or pull request),
CSV and JSON with raw numbers in fixed units.

The figure columns are the registry's (:mod:`microbench.store.figures`: each figure's heading,
cell style and why none is known), in its order; a sweep's closing tables are
:mod:`microbench.output.sweep_table`'s.

Example::

    tables = build_tables(group_entries(found.entries), baseline="3")
    print(render(tables, "markdown"))
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
from dataclasses import dataclass, field
from typing import Sequence

from microbench.measure import stats
from microbench.platform import safe_text
from microbench.platform import text_table
from microbench.platform.errors import UsageError
from microbench.platform import units, writing
from microbench.store import figures, iteration_noise, ranges
from microbench.store.collection import FILE, HEADLINE_SETTINGS, RUN_AT, Group, setting_value
from microbench.store.entry import MODEL, Entry, accuracy_reference

FORMATS = ("text", "markdown", "csv", "json")
# --compare's default tolerance, for the verdict between rows with trials.
DEFAULT_TOLERANCE_PCT = stats.DEFAULT_TOLERANCE_PCT


# ---------------------------------------------------------------- a row against its baseline

@dataclass(frozen=True)
class Versus:
    """A row against the baseline row: its speed ratio (above 1: faster), and, where both have
    trials, the comparison in the shared words (:class:`microbench.measure.stats.Comparison`); the
    baseline row itself is marked, not compared with itself."""

    ratio: float | None
    low: float | None = None
    high: float | None = None
    verdict: str | None = None
    text: str | None = None
    is_baseline: bool = False
    noise_band: tuple[float, float] | None = None    # one trial a side: the ratios within noise

    @property
    def in_noise(self) -> bool:
        """Whether the noise does not tell this ratio from 1: one trial a side and inside the
        band of the rows' iteration noise (:mod:`microbench.store.iteration_noise`), or, with
        trials, a 95% interval that holds 1."""
        if self.verdict == iteration_noise.WITHIN_NOISE:
            return True
        return self.low is not None and self.high is not None and self.low <= 1 <= self.high


BASELINE = "baseline"


def speed(entry: Entry) -> float | None:
    """Higher is faster: a model's throughput, an op's calls per millisecond."""
    if entry.table == MODEL:
        return entry.figures.get("throughput")
    median = entry.figures.get("median_ms")
    return 1.0 / median if median else None


def trial_verdict(baseline_trials: Sequence[float], trials: Sequence[float],
                  tolerance_pct: float = DEFAULT_TOLERANCE_PCT) -> Versus:
    """Two sets of trial throughputs (two or more each) compared as ``--compare`` compares
    them: the ratio of their geometric means, its 95% interval (Welch on logs) and the
    verdict in the shared words."""
    ruled = stats.gate(baseline_trials, trials, tolerance_pct).comparison
    # trials on both sides give an interval (a point's ratio would stand for itself)
    low, high = ruled.interval if ruled.interval is not None else (ruled.ratio, ruled.ratio)
    if any(ranges.ratio_problem(value) for value in (ruled.ratio, low, high)):
        return Versus(None, text=ranges.BEYOND_RATIO)
    return Versus(ruled.ratio, low, high, ruled.verdict, ruled.text)


def versus(entry: Entry, baseline: Entry) -> Versus:
    if entry is baseline:
        return Versus(1.0, is_baseline=True)
    if not entry.measured or not baseline.measured or entry.unit != baseline.unit:
        return Versus(None)
    if len(entry.trial_values) >= 2 and len(baseline.trial_values) >= 2:
        return trial_verdict(baseline.trial_values, entry.trial_values)
    ours, theirs = speed(entry), speed(baseline)
    ratio = ranges.ratio_of(ours, theirs)
    if ratio is None and ours and theirs:
        return Versus(None, text=ranges.BEYOND_RATIO)
    return _one_trial(ratio, (baseline, entry))


def _one_trial(ratio: float | None, entries: tuple[Entry, Entry]) -> Versus:
    """The ratio of headlines alone, said ``within noise`` where it lies inside the band the
    two rows' iteration spread allows (the rule ``--compare`` gates by)."""
    band = None if ratio is None else iteration_noise.within(stats.compared(ratio, None), entries)
    if band is None:
        return Versus(ratio)
    return Versus(ratio, verdict=iteration_noise.WITHIN_NOISE,
                  text=f"{iteration_noise.WITHIN_NOISE} (band {band.range_text})",
                  noise_band=(band.low, band.high))


# ---------------------------------------------------------------- columns

@dataclass(frozen=True)
class Column:
    key: str                   # a setting name, a figure's column key (column_key), "#",
                               # "versus" or FLAGS
    heading: str
    setting: bool = False
    numeric: bool = True
    figure: figures.Figure | None = None       # the registry's row, for a figure's column


# The op bench's marks (cache-resident, ...): a column of Entry.flags, after the figures.
FLAGS = "flags"
# Figures shown with their unit in each cell where the rows count in different units, and the
# heading they then get.
PER_CELL_UNIT = {"throughput": "throughput", "energy_per_unit": "energy"}


def column_key(figure: figures.Figure) -> str:
    """A figure's column: its key; an interval's (its low end's row) named without ``_low``."""
    return figure.key.removesuffix("_low") if figure.style == figures.INTERVAL else figure.key


def shown_figures(table: str) -> tuple[figures.Figure, ...]:
    """The registry's figures the report's table of ``table`` (MODEL, OP) can show, in order."""
    return tuple(figure for figure in figures.of_table(table) if figure.heading)


def _figure_known(entries: Sequence[Entry], figure: figures.Figure) -> bool:
    if figure.style == figures.COUNT:
        return any((e.figures.get(figure.key) or 1) > 1 for e in entries)
    return any(e.figures.get(figure.key) is not None for e in entries)


def _numeric_setting(entries: Sequence[Entry], name: str) -> bool:
    values = [setting_value(e, name) for e in entries if setting_value(e, name) is not None]
    return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                for v in values)


def _units(entries: Sequence[Entry]) -> list[str]:
    return list(dict.fromkeys(e.unit for e in entries if e.measured and e.unit))


# A node check's settings shown as columns in every node table (a GPU and its verdict).
NODE_COLUMNS = ("host", "rank", "device", "verdict", "flagged by")
# The headline figures, first after the row number (the versus column follows them).
HEADLINE_FIGURES = ("throughput", "ci95", "median_ms")


def _values_where_set(entries: Sequence[Entry], name: str) -> set[str]:
    return {json.dumps(setting_value(e, name), sort_keys=True, default=str) for e in entries
            if setting_value(e, name) is not None}


def setting_columns(group: Group) -> list[str]:
    """The varying settings that become columns: those that split the rows they apply to
    (two values or more where set), the one that sets the most rows apart first, as the rows
    are ordered (``collection.rows_split``). When the rows ran and which file holds them, and a
    setting that only tells the rows it applies to from those it does not (the data set's image
    count of a --data run beside synthetic ones), go to the file list instead
    (:func:`file_line`)."""
    # A headline setting a row does not record is unknown there (the older tool's mode), which
    # the column shows; any other setting a row lacks did not apply to it.
    varying = [name for name in group.varying if name not in (RUN_AT, FILE)
               and (name in HEADLINE_SETTINGS
                    or len(_values_where_set(group.entries, name)) > 1)]
    if group.table != figures.NODE:
        return varying
    # A node check's row is a GPU: which one and its verdict, even where every row shares them.
    named = [name for name in NODE_COLUMNS if _values_where_set(group.entries, name)]
    return named + [name for name in varying if name not in named]


def file_line(table: "Table", index: int, entry: Entry) -> str:
    """``#3 results/x.json (run at 2026-11-25 09:00:12; data images 4096)``: the row's file,
    when it ran, and the varying settings that are not columns, where set."""
    shown = {column.key for column in table.columns if column.setting}
    extra = [f"{name} {format_setting(setting_value(entry, name))}"
             for name in [RUN_AT, *table.group.varying]
             if name not in shown and name != FILE and setting_value(entry, name) is not None]
    extra = list(dict.fromkeys(extra))
    return f"#{index} {entry.source}" + (f" ({'; '.join(extra)})" if extra else "")


def _columns(group: Group) -> tuple[list[Column], list[str]]:
    """The columns of a group, and the figures no row knows (for a note): the row number, the
    headline and its interval, the settings that split the rows, then the other figures."""
    entries = group.entries
    columns = [Column("#", "#")]
    settings: list[Column] | None = [
        Column(name, name, setting=True, numeric=_numeric_setting(entries, name))
        for name in setting_columns(group)]
    unknown = []
    units_ = _units(entries)
    unit = units_[0] if len(units_) == 1 else "unit"
    item = unit.split("/")[0].removesuffix("s") if len(units_) == 1 else "unit"
    for figure in shown_figures(group.table):
        key = column_key(figure)
        if key not in HEADLINE_FIGURES and settings is not None:
            columns += settings                     # after the headline and its interval
            settings = None
        heading = figure.heading or figure.key          # shown figures have a heading
        if figure.key == "accuracy":
            heading = f"vs {accuracy_reference(entries) or 'its reference'} (error)"
        if _figure_known(entries, figure) or figure.always:
            columns.append(Column(key, heading.format(unit=unit, item=item), figure=figure))
        elif figure.unknown and any(e.measured for e in entries):
            unknown.append(figure.unknown)
    if group.table != MODEL and any(e.flags for e in entries):
        columns.append(Column(FLAGS, FLAGS, numeric=False))
    columns += settings or []
    if len(units_) > 1 and group.table == MODEL:         # each cell then names its unit
        columns = [dataclasses.replace(c, heading=PER_CELL_UNIT[c.key])
                   if c.key in PER_CELL_UNIT else c for c in columns]
    return columns, unknown


# ---------------------------------------------------------------- tables

@dataclass
class Table:
    group: Group
    first_index: int                      # the # of its first row
    columns: list[Column]
    unknown: list[str]                    # figures no row knows
    baseline: Entry | None = None
    versus: dict = field(default_factory=dict)      # id(entry) -> Versus

    @property
    def rows(self) -> list[tuple[int, Entry]]:
        return list(enumerate(self.group.entries, self.first_index))

    def index_of(self, entry: Entry) -> int:
        return self.first_index + self.group.entries.index(entry)

    def set_baseline(self, baseline: Entry) -> None:
        self.baseline = baseline
        after = max(i for i, column in enumerate(self.columns)
                    if column.key in ("#", *HEADLINE_FIGURES))
        self.columns.insert(after + 1, Column("versus", f"vs #{self.index_of(baseline)}"))
        self.versus = {id(entry): versus(entry, baseline) for entry in self.group.entries}


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(" ", "-")


def _matches(entry: Entry, conditions: dict) -> bool:
    settings = {_normal(name): value for name, value in entry.settings.items()}
    settings[_normal(RUN_AT)] = setting_value(entry, RUN_AT)
    return all(name in settings and format_setting(settings[name]) == wanted
               for name, wanted in conditions.items())


def _conditions(selector: str) -> dict:
    conditions = {}
    for part in selector.split(","):
        name, equals, value = part.partition("=")
        if not equals or not name.strip():
            raise UsageError(f"--baseline {selector}: give a row number, a result file, or "
                             f"SETTING=VALUE[,SETTING=VALUE...] (e.g. precision=fp32,batch=64)")
        conditions[_normal(name.strip())] = value.strip()
    return conditions


def _candidates(tables: list[Table], selector: str) -> list[tuple[Table, Entry]]:
    rows = [(table, entry) for table in tables for _, entry in table.rows]
    if selector.isdigit():
        return [(t, e) for t, e in rows if t.index_of(e) == int(selector)]
    if "=" in selector:
        conditions = _conditions(selector)
        return [(t, e) for t, e in rows if _matches(e, conditions)]
    if not os.path.exists(selector):
        raise UsageError(f"--baseline {selector}: no such row number, file or SETTING=VALUE")
    real = os.path.realpath(selector)
    return [(t, e) for t, e in rows if os.path.realpath(e.file) == real]


def choose_baseline(tables: list[Table], selector: str) -> None:
    """Mark the one row ``selector`` names as its table's baseline (UsageError otherwise)."""
    found = _candidates(tables, selector)
    count = sum(len(table.rows) for table in tables)
    if not found:
        raise UsageError(f"--baseline {selector} matches none of the {count} rows")
    if len(found) > 1:
        numbers = ", ".join(f"#{t.index_of(e)}" for t, e in found[:8])
        raise UsageError(f"--baseline {selector} matches {len(found)} rows ({numbers}): name "
                         f"one by its number or add a setting")
    table, entry = found[0]
    if not entry.measured:
        raise UsageError(f"--baseline {selector} is row #{table.index_of(entry)}, which was not "
                         f"measured ({entry.status})")
    table.set_baseline(entry)


def build_tables(groups: list[Group], baseline: str | None = None) -> list[Table]:
    tables, first = [], 1
    for group in groups:
        columns, unknown = _columns(group)
        tables.append(Table(group, first, columns, unknown))
        first += len(group.entries)
    if baseline is not None:
        choose_baseline(tables, baseline)
    return tables


# ---------------------------------------------------------------- cells

def format_setting(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) or "none"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _number(value: float | None) -> str:
    return "-" if value is None else units.rate(value)


def _versus_cell(table: Table, entry: Entry) -> str:
    found = table.versus[id(entry)]
    if found.is_baseline:
        return BASELINE
    if found.ratio is None:
        return "-"
    if found.text is None:
        return f"{found.ratio:.2f}x"
    return f"{found.ratio:.2f}x {found.text}"


def _figure_cell(table: Table, entry: Entry, column: Column) -> str:
    if column.key == "versus":
        return _versus_cell(table, entry)
    if column.key == FLAGS:
        return " ".join(entry.flags)
    figure = column.figure
    if figure is None:                          # a figure's column (settings have their own)
        return "-"
    value, style = entry.figures.get(figure.key), figure.style
    if style == figures.INTERVAL:
        high = entry.figures.get(figure.key.removesuffix("_low") + "_high")
        return ("-" if value is None or high is None
                else f"[{units.rate(value)}, {units.rate(high)}]")
    if style == figures.COUNT:
        return str(value or 1)
    if style in (figures.PERCENT, figures.PERCENT_POINTS):
        if value is None:
            return "-"
        if figure.key == "accuracy" and accuracy_reference(table.group.entries) is None \
                and entry.accuracy_reference:          # the heading names no one reference
            return f"{units.percent(value)} vs {entry.accuracy_reference}"
        return f"{value:.1f}%" if style == figures.PERCENT_POINTS else units.percent(value)
    if style in (figures.DURATION, figures.FLOP_RATE) and value:
        # Each in the unit that reads best (5.60 us, 798 MFLOP/s); CSV and JSON keep ms, TFLOP/s.
        return units.duration_ms(value) if style == figures.DURATION else \
            units.flops(value * 1e12, per_second=True)
    text = _number(value)
    if len(_units(table.group.entries)) > 1 and text != "-" and figure.key in PER_CELL_UNIT:
        item = entry.unit.split("/")[0].removesuffix("s")
        text = f"{text} {figure.unit.format(unit=entry.unit, item=item)}"
    if figure.key == _noisy_mark_key(table) and "noisy" in entry.flags and text != "-":
        text += "*"
    if figure.key == "energy_per_unit" and "estimated energy" in entry.flags and text != "-":
        text = "~" + text
    return text


def _noisy_mark_key(table: Table) -> str:
    """Where a noisy row's ``*`` goes: on p50 where the table shows it, else on the headline,
    which every rendering shows (a markdown table of many settings leaves p50 out, and its
    legend must still have a mark to explain)."""
    return "p50_ms" if any(column.key == "p50_ms" for column in table.columns) else "throughput"


def cell(table: Table, index: int, entry: Entry, column: Column) -> str:
    """A cell as the text and markdown tables show it."""
    if column.key == "#":
        return str(index)
    if column.setting:
        return format_setting(setting_value(entry, column.key))
    if not entry.measured:
        first_figure = next(c for c in table.columns if not c.setting and c.key != "#")
        return entry.status if column is first_figure else ""
    return _figure_cell(table, entry, column)


# ---------------------------------------------------------------- notes

def common_line(table: Table) -> str:
    shown = [(name, table.group.common[name]) for name in HEADLINE_SETTINGS
             if name in table.group.common]
    return " · ".join(f"{name} {format_setting(value)}" for name, value in shown)


def notes(table: Table) -> list[str]:
    """What the columns mean, what no row knows, and why rows were not measured."""
    keys = {column.key for column in table.columns}
    lines = []
    if table.group.table == MODEL:
        lines.append("throughput: the headline of each result (with --repeat, the geometric "
                     "mean of its trials; files whose trials state no headline_statistic: the "
                     "median)")
        if "ci95" in keys:
            lines.append("95% CI: the interval each result file states for its headline "
                         "(Student t on log throughput; older files: of the arithmetic mean)")
        if "p50_ms" in keys:
            lines.append("p50/p90/p99: percentiles of the iteration times (a whole generation "
                         "for --mode generate)")
    if any("noisy" in entry.flags for entry in table.group.entries):
        lines.append("*: noisy timing (the result flags its coefficient of variation)")
    if any("estimated energy" in entry.flags for entry in table.group.entries):
        lines.append("~: energy estimated from power samples (no energy counter)")
    if table.group.table == figures.NODE:
        lines.append("node checks: one row per GPU, its figures (median of its samples) and "
                     "the check's verdict; the findings of a flagged GPU follow")
    if table.baseline is not None:
        number = table.index_of(table.baseline)
        what = (f"each row's throughput over row #{number}'s" if table.group.table == MODEL
                else f"row #{number}'s median time over each row's")
        tolerance = f"{DEFAULT_TOLERANCE_PCT:g}%"
        lines.append(f"vs #{number}: {what}, above 1 faster; where both rows have trials, "
                     f"as --compare words it: faster/slower when the ratio's 95% interval "
                     f"(Welch on log throughput) excludes 1 and the change is beyond "
                     f"{tolerance}, same within {tolerance} when the whole interval is, else "
                     f"no difference detected; a row of one trial gets the ratio of "
                     f"headlines alone, not a significance test, said within noise where "
                     f"it lies inside the band both rows' iteration spread allows (95%, "
                     f"from their CVs)")
    for index, entry in table.rows:
        if entry.note:
            lines.append(f"#{index}: {entry.note}")
        beyond = table.versus.get(id(entry))
        if (beyond is not None and beyond.ratio is None and beyond.text
                and table.baseline is not None):      # a versus is against the baseline
            lines.append(f"#{index} vs #{table.index_of(table.baseline)}: not shown, "
                         f"{beyond.text}")
    if table.unknown:
        lines.append(f"not known for any row: {'; '.join(table.unknown)}")
    for index, entry in table.rows:
        if not entry.measured and entry.error:
            lines.append(f"#{index} {entry.status}: {' '.join(entry.error.split())}")
    return lines


# ---------------------------------------------------------------- renderings

# Each table's title, by the kind of its rows.
TITLES = {MODEL: "model results", figures.OP: "op bench results", figures.NODE: "node checks"}


def title_of(table: Table) -> str:
    noun = TITLES[table.group.table]
    count = len(table.group.entries)
    return f"{noun.capitalize()}: {count} row{'s' if count != 1 else ''}"


def _aligned(table: Table, terminal: bool) -> list[str]:
    columns = [text_table.Column(safe_text.terminal(column.heading), numeric=column.numeric)
               for column in table.columns]
    cells = [[safe_text.terminal(cell(table, index, entry, column)) for column in table.columns]
             for index, entry in table.rows]
    return text_table.render(columns, cells, terminal).splitlines()


def render_text(tables: list[Table], terminal: bool = False) -> str:
    """The text table; ``terminal``: styled for a terminal (plain text otherwise)."""
    out = []
    for table in tables:
        out.append(title_of(table))
        common = common_line(table)
        if common:
            out.append(f"Same in every row: {safe_text.terminal(common)}")
        out += _aligned(table, terminal)
        out += [safe_text.terminal(line) for line in notes(table)]
        out.append("Files:")
        out += [f"  {safe_text.terminal(file_line(table, index, entry))}"
                for index, entry in table.rows]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


# Columns a markdown table shows by default: about what a GitHub comment or a printed page
# shows without scrolling sideways (issue 56: a report of 28 columns). The row number, the
# headline, its interval and ratio come first, then the settings that tell the rows apart,
# then the other columns in their order while there is room.
MARKDOWN_COLUMNS = 10


def _telling_apart(table: Table) -> list[Column]:
    """The fewest setting columns, chosen greedily in column order, whose values tell apart
    every pair of rows the settings can tell apart (two rows that differ only in quantize
    must not look alike because quantize came late)."""
    settings = [column for column in table.columns if column.setting]
    values = {id(column): [cell(table, index, entry, column) for index, entry in table.rows]
              for column in settings}

    def distinct(chosen: list[Column]) -> int:
        return len(set(zip(*(values[id(column)] for column in chosen)))) if chosen else 1
    chosen: list[Column] = []
    while True:
        gains = [(distinct(chosen + [column]), -position) for position, column
                 in enumerate(settings) if column not in chosen]
        if not gains or max(gains)[0] <= distinct(chosen):
            return chosen
        chosen.append(settings[-max(gains)[1]])


def on_a_page(table: Table) -> tuple[Table, list[str]]:
    """``table`` with the columns that fit a page, and the headings of those left out (a
    setting left out is then named in each row's file line)."""
    head = next((position for position, column in enumerate(table.columns) if column.setting),
                len(table.columns))
    wanted = [*table.columns[:head], *_telling_apart(table)]
    for column in table.columns:
        if len(wanted) >= MARKDOWN_COLUMNS:
            break
        if column not in wanted:
            wanted.append(column)
    kept = [column for column in table.columns if column in wanted]
    left = [column.heading for column in table.columns if column not in wanted]
    return dataclasses.replace(table, columns=kept), left


def render_markdown(tables: list[Table], all_columns: bool = False) -> str:
    """GitHub markdown; ``all_columns``: every column, not only those that fit a page."""
    out = []
    for whole in tables:
        table, left = (whole, []) if all_columns else on_a_page(whole)
        out.append(f"**{title_of(table)}**")
        out.append("")
        common = common_line(table)
        if common:
            out += [f"Same in every row: {safe_text.markdown(common)}", ""]
        out.append("| " + " | ".join(safe_text.markdown(c.heading) for c in table.columns) + " |")
        out.append("|" + "|".join("---:" if c.numeric else "---" for c in table.columns) + "|")
        for index, entry in table.rows:
            cells = [safe_text.markdown(cell(table, index, entry, c)) for c in table.columns]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        out += [f"- {safe_text.markdown(line)}" for line in notes(table)]
        if left:
            out.append(f"- {len(left)} more columns with --all-columns: "
                       f"{safe_text.markdown(', '.join(left))}")
        out += ["", "Files:", ""]
        out += [f"- {safe_text.markdown(file_line(table, index, entry))}"
                for index, entry in table.rows]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


# Raw figures in fixed units, for CSV and JSON, in the order the report's files first had (a
# file format: never reordered), then every figure added to the table since, in the registry's
# order.
RAW_FIGURES_FIRST = ("throughput", "ci95_low", "ci95_high", "trial_count", "p50_ms", "p90_ms",
                     "p99_ms", "cv", "ttft_ms", "itl_ms", "mfu", "mbu", "accuracy",
                     "decode_kernel_ms", "decode_gap_ms", "energy_per_unit", "peak_allocated_mb",
                     "median_ms", "gbs", "tflops", "pct_of_peak", "mfu_measured", "mbu_measured")
RAW_FIGURES = RAW_FIGURES_FIRST + tuple(dict.fromkeys(
    figure.key for table in (MODEL, figures.OP, figures.NODE)
    for figure in shown_figures(table)
    if figure.key not in RAW_FIGURES_FIRST))


def _raw_row(table: Table, index: int, entry: Entry) -> dict:
    versus_ = table.versus.get(id(entry))
    return {
        "index": index, "table": table.group.table, "source": entry.source,
        "status": entry.status, "error": entry.error,
        "settings": {**entry.settings, RUN_AT: setting_value(entry, RUN_AT)},
        "unit": entry.unit or None,
        "figures": {key: entry.figures.get(key) for key in RAW_FIGURES
                    if key in entry.figures},
        "flags": list(entry.flags),
        "versus_baseline": None if versus_ is None else versus_.__dict__,
    }


def render_json(tables: list[Table]) -> str:
    document = {"tables": [{
        "table": table.group.table, "common": table.group.common,
        "varying": [name for name in table.group.varying if name != FILE],
        "baseline": None if table.baseline is None else table.index_of(table.baseline),
        "rows": [_raw_row(table, index, entry) for index, entry in table.rows],
        "notes": notes(table)} for table in tables]}
    return writing.json_text(document)


def render_csv(tables: list[Table]) -> str:
    rows = [_raw_row(table, index, entry) for table in tables for index, entry in table.rows]
    settings = list(dict.fromkeys(name for row in rows for name in row["settings"]))
    header = ["index", "table", *settings, "unit", *RAW_FIGURES, "vs_baseline", "flags",
              "status", "error", "source"]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([safe_text.csv_cell(name) for name in header])
    for row in rows:
        versus_ = row["versus_baseline"]
        writer.writerow([safe_text.csv_cell(str(value)) for value in [row["index"], row["table"],
                         *[_csv_value(row["settings"].get(name)) for name in settings],
                         row["unit"] or "",
                         *[_csv_value(row["figures"].get(key)) for key in RAW_FIGURES],
                         _csv_value(versus_["ratio"] if versus_ else None),
                         " ".join(row["flags"]), row["status"],
                         " ".join(row["error"].split()), row["source"]]])
    return buffer.getvalue()


def _csv_value(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple, dict)):
        return format_setting(value)
    return str(value)


def render(tables: list[Table], format_: str, terminal: bool = False,
           all_columns: bool = False) -> str:
    """``format_`` text, markdown, csv or json; ``terminal`` styles the text table only (the
    others are files to paste or parse, the same wherever they go); ``all_columns``: markdown
    with every column."""
    if format_ == "text":
        return render_text(tables, terminal)
    if format_ == "markdown":
        return render_markdown(tables, all_columns)
    return {"csv": render_csv, "json": render_json}[format_](tables)
