"""``microbench-report``: many result files as one table (and a chart, and a web page).

    microbench-report results/
    microbench-report results/ nightly/ --baseline precision=fp32 --format markdown
    microbench-report results/sweep_20261124T203708Z.json --plot batch.png --html report.html
    microbench-report nightly/ --history --plot history.png --tolerance 5     # docs/history.md
    python3 -m microbench.report old.json new.json --baseline old.json

Reads result JSONs of every version this tool wrote (and the older tool's, and the op bench's),
groups the rows by the settings that differ and prints one table: the settings that vary, then
throughput with its interval where there are trials, latency percentiles, MFU and MBU, energy,
peak memory, and with ``--baseline`` each row's speed against one row. The table goes to
standard output; what reading the files said (a file skipped, an older version read) goes to
standard error, one line each.

With ``--history`` (:mod:`.history_view`): each run identity's results over time, the changes
of speed confirmed beyond noise, and what else changed at each.

Exit codes: 0 a table was printed (files may have been skipped, each named); 2 usage: a path that
is missing, not a regular file or directory (a FIFO, a device), larger than a result can be, a
directory without results, no readable result at all, a baseline that names no row or several;
4 matplotlib (--plot) or jsonschema missing, or no space to write the chart or page; 5 with
--history, a series whose newest result is below its level before a confirmed slowdown by more
than --tolerance (after everything was written); 130 Ctrl-C,
141 the reader of standard output left, 143 SIGTERM. Nothing here imports torch or the code that
runs a benchmark (only microbench.settings.config's setting schema, for the settings' flag names), so
reading results does not wait for torch's imports.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import argparse
import os
import sys

from microbench import __version__
from microbench.platform import process, safe_text
from microbench.platform import progress
from microbench.settings.argtypes import OneLineParser, finite_float, path_text
from microbench.platform.errors import BenchmarkError, UsageError
from microbench.measure.stats import DEFAULT_TOLERANCE_PCT
from microbench.output import chart, history_table, table
from microbench.report import history_view, page
from microbench.store import collection
from microbench.store.history import BY_TIME, ORDERS
from microbench.platform import writing

if TYPE_CHECKING:
    from microbench.output.table import Table


DEFAULT_TITLE = "Benchmark results"


class _Parser(OneLineParser):
    """Usage errors as one line, exit 2, with the value typed shown safely (OneLineParser)."""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="microbench-report",
        description="Show many benchmark result files as one table: the settings that differ, "
                    "throughput with its interval, latency percentiles, MFU, energy and the "
                    "ratio to a baseline row.")
    parser.add_argument("paths", nargs="+", type=path_text, metavar="FILE_OR_DIR",
                        help="result JSONs (a run's, a sweep's, the op bench's), or directories "
                             "searched for *.json")
    parser.add_argument("--format", choices=table.FORMATS, default="text",
                        help="text for the terminal, markdown for an issue or pull request, "
                             "csv or json with raw numbers (default: text)")
    parser.add_argument("--all-columns", action="store_true",
                        help=f"with --format markdown, every column (default: "
                             f"{table.MARKDOWN_COLUMNS}, which fit a page: the headline, the "
                             f"settings that tell the rows apart, then the others; the rest are "
                             f"named under the table)")
    parser.add_argument("--baseline", metavar="ROW",
                        help="the row the others are compared with: its number in the table, "
                             "its result file, or SETTING=VALUE[,SETTING=VALUE...] naming one row "
                             "(e.g. precision=fp32,batch=64) (default: none)")
    parser.add_argument("--plot", type=path_text, metavar="FILE",
                        help="draw --metric across the setting that varies, with error bars; "
                             "the suffix names the format (.png, .svg, .pdf)")
    parser.add_argument("--metric", choices=tuple(chart.METRICS),
                        help="what --plot and the page's chart draw (default: throughput for "
                             "model results, latency for op bench results)")
    parser.add_argument("--x", metavar="SETTING",
                        help="the setting along the chart's axis (default: in each panel, the "
                             "setting that varies most among its rows, a number first, e.g. "
                             "batch)")
    parser.add_argument("--html", type=path_text, metavar="FILE",
                        help="write the tables and the chart as one self-contained web page")
    parser.add_argument("--title", default=DEFAULT_TITLE,
                        help=f"the --html page's title (default: {DEFAULT_TITLE})")
    history = parser.add_argument_group("results over time (docs/history.md)")
    history.add_argument("--history", action="store_true",
                         help="each run identity's results in order, with the changes of "
                              "speed confirmed beyond noise and what else changed there; "
                              "exit 5 when a series' newest result is below its level before "
                              "a confirmed slowdown by more than --tolerance")
    history.add_argument("--by", choices=ORDERS, default=BY_TIME,
                         help="with --history: order each series by when each run ran, or "
                              "by the --label each run was given (default: time)")
    history.add_argument("--tolerance", type=finite_float(0, 100, low_inclusive=True),
                         default=DEFAULT_TOLERANCE_PCT, metavar="PCT",
                         help="with --history: the smallest slowdown, in percent, that fails "
                              f"the check (default: {DEFAULT_TOLERANCE_PCT:g})")
    parser.add_argument("--version", action="version",
                        version=f"microbench-report {__version__}")
    return parser


def _check_history_flags(args: argparse.Namespace) -> None:
    """--history's own flags only with it, and the table's flags only without it."""
    if args.history:
        for flag, value in (("--baseline", args.baseline), ("--metric", args.metric),
                            ("--x", args.x)):
            if value is not None:
                raise UsageError(f"{flag} chooses what the table or its chart shows; --history "
                                 f"shows each series over time: leave {flag} out")
        if args.format not in history_table.FORMATS:
            raise UsageError(f"--history writes {', '.join(history_table.FORMATS)}; not "
                             f"--format {args.format}")
        if args.all_columns:          # the history's tables leave no column out to add
            raise UsageError("--all-columns widens the report's markdown table; --history's "
                             "tables always have every column: leave --all-columns out")
        return
    for flag, given in (("--by", args.by != BY_TIME),
                        ("--tolerance", args.tolerance != DEFAULT_TOLERANCE_PCT)):
        if given:
            raise UsageError(f"{flag} applies to --history: give --history with it")


def _check_outputs(args: argparse.Namespace) -> None:
    """Output paths checked before any result is read, and no flag given that would not take
    effect."""
    _check_history_flags(args)
    if args.plot is None and args.html is None:
        for flag, value in (("--metric", args.metric), ("--x", args.x)):
            if value is not None:
                raise UsageError(f"{flag} chooses what the chart draws: give --plot FILE or "
                                 f"--html FILE with it")
    if args.html is None and args.title != DEFAULT_TITLE:
        raise UsageError("--title names the --html page: give --html FILE with it")
    if args.all_columns and args.format != "markdown":
        raise UsageError("--all-columns widens the markdown table (the others have every "
                         "column): give --format markdown with it")
    if args.plot is not None:
        chart.check_path(args.plot, "--plot")
    if args.html is not None:
        writing.check_target(args.html, "--html")
    if args.plot and args.html and os.path.abspath(args.plot) == os.path.abspath(args.html):
        raise UsageError("--plot and --html name the same file: name two")


def _same_file(one: str, other: str) -> bool:
    if os.path.realpath(one) == os.path.realpath(other):
        return True
    try:
        return os.path.samefile(one, other)                  # a hard link
    except OSError:
        return False


def _check_outputs_are_not_inputs(args: argparse.Namespace, files: list[str]) -> None:
    """No output replaces a file this report reads (``microbench-report d --html d/a.json``
    would overwrite one of its own inputs): refused before anything is read or written."""
    for flag, path in (("--html", args.html), ("--plot", args.plot)):
        if path is None:
            continue
        for read in files:
            if _same_file(path, read):
                raise UsageError(f"{flag} {path} is one of the result files this report "
                                 f"reads ({read}): name another file")


def _page_chart(tables: list[Table], args: argparse.Namespace) -> tuple[bytes | None, str | None]:
    """The page's chart as PNG, or why there is none."""
    try:
        chart.require_matplotlib()
    except BenchmarkError:
        return None, "No chart: matplotlib is not installed (pip install matplotlib)."
    plotted, metric = chart.plotted_table(tables, args.metric)
    if len(plotted.rows) < 2:
        return None, None
    empty = chart.nothing_drawn(plotted, metric)
    if empty is not None:
        return None, f"No chart: {empty}."
    try:
        return chart.chart_bytes(plotted, metric, args.x, "png"), None
    except DrawingFailed as error:
        return None, f"No chart: {error}."


