"""microbench-report over a folder of results the tests make: real runs of two batch sizes and two
precisions (a sweep) and one with trials, beside a result of schema version 1, a version-1 sweep
with a failed row, the older tool's result, a corrupt file, a file of a future schema version and
a Kineto trace. Grouping, the varying columns, ratios to a baseline, each format, the chart, the
web page (rendered in headless Chromium where it is installed), and bad inputs."""
import csv
import dataclasses
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HISTORY, ROOT, TINY, assert_one_line_error, run_main
from microbench.output import chart, table
from microbench.report import command
from microbench.store import collection
from microbench.platform import units
from microbench.store.entry import entries_of
from microbench.output.table import file_line

QUICK = ["--network", "resnet18", "--image-size", "32", "--iterations", "3", "--warmup", "1",
         "--quiet"]
OLDER_TOOL = {"Name": "resnet18", "GPUs": 1, "Mini batch size [img]": 2,
              "Mini batch size [img/gpu]": 2, "Throughput [img/sec]": 20.0,
              "Time per mini-batch": 0.1}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """The folder: results/ (a 2x2 sweep, one run with 2 trials, a trace), results/old/ (older
    versions), results/broken/ (a corrupt file and a future version)."""
    from microbench.main import main
    folder = tmp_path_factory.mktemp("report") / "results"
    assert main(["--output-dir", str(folder), *QUICK, "--batch-size", "2,4",
                 "--precision", "fp32,tf32"]) == 0
    assert main(["--output-dir", str(folder), *QUICK, "--batch-size", "2", "--repeat", "2",
                 "--trials", "in-process", "--output-file", "trials.json"]) == 0
    (folder / "resnet18_trace1.json").write_text('{"traceEvents": []}')
    old = folder / "old"
    old.mkdir()
    shutil.copy(HISTORY / "v1_c5b2321_training.json", old)
    shutil.copy(HISTORY / "v1_8aa20e1_sweep.json", old)
    (old / "older_tool.json").write_text(json.dumps(OLDER_TOOL))
    broken = folder / "broken"
    broken.mkdir()
    text = (folder / "trials.json").read_text()
    (broken / "corrupt.json").write_text(text[:len(text) // 2])
    (broken / "future.json").write_text(text.replace('"schema_version": 2',
                                                     '"schema_version": 3'))
    return folder


def report(capfd, *args):
    return run_main(capfd, *args, main=command.main)


def assert_error_after_reading(process, code: int, text: str) -> None:
    """A problem found once the files are read: the lines reading them printed, then one error
    line, the documented exit code, no traceback, nothing on standard output."""
    assert process.returncode == code, process.stderr
    lines = process.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and text in lines[-1], process.stderr
    assert sum(line.startswith("error") for line in lines) == 1
    assert "Traceback" not in process.stderr and process.stdout == ""


def as_json(process) -> dict:
    assert process.returncode == 0, process.stderr
    return json.loads(process.stdout)


def document(path) -> dict:
    return json.loads(Path(path).read_text())


# ---------------------------------------------------------------- reading and grouping

def test_every_file_is_read_or_named_on_one_line(results, capfd):
    process = report(capfd, str(results), "--format", "json")
    assert process.returncode == 0, process.stderr
    lines = process.stderr.strip().splitlines()
    assert f"left out 1 Kineto trace(s) (*trace<N>.json) in {results}" in lines
    for name in ("v1_c5b2321_training.json", "v1_8aa20e1_sweep.json"):
        assert f"read {results / 'old' / name}: schema version 1 (this tool writes 2)" in lines
    assert (f"read {results / 'old' / 'older_tool.json'}: a result of the older tool "
            f"(network, devices, batch and throughput only)") in lines
    corrupt, future = (f"skipped {results / 'broken' / name}" for name in
                       ("corrupt.json", "future.json"))
    assert any(line.startswith(corrupt + ": not JSON") for line in lines)
    assert any(line.startswith(future + ": schema version 3 is newer") for line in lines)
    # The sweep's rows are also in their own files: each counted once.
    assert "counted once: 4 result(s) found in two files" in process.stderr
    assert len(lines) == 7


def test_rows_are_grouped_by_the_settings_that_differ(results, capfd):
    [model] = as_json(report(capfd, str(results), "--format", "json"))["tables"]
    rows = model["rows"]
    # 4 sweep rows, the trials run, the v1 result, the v1 sweep's 2 rows, the older tool's.
    assert len(rows) == 9
    assert {"precision", "batch", "repeat"} <= set(model["varying"])
    assert model["common"]["network"] == "resnet18"
    assert "network" not in model["varying"]
    # The older tool's result does not record its mode: mode is a column, unknown there.
    assert "mode" in model["varying"] and "mode" not in model["common"]
    # Ordered by the varying settings: rows of one configuration stand together.
    order = [(row["settings"].get("precision"), row["settings"]["batch"]) for row in rows]
    firsts = [order.index(key) for key in dict.fromkeys(order)]
    assert all(order[i:j] == [order[i]] * (j - i) for i, j in zip(firsts, firsts[1:]))


def test_figures_are_the_documents_own(results, capfd):
    [model] = as_json(report(capfd, str(results), "--format", "json"))["tables"]
    by_source = {row["source"]: row for row in model["rows"]}
    trials = document(results / "trials.json")
    row = by_source[str(results / "trials.json")]
    assert row["figures"]["throughput"] == trials["Throughput [img/sec]"]
    assert row["figures"]["trial_count"] == 2
    assert row["figures"]["ci95_low"] == trials["trials"]["ci95_low"]
    assert row["figures"]["p99_ms"] == trials["timing"]["stats"]["p99_ms"]
    assert row["unit"] == "images/s" and row["figures"]["mfu"] is None     # no CPU peak
    older = by_source[str(results / "old" / "older_tool.json")]
    assert older["figures"] == {"throughput": 20.0, "trial_count": 1}
    failed = [r for r in model["rows"] if r["status"] != "ok"]
    assert [r["settings"]["batch"] for r in failed] == [1]
    assert "batch normalisation" in failed[0]["error"]


def test_the_text_table_names_its_units_intervals_and_unknowns(results, capfd):
    process = report(capfd, str(results))
    assert process.returncode == 0, process.stderr
    out = process.stdout
    assert "throughput [images/s]" in out and "95% CI" in out and "p99 [ms]" in out
    trials = document(results / "trials.json")["trials"]
    interval = f"[{units.rate(trials['ci95_low'])}, {units.rate(trials['ci95_high'])}]"
    assert interval in out
    assert "95% CI: the interval each result file states for its headline" in out
    assert "not known for any row: MFU (no datasheet peak" in out
    assert "energy (no telemetry" in out
    assert "#1 error: batch normalisation" in out or "error: batch normalisation" in out
    assert "Same in every row: network resnet18 · devices 1" in out
    # The older tool's result does not say its mode: the column shows it as unknown.
    assert "mode" in out.splitlines()[2].split()


def test_mfu_mbu_and_energy_where_the_results_know_them(capfd, tmp_path):
    """What the CPU cannot measure, as a GPU result stores it: MFU and MBU as percentages,
    energy per unit of throughput (an estimate marked), none of them guessed elsewhere."""
    gpu = document(HISTORY / "v2_17ac068_training.json")
    gpu["flops"].update(mfu=0.412, mbu=0.25, peak_tflops=989.0)
    gpu["telemetry"] = {"available": True, "source": "NVML 12", "energy_j": 500.0,
                        "joules_per_item": 5.0, "energy_estimated": True, "samples": []}
    gpu["env"].update(device_name="NVIDIA H100 80GB HBM3", time_utc="2026-11-25T01:00:00+00:00")
    (tmp_path / "gpu.json").write_text(json.dumps(gpu))
    process = report(capfd, str(tmp_path / "gpu.json"), str(HISTORY / "v2_17ac068_training.json"))
    assert process.returncode == 0, process.stderr
    header, _, cpu_row, gpu_row = process.stdout.splitlines()[2:6]
    assert header.split()[-3:] == ["MFU", "MBU", "J/image"]
    assert "41.2%" in gpu_row and "25.0%" in gpu_row and "~5.000" in gpu_row
    assert "NVIDIA H100" in gpu_row and "41.2%" not in cpu_row and "~" not in cpu_row
    assert "~: energy estimated from power samples" in process.stdout
    language = document(HISTORY / "v2_1e1a09d_generate.json")
    language["telemetry"] = {"available": True, "source": "amdsmi", "energy_j": 10.0,
                             "joules_per_item": 0.5, "energy_estimated": False, "samples": []}
    (tmp_path / "lm.json").write_text(json.dumps(language))
    [lm] = as_json(report(capfd, str(tmp_path / "lm.json"), "--format", "json"))["tables"]
    # Generated tokens are not processed tokens: named apart, never compared with them.
    assert lm["rows"][0]["unit"] == "generated tokens/s"
    # Energy is shared out over generated tokens by the run itself: no conversion here.
    assert lm["rows"][0]["figures"]["energy_per_unit"] == 0.5
    out = report(capfd, str(tmp_path / "lm.json")).stdout
    assert "J/generated token" in out and "throughput [generated tokens/s]" in out
    # Rows of two units in one table: each cell names its own.
    both = report(capfd, str(tmp_path / "lm.json"), str(tmp_path / "gpu.json")).stdout
    assert "0.5000 J/generated token" in both and "~5.000 J/image" in both
    assert " generated tokens/s" in both and " images/s" in both


# ---------------------------------------------------------------- the baseline

def _row_number(model, source, precision=None):
    return next(row["index"] for row in model["rows"] if row["source"] == source
                and (precision is None or row["settings"]["precision"] == precision))


def test_ratios_against_a_baseline_row(results, capfd):
    [model] = as_json(report(capfd, str(results), "--format", "json"))["tables"]
    base_file = results / "resnet18_training_fp32_b2.json"
    number = _row_number(model, str(base_file))
    base = document(base_file)["Throughput [img/sec]"]
    for selector in (str(number), str(base_file), "precision=fp32,batch=2,repeat=1"):
        [model] = as_json(report(capfd, str(results), "--format", "json", "--baseline",
                                 selector))["tables"]
        assert model["baseline"] == number
        for row in model["rows"]:
            ratio = row["versus_baseline"]["ratio"]
            if row["status"] != "ok":
                assert ratio is None
            else:
                assert ratio == pytest.approx(row["figures"]["throughput"] / base)
            # The baseline row is marked as such, not compared with itself.
            assert row["versus_baseline"]["is_baseline"] == (row["index"] == number)
    text = report(capfd, str(results), "--baseline", str(number)).stdout
    [line] = [line for line in text.splitlines() if line.split()[:1] == [str(number)]]
    assert line.split()[3] == "baseline" and "1.00x" not in line   # after the headline, CI
    assert "the ratio of headlines alone, not a significance test" in text


@pytest.mark.parametrize("selector, message", [
    ("precision=fp32,batch=2", "matches 4 rows"),
    ("precision=bf16", "matches none of the 9 rows"),
    ("99", "matches none of the 9 rows"),
    ("precision", "no such row number, file or SETTING=VALUE"),
    ("=fp32", "give a row number, a result file, or SETTING=VALUE"),
])
def test_a_baseline_must_name_exactly_one_row(results, capfd, selector, message):
    assert_error_after_reading(report(capfd, str(results), "--baseline", selector), 2, message)


def test_a_baseline_that_was_not_measured_is_refused(results, capfd):
    [model] = as_json(report(capfd, str(results), "--format", "json"))["tables"]
    [failed] = [row["index"] for row in model["rows"] if row["status"] != "ok"]
    process = report(capfd, str(results), "--baseline", str(failed))
    assert_error_after_reading(process, 2, "which was not measured (error)")


# ---------------------------------------------------------------- formats

def test_markdown_is_a_table_github_renders(results, capfd):
    process = report(capfd, str(results), "--format", "markdown")
    assert process.returncode == 0
    lines = [line for line in process.stdout.splitlines() if line.startswith("|")]
    cells = [len(re.findall(r"(?<!\\)\|", line)) for line in lines]
    assert len(set(cells)) == 1, "every row of the table has the same number of cells"
    assert set(lines[1]) <= set("|-:") and len(lines) == 2 + 9
    assert "**Model results: 9 rows**" in process.stdout


def test_markdown_shows_the_columns_that_fit_a_page_and_names_the_rest(results, capfd):
    """Issue 56: a 28-column markdown report; the rest are behind --all-columns."""
    def headings(*args):
        process = report(capfd, str(results), "--format", "markdown", *args)
        assert process.returncode == 0, process.stderr
        line = next(line for line in process.stdout.splitlines() if line.startswith("| \\#"))
        return process.stdout, line.strip("| ").split(" | ")
    text, page = headings()
    everything = headings("--all-columns")[1]
    assert len(everything) > table.MARKDOWN_COLUMNS == len(page)
    assert page == [heading for heading in everything if heading in page]     # in order
    left = [heading for heading in everything if heading not in page]
    assert f"- {len(left)} more columns with --all-columns: {', '.join(left)}" in text


def _noisy_rows(knobs: int = 0) -> list:
    """Four one-trial rows: two noisy (iteration CV 32% and 75%, flagged), two tight (0.5%),
    with ``knobs`` more settings that vary (enough push p50 off a markdown page)."""
    from microbench.store.entry import MODEL, Entry

    def row(index, throughput, cv):
        settings = {"network": "resnet50", "batch": 2 * (index + 1),
                    **{f"knob{k}": index * k for k in range(1, knobs + 1)}}
        return Entry(MODEL, f"r{index}.json", settings,
                     {"throughput": throughput, "p50_ms": 1000.0 / throughput, "cv": cv},
                     "images/s", flags=("noisy",) if cv > 0.1 else (), file=f"r{index}.json")
    return [row(0, 100.0, 0.32), row(1, 111.6, 0.75), row(2, 80.0, 0.005),
            row(3, 60.0, 0.005)]


def test_a_one_trial_ratio_inside_the_rows_noise_is_said_within_noise():
    """Issue 64: against a tight row, the noisy rows' ratios lie inside their band; a tight
    row's does not, and keeps the ratio alone."""
    tables = table.build_tables(collection.group_entries(_noisy_rows()), "3")
    text = table.render(tables, "text")
    assert "1.25x within noise (band 0.542-1.844)" in text
    assert "1.40x within noise (band 0.270-3.704)" in text
    [tight] = [line for line in text.splitlines() if line.startswith("4 ")]
    assert "0.75x" in tight and "noise" not in tight
    assert "said within noise where it lies inside the band" in text
    rows = json.loads(table.render(tables, "json"))["tables"][0]["rows"]
    versus = [row["versus_baseline"] for row in rows]
    assert [v["verdict"] for v in versus] == ["within noise", "within noise", None, None]
    assert versus[0]["noise_band"] == pytest.approx([0.542, 1.844], rel=1e-3)


def test_markdown_shows_the_noisy_mark_where_it_shows_its_legend():
    """Issue 64: the text table marks p50; a markdown page that leaves p50 out marks the
    headline instead, so the legend "*: noisy timing" always has a mark to explain."""
    tables = table.build_tables(collection.group_entries(_noisy_rows(knobs=8)))
    markdown = table.render(tables, "markdown")
    heading = next(line for line in markdown.splitlines() if line.startswith("| \\#"))
    assert "p50" not in heading                                       # left off the page
    assert "- \\*: noisy timing" in markdown
    assert "| 100.0\\* |" in markdown and "| 111.6\\* |" in markdown
    assert "| 80.00 |" in markdown                                   # a tight row: no mark
    text = table.render(tables, "text")
    assert "100.0*" not in text and "10.00*" in text                  # text: on p50, as before
    every = table.render(tables, "markdown", all_columns=True)
    assert "100.0\\*" not in every and "10.00\\*" in every


def test_a_page_keeps_the_setting_that_tells_rows_apart_however_late_it_comes():
    """Rows that differ only in quantize, beside rows that differ in many settings: the
    quantize column stays on the page, else two rows would look alike."""
    from microbench.store.entry import Entry
    def knobs(value):
        return {f"knob{n}": value for n in range(12)}
    entries = [Entry("model", f"k{n}.json", {**knobs(n + 1), "quantize": "none"},
                     {"throughput": 10.0 + n}, "images/s", identity=f"k{n}") for n in range(3)]
    entries += [Entry("model", f"q{name}.json", {**knobs(0), "quantize": name},
                      {"throughput": 5.0}, "images/s", identity=name)
                for name in ("none", "int8wo")]
    [built] = table.build_tables(collection.group_entries(entries))
    page, left = table.on_a_page(built)
    assert "quantize" in [column.heading for column in page.columns] and left
    assert len(page.columns) >= table.MARKDOWN_COLUMNS


def test_csv_has_raw_numbers_and_every_setting(results, capfd):
    process = report(capfd, str(results), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(process.stdout)))
    assert len(rows) == 9
    trials = next(row for row in rows if row["source"] == str(results / "trials.json"))
    assert float(trials["throughput"]) == document(results / "trials.json")[
        "Throughput [img/sec]"]
    assert trials["repeat"] == "2" and trials["precision"] == "fp32" and trials["mfu"] == ""
    assert {row["status"] for row in rows} == {"ok", "error"}


def test_op_bench_results_get_their_own_table(capfd):
    process = report(capfd, str(HISTORY / "ops_a7991ea.json"), str(HISTORY /
                                                                  "v1_c5b2321_training.json"))
    assert process.returncode == 0, process.stderr
    out = process.stdout
    assert "Model results: 1 row" in out and "Op bench results: 1 row" in out
    assert "median" in out and "GB/s" in out and "FLOP/s" in out
    # Each in the unit that reads best: us for a microsecond op, not 0.0056 ms.
    [row] = [line for line in out.split("Op bench results")[1].splitlines()
             if line.startswith("2 ")]
    assert re.search(r"\d (us|ms|s) ", row) and "FLOP/s" in row, row
    assert "Same in every row: op add · op type binary · shapes 64-64,64-64 · dtype fp32" in out
    # Rows are numbered across tables: the op is #2.
    assert "#2 " in out.split("Op bench results")[1]


# ---------------------------------------------------------------- the chart

def _entries_of_rows(rows):
    from microbench.output import files
    return [entry for row in rows for entry in
            entries_of(json.loads(json.dumps(files.result_document(row.summary))),
                       f"row-{row.spec.batch_size}-{row.spec.precision.name}.json")]


def _table(entries):
    return table.build_tables(collection.group_entries(entries))[0]


def test_chart_bars_are_those_of_a_sweeps_plot():
    """The same summaries through a sweep's --plot and through a result file: the same points
    and the same bars (p10-p90 of the per-iteration rate; the lowest and highest trial)."""
    from support.rows import measured_row
    from microbench.output import sweep_plot
    rows = [measured_row(2), measured_row(4, trials=[[10.0, 10.0], [20.0, 20.0]])]
    entries = _entries_of_rows(rows)
    for row, entry in zip(rows, entries):
        ours, theirs = chart.point_of(entry, "throughput"), sweep_plot.point_of(row.entry)
        assert (ours.value, ours.low, ours.high) == pytest.approx(
            (theirs.value, theirs.low, theirs.high))
    figure = chart.build_figure(_table(entries), "throughput")
    [axis] = figure.axes
    assert [label.get_text() for label in axis.get_xticklabels()] == ["2", "4"]
    assert axis.get_ylabel() == "throughput [images/s]"
    footnote = " ".join(" ".join(text.get_text().split()) for text in figure.texts)
    assert "the lowest to the highest trial (results with --repeat)" in footnote
    assert "10th to 90th percentile of the per-iteration rate" in footnote


def test_chart_series_by_precision_and_a_subtitle_of_what_is_shared():
    from support.rows import measured_row
    rows = [measured_row(b, precision=p) for p in ("fp32", "amp-bf16") for b in (2, 4, 8)]
    figure = chart.build_figure(_table(_entries_of_rows(rows)), "throughput")
    [axis] = figure.axes
    assert [text.get_text() for text in axis.get_legend().get_texts()] == ["amp-bf16", "fp32"]
    subtitle = figure._suptitle.get_text()
    assert "network resnet18" in subtitle and "image size 32" in subtitle
    assert axis.get_title() == "throughput by batch"
    latency = chart.build_figure(_table(_entries_of_rows(rows)), "latency").axes[0]
    assert latency.get_ylabel() == "median iteration time [ms]"


def test_the_default_axis_is_a_setting_of_the_work_never_how_it_was_measured():
    """A mixed folder charted "throughput by repeat" (issue 45): repeat, iterations and the
    like are how a result was measured; the axis is the setting of the work that splits the
    rows, a number first."""
    from support.rows import measured_row
    rows = [measured_row(2, repeat=3), measured_row(2, repeat=3, network="resnet34"),
            measured_row(2, network="alexnet", image_size=64), measured_row(4, iterations=7)]
    built = _table(_entries_of_rows(rows))
    assert {"repeat", "iterations", "batch", "network"} <= set(built.group.varying)
    assert chart.choose_x(built, None) == "batch"
    same_batch = _table(_entries_of_rows(rows[:3]))
    assert chart.choose_x(same_batch, None) == "image size"
    assert chart.choose_x(_table(_entries_of_rows([rows[0], measured_row(2, seed=5)])),
                          None) not in ("repeat", "seed")
    assert chart.choose_x(built, "repeat") == "repeat"           # asked for: drawn


def test_language_rows_are_drawn_in_their_own_unit_in_a_panel_of_their_own():
    from support.rows import measured_row
    rows = [measured_row(b) for b in (2, 4)] + [
        measured_row(b, network="llama_tiny", image_size=None, seq_len=16, vocab_size=128,
                     mode="inference") for b in (1, 2)]
    figure = chart.build_figure(_table(_entries_of_rows(rows)), "throughput")
    assert sorted(axis.get_ylabel() for axis in figure.axes) == ["throughput [images/s]",
                                                                 "throughput [tokens/s]"]
    assert all(axis.lines for axis in figure.axes)
    assert "Not drawn" not in " ".join(text.get_text() for text in figure.texts)
    for axis in figure.axes:                       # no point on the frame
        top = max(max(line.get_ydata()) for line in axis.lines)
        assert axis.get_ylim()[1] >= top * 1.05


def test_the_page_shows_the_name_and_headline_columns_first_and_pins_them(tmp_path):
    """A 26-column table kept TTFT and ITL off a 1,400 px screen: on the page the row number
    and the name stay pinned and the headline figures follow them."""
    from support.rows import measured_row
    from microbench.report import page
    rows = [measured_row(2, network=name, precision=p) for name in ("resnet18", "alexnet")
            for p in ("fp32", "tf32")]
    built = _table(_entries_of_rows(rows))
    keys = [column.key for column in page.page_columns(built)]
    assert keys[:3] == ["#", "network", "throughput"]
    assert keys.index("precision") > keys.index("throughput")
    text = page.html_page([built], [])
    assert '<th class="number pin0">#</th><th class="pin1">network</th>' in text
    assert "position: sticky" in text


def test_plot_file_from_the_command(results, capfd, tmp_path):
    path = tmp_path / "batch.png"
    sweep = next(results.glob("sweep_*.json"))
    process = report(capfd, str(sweep), "--plot", str(path))
    assert process.returncode == 0, process.stderr
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert f"Chart : {path}" in process.stderr          # every file written is named


@pytest.mark.parametrize("args, code, message", [
    (["--plot", "{tmp}/nowhere/p.png"], 2, "does not exist"),
    (["--plot", "{tmp}/p.xyz"], 2, "suffix names the format"),
    (["--html", "{tmp}"], 2, "is a directory"),
    (["--plot", "{tmp}/p.png", "--x", "colour"], 2, "--x colour: not a setting that varies"),
    (["--plot", "{tmp}/p.png", "--metric", "gbs"], 2, "--metric gbs applies to op"),
])
def test_chart_and_page_problems_are_one_line_and_write_nothing(results, capfd, tmp_path,
                                                              args, code, message):
    args = [arg.format(tmp=tmp_path) for arg in args]
    process = report(capfd, str(results), *args)
    if "--x" in args or "--metric" in args:          # known once the results are read
        assert_error_after_reading(process, code, message)
    else:                                             # output paths: before anything is read
        assert_one_line_error(process, code, message)
    assert process.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# ---------------------------------------------------------------- the web page

def test_the_page_is_self_contained(results, capfd, tmp_path):
    page = tmp_path / "report.html"
    process = report(capfd, str(results), "--html", str(page), "--baseline",
                     str(results / "trials.json"))
    assert process.returncode == 0, process.stderr
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and '<img class="chart"' in text
    assert 'src="data:image/png;base64,' in text
    for outside in ("http://", "https://", "<script", "<link", "@import", "url("):
        assert outside not in text
    assert text.count("<tr") == 1 + 9


def test_a_failed_run_leaves_an_existing_page_as_it_was(results, capfd, tmp_path):
    page = tmp_path / "report.html"
    page.write_text("previous")
    process = report(capfd, str(results), "--html", str(page), "--baseline", "99")
    assert_error_after_reading(process, 2, "matches none")
    assert page.read_text() == "previous"


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") \
    or shutil.which("google-chrome")


def screenshot(html: Path, png: Path, profile: Path) -> str:
    """Render ``html`` in headless Chromium; its log (console messages are 'CONSOLE' lines)."""
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
         "--window-size=1400,1200", f"--screenshot={png}", html.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stderr


def colours(png: Path) -> int:
    from matplotlib.image import imread
    pixels = imread(str(png))
    return len({tuple(pixel) for pixel in pixels[::7, ::7].reshape(-1, pixels.shape[-1])})


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium)")
def test_the_page_renders_in_headless_chromium_without_console_errors(results, capfd,
                                                                      tmp_path):
    page = tmp_path / "report.html"
    assert report(capfd, str(results), "--html", str(page)).returncode == 0
    log = screenshot(page, tmp_path / "page.png", tmp_path / "profile")
    assert "CONSOLE" not in log, log[-2000:]
    assert (tmp_path / "page.png").stat().st_size > 10_000
    assert colours(tmp_path / "page.png") > 20                # text, table rules, the chart
    # The check sees console errors when there are some.
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><title>x</title><script>console.error('boom')</script>")
    assert "boom" in screenshot(bad, tmp_path / "bad.png", tmp_path / "profile2")


