"""Sweeps: every configuration of a plan in turn, in one process, on one device.

Each row gets a fresh model and emptied caches (and a reset compiler when it compiles). A row
that runs out of memory or fails otherwise is recorded with its error and the sweep goes on
(errors are data in a sweep). A comparison table against the first successful row closes it
(:func:`microbench.output.sweep_table.print_comparison`).
"""
from __future__ import annotations

import dataclasses
import datetime
import os
from dataclasses import dataclass
from typing import Sequence, TextIO

from microbench.drivers import benchmark
from microbench.drivers.trials import Job, in_worker, in_workers, measure_trial, run_rounds
from microbench.platform import progress
from microbench.platform.errors import EXIT_UNEXPECTED, BenchmarkError, OutOfMemory, SweepFailed
from microbench.output import files
from microbench.platform import units, writing
from microbench.output.summary import Summary
from microbench.plan import naming
from microbench.plan.spec import RunSpec
from microbench.platform.environment import DeviceInfo
from microbench.store.entry import Entry, entries_of


@dataclass
class Row(Job):
    """One configuration of the sweep: its trials, then its Summary (or why it failed), the
    result document its file holds, and that document as the report reads it."""

    summary: Summary | None = None
    document: dict | None = None          # what write_files writes for this row
    entry: Entry | None = None  # the document through store.entry: what the sweep's
                                          # closing tables and --plot read, as the report does

    def record(self, summary: Summary) -> None:
        """The row's trials are done: its Summary, its result document (built once, here) and
        the entry read from it."""
        self.summary = summary
        self.document = files.result_document(summary)
        self.entry = entries_of(self.document, self.label())[0]

    @property
    def env(self):
        """The environment the row was measured in; None while nothing was measured."""
        return self.summary.env if self.summary is not None else None

    def label(self) -> str:
        spec = self.spec            # a label reads the configuration, not this process's batch
        return naming.row_label(naming.Described(spec.config, spec.model, spec.precision,
                                                 spec.parallel))


class Progress:
    """One line per row: on a terminal it counts the row's elapsed time while the row runs
    and keeps the outcome; elsewhere (logs, profiler wrappers) a plain line when a row starts
    and one with its outcome. The ``[k/n]`` is the row's place in its round, which is the
    order it runs in: a counterbalanced round runs the rows in reverse (A B, then B A), and
    counting by the row's own number read ``[2/2]`` before ``[1/2]`` (issue 64)."""

    def __init__(self, out: TextIO, total: int, trials: int = 1):
        self.out, self.total, self.trials = out, total, trials
        self.activity = progress.Activity(out)
        self.place = 0

    def trial(self, index: int) -> None:
        self.place = 0
        if self.trials > 1:
            print(f"Trial {index + 1} of {self.trials} of every row", file=self.out, flush=True)

    def start(self, row: Row) -> None:
        self.place += 1
        self.activity.start(f"[{self.place}/{self.total}] {row.label()}")

    def done(self, row: Row) -> None:
        self.activity.finish(_outcome(row))


def _outcome(row: Row) -> str:
    if row.failed:
        return f"{row.status}: {row.error}"
    trial, scenario = row.trials[-1], row.spec.scenario
    t, memory = trial.slowest.times, trial.result.peak_allocated_mb
    memory_text = f", peak {units.megabytes(memory)}" if memory is not None else ""
    rate = trial.throughput * scenario.units_per_item
    return (f"{units.rate(rate)} {scenario.unit}s/s, median {units.duration_ms(t.median)}, "
            f"CV {units.percent(t.cv)}{memory_text}")


def run_trial(row: Row, env: DeviceInfo, monitor: benchmark.Monitor, index: int = 0) -> None:
    """Trial ``index`` of one configuration (in a worker process when trials run in workers);
    a failure is recorded in the row instead of raised, and ends the row (its later trials are
    skipped)."""
    try:
        row.spec.check()
        trial = (in_worker(row.spec, index) if in_workers(row.spec)
                 else measure_trial(row.spec, env, monitor))
        if trial is not None:                      # one process: its trial, always
            row.trials.append(trial)
    except OutOfMemory as error:
        row.fail("out of memory", str(error), error.exit_code)
    except BenchmarkError as error:
        row.fail("error", str(error), error.exit_code)
    except Exception as error:                     # noqa: BLE001 (recorded; the sweep goes on)
        row.fail("error", f"{type(error).__name__}: {error}", EXIT_UNEXPECTED)


def outcome(rows: list[Row]) -> int:
    """0 when any row was measured (errors are data in a sweep); when every row failed, the
    sweep failed: exit with the first row's code (3 if it ran out of memory), with one line."""
    if any(row.summary is not None for row in rows):
        return 0
    first = rows[0]
    raise SweepFailed(f"every configuration of the sweep failed ({len(rows)} of {len(rows)}); "
                      f"the first, {first.label()}: {first.error}", first.exit_code)


def run_sweep(specs: Sequence[RunSpec], env: DeviceInfo, out: TextIO, counterbalance: bool = False
             ) -> list[Row]:
    """Every configuration, trial after trial: with --repeat N the rows interleave (trial 1 of
    every row, then trial 2, ...), so a drift of the device's speed hits all rows alike
    (``counterbalance``: in reverse order every other round, trials.run_rounds)."""
    repeat = specs[0].config.repeat
    shown, rows = Progress(out, len(specs), repeat), [Row(spec) for spec in specs]
    monitor = benchmark.Monitor(specs[0].device, specs[0].config.telemetry_interval_ms / 1e3)

    def measure(row: Row, index: int) -> None:
        shown.start(row)
        run_trial(row, env, monitor, index)
        benchmark.release(row.spec, reset_compiler=True)
        shown.done(row)

    try:
        run_rounds(rows, repeat, measure, on_round=shown.trial,
                              counterbalance=counterbalance)
    finally:
        monitor.close()
    for row in rows:
        if not row.failed:
            row.record(Summary(row.spec, env, tuple(row.trials)))
    return rows


def write_files(rows: list[Row], output_dir: str, env: DeviceInfo) -> str:
    """Each successful row's JSON, every row in the CSV, and one sweep JSON; returns its path."""
    documents = []
    for row in rows:
        spec = row.spec
        if not row.failed and row.summary is not None:       # measured rows are recorded
            files.write_files(row.summary, row.document)
            documents.append({"status": "ok", "json_file": spec.json_path,
                              "result": row.document})
        else:
            if spec.csv_path is not None:                    # files are written: it is named
                files.append_csv(files.failed_csv_row(spec, env, row.status, row.error or ""),
                                 spec.csv_path)
            documents.append({"status": row.status, "error": row.error,
                              "config": dataclasses.asdict(spec.config)})
    # Named by what it holds (its first and last rows' result names) and when, and claimed
    # exclusively: two sweeps started in the same second never share a file.
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    names = list(dict.fromkeys(row.spec.result_name for row in (rows[0], rows[-1])))
    path = writing.claim_new(os.path.join(output_dir,
                                          f"sweep_{stamp}_{'_to_'.join(names)}"[:200] + ".json"))
    writing.write_json(path, {"schema_version": files.SCHEMA_VERSION, "env": env.to_dict(),
                              "rows": documents})
    return path