# What matplotlib raises on text or data it cannot draw (a layout, a parser, a font).
DrawingFailed = chart.DrawingFailed


def run(args: argparse.Namespace) -> int:
    _check_outputs(args)
    inputs = collection.input_files(args.paths)
    _check_outputs_are_not_inputs(args, inputs.files)
    found = collection.read(inputs)
    for line in found.lines:
        print(safe_text.terminal(line), file=sys.stderr)
    if not found.entries:
        raise UsageError(f"no result to report: none of the {len(inputs.files)} file(s) read "
                         f"is a result of this tool (see the lines above)")
    if args.history:
        return history_view.run(args, found)
    tables = table.build_tables(collection.group_entries(found.entries), args.baseline)
    if args.plot or args.html:                # a wrong --metric or --x: before any output
        plotted, metric = chart.plotted_table(tables, args.metric)
        chart.choose_x(plotted, args.x)
        empty = chart.nothing_drawn(plotted, metric) if args.plot else None
        if empty is not None:
            raise UsageError(f"--plot would draw nothing: {empty}; choose another --metric")
    terminal = progress.is_terminal(sys.stdout)
    sys.stdout.write(table.render(tables, args.format, terminal, args.all_columns))
    sys.stdout.flush()
    # Every file written is named, on standard error: standard output may be CSV or JSON.
    failed = None
    if args.plot:
        try:
            chart.write_chart(plotted, metric, args.x, args.plot)
            print(f"Chart : {safe_text.terminal(args.plot)}", file=sys.stderr)
        except chart.DrawingFailed as error:          # the page is still written
            failed = error
    if args.html:
        png, why_not = _page_chart(tables, args)
        writing.write_whole(args.html, page.html_page(tables, found.lines, png, why_not,
                                                      title=args.title))
        print(f"Page  : {safe_text.terminal(args.html)}", file=sys.stderr)
    if failed is not None:
        raise failed
    return 0


def main(argv: list[str] | None = None) -> int:
    return process.command(lambda: run(build_parser().parse_args(argv)))
