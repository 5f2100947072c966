"""``microbench-report --history``: the results read, as series over time (docs/history.md).

The files are read once by the report's command (:mod:`.command`: found, checked, parsed,
validated, each problem one line); here they become :func:`microbench.store.history.history`'s
series, printed as a table (:mod:`microbench.output.history_table`), drawn with ``--plot``
(:mod:`microbench.output.history_chart`) and laid out with ``--html``
(:func:`microbench.report.page.history_page`). The check comes last, once everything is
written: a series whose newest result is below its level before a confirmed slowdown by more
than ``--tolerance`` is :class:`~microbench.platform.errors.Regression`, exit 5, the code
``--compare`` gives a regression, so one CI rule reads both.

Example::

    microbench-report nightly/ --history --by label --plot history.png --html history.html
"""
from __future__ import annotations

import argparse
import sys

from microbench.output import chart, history_chart, history_table
from microbench.platform import progress, safe_text, writing
from microbench.platform.errors import BenchmarkError, Regression, UsageError
from microbench.report import page
from microbench.store.collection import Found
from microbench.store.history import History, history


def _page_chart(past: History) -> tuple[bytes | None, str | None]:
    """The page's chart as PNG, or why there is none."""
    try:
        chart.require_matplotlib()
        return history_chart.history_chart_bytes(past, "png"), None
    except chart.DrawingFailed as error:
        return None, f"No chart: {error}."
    except BenchmarkError:
        return None, "No chart: matplotlib is not installed (pip install matplotlib)."


def _regression_message(past: History, tolerance_pct: float) -> str | None:
    regressed = [series for series in past.series if series.regression is not None]
    if not regressed:
        return None
    first = regressed[0]
    others = f" (and {len(regressed) - 1} more series)" if len(regressed) > 1 else ""
    return (f"{first.title}: {history_table.regression_line(first, tolerance_pct)}{others}")


def run(args: argparse.Namespace, found: Found) -> int:
    past = history(found.entries, args.by, args.tolerance)
    if not past.series:
        raise UsageError(f"--history has no series to show: {'; '.join(past.lines)}")
    sys.stdout.write(history_table.render(past, args.format, args.tolerance,
                                          progress.is_terminal(sys.stdout)))
    sys.stdout.flush()
    failed = None
    if args.plot:
        try:
            history_chart.write_history_chart(past, args.plot)
            print(f"Chart : {safe_text.terminal(args.plot)}", file=sys.stderr)
        except chart.DrawingFailed as error:          # the page is still written
            failed = error
    if args.html:
        png, why_not = _page_chart(past)
        writing.write_whole(args.html, page.history_page(past, args.tolerance, found.lines,
                                                         png, why_not, title=args.title))
        print(f"Page  : {safe_text.terminal(args.html)}", file=sys.stderr)
    if failed is not None:
        raise failed
    message = _regression_message(past, args.tolerance)
    if message is not None:
        raise Regression(message)
    return 0
