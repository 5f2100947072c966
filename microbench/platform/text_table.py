"""Tables on the console, drawn by rich: the sweep comparison, the op bench's rows and the
report command's text table all go through here.

Two renderings, one layout. Off a terminal (a pipe, a log file, CI, tests) a table is plain
text that scripts can parse and diff: no colour or escape codes, columns two spaces apart,
a line of dashes under the headings, nothing wrapped or cut whatever the width, no trailing
spaces. On a terminal the headings are bold and the table fits the terminal's width (rich
folds a cell that does not fit instead of letting the terminal break the line).

Example::

    columns = [Column("#", numeric=True), Column("configuration"), Column("img/s", numeric=True)]
    print(render(columns, [("1", "resnet50 b64", "1234.56")]), end="")

A table printed row by row as results come in (the op bench) fixes its widths first::

    rows = RowPrinter([Column("op", width=12), Column("median ms", numeric=True, width=10)])
    print(rows.header())
    print(rows.line(("add", "0.0123")))
"""
from __future__ import annotations

import io
import shutil
from dataclasses import dataclass
from typing import Iterable, Sequence

from rich import box
from rich.console import Console
from rich.table import Table

# Off a terminal: no edges, a space between columns (plus each cell's one space of right
# padding: two in all), and a line of '-' under the headings. Eight rows of four characters,
# rich's box format: top, head, head row, mid, row, foot row, foot, bottom.
_PLAIN = box.Box("    \n"
                 "    \n"
                 " -  \n"
                 "    \n"
                 "    \n"
                 "    \n"
                 "    \n"
                 "    \n", ascii=True)

# Off a terminal nothing wraps: a width no table line reaches.
_UNBOUNDED = 100_000


@dataclass(frozen=True)
class Column:
    """A column: its heading, right-aligned when ``numeric``, and at least ``width`` wide."""

    heading: str
    numeric: bool = False
    width: int = 0


def _console(terminal: bool, into: io.StringIO) -> Console:
    if terminal:
        return Console(file=into, force_terminal=True, highlight=False, markup=False,
                       width=shutil.get_terminal_size().columns, emoji=False)
    return Console(file=into, force_terminal=False, no_color=True, color_system=None,
                   highlight=False, markup=False, width=_UNBOUNDED, emoji=False)


def _table(columns: Sequence[Column], terminal: bool, show_header: bool = True) -> Table:
    table = Table(box=_PLAIN, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0),
                  show_header=show_header, header_style="bold" if terminal else None,
                  border_style="dim" if terminal else None)
    for column in columns:
        table.add_column(column.heading, justify="right" if column.numeric else "left",
                         min_width=column.width or None, no_wrap=not terminal,
                         overflow="fold")
    return table


def _text(table: Table, terminal: bool) -> str:
    captured = io.StringIO()
    _console(terminal, captured).print(table)
    lines = captured.getvalue().splitlines()
    return "\n".join(line.rstrip() for line in lines) + "\n"


# What a cell holds where its row has no value: a column of nothing else says nothing on this
# device (peak memory on the CPU, MBU without a bandwidth peak) and is left out.
EMPTY_CELLS = frozenset({"", "-", "n/a"})


def with_values(columns: Sequence[Column], rows: Sequence[Sequence[str]]
                ) -> tuple[list[Column], list[tuple[str, ...]]]:
    """``columns`` and ``rows`` without the columns in which no row has a value."""
    kept = [index for index in range(len(columns))
            if any(row[index] not in EMPTY_CELLS for row in rows)]
    return ([columns[index] for index in kept],
            [tuple(row[index] for index in kept) for row in rows])


def render(columns: Sequence[Column], rows: Iterable[Sequence[str]],
           terminal: bool = False) -> str:
    """The whole table as text ending in a newline: headings, a rule, one line per row."""
    table = _table(columns, terminal)
    for row in rows:
        table.add_row(*row)
    return _text(table, terminal)


class RowPrinter:
    """A table printed a row at a time: every line has the columns' fixed widths (a cell
    longer than its column pushes the rest of its line right, and only that line)."""

    def __init__(self, columns: Sequence[Column], terminal: bool = False):
        self.columns, self.terminal = list(columns), terminal

    def header(self) -> str:
        """The headings and the rule under them (two lines, no newline at the end)."""
        return _text(_table(self.columns, self.terminal), self.terminal).rstrip("\n")

    def line(self, cells: Sequence[str]) -> str:
        table = _table(self.columns, self.terminal, show_header=False)
        table.add_row(*cells)
        return _text(table, self.terminal).rstrip("\n")
