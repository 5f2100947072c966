"""Sweeps: every configuration of a plan in turn, in one process, on one device.

Each row gets a fresh model and emptied caches (and a reset compiler when it compiles). A row
that runs out of memory or fails otherwise is recorded with its error and the sweep goes on
(errors are data in a sweep). A comparison table against the first successful row closes it.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
from dataclasses import dataclass
from typing import TextIO

from microbench.drivers import benchmark, trials as trials_mod
from microbench.steps import lowp
from microbench.output import progress, text_table as tables
from microbench.platform.errors import EXIT_UNEXPECTED, BenchmarkError, OutOfMemory, SweepFailed
from microbench.output import files, units, writing
from microbench.measure.summary import Summary


@dataclass
class Row(trials_mod.Job):
    """One configuration of the sweep: its trials, then its Summary (or why it failed)."""

    summary: Summary | None = None

    @property
    def throughput(self) -> float | None:
        return self.summary.throughput if self.summary else None

    @property
    def peak_allocated_mb(self) -> float | None:
        return self.summary.peak_allocated_mb if self.summary else None

    def label(self) -> str:
        config, model = self.spec.config, self.spec.model
        compiled = (f" compile={config.compile_options.get('mode', 'default')}"
                    if config.compile else "")
        language = (f" {model.attention} s{model.seq_len}"
                    if model.tokens_per_item is not None else "")
        return (f"{config.network} {config.mode} {self.spec.precision.name}"
                f"{lowp.label(config)}{' nhwc' if config.nhwc else ''}{compiled}{language}"
                f"{training_label(config)} b{config.batch_size}{data_label(config)}")


def training_label(config) -> str:
    """Sharding and checkpointing in a row's label ('' for the defaults)."""
    parts = [" fsdp" if config.parallel == "fsdp" else "",
             "" if config.activation_checkpointing == "none"
             else f" ac={config.activation_checkpointing}"]
    return "".join(parts)


def data_label(config) -> str:
    """The input pipeline in a row's label ('' for synthetic inputs)."""
    if config.data == "synthetic":
        return ""
    workers = "auto" if config.workers is None else config.workers
    return f" {config.data} workers={workers} decode={config.decode}"


class Progress:
    """One line per row: on a terminal it counts the row's elapsed time while the row runs
    and keeps the outcome; elsewhere (logs, profiler wrappers) a plain line when a row starts
    and one with its outcome."""

    def __init__(self, out: TextIO, total: int, trials: int = 1):
        self.out, self.total, self.trials = out, total, trials
        self.activity = progress.Activity(out)

    def trial(self, index: int) -> None:
        if self.trials > 1:
            print(f"Trial {index + 1} of {self.trials} of every row", file=self.out, flush=True)

    def start(self, index: int, row: Row) -> None:
        self.activity.start(f"[{index}/{self.total}] {row.label()}")

    def done(self, index: int, row: Row) -> None:
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


def run_trial(row: Row, env, monitor: benchmark.Monitor, index: int = 0) -> None:
    """Trial ``index`` of one configuration (in a worker process when trials run in workers);
    a failure is recorded in the row instead of raised, and ends the row (its later trials are
    skipped)."""
    try:
        row.spec.check()
        if trials_mod.in_workers(row.spec):
            row.trials.append(trials_mod.in_worker(row.spec, index))
        else:
            row.trials.append(trials_mod.measure_trial(row.spec, env, monitor))
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


def run_sweep(specs, env, out: TextIO, counterbalance: bool = False) -> list[Row]:
    """Every configuration, trial after trial: with --repeat N the rows interleave (trial 1 of
    every row, then trial 2, ...), so a drift of the device's speed hits all rows alike
    (``counterbalance``: in reverse order every other round, trials.run_rounds)."""
    repeat = specs[0].config.repeat
    shown, rows = Progress(out, len(specs), repeat), [Row(spec) for spec in specs]
    monitor = benchmark.Monitor(specs[0].device, specs[0].config.telemetry_interval_ms / 1e3)

    def measure(row: Row, index: int) -> None:
        number = rows.index(row) + 1
        shown.start(number, row)
        run_trial(row, env, monitor, index)
        benchmark.release(row.spec, reset_compiler=True)
        shown.done(number, row)

    try:
        trials_mod.run_rounds(rows, repeat, measure, on_round=shown.trial,
                              counterbalance=counterbalance)
    finally:
        monitor.close()
    for row in rows:
        if not row.failed:
            row.summary = Summary(row.spec, env, row.trials)
    return rows