# ---------------------------------------------------------------- bad inputs

@pytest.mark.parametrize("setup, message", [
    (lambda tmp: str(tmp / "none.json"), "none.json: no such file or directory"),
    (lambda tmp: (tmp / "empty").mkdir() or str(tmp / "empty"),
     "empty: no *.json result files in this directory"),
    (lambda tmp: (tmp / "t").mkdir() or (tmp / "t" / "a_trace1.json").write_text("{}")
     and str(tmp / "t"), "no *.json result files"),
    (lambda tmp: os.devnull, "is a device, not a regular file"),
    (lambda tmp: "", "an empty path was given"),
])
def test_bad_paths_are_one_line_and_exit_2(capfd, tmp_path, setup, message):
    assert_one_line_error(report(capfd, setup(tmp_path)), 2, message)


@pytest.mark.parametrize("args, message", [
    (["--metric", "latency"], "--metric chooses what the chart draws: give --plot FILE"),
    (["--x", "batch"], "--x chooses what the chart draws"),
    (["--title", "nightly"], "--title names the --html page"),
    (["--all-columns"], "--all-columns widens the markdown table"),
])
def test_flags_that_would_not_take_effect_are_refused(capfd, args, message):
    assert_one_line_error(report(capfd, str(HISTORY), *args), 2, message)


