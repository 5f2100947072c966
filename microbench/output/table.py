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
ratio's interval; otherwise the ratio of the headlines alone, called that. A sweep's comparison
table takes its speedup from it too.

Renderings: aligned text for the terminal, GitHub markdown (pastes into an issue or pull request),
CSV and JSON with raw numbers in fixed units.

A sweep's own closing tables (:func:`print_comparison`: each row's rate, speedup and memory
against the first measured row, the generation and input pipeline figures where rows have them)
are laid out here too, from each row's stored result (``row.entry``), as the report reads it.

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
from typing import TextIO

from microbench.measure import stats
from microbench.platform import safe_text
from microbench.platform import text_table
from microbench.platform.errors import UsageError
from microbench.platform import progress, units, writing
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


BASELINE = "baseline"


def speed(entry: Entry) -> float | None:
    """Higher is faster: a model's throughput, an op's calls per millisecond."""
    if entry.table == MODEL:
        return entry.figures.get("throughput")
    median = entry.figures.get("median_ms")
    return 1.0 / median if median else None


def trial_verdict(baseline_trials, trials, tolerance_pct: float = DEFAULT_TOLERANCE_PCT
                  ) -> Versus:
    """Two sets of trial throughputs (two or more each) compared as ``--compare`` compares
    them: the ratio of their geometric means, its 95% interval (Welch on logs) and the
    verdict in the shared words."""
    ruled = stats.gate(baseline_trials, trials, tolerance_pct).comparison
    low, high = ruled.interval
    return Versus(ruled.ratio, low, high, ruled.verdict, ruled.text)


def versus(entry: Entry, baseline: Entry) -> Versus:
    if entry is baseline:
        return Versus(1.0, is_baseline=True)
    if not entry.measured or not baseline.measured or entry.unit != baseline.unit:
        return Versus(None)
    if len(entry.trial_values) >= 2 and len(baseline.trial_values) >= 2:
        return trial_verdict(baseline.trial_values, entry.trial_values)
    ours, theirs = speed(entry), speed(baseline)
    return Versus(ours / theirs if ours and theirs else None)


# ---------------------------------------------------------------- columns

@dataclass(frozen=True)
class Column:
    key: str                   # a setting name, or a figure key (FIGURE_KEYS)
    heading: str
    setting: bool = False
    numeric: bool = True


# Model figures in column order: key, heading ({unit} and {item} filled in), why none is known.
MODEL_FIGURES = (
    ("throughput", "throughput [{unit}]", None),
    ("ci95", "95% CI", None),
    ("trial_count", "trial count", None),
    ("p50_ms", "p50 [ms]", None),
    ("p90_ms", "p90 [ms]", None),
    ("p99_ms", "p99 [ms]", None),
    ("ttft_ms", "TTFT p50 [ms]", None),
    ("itl_ms", "ITL p50 [ms]", None),
    ("mfu", "MFU", "MFU (no datasheet peak for the device, or no FLOP count; --peak-tflops "
                   "gives a peak)"),
    ("mbu", "MBU", None),
    ("mfu_measured", "MFU (measured peak)", None),
    ("mbu_measured", "MBU (measured peak)", None),
    ("accuracy", "vs BF16 (error)", None),
    ("decode_kernel_ms", "decode kernels [ms]", None),      # the profiled decode step
    ("decode_gap_ms", "decode gaps [ms]", None),
    ("energy_per_unit", "J/{item}", "energy (no telemetry for these devices)"),
    ("peak_allocated_mb", "peak alloc [MB]", None),
)
OP_FIGURES = (
    ("median_ms", "median", None),
    ("cv", "CV", None),
    ("gbs", "GB/s", None),
    ("tflops", "FLOP/s", None),
    ("pct_of_peak", "% of peak", "% of peak (no datasheet peak for the device)"),
    ("flags", "flags", None),
)


