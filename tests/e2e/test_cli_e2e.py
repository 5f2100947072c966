"""The CLI end to end on tiny inputs on the CPU: console, JSON, CSV and exit codes.

The first test runs the real entry script in a subprocess; the others call main() in-process
through the ``cli`` fixture, which is the same code path without 6-8 s of imports each.
"""
import csv
import json
import multiprocessing

import pytest

from conftest import TINY, assert_one_line_error, run_cli
from microbench.output import files
from microbench.platform import writing

LEGACY_LINES = ("Microbenchmark for network : ", "Num devices: ", "Dtype: ",
                "Mini batch size [img] : ", "Time per mini-batch : ", "Throughput [img/sec] : ")
LEGACY_KEYS = ("Name", "GPUs", "Mini batch size [img]", "Mini batch size [img/gpu]",
               "Throughput [img/sec]", "Time per mini-batch")


def only_json(out_dir):
    files = sorted(out_dir.glob("*.json"))
    assert len(files) == 1, files
    return files[0], json.loads(files[0].read_text())


@pytest.mark.slow
def test_training_run_prints_summary_and_writes_json_and_csv(tmp_path):
    out_dir = tmp_path / "results"
    process = run_cli("--network", "resnet18", *TINY, "--output-dir", str(out_dir))
    assert process.returncode == 0, process.stderr
    out = process.stdout
    assert "running on the CPU" in out
    for line in LEGACY_LINES:
        assert line in out
    assert "Dtype: FP32" in out and "Iteration 1: Loss = " in out
    for label in ("p99", "(CV of 2 iterations)", "Peak memory           : not tracked on the CPU",
                  "Time per image", "Warm-up               : 1 iterations in"):
        assert label in out
    # The headline stands between two rules, right after the older tool's lines.
    lines = out.splitlines()
    headline = lines.index("=" * 60) + 1
    assert lines[headline].startswith("resnet18 training: ") and "images/s" in lines[headline]
    assert "on the CPU" in lines[headline] and lines[headline + 1] == "=" * 60
    path, doc = only_json(out_dir)
    assert path.name == "resnet18_training_fp32_b2.json"
    for key in LEGACY_KEYS:
        assert key in doc
    stats, samples = doc["timing"]["stats"], doc["timing"]["samples_ms"]
    assert len(samples) == 2 and stats["count"] == 2
    assert stats["mean_ms"] == pytest.approx(sum(samples) / 2)
    assert doc["Throughput [img/sec]"] == pytest.approx(2 * 2 / (sum(samples) / 1e3))
    assert doc["Time per mini-batch"] == pytest.approx(stats["mean_ms"] / 1e3)
    assert doc["config"]["network"] == "resnet18" and doc["env"]["torch"]
    assert len(doc["losses"]) == 2
    rows = list(csv.DictReader((out_dir / "benchmark_summary.csv").open()))
    assert len(rows) == 1 and rows[0]["network"] == "resnet18"
    assert float(rows[0]["throughput_img_s"]) == pytest.approx(doc["Throughput [img/sec]"], rel=1e-3)


def test_inference_bf16_amp_nhwc_and_quiet(cli):
    process, out_dir = cli("--network", "mobilenet_v3_small", "--mode", "inference", "--amp",
                           "--amp-dtype", "bf16", "--nhwc", "--quiet", *TINY)
    assert process.returncode == 0, process.stderr
    assert "Dtype: AMP-BF16" in process.stdout and "Iteration 0" not in process.stdout
    path, doc = only_json(out_dir)
    assert path.name == "mobilenet_v3_small_inference_amp-bf16_nhwc_b2.json"
    assert doc["losses"] == []


@pytest.mark.parametrize("flags, dtype", [(["--fp16", "1"], "FP16"),
                                          (["--amp"], "AMP-FP16"),
                                          (["--amp-opt-level", "2"], "FP16")])
def test_half_precision_training_runs(cli, flags, dtype):
    process, _ = cli("--network", "resnet18", *flags, *TINY)
    assert process.returncode == 0, process.stderr
    assert f"Dtype: {dtype}" in process.stdout


def test_amp_opt_level_prints_its_mapping(cli):
    process, _ = cli("--network", "resnet18", "--amp-opt-level", "1", "--no-files", *TINY)
    assert "Note: --amp-opt-level 1 (APEX O1) is mapped to native precision mode 'amp-fp16'" \
        in process.stdout


@pytest.mark.slow
def test_compile_reports_compile_time(cli):
    process, out_dir = cli("--network", "squeezenet1_1", "--mode", "inference", "--compile",
                           "--compileContext", "{'fullgraph': 'True'}", *TINY)
    assert process.returncode == 0, process.stderr
    assert "compile + first iteration" in process.stdout
    _, doc = only_json(out_dir)
    assert doc["timing"]["compile_s"] > 0
    assert doc["config"]["compile_options"] == {"fullgraph": True}


