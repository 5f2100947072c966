"""Result rows and their one writer: an aligned console table, JSON and CSV files.

A row is an :class:`OpResult`: measured, skipped (did not fit in memory) or failed (bad input,
unsupported dtype, out of memory). Files are written whole or not at all: into a temporary file
beside the target, then ``os.replace`` (:mod:`microbench.platform.writing`, shared with the model
benchmark).
"""
from __future__ import annotations

import csv
import dataclasses
import io
import math
import sys
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from microbench.platform import text_table
from microbench.platform import safe_text
from microbench.platform.errors import BenchmarkError
from microbench.platform import writing
from microbench.platform.units import duration_ms, flops, significant
from microbench.measure.timing import NOISY_CV_THRESHOLD, Measurement

BYTES_NOTE = "bytes moved = each input read once + output written once; FLOPs from the shapes"
CACHE_FLAG = "cache"
ABOVE_PEAK_FLAG = ">peak"


@dataclass(frozen=True)
class OpResult:
    op: str
    op_type: str
    shapes: str
    dtype: str
    roof: str = ""
    bytes_moved: int | None = None
    flops: int | None = None
    status: str = "ok"            # ok, skipped or failed
    message: str = ""
    exit_code: int = 0
    measurement: Measurement | None = None
    gbs: float | None = None
    tflops: float | None = None
    peak_label: str | None = None  # "BW" for memory-bound ops, else the precision
    peak_value: float | None = None  # GB/s or TFLOP/s
    pct_of_peak: float | None = None
    profile: str = ""  # torch.profiler's table with --enable-profiling (console only)
    working_set_bytes: int | None = None  # distinct bytes of inputs and output
    cache_resident: bool | None = None    # fits in the last-level cache, not flushed; None: unknown

    @classmethod
    def for_case(cls, op: str, op_type: str, shapes: str, dtype: str, roof: str,
                 bytes_moved: int, flops: int) -> "OpResult":
        return cls(op, op_type, shapes, dtype, roof, bytes_moved, flops)

    @classmethod
    def for_request_error(cls, op: str, op_type: str, dtype: str,
                          error: BenchmarkError) -> "OpResult":
        return cls(op, op_type, "", dtype).failed(error)

    def skipped(self, reason: str) -> "OpResult":
        return dataclasses.replace(self, status="skipped", message=reason)

    def failed(self, error: BenchmarkError) -> "OpResult":
        return dataclasses.replace(self, status="failed", message=str(error),
                                   exit_code=error.exit_code)

    def measured(self, measurement: Measurement, gbs: float, tflops: float,
                 peak_label: str | None, peak_value: float | None,
                 pct_of_peak: float | None) -> "OpResult":
        return dataclasses.replace(self, measurement=measurement, gbs=gbs, tflops=tflops,
                                   peak_label=peak_label, peak_value=peak_value,
                                   pct_of_peak=pct_of_peak)

    def with_profile(self, profile: str) -> "OpResult":
        return dataclasses.replace(self, profile=profile)

    def with_cache(self, working_set_bytes: int, cache_resident: bool | None) -> "OpResult":
        return dataclasses.replace(self, working_set_bytes=working_set_bytes,
                                   cache_resident=cache_resident)

    @property
    def above_peak(self) -> bool | None:
        """More than the datasheet allows: the data came from a cache, or the peak is wrong
        for this device. None without a peak."""
        return None if self.pct_of_peak is None else self.pct_of_peak > 100.0

    @property
    def flags(self) -> tuple[str, ...]:
        """Short marks for the table (explained under it by :func:`summary_lines`)."""
        marks = []
        if self.cache_resident:
            marks.append(CACHE_FLAG)
        if self.above_peak:
            marks.append(ABOVE_PEAK_FLAG)
        return tuple(marks)

    def as_dict(self, with_samples: bool = True) -> dict:
        """Flat fields (the CSV row); JSON adds the raw samples."""
        stats = self.measurement.stats() if self.measurement else {}
        row: dict[str, object] = {
            "op": self.op, "op_type": self.op_type, "shapes": self.shapes, "dtype": self.dtype,
            "status": self.status, "message": self.message,
            "median_ms": stats.get("median_ms"), "mean_ms": stats.get("mean_ms"),
            "std_ms": stats.get("std_ms"), "min_ms": stats.get("min_ms"),
            "max_ms": stats.get("max_ms"), "p90_ms": stats.get("p90_ms"),
            "cv": stats.get("cv"), "iterations": stats.get("count"),
            "bytes_moved": self.bytes_moved, "flops": self.flops,
            "gbs": self.gbs, "tflops": self.tflops, "roof": self.roof,
            "peak": self.peak_value, "peak_unit": _peak_unit(self.peak_label),
            "peak_precision": self.peak_label, "pct_of_peak": self.pct_of_peak,
            # Added keys (after the original ones, so older readers of the CSV keep working).
            "working_set_bytes": self.working_set_bytes, "cache_resident": self.cache_resident,
            "above_peak": self.above_peak, "flags": " ".join(self.flags),
        }
        if with_samples:
            row["samples_ms"] = list(self.measurement.samples_ms) if self.measurement else []
        return row


def _peak_unit(peak_label: str | None) -> str | None:
    if peak_label is None:
        return None
    return "GB/s" if peak_label == "BW" else "TFLOP/s"


# ---------------------------------------------------------------------------------------------
# Console
# ---------------------------------------------------------------------------------------------

def _format_ms(value: float) -> str:
    """The median in the unit that reads best (``5.60 us``, not ``0.0056`` ms); the JSON and
    CSV keep milliseconds."""
    return duration_ms(value)