def test_a_file_larger_than_a_result_can_be_is_refused_unread(capfd, tmp_path, monkeypatch):
    monkeypatch.setattr(collection, "MAX_INPUT_BYTES", 100)
    big = tmp_path / "big.json"
    big.write_text(json.dumps(OLDER_TOOL) + " " * 200)
    assert_one_line_error(report(capfd, str(big)), 2, "more than the 100 a result file can")


def test_nothing_readable_is_exit_2_after_naming_each_file(capfd, tmp_path):
    (tmp_path / "a.json").write_text("{")
    (tmp_path / "b.json").write_text("[]")
    (tmp_path / "benchmark_summary.csv").write_text("time_utc,network\n")
    process = report(capfd, str(tmp_path), str(tmp_path / "benchmark_summary.csv"))
    assert process.returncode == 2 and "Traceback" not in process.stderr
    lines = process.stderr.strip().splitlines()
    assert lines[0].startswith(f"skipped {tmp_path / 'a.json'}: not JSON")
    assert lines[1].startswith(f"skipped {tmp_path / 'b.json'}: not a result of this tool")
    assert lines[2].startswith(f"skipped {tmp_path / 'benchmark_summary.csv'}: a CSV; the "
                               f"report reads the JSON results")
    assert lines[3] == ("error: no result to report: none of the 3 file(s) read is a result "
                        "of this tool (see the lines above)")