def _rate_heading(rows: list[Row]) -> str:
    """The rate column's heading: the unit the rows count in (img/s as the older tool printed
    it for images), or ``rate`` with the unit in each cell where the rows count in different
    units (a sweep over an image and a language model)."""
    units = {row.spec.scenario.unit for row in rows if not row.failed}
    if len(units) != 1:
        return "rate"
    unit = units.pop()
    return "img/s" if unit == "image" else f"{unit}s/s"


def _rate_cell(row: Row, heading: str) -> str:
    scenario = row.spec.scenario
    rate = f"{row.throughput * scenario.units_per_item:.2f}"
    return f"{rate} {scenario.unit}s/s" if heading == "rate" else rate


def comparison_cells(rows: list[Row]) -> tuple[list[tables.Column], list[tuple[str, ...]]]:
    """The sweep table: each row's rate in its unit, its speedup and its peak memory against
    the first successful row (a failed row shows its status where the rate would be)."""
    reference = next((row for row in rows if not row.failed), None)
    heading = _rate_heading(rows)
    columns = [tables.Column("#", numeric=True, width=3), tables.Column("configuration"),
               tables.Column(heading, numeric=True, width=10),
               tables.Column("speedup", numeric=True, width=8),
               tables.Column("peak MB", numeric=True, width=9),
               tables.Column("memory", numeric=True, width=8)]
    accuracy = any(row.summary is not None and row.summary.lowp is not None for row in rows)
    if accuracy:
        columns.append(tables.Column("accuracy vs BF16"))
    cells = []
    for index, row in enumerate(rows, 1):
        if row.failed:
            cells.append((str(index), row.label(), row.status, "", "", "")
                         + (("",) if accuracy else ()))
            continue
        memory, change = "n/a", ""
        if row.peak_allocated_mb is not None:
            memory = f"{row.peak_allocated_mb:.0f}"
            if reference.peak_allocated_mb:          # unknown or zero: no ratio to show
                change = f"{row.peak_allocated_mb / reference.peak_allocated_mb - 1:+.0%}"
        cells.append((str(index), row.label(), _rate_cell(row, heading),
                      f"{row.throughput / reference.throughput:.2f}x", memory, change)
                     + ((_accuracy_cell(row),) if accuracy else ()))
    return columns, cells


def print_comparison(rows: list[Row], out: TextIO) -> None:
    reference = next((row for row in rows if not row.failed), None)
    print("", file=out)
    print("Sweep comparison (speedup and memory change against row "
          f"{rows.index(reference) + 1 if reference else '-'})", file=out)
    columns, cells = comparison_cells(rows)
    out.write(tables.render(columns, cells, terminal=progress.is_terminal(out)))
    out.flush()
    for line in slower_than_bf16(rows):
        print(line, file=out)
    print_data_table(rows, out)
    print_generation_table(rows, out)


def generation_cells(rows: list[Row]) -> tuple[list[tables.Column], list[tuple[str, ...]]]:
    """Generate rows: decode tokens/s of the whole batch, inter-token latency p50 and p99, time
    to first token and MBU, each from that row's own timed samples."""
    columns = [tables.Column("#", numeric=True, width=3), tables.Column("batch", numeric=True),
               tables.Column("decode tok/s", numeric=True, width=12),
               tables.Column("ITL p50 ms", numeric=True), tables.Column("ITL p99 ms", numeric=True),
               tables.Column("TTFT p50 ms", numeric=True), tables.Column("MBU", numeric=True)]
    cells = []
    for index, row in enumerate(rows, 1):
        times = row.summary.detail if row.summary is not None else None
        if getattr(times, "decode", None) is None:
            continue
        scenario = row.spec.scenario
        rate = scenario.decode_tokens_per_s(row.summary)
        use = scenario.decode_bandwidth(row.summary)
        mbu = use.mbu if use is not None else None
        cells.append((str(index), str(row.spec.batch_size),
                      "-" if rate is None else f"{rate:,.1f}", f"{times.decode.median:.3f}",
                      f"{times.decode.p99:.3f}", f"{times.prefill.median:.3f}",
                      "-" if mbu is None else units.percent(mbu)))
    return columns, cells