def _figure_known(entries, key: str) -> bool:
    if key == "ci95":
        return any(e.figures.get("ci95_low") is not None for e in entries)
    if key == "trial_count":
        return any((e.figures.get("trial_count") or 1) > 1 for e in entries)
    if key == "flags":
        return any(e.flags for e in entries)
    return any(e.figures.get(key) is not None for e in entries)


def _numeric_setting(entries, name: str) -> bool:
    values = [setting_value(e, name) for e in entries if setting_value(e, name) is not None]
    return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                for v in values)


def _units(entries) -> list[str]:
    return list(dict.fromkeys(e.unit for e in entries if e.measured and e.unit))


# The headline figures, first after the row number (the versus column follows them).
HEADLINE_FIGURES = ("throughput", "ci95", "median_ms")


def _values_where_set(entries, name: str) -> set[str]:
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
    return [name for name in group.varying if name not in (RUN_AT, FILE)
            and (name in HEADLINE_SETTINGS or len(_values_where_set(group.entries, name)) > 1)]


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
    settings = [Column(name, name, setting=True, numeric=_numeric_setting(entries, name))
                for name in setting_columns(group)]
    unknown = []
    units_ = _units(entries)
    unit = units_[0] if len(units_) == 1 else "unit"
    item = unit.split("/")[0].removesuffix("s") if len(units_) == 1 else "unit"
    figures = MODEL_FIGURES if group.table == MODEL else OP_FIGURES
    for key, heading, why_unknown in figures:
        if key not in HEADLINE_FIGURES and settings is not None:
            columns += settings                     # after the headline and its interval
            settings = None
        if key == "accuracy":
            heading = f"vs {accuracy_reference(entries) or 'its reference'} (error)"
        if _figure_known(entries, key) or key in ("throughput", "median_ms"):
            columns.append(Column(key, heading.format(unit=unit, item=item),
                                  numeric=key != "flags"))
        elif why_unknown and any(e.measured for e in entries):
            unknown.append(why_unknown)
    columns += settings or []
    if len(units_) > 1 and group.table == MODEL:         # each cell then names its unit
        renamed = {"throughput": "throughput", "energy_per_unit": "energy"}
        columns = [Column(c.key, renamed[c.key]) if c.key in renamed else c for c in columns]
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

def format_setting(value) -> str:
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


def _figure_cell(table: Table, entry: Entry, key: str) -> str:
    figures = entry.figures
    if key == "versus":
        found = table.versus[id(entry)]
        if found.is_baseline:
            return BASELINE
        if found.ratio is None:
            return "-"
        if found.text is None:
            return f"{found.ratio:.2f}x"
        return f"{found.ratio:.2f}x {found.text}"
    if key == "ci95":
        low, high = figures.get("ci95_low"), figures.get("ci95_high")
        return "-" if low is None else f"[{units.rate(low)}, {units.rate(high)}]"
    if key == "trial_count":
        return str(figures.get("trial_count") or 1)
    if key in ("mfu", "mbu", "mfu_measured", "mbu_measured", "cv", "pct_of_peak", "accuracy"):
        value = figures.get(key)
        if value is None:
            return "-"
        if key == "accuracy" and accuracy_reference(table.group.entries) is None \
                and entry.accuracy_reference:          # the heading names no one reference
            return f"{units.percent(value)} vs {entry.accuracy_reference}"
        return f"{value:.1f}%" if key == "pct_of_peak" else units.percent(value)
    if key == "flags":
        return " ".join(entry.flags)
    if key in ("median_ms", "tflops") and figures.get(key):
        # Each in the unit that reads best (5.60 us, 798 MFLOP/s); CSV and JSON keep ms, TFLOP/s.
        value = figures[key]
        return units.duration_ms(value) if key == "median_ms" else \
            units.flops(value * 1e12, per_second=True)
    text = _number(figures.get(key))
    if len(_units(table.group.entries)) > 1 and text != "-":
        if key == "throughput":
            text = f"{text} {entry.unit}"
        elif key == "energy_per_unit":
            text = f"{text} J/{entry.unit.split('/')[0].removesuffix('s')}"
    if key == "p50_ms" and "noisy" in entry.flags and text != "-":
        text += "*"
    if key == "energy_per_unit" and "estimated energy" in entry.flags and text != "-":
        text = "~" + text
    return text


