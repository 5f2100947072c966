"""``microbench-report --html FILE``: the report (or, with ``--history``, the history) as one
self-contained web page.

Everything the page shows is inside the file: the tables as HTML, the chart as a PNG in a
``data:`` URI, the style in a ``<style>`` element; no script, no font, no link to anything
outside, so it opens the same from an e-mail, a CI artifact or a machine without network. Every
text from the results is escaped.

Example::

    page = html_page(tables, found.lines, chart_png=png_bytes, title="nightly resnet50")
    writing.write_whole("report.html", page)
    page = history_page(past, 5.0, found.lines, chart_png=png_bytes)     # --history
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import base64
import datetime

from microbench import __version__
from microbench.platform import safe_text
from microbench.output import history_table
from microbench.output.table import Table, cell, common_line, file_line, notes, title_of
from microbench.store.history import History, Series

if TYPE_CHECKING:
    from microbench.platform.text_table import Column

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em;
       color: #1b1b1b; max-width: 110em; }
h1 { font-size: 1.4em; margin-bottom: 0.2em; }
h2 { font-size: 1.1em; margin-top: 1.6em; }
p.meta, p.common { color: #555; margin: 0.3em 0; }
div.wide { overflow-x: auto; }
th.pin0, td.pin0, th.pin1, td.pin1 { position: sticky; background: #fff; z-index: 1; }
th.pin0, th.pin1 { background: #f3f3f3; }
th.pin0, td.pin0 { left: 0; min-width: 3.2em; max-width: 3.2em; box-sizing: border-box; }
th.pin1, td.pin1 { left: 3.2em; box-shadow: 1px 0 0 #ccc; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.6em 0; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25em 0.7em; white-space: nowrap; }
th { background: #f3f3f3; text-align: left; }
td.number, th.number { text-align: right; font-variant-numeric: tabular-nums; }
tr.failed td { color: #a31515; }
ul.notes { color: #444; font-size: 0.9em; }
img.chart { max-width: 100%; border: 1px solid #eee; margin-top: 0.6em; }
details { margin-top: 1.2em; color: #444; font-size: 0.9em; }
p.regression { color: #a31515; font-weight: bold; }
"""


# What a reader looks for first in a row: its name, its throughput (and interval), and a
# language model's latencies. On the page they come first and the row number and name stay
# pinned while the rest scrolls sideways: a 26-column table at 1,400 px kept TTFT and ITL off
# screen (issue 45).
_NAME = "network"
_HEADLINE = ("throughput", "ci95", "ttft_ms", "itl_ms", "median_ms")


def page_columns(table: Table) -> list:
    """The table's columns in the page's order: the row number, the name, the headline
    figures, then the rest in the table's own order."""
    first = [column for key in ("#", _NAME, *_HEADLINE)
             for column in table.columns if column.key == key]
    return first + [column for column in table.columns if column not in first]


def _classes(column: Column, position: int, pinned: int) -> str:
    names = (["number"] if column.numeric else []) + \
        ([f"pin{position}"] if position < pinned else [])
    return f' class="{" ".join(names)}"' if names else ""


def _table_html(table: Table) -> list[str]:
    out = [f"<h2>{safe_text.html(title_of(table))}</h2>"]
    common = common_line(table)
    if common:
        out.append(f'<p class="common">Same in every row: {safe_text.html(common)}</p>')
    columns = page_columns(table)
    pinned = 2 if len(columns) > 1 and columns[1].key == _NAME else 1
    out.append('<div class="wide"><table>')
    out.append("<thead><tr>" + "".join(
        f'<th{_classes(c, position, pinned)}>{safe_text.html(c.heading)}</th>'
        for position, c in enumerate(columns)) + "</tr></thead>")
    out.append("<tbody>")
    for index, entry in table.rows:
        cells = "".join(
            f'<td{_classes(c, position, pinned)}>'
            f'{safe_text.html(cell(table, index, entry, c))}</td>'
            for position, c in enumerate(columns))
        row_class = "" if entry.measured else ' class="failed"'
        out.append(f"<tr{row_class} title=\"{safe_text.html(entry.source, quote=True)}\">"
                   f"{cells}</tr>")
    out.append("</tbody></table></div>")
    lines = notes(table)
    if lines:
        out.append('<ul class="notes">' + "".join(f"<li>{safe_text.html(line)}</li>"
                                                  for line in lines) + "</ul>")
    return out


