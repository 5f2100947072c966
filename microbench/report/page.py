"""``microbench-report --html FILE``: the report as one self-contained web page.

Everything the page shows is inside the file: the tables as HTML, the chart as a PNG in a
``data:`` URI, the style in a ``<style>`` element; no script, no font, no link to anything
outside, so it opens the same from an e-mail, a CI artifact or a machine without network. Every
text from the results is escaped.

Example::

    page = html_page(tables, found.lines, chart_png=png_bytes, title="nightly resnet50")
    writing.write_whole("report.html", page)
"""
from __future__ import annotations

import base64
import datetime

from microbench import __version__
from microbench.platform import safe_text
from microbench.output.table import Table, cell, common_line, file_line, notes, title_of

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


def _classes(column, position: int, pinned: int) -> str:
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


def html_page(tables: list[Table], read_lines: list[str], chart_png: bytes | None = None,
              chart_note: str | None = None, title: str = "Benchmark results") -> str:
    """The whole page. ``read_lines``: what reading the files said (skipped, older versions);
    ``chart_png``: the chart to embed; ``chart_note``: why there is none, when there is none."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows = sum(len(table.rows) for table in tables)
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{safe_text.html(title)}</title>", f"<style>{_STYLE}</style>", "</head>",
           "<body>", f"<h1>{safe_text.html(title)}</h1>",
           f'<p class="meta">{rows} row{"s" if rows != 1 else ""}; made by microbench-report '
           f"{safe_text.html(__version__)} on {stamp}</p>"]
    for table in tables:
        out += _table_html(table)
    if chart_png is not None:
        encoded = base64.b64encode(chart_png).decode("ascii")
        out.append(f'<img class="chart" alt="chart of the results" '
                   f'src="data:image/png;base64,{encoded}">')
    elif chart_note:
        out.append(f'<p class="meta">{safe_text.html(chart_note)}</p>')
    files = [file_line(table, index, entry) for table in tables for index, entry in table.rows]
    out.append("<details><summary>Files</summary><ul>" + "".join(
        f"<li>{safe_text.html(line)}</li>" for line in files + read_lines) + "</ul></details>")
    out += ["</body>", "</html>", ""]
    return "\n".join(out)