def _format_rate(value: float | None) -> str:
    """A rate with three significant digits however small (never ``0.000``), and ``-`` where
    there is none (unknown, or an op that does no arithmetic has no TFLOP/s)."""
    if value is None or math.isnan(value) or value == 0:
        return "-"
    return f"{value:.1f}" if value >= 10 else significant(value)


def _format_flops(tflops: float | None) -> str:
    """FLOP/s with its SI prefix (``798 MFLOP/s``, not ``0.000798`` TFLOP/s); the files keep
    TFLOP/s."""
    if tflops is None or math.isnan(tflops) or tflops == 0:
        return "-"
    return flops(tflops * 1e12, per_second=True)


def _format_cv(measurement: Measurement) -> str:
    noisy_mark = "*" if measurement.is_noisy else ""
    return f"{100 * measurement.cv:.1f}{noisy_mark}"


def _format_pct(row: OpResult) -> str:
    if row.pct_of_peak is None:
        return "-"
    return f"{row.pct_of_peak:.1f} ({row.peak_label})"


HEADINGS = ("op", "shapes", "dtype", "median", "cv %", "GB/s", "FLOP/s", "% of peak",
            "flags")
_RIGHT_ALIGNED = {"median", "cv %", "GB/s", "FLOP/s", "% of peak"}
# "% of peak" holds e.g. "71.3 (fp32_matrix)"; "median" e.g. "5.60 us", "FLOP/s" "798 MFLOP/s".
_MIN_WIDTHS = {"median": 9, "cv %": 6, "GB/s": 9, "FLOP/s": 12, "% of peak": 18,
               "flags": len(f"{CACHE_FLAG} {ABOVE_PEAK_FLAG}")}


def row_cells(row: OpResult) -> tuple[str, ...]:
    measurement = row.measurement                  # a measured row's (status "ok")
    median, cv = (("", "") if measurement is None
                  else (_format_ms(measurement.median), _format_cv(measurement)))
    return (row.op, row.shapes, row.dtype, median, cv, _format_rate(row.gbs),
            _format_flops(row.tflops), _format_pct(row), " ".join(row.flags))


class TablePrinter:
    """Prints rows as they finish, aligned to widths known before the run starts (plain text
    off a terminal, bold headings on one: ``text_table.RowPrinter``)."""

    def __init__(self, labels: Iterable[tuple[str, str]], dtype: str,
                 out: Callable[[str], None] = print,
                 err: Callable[[str], None] | None = None, terminal: bool = False):
        labels = list(labels)
        widths = {heading: max(len(heading), _MIN_WIDTHS.get(heading, 0))
                  for heading in HEADINGS}
        widths["op"] = max([widths["op"], *(len(op) for op, _ in labels)])
        widths["shapes"] = max([widths["shapes"], *(len(shapes) for _, shapes in labels)])
        widths["dtype"] = max(widths["dtype"], len(dtype))
        self._rows = text_table.RowPrinter(
            [text_table.Column(heading, numeric=heading in _RIGHT_ALIGNED, width=widths[heading])
             for heading in HEADINGS], terminal=terminal)
        self._out = out
        self._err = err or (lambda line: print(line, file=sys.stderr, flush=True))

    def header(self) -> None:
        self._out(self._rows.header())

    def __call__(self, row: OpResult) -> None:
        name = f"{row.op} {row.shapes}".rstrip()
        if row.status == "ok":
            self._out(self._rows.line(row_cells(row)))
            if row.profile:
                self._out(row.profile)
        elif row.status == "skipped":        # not measured (no memory for it): a warning
            self._err(safe_text.terminal(f"skipped {name}: {row.message}"))
        else:
            self._err(safe_text.terminal(f"error: {name}: {row.message}"))


def summary_lines(results: Sequence[OpResult]) -> list[str]:
    counts = {status: sum(row.status == status for row in results)
              for status in ("ok", "skipped", "failed")}
    noun = "op" if len(results) == 1 else "ops"
    lines = [f"{len(results)} {noun}: {counts['ok']} measured, {counts['skipped']} skipped, "
             f"{counts['failed']} failed"]
    measured = [row for row in results if row.status == "ok"]
    if any(row.measurement is not None and row.measurement.is_noisy for row in measured):
        lines.append(f"* CV above {NOISY_CV_THRESHOLD:.0%}: noisy; rerun with more "
                     f"--num-iters or on an idle device")
    if any(row.cache_resident for row in measured):
        lines.append(f"{CACHE_FLAG}: the working set (inputs + output) fits in the device's "
                     f"last-level cache and nothing flushed it between calls: the rate is the "
                     f"cache's, not the memory's (drop --no-flush-l2 to measure the memory)")
    if any(row.above_peak for row in measured):
        lines.append(f"{ABOVE_PEAK_FLAG}: above 100% of the datasheet peak: the data came from "
                     f"a cache, or the table's peak does not fit this device (--peak-gbs, "
                     f"--peak-tflops); not an efficiency")
    return lines


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------

def write_json(path: str, run_info: dict, results: Sequence[OpResult]) -> None:
    writing.write_json(path, {**run_info, "results": [row.as_dict() for row in results]})


def write_csv(path: str, results: Sequence[OpResult]) -> None:
    rows = [{key: safe_text.csv_cell(value) if isinstance(value, str) else value
             for key, value in row.as_dict(with_samples=False).items()} for row in results]
    buffer = io.StringIO()
    fieldnames = list(OpResult("", "", "", "").as_dict(with_samples=False))
    writer = csv.DictWriter(buffer, fieldnames=fieldnames, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    writing.write_whole(path, buffer.getvalue())