def cell(table: Table, index: int, entry: Entry, column: Column) -> str:
    """A cell as the text and markdown tables show it."""
    if column.key == "#":
        return str(index)
    if column.setting:
        return format_setting(setting_value(entry, column.key))
    if not entry.measured:
        first_figure = next(c for c in table.columns if not c.setting and c.key != "#")
        return entry.status if column is first_figure else ""
    return _figure_cell(table, entry, column.key)


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
                     f"headlines alone, not a significance test")
    for index, entry in table.rows:
        if entry.note:
            lines.append(f"#{index}: {entry.note}")
    if table.unknown:
        lines.append(f"not known for any row: {'; '.join(table.unknown)}")
    for index, entry in table.rows:
        if not entry.measured and entry.error:
            lines.append(f"#{index} {entry.status}: {' '.join(entry.error.split())}")
    return lines


# ---------------------------------------------------------------- renderings

def title_of(table: Table) -> str:
    noun = "model results" if table.group.table == MODEL else "op bench results"
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


def render_markdown(tables: list[Table]) -> str:
    out = []
    for table in tables:
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
        out += ["", "Files:", ""]
        out += [f"- {safe_text.markdown(file_line(table, index, entry))}"
                for index, entry in table.rows]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


# Raw figures in fixed units, for CSV and JSON: model, then op bench.
RAW_FIGURES = ("throughput", "ci95_low", "ci95_high", "trial_count", "p50_ms", "p90_ms", "p99_ms",
               "cv", "ttft_ms", "itl_ms", "mfu", "mbu", "accuracy", "decode_kernel_ms",
               "decode_gap_ms", "energy_per_unit", "peak_allocated_mb", "median_ms", "gbs",
               "tflops", "pct_of_peak", "mfu_measured", "mbu_measured")


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


def _csv_value(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple, dict)):
        return format_setting(value)
    return str(value)


def render(tables: list[Table], format_: str, terminal: bool = False) -> str:
    """``format_`` text, markdown, csv or json; ``terminal`` styles the text table only (the
    others are files to paste or parse, the same wherever they go)."""
    if format_ == "text":
        return render_text(tables, terminal)
    return {"markdown": render_markdown, "csv": render_csv, "json": render_json}[format_](tables)


# ---------------------------------------------------------------- a sweep's closing tables

def _numeric(heading: str, width: int = 0) -> text_table.Column:
    """A right-aligned column of a sweep's closing tables."""
    return text_table.Column(heading, numeric=True, width=width)


def _rate_heading(entries: list[Entry]) -> str:
    """The rate column's heading: the unit the rows count in (img/s as the older tool printed
    it for images), or ``rate`` with the unit in each cell where the rows count in different
    units (a sweep over an image and a language model)."""
    units = {entry.unit for entry in entries}
    if len(units) != 1:
        return "rate"
    unit = units.pop()
    return "img/s" if unit == "images/s" else unit


def _rate_cell(entry: Entry, heading: str) -> str:
    rate = f"{entry.figures['throughput']:.2f}"
    return f"{rate} {entry.unit}" if heading == "rate" else rate


def _speedup_cell(entry: Entry, reference: Entry) -> str:
    """The speedup as the report computes it (:func:`versus`): rows of different units are not
    compared ("-")."""
    ratio = versus(entry, reference).ratio
    return "-" if ratio is None else f"{ratio:.2f}x"


def _memory_cells(entry: Entry, reference: Entry) -> tuple[str, str]:
    memory, base = (e.figures.get("peak_allocated_mb") for e in (entry, reference))
    if memory is None:
        return "n/a", ""
    change = f"{memory / base - 1:+.0%}" if base else ""     # unknown or zero: no ratio
    return f"{memory:.0f}", change