def _head(title: str, meta: str) -> list[str]:
    return ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{safe_text.html(title)}</title>", f"<style>{_STYLE}</style>", "</head>",
            "<body>", f"<h1>{safe_text.html(title)}</h1>",
            f'<p class="meta">{safe_text.html(meta)}; made by microbench-report '
            f"{safe_text.html(__version__)} on {_stamp()}</p>"]


def _stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _chart(chart_png: bytes | None, chart_note: str | None, alt: str) -> list[str]:
    if chart_png is not None:
        encoded = base64.b64encode(chart_png).decode("ascii")
        return [f'<img class="chart" alt="{alt}" src="data:image/png;base64,{encoded}">']
    return [f'<p class="meta">{safe_text.html(chart_note)}</p>'] if chart_note else []


def _details(summary: str, lines: list[str]) -> str:
    return (f"<details><summary>{summary}</summary><ul>" + "".join(
        f"<li>{safe_text.html(line)}</li>" for line in lines) + "</ul></details>")


def html_page(tables: list[Table], read_lines: list[str], chart_png: bytes | None = None,
              chart_note: str | None = None, title: str = "Benchmark results") -> str:
    """The whole page. ``read_lines``: what reading the files said (skipped, older versions);
    ``chart_png``: the chart to embed; ``chart_note``: why there is none, when there is none."""
    rows = sum(len(table.rows) for table in tables)
    out = _head(title, f"{rows} row{'s' if rows != 1 else ''}")
    for table in tables:
        out += _table_html(table)
    out += _chart(chart_png, chart_note, "chart of the results")
    files = [file_line(table, index, entry) for table in tables for index, entry in table.rows]
    out += [_details("Files", files + read_lines), "</body>", "</html>", ""]
    return "\n".join(out)


def _series_html(series: Series, tolerance_pct: float) -> list[str]:
    out = [f"<h2>{safe_text.html(history_table.heading(series))}</h2>"]
    line = history_table.regression_line(series, tolerance_pct)
    if line:
        out.append(f'<p class="regression">{safe_text.html(line)}</p>')
    if not series.steps:
        return out
    columns = history_table.COLUMNS
    out.append('<div class="wide"><table><thead><tr>' + "".join(
        f'<th{_classes(column, position, 0)}>{safe_text.html(column.heading)}</th>'
        for position, column in enumerate(columns)) + "</tr></thead><tbody>")
    for row in history_table.change_rows(series):
        out.append("<tr>" + "".join(
            f'<td{_classes(column, position, 0)}>{safe_text.html(text)}</td>'
            for position, (column, text) in enumerate(zip(columns, row))) + "</tr>")
    out.append("</tbody></table></div>")
    out.append('<ul class="notes">' + "".join(
        f"<li>{safe_text.html(note)}</li>" for note in history_table.notes(series)) + "</ul>")
    return out


def history_page(past: History, tolerance_pct: float, read_lines: list[str],
                 chart_png: bytes | None = None, chart_note: str | None = None,
                 title: str = "Benchmark results") -> str:
    """``--history --html``: each series with its changes, the chart, and what was read."""
    results = sum(len(series.entries) for series in past.series)
    out = _head(title, f"{len(past.series)} series of {results} results over time")
    for series in past.series:
        out += _series_html(series, tolerance_pct)
    out += _chart(chart_png, chart_note, "throughput over time with the changes marked")
    out += [_details("Notes and files read", past.lines + read_lines), "</body>", "</html>",
            ""]
    return "\n".join(out)