def _run_command(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "microbench.report", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def test_a_fifo_and_dev_zero_are_refused_without_reading(tmp_path):
    """As a process: a FIFO nobody writes would block a reader forever, /dev/zero never ends."""
    fifo = tmp_path / "results.json"
    os.mkfifo(fifo)
    assert_one_line_error(_run_command(str(fifo)), 2, "is a FIFO, not a regular file")
    assert_one_line_error(_run_command("/dev/zero"), 2, "is a device, not a regular file")


def test_the_command_reads_results_without_importing_torch(results):
    code = ("import sys; from microbench.report.command import main; "
            f"code = main([{str(results / 'trials.json')!r}]); "
            "print('torch imported:', 'torch' in sys.modules); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "torch imported: False" in done.stdout and "throughput [images/s]" in done.stdout


# ---------------------------------------------------------------- layout for people

def _model_entry(number, network, mode, batch, data_images=None, unit="images/s"):
    from microbench.store.entry import Entry
    settings = {"network": network, "mode": mode, "batch": batch, "data images": data_images}
    return Entry("model", f"r{number}.json", settings,
                 {"throughput": 10.0 + number, "ci95_low": 9.0, "ci95_high": 12.0 + number,
                  "trial_count": 3}, unit, time_utc=f"2026-11-25T09:{number:02d}:00",
                 identity=str(number))


def test_the_headline_comes_first_and_only_settings_that_split_rows_are_columns():
    """#, the headline and its interval, then the settings that split the rows, the one that
    sets the most rows apart first; when each ran and a setting that only some rows have go to
    the file list."""
    entries = [_model_entry(n, network, mode, batch,
                            data_images=4096 if network == "resnet50" else None)
               for n, (network, mode, batch) in enumerate(
                   [(net, mode, batch) for net in ("resnet18", "resnet50", "vgg11")
                    for mode in ("training", "inference") for batch in (2, 4, 8)][:15])]
    [built] = table.build_tables(collection.group_entries(entries), baseline="1")
    headings = [column.heading for column in built.columns]
    # Batch sets 10 of the 15 rows apart from its most common value, network 9, mode 6.
    assert headings[:7] == ["#", "throughput [images/s]", "95% CI", "vs #1", "batch",
                            "network", "mode"]
    assert "run at" not in headings and "data images" not in headings
    [line] = [file_line(built, i, e) for i, e in built.rows if e.settings["data images"]][:1]
    assert re.match(r"#\d+ r\d+\.json \(run at 2026-11-25 09:\d\d:00; data images 4096\)$",
                    line), line
    text = table.render_text([built])
    assert "data images 4096" in text.split("Files:")[1]


def test_a_long_subtitle_wraps_inside_the_figure_and_many_series_keep_distinct_colours():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    entries = [dataclasses.replace(_model_entry(n, f"net{n}", "training", batch),
                                   settings={"network": f"net{n}", "batch": batch,
                                             "device": "AMD Instinct MI300X VF " * 8})
               for n in range(12) for batch in (2, 4)]
    figure = chart.build_figure(_table(entries), "throughput")
    FigureCanvasAgg(figure).draw()
    box, width = figure._suptitle.get_window_extent(), figure.bbox.width
    assert "\n" in figure._suptitle.get_text() and 0 <= box.x0 and box.x1 <= width
    from matplotlib.colors import to_hex
    colours = {to_hex(container.lines[0].get_color()) for container in figure.axes[0].containers}
    assert len(figure.axes[0].containers) == 12 and len(colours) == 12


def test_the_op_chart_is_drawn_per_op_not_across_its_iterations():
    from microbench.store.entry import Entry
    entries = [Entry("op", f"o{n}.json", {"op": op, "iterations": iters, "shapes": "8"},
                     {"median_ms": 0.01 * (n + 1)}, "ms", identity=str(n))
               for n, (op, iters) in enumerate([("add", 5), ("mul", 5), ("add", 10)])]
    built = _table(entries)
    assert chart.choose_x(built, None) == "op"


def test_the_cpu_run_of_the_data_chart_asks_about_the_cpu():
    from types import SimpleNamespace
    import torch
    from microbench.output import sweep_plot

    def row(kind):
        return SimpleNamespace(spec=SimpleNamespace(device=torch.device(kind)))
    assert sweep_plot._question([row("cpu")]) == "Is the model on the CPU waiting for data?"
    assert sweep_plot._question([row("cuda")]) == "Is the GPU waiting for data?"


def _mixed_folder(results: Path, folder: Path) -> Path:
    """Fifteen model results of mixed kinds and versions: the fixture's (a sweep, trials, older
    versions, the older tool), the history's (training, generation), and copies of a result as
    other devices and a --data run would write them (a long device name, data images)."""
    shutil.copytree(results, folder, ignore=shutil.ignore_patterns("broken"))
    for name in ("v2_17ac068_training.json", "v2_1e1a09d_generate.json",
                 "v2_62b9ba6_training.json", "ops_a7991ea.json"):
        shutil.copy(HISTORY / name, folder)
    base = json.loads((results / "trials.json").read_text())
    for number, device in enumerate(["AMD Instinct MI300X VF", "NVIDIA H100 80GB HBM3",
                                     "NVIDIA H200 Tensor Core GPU with a long marketing name"]):
        copy = json.loads(json.dumps(base))
        copy["env"]["device_name"] = device
        copy["env"]["time_utc"] = f"2026-11-2{number}T10:00:00Z"
        copy["config"]["data_images"] = 32 * (number + 1)       # not applying: synthetic
        (folder / f"copy{number}.json").write_text(json.dumps(copy))
    return folder


def _headline_edge(page: Path, profile: Path) -> tuple[float, float]:
    """The right edge of the first table's headline columns (name, throughput, TTFT, ITL) and
    the window's width, in CSS pixels, as headless Chromium lays the page out at 1,400 px (a
    copy of the page with a script that writes them into its title: the page itself has no
    script)."""
    probe = page.with_name("probe.html")
    probe.write_text(page.read_text().replace("</body>", (
        "<script>const ths = [...document.querySelector('table').querySelectorAll('th')]"
        ".filter(th => /^(network|throughput|TTFT|ITL)/.test(th.textContent));"
        "document.title = 'EDGE ' + Math.max(...ths.map(th => th.getBoundingClientRect()"
        ".right)) + ' ' + document.documentElement.clientWidth + ' ' + "
        "ths.map(th => th.textContent).join(',');</script></body>")))
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--window-size=1400,1000", "--dump-dom",
         probe.as_uri()], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r"<title>EDGE ([\d.]+) ([\d.]+) ([^<]*)</title>", done.stdout)
    assert found, done.stdout[:2000]
    assert found.group(3).startswith("network,throughput") and "TTFT" in found.group(3) \
        and "ITL" in found.group(3), found.group(3)
    return float(found.group(1)), float(found.group(2))


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium)")
def test_the_page_shows_the_headline_at_1400_px_without_scrolling(results, capfd, tmp_path):
    folder = _mixed_folder(results, tmp_path / "mixed")
    page = tmp_path / "report.html"
    shown = report(capfd, str(folder), "--html", str(page), "--baseline",
                   str(folder / "trials.json"))
    assert shown.returncode == 0, shown.stderr
    [model] = as_json(report(capfd, str(folder), "--format", "json"))["tables"][:1]
    assert len(model["rows"]) >= 15
    edge, width = _headline_edge(page, tmp_path / "profile")
    assert edge <= width <= 1400