def comparison_cells(rows: list) -> tuple[list[text_table.Column], list[tuple[str, ...]]]:
    """The sweep table, from each row's stored result (``row.entry``, as the report reads it):
    each row's rate in its unit, its speedup and its peak memory against the first successful
    row (a failed row shows its status where the rate would be)."""
    measured = [row.entry for row in rows if row.entry is not None]
    reference = measured[0] if measured else None
    heading = _rate_heading(measured)
    columns = [_numeric("#", 3), text_table.Column("configuration"), _numeric(heading, 10),
               _numeric("speedup", 8), _numeric("peak MB", 9), _numeric("memory", 8)]
    accuracy = any(entry.accuracy_kind for entry in measured)
    if accuracy:
        versus = accuracy_reference(measured)
        columns.append(text_table.Column(f"accuracy vs {versus or 'its reference'}"))
    cells = []
    for index, row in enumerate(rows, 1):
        entry = row.entry
        if entry is None:
            cells.append((str(index), row.label(), row.status, "", "", "")
                         + (("",) if accuracy else ()))
            continue
        cells.append((str(index), row.label(), _rate_cell(entry, heading),
                      _speedup_cell(entry, reference), *_memory_cells(entry, reference))
                     + ((accuracy_cell(entry, versus is not None),) if accuracy else ()))
    return columns, cells


def print_comparison(rows: list, out: TextIO) -> None:
    reference = next((index for index, row in enumerate(rows, 1) if row.entry is not None), "-")
    print("", file=out)
    print(f"Sweep comparison (speedup and memory change against row {reference})", file=out)
    columns, cells = comparison_cells(rows)
    out.write(text_table.render(columns, cells, terminal=progress.is_terminal(out)))
    out.flush()
    for line in slower_than_bf16(rows):
        print(line, file=out)
    print_data_table(rows, out)
    print_generation_table(rows, out)


# The settings a generate sweep may vary besides the batch (its stored names, store.entry):
# each that differs among the rows gets a column, so that two rows of one batch (a quantize
# sweep's none and int8wo) can be told apart.
GENERATION_SETTINGS = ("network", "precision", "quantize", "attention", "seq len", "compile",
                       "prompt", "generated")


def generation_cells(rows: list) -> tuple[list[text_table.Column], list[tuple[str, ...]]]:
    """Generate rows: what differs between them, decode tokens/s of the whole batch,
    inter-token latency p50 and p99, time to first token and MBU, each from that row's own
    timed samples."""
    # The row's result as its file holds it and the report reads it (drivers.sweep.Row).
    generated = [(index, row.entry) for index, row in enumerate(rows, 1)
                 if row.entry is not None and row.entry.figures.get("itl_ms") is not None]
    shown = [name for name in GENERATION_SETTINGS
             if len({format_setting(entry.settings.get(name)) for _, entry in generated}) > 1]
    columns = [_numeric("#", 3), *(text_table.Column(name) for name in shown),
               _numeric("batch"), _numeric("decode tok/s", 12), _numeric("ITL p50 ms"),
               _numeric("ITL p99 ms"), _numeric("TTFT p50 ms"), _numeric("MBU")]
    cells = []
    for index, entry in generated:
        figures = entry.figures
        rate, mbu = figures.get("decode_tokens_per_s"), figures.get("decode_mbu")
        cells.append((str(index), *(format_setting(entry.settings.get(name)) for name in shown),
                      format_setting(entry.settings.get("batch")),
                      "-" if rate is None else f"{rate:,.1f}", f"{figures['itl_ms']:.3f}",
                      f"{figures['itl_p99_ms']:.3f}", f"{figures['ttft_ms']:.3f}",
                      "-" if mbu is None else units.percent(mbu)))
    return columns, cells


def print_generation_table(rows: list, out: TextIO) -> None:
    columns, cells = generation_cells(rows)
    if not cells:
        return
    print("", file=out)
    print("Generation (decode tok/s: tokens the decode steps generated per second, the whole "
          "batch; ITL: inter-token latency; TTFT: time to first token)", file=out)
    out.write(text_table.render(columns, cells, terminal=progress.is_terminal(out)))
    out.flush()