def test_list_networks(cli):
    process, _ = cli("--list-networks")
    names = process.stdout.split()
    assert process.returncode == 0 and "resnet50" in names and "SqueezeNet1.1" in names


def test_second_run_appends_a_row_under_one_header(cli):
    for network in ("resnet18", "squeezenet1_1"):
        process, out_dir = cli("--network", network, "--mode", "inference", *TINY)
        assert process.returncode == 0, process.stderr
    lines = (out_dir / "benchmark_summary.csv").read_text().splitlines()
    assert len(lines) == 3 and lines[0].startswith("time_utc,")


@pytest.mark.parametrize("argv, code, text", [
    (["--network", "resnet05"], 2, "did you mean resnet50"),
    (["--batch-size", "0"], 2, "positive integer"),
    (["--iterations", "-1"], 2, "positive integer"),
    (["--compile", "--compileContext", "{'mode': "], 2, "dict literal"),
    (["--fp16", "1", "--amp"], 2, "choose one"),
    (["--device", "cuda"], 4, "asked for a GPU"),
    (["--device", "tpu"], 2, "--device"),
    (["--network", "inception_v3", "--image-size", "32"], 2, "at least 96"),
    (["--network", "mvit_v2_s", "--image-size", "112"], 2, "224x224 input only"),
])
def test_bad_input_gives_one_line_and_exit_code(cli, argv, code, text):
    process, _ = cli(*argv)
    assert_one_line_error(process, code, text)


def test_out_of_memory_exits_3_with_advice(cli):
    # A batch no machine can hold (50 PB of input), within the flags' bounds: the CPU allocator
    # refuses it at once.
    process, _ = cli("--network", "resnet18", "--batch-size", "1000000", "--image-size", "2048",
                     "--iterations", "1")
    assert_one_line_error(process, 3, "out of memory")
    assert "--batch-size" in process.stderr


def test_unwritable_output_dir_fails_before_running(cli, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    process, _ = cli("--network", "resnet18", *TINY, "--output-dir", str(blocker / "sub"))
    assert_one_line_error(process, 2, "cannot write results")
    assert "Warming up" not in process.stdout


def test_csv_with_another_header_is_refused(cli, tmp_path):
    foreign = tmp_path / "foreign.csv"
    foreign.write_text("a,b,c\n1,2,3\n")
    process, _ = cli("--network", "resnet18", "--csv-file", str(foreign), *TINY)
    assert_one_line_error(process, 2, "different CSV header")
    assert foreign.read_text() == "a,b,c\n1,2,3\n"


def _append_rows(path, worker, count):
    row = {column: f"w{worker}" for column in files.CSV_COLUMNS}
    for index in range(count):
        files.append_csv({**row, "iterations": index}, path)


@pytest.mark.slow
def test_concurrent_appends_never_interleave(tmp_path):
    path = str(tmp_path / "shared.csv")
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_append_rows, args=(path, w, 40)) for w in range(4)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(60)
    rows = list(csv.reader(open(path)))
    assert rows[0] == list(files.CSV_COLUMNS)
    assert len(rows) == 1 + 4 * 40
    for row in rows[1:]:
        assert len(row) == len(files.CSV_COLUMNS) and row[0] in {"w0", "w1", "w2", "w3"}
        iterations = files.CSV_COLUMNS.index("iterations")
        assert all(cell == row[0] for i, cell in enumerate(row) if i != iterations)


def test_json_is_written_whole(tmp_path, monkeypatch):
    target = tmp_path / "result.json"
    target.write_text('{"previous": true}')

    class Unserialisable:
        def __repr__(self):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        writing.write_json(str(target), {"bad": float("nan"), "x": Unserialisable()})
    assert json.loads(target.read_text()) == {"previous": True}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_output_file_gets_the_json_suffix_the_older_tool_gave_it(cli):
    process, out_dir = cli("--network", "resnet18", "--mode", "inference", "--output-file",
                           "run1", *TINY)
    assert process.returncode == 0, process.stderr
    assert sorted(p.name for p in out_dir.glob("*.json")) == ["run1.json"]
    process, out_dir = cli("--network", "resnet18", "--mode", "inference", "--output-file",
                           "run2.json", *TINY)
    assert sorted(p.name for p in out_dir.glob("*.json")) == ["run1.json", "run2.json"]


def test_json_is_strict_json_with_nan_as_null(tmp_path):
    target = tmp_path / "r.json"
    writing.write_json(str(target), {"cv": float("nan"), "ok": 1.5})
    assert json.loads(target.read_text(), parse_constant=lambda c: pytest.fail(c)) == \
        {"cv": None, "ok": 1.5}