def print_generation_table(rows: list[Row], out: TextIO) -> None:
    columns, cells = generation_cells(rows)
    if not cells:
        return
    print("", file=out)
    print("Generation (decode tok/s: tokens the decode steps generated per second, the whole "
          "batch; ITL: inter-token latency; TTFT: time to first token)", file=out)
    out.write(tables.render(columns, cells, terminal=progress.is_terminal(out)))
    out.flush()


def _accuracy_cell(row: Row) -> str:
    reduced = row.summary.lowp if row.summary is not None else None
    return reduced.drift.cell() if reduced is not None else "-"


def slower_than_bf16(rows: list[Row]) -> list[str]:
    """A line for each quantized or FP8 row slower than the row without it (the same other
    settings): torchao's kernels do not beat BF16 everywhere (int8 weight-only decode on an
    H100, for one), and a reader should not have to spot that in the ratios."""
    lines = []
    for row in rows:
        if row.summary is None or row.summary.lowp is None:
            continue
        config = row.spec.config
        plain = dataclasses.replace(config, quantize="none") if config.quantize != "none" \
            else dataclasses.replace(config, precision="amp-bf16")
        base = next((other for other in rows if other.summary is not None
                     and dataclasses.replace(other.spec.config, fp8_recipe=config.fp8_recipe)
                     == plain), None)
        if base is not None and row.throughput < base.throughput:
            lines.append(f"Note: {row.label()} ran slower than {base.label()} here "
                         f"({row.throughput / base.throughput:.2f}x): torchao's "
                         f"{config.quantize if config.quantize != 'none' else 'FP8'} kernels "
                         f"did not beat BF16 on this device at this size")
    return lines


def print_data_table(rows: list[Row], out: TextIO) -> None:
    """Rows fed by an input pipeline: what it delivered beside what each side does alone."""
    fed = [(index, row) for index, row in enumerate(rows, 1)
           if row.summary is not None and row.summary.data is not None]
    if not fed:
        return
    unit = fed[0][1].summary.data.unit
    print("", file=out)
    print(f"Input pipeline ({unit}{' per device' if fed[0][1].summary.data.per_device else ''}"
          f"; wait: share of a step spent waiting for the batch, median and p99, and of the "
          f"whole run)", file=out)
    columns = [tables.Column("#", numeric=True, width=3),
               tables.Column("workers", numeric=True), tables.Column("decode", numeric=True),
               tables.Column("pipeline", numeric=True, width=10),
               tables.Column("loader", numeric=True, width=10),
               tables.Column("model", numeric=True, width=10), tables.Column("kept", numeric=True),
               tables.Column("wait p50", numeric=True), tables.Column("wait p99", numeric=True),
               tables.Column("wait run", numeric=True), tables.Column("verdict")]
    cells = []
    for index, row in fed:
        data = row.summary.data
        waits, kept = data.pipeline.waits, data.verdict.kept
        model = "n/a" if data.model_alone_per_s is None else f"{data.model_alone_per_s:.2f}"
        cells.append((str(index), str(data.description["workers"]),
                       str(data.description["decode"]), f"{data.pipeline.per_s:.2f}",
                       f"{data.loader.per_s:.2f}", model, f"{kept:.0%}",
                       f"{waits.share_median:.1%}", f"{waits.share_p99:.1%}",
                       f"{waits.share_total:.1%}", data.verdict.kind))
    out.write(tables.render(columns, cells, terminal=progress.is_terminal(out)))
    out.flush()


def write_files(rows: list[Row], output_dir: str, env) -> str:
    """Each successful row's JSON, every row in the CSV, and one sweep JSON; returns its path."""
    documents = []
    for row in rows:
        spec = row.spec
        if not row.failed:
            files.write_files(row.summary)
            documents.append({"status": "ok", "json_file": spec.json_path,
                              "result": files.result_document(row.summary)})
        else:
            files.append_csv(files.failed_csv_row(spec, env, row.status, row.error),
                             spec.csv_path)
            documents.append({"status": row.status, "error": row.error,
                              "config": dataclasses.asdict(spec.config)})
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = os.path.join(output_dir, f"sweep_{stamp}.json")
    writing.write_json(path, {"schema_version": files.SCHEMA_VERSION, "env": env.to_dict(),
                              "rows": documents})
    return path