def accuracy_cell(entry: Entry, named_in_heading: bool = True) -> str:
    """A reduced-precision row's distance from BF16, short, for a table's cell ("-" for a row
    without one, the BF16 reference among them)."""
    if not entry.accuracy_kind:
        return "-"
    value = entry.figures.get("accuracy")
    if value is None:
        return "not measured"
    versus = f" vs {entry.accuracy_reference}" if entry.accuracy_reference else ""
    if entry.accuracy_kind == "loss":
        return f"loss diff {value:.2%}" + ("" if named_in_heading else versus)
    agreement = entry.figures.get("accuracy_agreement")
    return (f"err {value:.2%}" + ("" if agreement is None else f", agree {agreement:.1%}")
            + ("" if named_in_heading else versus))


def slower_than_bf16(rows: list) -> list[str]:
    """A line for each quantized or FP8 row slower than the row without it (the same other
    settings): torchao's kernels do not beat BF16 everywhere (int8 weight-only decode on an
    H100, for one), and a reader should not have to spot that in the ratios."""
    lines = []
    for row in rows:
        if row.entry is None or not row.entry.accuracy_kind:    # not FP8 or quantized
            continue
        config = row.spec.config
        plain = dataclasses.replace(config, quantize="none") if config.quantize != "none" \
            else dataclasses.replace(config, precision="amp-bf16")
        base = next((other for other in rows if other.entry is not None
                     and dataclasses.replace(other.spec.config, fp8_recipe=config.fp8_recipe)
                     == plain), None)
        if base is None:
            continue
        ratio = row.entry.figures["throughput"] / base.entry.figures["throughput"]
        if ratio < 1:
            lines.append(f"Note: {row.label()} ran slower than {base.label()} here "
                         f"({ratio:.2f}x): torchao's "
                         f"{config.quantize if config.quantize != 'none' else 'FP8'} kernels "
                         f"did not beat BF16 on this device at this size")
    return lines


def print_data_table(rows: list, out: TextIO) -> None:
    """Rows fed by an input pipeline: what it delivered beside what each side does alone."""
    # Each row's result as its file holds it and the report reads it (drivers.sweep.Row).
    fed = [(index, row.entry) for index, row in enumerate(rows, 1)
           if row.entry is not None and row.entry.data_unit]
    if not fed:
        return
    first = fed[0][1]
    per_device = (first.settings.get("devices") or 1) > 1
    print("", file=out)
    print(f"Input pipeline ({first.data_unit}{' per device' if per_device else ''}"
          f"; wait: share of a step spent waiting for the batch, median and p99, and of the "
          f"whole run)", file=out)
    columns = [_numeric("#", 3), _numeric("workers"), _numeric("decode"),
               _numeric("pipeline", 10), _numeric("loader", 10), _numeric("model", 10),
               _numeric("kept"), _numeric("wait p50"), _numeric("wait p99"), _numeric("wait run"),
               text_table.Column("verdict")]
    cells = []
    for index, entry in fed:
        data = entry.figures
        cells.append((str(index), str(_whole(data["data_workers"])),
                       str(entry.settings.get("decode")), _share(data["pipeline_per_s"], ".2f"),
                       _share(data["loader_alone_per_s"], ".2f"),
                       _share(data["model_alone_per_s"], ".2f"), _share(data["data_kept"], ".0%"),
                       _share(data["wait_share_median"], ".1%"),
                       _share(data["wait_share_p99"], ".1%"),
                       _share(data["wait_share"], ".1%"), entry.data_verdict))
    out.write(text_table.render(columns, cells, terminal=progress.is_terminal(out)))
    out.flush()


def _whole(value):
    """A count the document stores as a number (4, not 4.0)."""
    return int(value) if value is not None and float(value).is_integer() else value


def _share(value, spec: str) -> str:
    """A figure of the data table; n/a where the document does not know it."""
    return "n/a" if value is None else format(value, spec)
