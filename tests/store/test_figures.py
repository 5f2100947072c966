"""The registry of figures (microbench/store/figures.py): each figure declared once, and every
reader and writer taking its figures from it.

The last test adds a figure in a scratch registry, in a fresh process (every writer reads the
registry when it is imported), and follows it from a real run to every place it should reach.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from microbench.output import chart, files, table
from microbench.scenarios import MODES
from microbench.store import figures, schema
from microbench.store.figures import MODEL, OP

ROOT = Path(__file__).resolve().parents[2]
# The CSV columns that say what ran and how the row ended, not what was measured.
RUN_COLUMNS = {"time_utc", "network", "mode", "precision", "nhwc", "compile", "batch_size",
               "global_batch_size", "world_size", "image_size", "seq_len", "attention",
               "iterations", "warmup", "device_name", "device_type", "torch", "gpu_runtime",
               "host", "json_file", "status", "error"}


def test_every_csv_column_is_a_figure_of_the_registry_or_says_what_ran():
    columns = [figure.csv for figure in figures.csv_figures()]
    assert len(columns) == len(set(columns))
    assert set(files.CSV_COLUMNS) == RUN_COLUMNS | set(columns)
    assert len(files.CSV_COLUMNS) == len(set(files.CSV_COLUMNS))


def test_the_csv_header_only_grows_before_status_and_error():
    """Files of every earlier header take rows in their own columns: the first header is kept
    whole, each later one adds columns before status and error, the newest first."""
    first, newest = files.CSV_COLUMNS_BEFORE_PEAKS, files.CSV_COLUMNS
    assert files.CSV_HEADERS[0] == newest and files.CSV_HEADERS[-1] == first
    assert newest[:len(first) - 2] == first[:-2] and newest[-2:] == ("status", "error")
    assert newest[len(first) - 2:-2] == ("measured_peak_tflops", "measured_peak_gbs",
                                         "mfu_measured", "mbu_measured",
                                         "host_load_per_core", "host_others_cpu_pct",
                                         "host_loaded")
    # The header of the files written before the host's load (issue 64) still takes rows.
    assert first[:-2] + ("measured_peak_tflops", "measured_peak_gbs", "mfu_measured",
                         "mbu_measured") + first[-2:] in files.CSV_HEADERS


def test_keys_and_labels_are_declared_once():
    for table_ in (MODEL, OP):
        keys = [figure.key for figure in figures.of_table(table_)]
        assert len(keys) == len(set(keys)), table_
    gates = [figure.gate for figure in figures.gate_figures()]
    assert len(gates) == len(set(gates))
    for figure in figures.FIGURES:
        assert (figure.path is None) != (figure.reader is None), figure.key
        assert figure.style in figures.STYLES and figure.better in (figures.HIGHER,
                                                                    figures.LOWER, None)
        assert figure.bars in (figures.NO_BARS, figures.THROUGHPUT_BARS, figures.CALL_TIME_BARS)


def test_the_kinds_of_run_are_the_scenarios():
    assert {figures.TRAINING, figures.GENERATE} <= set(MODES)
    assert all(figure.kinds is None or figure.kinds <= set(MODES) for figure in figures.FIGURES)
    phase = figures.by_key()["forward_ms"]
    assert phase.applies_to("training") and not phase.applies_to("generate")
    assert figures.by_key()["p99_ms"].applies_to("a kind added later")


def test_the_published_schema_gives_each_figure_path_it_names_a_number():
    """A path the file names has a numeric type there; a path it does not name (a figure added
    since) is declared a number or null by schema.schema(), which then names every path."""
    published = schema.published()
    for path in figures.result_paths():
        node = schema.node_at(published, path)
        if node is not None:
            types = node.get("type")
            types = types if isinstance(types, list) else [types]
            assert {"number", "integer"} & set(types), path
        assert schema.node_at(schema.schema(), path) is not None, path


def test_the_readers_show_what_they_showed_before_the_registry():
    """The report's columns, --compare's metrics and the chart's --metric choices, as they were
    written by hand before the registry (their order is what users see)."""
    assert [table.column_key(f) for f in table.shown_figures(MODEL)] == [
        "throughput", "ci95", "trial_count", "p50_ms", "p90_ms", "p99_ms", "ttft_ms", "itl_ms",
        "mfu", "mbu", "mfu_measured", "mbu_measured", "accuracy", "decode_kernel_ms",
        "decode_gap_ms", "energy_per_unit", "peak_allocated_mb"]
    assert [f.key for f in table.shown_figures(OP)] == ["median_ms", "cv", "gbs", "tflops",
                                                         "pct_of_peak"]
    assert [f.gate for f in figures.gate_figures()] == [
        "Throughput [img/sec]", "Median iteration [ms]", "p99 iteration [ms]",
        "Coefficient of variation", "Peak memory allocated [MB]"]
    assert chart.METRICS == {"throughput": (MODEL,), "latency": (MODEL, OP), "mfu": (MODEL,),
                             "gbs": (OP,), "tflops": (OP,)}


def test_a_figure_is_read_from_its_path_and_formatted_for_the_csv():
    document = {"timing": {"stats": {"p99_ms": 12.345678}}, "telemetry": {"throttled": True}}
    p99, throttled = figures.by_key()["p99_ms"], figures.by_key()["throttled"]
    assert p99.read(document) == 12.345678 and p99.csv_cell(document) == "12.3457"
    assert throttled.csv_cell(document) == "1"
    assert figures.by_key()["mfu"].csv_cell(document) == ""          # not measured: empty


# A scratch figure, registered before any writer is imported: iterations per second, with a
# CSV column, a report column, a --compare line, a chart, a console row and a sweep column.
SCRATCH = r'''
import json, sys, types
from microbench.store import figures
scratch = figures.Figure(
    "scratch_iterations_per_s", "it/s", figures.HIGHER, path=("scratch", "iterations_per_s"),
    of_summary=lambda summary: 1e3 / summary.times.median, csv="scratch_iterations_per_s",
    heading="iterations/s", gate="Iterations per second", chart="iterations/s",
    console="Iterations per second", sweep="it/s")
figures.FIGURES = figures.FIGURES + (scratch,)

from microbench.main import main
from microbench.output import chart, files, sweep_table, table
from microbench.store import baseline, collection, schema, stored
from microbench.store.entry import entries_of

out = sys.argv[1]
code = main(["--network", "resnet18", "--image-size", "32", "--batch-size", "2",
             "--iterations", "2", "--warmup", "1", "--output-dir", out,
             "--output-file", "scratch"])
document = stored.load_result(f"{out}/scratch.json", "scratch")
with open(f"{out}/benchmark_summary.csv") as handle:
    header, row = (line.rstrip("\n").split(",") for line in handle)
[entry] = entries_of(document, "scratch.json")
tables = table.build_tables(collection.group_entries([entry]))
sweep_row = types.SimpleNamespace(entry=entry, status="ok", label=lambda: "resnet18 b2")
sweep_columns, [sweep_cells] = sweep_table.comparison_cells([sweep_row])
broken = {**document, "scratch": {"iterations_per_s": "fast"}}
try:
    schema.validate_result(broken, "broken.json")
    refused = False
except Exception:
    refused = True
print(json.dumps({
    "code": code, "json": document["scratch"]["iterations_per_s"],
    "csv": dict(zip(header, row)).get("scratch_iterations_per_s"),
    "csv_last": header[-3:], "entry": entry.figures.get("scratch_iterations_per_s"),
    "report_columns": [column.heading for column in tables[0].columns],
    "report_csv": table.render(tables, "csv").splitlines()[0].split(","),
    "gate": baseline.metrics(entry).get("Iterations per second"),
    "chart": "scratch_iterations_per_s" in chart.METRICS, "schema_refuses_text": refused,
    "sweep": dict(zip([column.heading for column in sweep_columns], sweep_cells)).get("it/s")}))
'''


@pytest.mark.slow
def test_a_figure_added_in_a_scratch_registry_reaches_every_writer(tmp_path):
    ran = subprocess.run([sys.executable, "-c", SCRATCH, str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    assert ran.returncode == 0, ran.stderr[-2000:]
    found = json.loads(ran.stdout.splitlines()[-1])
    assert found["code"] == 0
    value = found["json"]
    assert value > 0                                              # the JSON, at its path
    assert found["csv"] == f"{value:.3f}"                         # the CSV row, before status
    assert found["csv_last"] == ["scratch_iterations_per_s", "status", "error"]
    assert found["entry"] == value                                # the stored result's Entry
    assert "iterations/s" in found["report_columns"]              # the report's table
    assert "scratch_iterations_per_s" in found["report_csv"]      # and its CSV
    assert found["gate"] == value                                 # --compare's metrics
    assert found["chart"] and found["schema_refuses_text"]        # --metric; the schema
    assert found["sweep"] == f"{value:.4g}"                       # a sweep's closing table
    assert f"  Iterations per second : {value:.4g} it/s" in ran.stdout   # the console


def test_the_telemetry_cells_are_the_reports_own_figures():
    """The CSV's telemetry cells, read from the JSON's telemetry block, are what the report
    measured, in the row's formats."""
    from microbench.measure.telemetry import Sample, summarize
    from support.telemetry_fakes import ScriptedSource
    samples = [Sample(t_s=10.0 + i, sm_clock_mhz=1980.0, memory_clock_mhz=2619.0,
                      power_w=300.0 + i, temperature_c=60.0, utilization_pct=99.0,
                      throttle_reasons=("sw_power_cap",), energy_j=100.0 + 300.0 * i)
               for i in range(3)]
    report = summarize(samples, ScriptedSource(), items=6, timed_s=2.0)
    cells = files.figure_cells({"telemetry": report.to_dict()})
    assert {key: cells[key] for key in ("sm_clock_mhz_median", "power_w_median", "energy_j",
                                        "j_per_item", "throttled")} == {
        "sm_clock_mhz_median": f"{report.stat('sm_clock_mhz').median:.4f}",
        "power_w_median": f"{report.stat('power_w').median:.4f}",
        "energy_j": f"{report.energy_j:.4f}", "j_per_item": f"{report.joules_per_item:.4f}",
        "throttled": "1"}


def test_a_charted_figure_without_bars_is_drawn_as_its_points(monkeypatch):
    from microbench.store.entry import Entry
    scratch = figures.Figure("scratch", "it/s", figures.HIGHER, path=("scratch",),
                             chart="iterations/s")
    monkeypatch.setitem(chart.CHARTED, "scratch", scratch)
    measured = Entry(MODEL, "a.json", {}, {"scratch": 3.0}, "images/s")
    assert chart.point_of(measured, "scratch") == chart.Point(3.0)
    assert chart.point_of(Entry(MODEL, "b.json", {}, {}, "images/s"), "scratch") is None