def test_the_readme_report_example_runs_on_a_folder_with_an_ab_and_a_sweep(results, capfd,
                                                                            tmp_path):
    """Issue 56: the README's report line named a baseline that three rows of an ordinary
    folder matched (exit 2); it runs here, as printed, on a folder the README's own commands
    leave: an A/B beside a sweep (the module's sweep and trials files)."""
    from microbench.main import main
    folder = tmp_path / "results"
    folder.mkdir()
    for path in results.glob("*.json"):
        shutil.copy(path, folder)
    assert main(["--output-dir", str(folder), "--network", "resnet18", *TINY, "--device", "cpu",
                 "--mode", "inference", "--quiet", "--trials", "in-process", "--repeat", "2",
                 "--ab", "--nhwc"]) == 0
    [line] = [line for line in (ROOT / "README.md").read_text().splitlines()
              if line.startswith("microbench-report results ")]
    files = {"results": str(folder), "report.png": str(tmp_path / "report.png"),
             "report.html": str(tmp_path / "report.html")}
    process = report(capfd, *[files.get(word, word) for word in line.split()[1:]])
    assert process.returncode == 0, process.stderr
    assert "baseline" in process.stdout and "A/B" in process.stdout
    assert (tmp_path / "report.png").stat().st_size and (tmp_path / "report.html").stat().st_size
