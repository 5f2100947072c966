"""A sweep's closing tables: each row's rate, speedup and memory against the first measured row
(:func:`print_comparison`), then, where rows have them, the input pipeline's figures and
generation's.

Each row is read from its stored result (``row.entry``, :mod:`microbench.store.entry`), as
``microbench-report`` reads it, and its speedup is the report's (:func:`~.table.versus`), so a
sweep and a report over its files never disagree. The figures are the registry's
(:mod:`microbench.store.figures`), by key; a figure the registry gives a ``sweep`` heading gets
a column of the comparison table.

Example::

    print_comparison(rows, sys.stdout)          # after the last row (drivers/runner.py)
"""
from __future__ import annotations

import dataclasses
from typing import Protocol, Sequence, TextIO

from microbench.platform import progress, text_table, units
from microbench.store import figures
from microbench.store.entry import Entry, accuracy_reference
from microbench.output.table import format_setting, versus
from microbench.platform.environment import DeviceInfo
from microbench.plan.spec import RunSpec


class SweptRow(Protocol):
    """What the closing tables and ``--plot`` read of a sweep's row (``drivers.sweep.Row``):
    its configuration, its stored result as the report reads it (None: it failed), and why it
    failed."""

    @property
    def spec(self) -> RunSpec: ...

    @property
    def entry(self) -> Entry | None: ...

    @property
    def env(self) -> DeviceInfo | None: ...

    @property
    def failed(self) -> bool: ...

    @property
    def status(self) -> str: ...

    def label(self) -> str: ...


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


# After a speedup the noise does not tell from 1, and the line under the table that says so.
IN_NOISE_MARK = "*"
IN_NOISE_LEGEND = ("*: within noise: the speedup is not told apart from 1 by the rows' own noise "
                   "(with trials, its 95% interval holds 1; with one trial a side, it lies inside "
                   "the band their iteration spread allows); not a change")


def _speedup_cell(entry: Entry, reference: Entry) -> str:
    """The speedup as the report computes it (:func:`versus`), marked where it lies within the
    noise: rows of different units are not compared ("-")."""
    found = versus(entry, reference)
    if found.ratio is None:
        return "-"
    return f"{found.ratio:.2f}x" + (IN_NOISE_MARK if found.in_noise else "")


def _memory_cells(entry: Entry, reference: Entry) -> tuple[str, str]:
    memory, base = (e.figures.get("peak_allocated_mb") for e in (entry, reference))
    if memory is None:
        return "n/a", ""
    change = f"{memory / base - 1:+.0%}" if base else ""     # unknown or zero: no ratio
    return f"{memory:.0f}", change


def comparison_cells(rows: Sequence[SweptRow]
                     ) -> tuple[list[text_table.Column], list[tuple[str, ...]]]:
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
    # The registry's figures with a sweep column (figures.FIGURES: ``sweep``) some row knows.
    swept = [figure for figure in figures.swept()
             if any(entry.figures.get(figure.key) is not None for entry in measured)]
    columns += [_numeric(figure.sweep or figure.key) for figure in swept]   # swept: named
    cells = []
    for index, row in enumerate(rows, 1):
        entry = row.entry
        if entry is None or reference is None:          # a measured row: the first is one
            cells.append((str(index), row.label(), row.status, "", "", "")
                         + (("",) if accuracy else ()) + ("",) * len(swept))
            continue
        cells.append((str(index), row.label(), _rate_cell(entry, heading),
                      _speedup_cell(entry, reference), *_memory_cells(entry, reference))
                     + ((accuracy_cell(entry, versus is not None),) if accuracy else ())
                     + tuple(_swept_cell(entry, figure) for figure in swept))
    return columns, cells


def _swept_cell(entry: Entry, figure: figures.Figure) -> str:
    value = entry.figures.get(figure.key)
    return "-" if value is None else format(value, figure.console_format)


def _any_in_noise(columns: list[text_table.Column], cells: list[tuple[str, ...]]) -> bool:
    """Whether a speedup of the table carries the within-noise mark (its legend then follows)."""
    at = next((i for i, column in enumerate(columns) if column.heading == "speedup"), None)
    return at is not None and any(row[at].endswith(IN_NOISE_MARK) for row in cells)


def print_comparison(rows: Sequence[SweptRow], out: TextIO) -> None:
    """The comparison table, without the columns no row has a value in (peak memory on the
    CPU)."""
    reference = next((index for index, row in enumerate(rows, 1) if row.entry is not None), "-")
    columns, cells = text_table.with_values(*comparison_cells(rows))
    memory = any(column.heading == "memory" for column in columns)
    print("", file=out)
    print(f"Sweep comparison (speedup{' and memory change' if memory else ''} against row "
          f"{reference})", file=out)
    out.write(text_table.render(columns, cells, terminal=progress.is_terminal(out)))
    if _any_in_noise(columns, cells):
        print(IN_NOISE_LEGEND, file=out)
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


def generation_cells(rows: Sequence[SweptRow]
                     ) -> tuple[list[text_table.Column], list[tuple[str, ...]]]:
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
        values = entry.figures
        rate, mbu = values.get("decode_tokens_per_s"), values.get("decode_mbu")
        cells.append((str(index), *(format_setting(entry.settings.get(name)) for name in shown),
                      format_setting(entry.settings.get("batch")),
                      "-" if rate is None else f"{rate:,.1f}", f"{values['itl_ms']:.3f}",
                      f"{values['itl_p99_ms']:.3f}", f"{values['ttft_ms']:.3f}",
                      "-" if mbu is None else units.percent(mbu)))
    return columns, cells


def print_generation_table(rows: Sequence[SweptRow], out: TextIO) -> None:
    columns, cells = text_table.with_values(*generation_cells(rows))
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


def slower_than_bf16(rows: Sequence[SweptRow]) -> list[str]:
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
        if base is None or base.entry is None:
            continue
        ratio = row.entry.figures["throughput"] / base.entry.figures["throughput"]
        if ratio < 1:
            lines.append(f"Note: {row.label()} ran slower than {base.label()} here "
                         f"({ratio:.2f}x): torchao's "
                         f"{config.quantize if config.quantize != 'none' else 'FP8'} kernels "
                         f"did not beat BF16 on this device at this size")
    return lines


def print_data_table(rows: Sequence[SweptRow], out: TextIO) -> None:
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
    out.write(text_table.render(*text_table.with_values(columns, cells),
                                terminal=progress.is_terminal(out)))
    out.flush()


def _whole(value: float | None) -> float | None:
    """A count the document stores as a number (4, not 4.0)."""
    return int(value) if value is not None and float(value).is_integer() else value


def _share(value: float | None, spec: str) -> str:
    """A figure of the data table; n/a where the document does not know it."""
    return "n/a" if value is None else format(value, spec)
