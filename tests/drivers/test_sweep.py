"""Sweeps, the max-batch search, --compare and --plot (CPU)."""
import csv
import json

import pytest

from conftest import assert_one_line_error, run_main
from microbench.drivers import capacity
from microbench.plan import cli
from microbench.platform.errors import UsageError

QUICK = ["--image-size", "32", "--iterations", "2", "--warmup", "1"]


@pytest.fixture
def run_cli(capfd):
    """The CLI in-process (a sweep or a search is the same code path as the script)."""
    return lambda *args: run_main(capfd, *args)


@pytest.mark.parametrize("limit", [0, 1, 7, 64, 65, 100, 129, 1000, 4095])
def test_max_batch_search_finds_the_fake_memory_limit(limit):
    result = capacity.find_max_batch(lambda batch: batch <= limit, start=64, limit=4096)
    assert result.largest == limit and not result.hit_limit
    assert all(ok == (batch <= limit) for batch, ok in result.tries)
    assert len(result.tries) <= 2 * 13, "doubling then bisecting stays logarithmic"


def test_max_batch_search_stops_at_its_limit():
    result = capacity.find_max_batch(lambda batch: True, start=3, limit=20)
    assert (result.largest, result.hit_limit) == (20, True)
    assert [batch for batch, _ in result.tries] == [3, 6, 12, 20]


@pytest.mark.slow
def test_a_2x2_sweep_writes_four_rows(tmp_path, run_cli):
    process = run_cli("--network", "resnet18", "--batch-size", "2,4", "--precision",
                      "fp32,amp-bf16", *QUICK, "--output-dir", str(tmp_path),
                      "--plot", str(tmp_path / "sweep.png"))
    assert process.returncode == 0, process.stderr
    rows = list(csv.DictReader((tmp_path / "benchmark_summary.csv").open()))
    assert [(r["batch_size"], r["precision"]) for r in rows] == [
        ("2", "fp32"), ("4", "fp32"), ("2", "amp-bf16"), ("4", "amp-bf16")]
    assert all(r["status"] == "ok" for r in rows)
    assert "Sweep comparison" in process.stdout and "1.00x" in process.stdout
    [sweep_json] = tmp_path.glob("sweep_*.json")
    assert len(json.loads(sweep_json.read_text())["rows"]) == 4
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_failing_row_does_not_stop_the_sweep(tmp_path, run_cli):
    # inception_v3 refuses 32 px inputs: that row fails, the other runs.
    process = run_cli("--network", "inception_v3,resnet18", "--batch-size", "2", *QUICK,
                      "--output-dir", str(tmp_path))
    assert process.returncode == 0, process.stderr
    rows = list(csv.DictReader((tmp_path / "benchmark_summary.csv").open()))
    assert [r["status"] for r in rows] == ["error", "ok"]
    assert "at least 96" in rows[0]["error"] and rows[0]["throughput_img_s"] == ""
    assert "[1/2] inception_v3 training fp32 b2: error:" in process.stdout


@pytest.mark.slow
def test_find_max_batch_benchmarks_the_largest_fit(tmp_path, run_cli):
    process = run_cli("--network", "resnet18", "--find-max-batch", "--batch-size", "2",
                      "--max-batch-limit", "5", "--memory-budget-gb", "8", *QUICK,
                      "--output-dir", str(tmp_path))
    assert process.returncode == 0, process.stderr
    assert "Largest batch that fits: 5 (the --max-batch-limit; more may fit)" in process.stdout
    assert "Mini batch size [img] : 5" in process.stdout
    notes = [line for line in process.stdout.splitlines() if line.startswith("Note: ")]
    assert len(set(notes)) == len(notes), notes          # each note once (No GPU found)


@pytest.mark.parametrize("limit", [5, 8, 100, 129, 1000, 4095])
def test_the_search_stops_at_a_multiple_of_the_granularity(limit):
    exact = capacity.find_max_batch(lambda batch: batch <= limit, start=1, limit=4096)
    round_ = capacity.find_max_batch(lambda batch: batch <= limit, start=1, limit=4096,
                                     granularity=8)
    expected = limit // 8 * 8 if limit >= 8 else 4          # 1, 2, 4 from the doubling
    assert round_.largest == expected and all(ok == (b <= limit) for b, ok in round_.tries)
    assert len(round_.tries) <= len(exact.tries) - (3 if limit > 16 else 0)


def test_find_max_batch_on_the_cpu_needs_a_memory_budget(tmp_path, run_cli):
    process = run_cli("--network", "resnet18", "--find-max-batch", *QUICK,
                      "--output-dir", str(tmp_path))
    assert_one_line_error(process, 2, "--memory-budget-gb")
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


class FakeHostMemory(capacity.HostMemory):
    """Peak resident memory of 1 GB plus 100 MB per image of the last probe."""

    def __init__(self):
        self.resets, self.last = 0, 0

    def available(self):
        return True

    def reset_peak(self):
        self.resets += 1

    def peak_bytes(self):
        return 1e9 + 100e6 * self.last


def test_a_cpu_probe_fails_beyond_the_host_budget():
    memory = FakeHostMemory()

    def probe(batch):
        memory.last = batch
        return True

    fits = capacity.within_host_budget(probe, 2.5e9, memory)
    found = capacity.find_max_batch(fits, start=1, limit=4096)
    assert found.largest == 15 and memory.resets == len(found.tries)


def test_host_budget_problems_are_named():
    memory = FakeHostMemory()
    assert "bound it with --memory-budget-gb" in capacity.host_budget_problem(None, memory, 8e9)
    assert "more than this machine" in capacity.host_budget_problem(16, memory, 8e9)
    assert capacity.host_budget_problem(4, memory, 8e9) is None


def test_the_host_memory_reader_parses_proc_status(tmp_path):
    (tmp_path / "status").write_text("Name:\tpython\nVmHWM:\t  204800 kB\nVmRSS:\t1 kB\n")
    (tmp_path / "clear_refs").write_text("")
    memory = capacity.HostMemory(str(tmp_path))
    memory.reset_peak()
    assert memory.available() and memory.peak_bytes() == 204800 * 1024
    assert (tmp_path / "clear_refs").read_text() == "5"


def test_a_batch_that_passes_the_probe_but_not_the_run_is_searched_below():
    """The probe admits up to 100, the full run only up to 97 (as at the edge on a real GPU)."""
    probed, ran = [], []

    def fits(batch):
        probed.append(batch)
        return batch <= 100

    def run(batch):
        ran.append(batch)
        return "result" if batch <= 97 else None

    found, outcome = capacity.largest_that_runs(fits, run, start=64, limit=4096)
    assert (found.largest, outcome) == (97, "result")
    assert ran == [100, 99, 98, 97]
    assert len(probed) == len(set(probed)), "each batch is probed once"


def test_single_value_batch_norm_is_a_usage_error(cli):
    process, _ = cli("--network", "resnet18", "--batch-size", "1", *QUICK)
    assert_one_line_error(process, 2, "larger --batch-size or --image-size")


def baseline_from(run_cli, tmp_path, throughput_factor):
    """A real result, with its throughput scaled to fake a better or worse baseline."""
    out = tmp_path / "base"
    assert run_cli("--network", "resnet18", "--batch-size", "2", *QUICK, "--output-dir",
                   str(out)).returncode == 0
    [path] = out.glob("*.json")
    doc = json.loads(path.read_text())
    doc["Throughput [img/sec]"] *= throughput_factor
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.slow
def test_compare_exits_5_on_a_regression_and_0_on_an_improvement(tmp_path, run_cli):
    much_faster_baseline = baseline_from(run_cli, tmp_path, 100.0)
    process = run_cli("--network", "resnet18", "--batch-size", "2", *QUICK, "--no-files",
                      "--compare", str(much_faster_baseline))
    assert_one_line_error(process, 5, "throughput regressed")
    assert "Comparison with" in process.stdout
    much_slower_baseline = baseline_from(run_cli, tmp_path / "b", 0.01)
    process = run_cli("--network", "resnet18", "--batch-size", "2", *QUICK, "--no-files",
                      "--compare", str(much_slower_baseline))
    assert process.returncode == 0, process.stderr
    assert "faster (one trial on a side: the point ratio, noise not tested)" in process.stdout
    assert "Gate passed" in process.stdout


def test_compare_refuses_another_configuration(tmp_path, run_cli):
    baseline = baseline_from(run_cli, tmp_path, 1.0)
    process = run_cli("--network", "resnet18", "--batch-size", "4", *QUICK, "--no-files",
                      "--compare", str(baseline))
    assert_one_line_error(process, 2, "another configuration")


@pytest.mark.parametrize("argv, message", [
    (["--precision", "fp32,amp", "--amp"], "replaces --fp16"),
    (["--compile-mode", "default", "--compile"], "replaces --compile"),
    (["--batch-size", "2,4", "--output-file", "x.json"], "a sweep writes one result"),
    (["--batch-size", "2,4", "--find-max-batch"], "not a sweep"),
    (["--memory-budget-gb", "8"], "goes with --find-max-batch"),
    (["--mode", "training,inference", "--opt-step", "2"], "training only"),
])
def test_sweep_usage_errors(argv, message):
    with pytest.raises(UsageError, match=message):
        cli.to_plan(cli.parse_args(argv))


def test_sweep_expansion_order_and_compile_modes():
    plan = cli.to_plan(cli.parse_args(["--network", "resnet18", "--compile-mode",
                                       "none,max-autotune", "--batch-size", "8,16"]))
    assert [(c.compile, c.compile_options.get("mode"), c.batch_size) for c in plan.configs] == [
        (False, None, 8), (False, None, 16), (True, "max-autotune", 8), (True, "max-autotune", 16)]


def test_a_failed_full_run_keeps_the_granularity_and_costs_one_run_per_answer():
    """Probes fit up to 100, the full run only up to 90: at granularity 8 the answer is 88,
    after two full runs (96 failed), not one full run per batch from 96 down."""
    ran = []

    def run(batch):
        ran.append(batch)
        return "result" if batch <= 90 else None

    found, outcome = capacity.largest_that_runs(lambda b: b <= 100, run, start=64, limit=4096,
                                                granularity=8)
    assert (found.largest, outcome, ran) == (88, "result", [96, 88])


@pytest.mark.parametrize("start, limit, fits_up_to, expected", [
    (100, 4096, 103, 96),          # a start off the grid: rounded down to a multiple
    (96, 105, 104, 104),           # the multiple between the start and the limit is probed
    (3, 4096, 7, 4),               # below the granularity: a power of two
    (64, 4096, 0, 0),              # nothing fits
])
def test_answers_are_multiples_of_the_granularity(start, limit, fits_up_to, expected):
    found = capacity.find_max_batch(lambda b: b <= fits_up_to, start=start, limit=limit,
                                    granularity=8)
    assert found.largest == expected


def test_a_sweep_says_the_notes_of_every_row_once(capsys):
    """Issue 56: a sweep printed its first row's notes only, so --quantize none,int8wo never
    said that its int8wo row ran without --compile."""
    from microbench.drivers import runner
    plan = cli.to_plan(cli.parse_args(["--network", "llama_tiny", "--mode", "generate",
                                       "--device", "cpu", "--quantize", "none,int8wo",
                                       "--no-files"]))
    runner._single_device(plan, "a sweep")
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Note: ")]
    assert len(set(notes)) == len(notes)
    assert [note for note in notes if note.startswith("Note: --quantize int8wo without --compile")]


def test_a_rows_progress_number_is_its_place_in_the_round_it_runs_in():
    """--ab runs every other round in reverse (A B, B A): the [k/n] counts the order the rows
    run in, so the second round reads [1/2] B, [2/2] A, not [2/2] then [1/2] (issue 64)."""
    import io
    from types import SimpleNamespace

    from microbench.drivers import sweep
    from microbench.drivers.trials import run_rounds
    out = io.StringIO()
    shown = sweep.Progress(out, total=2, trials=2)
    rows = [SimpleNamespace(label=lambda name=name: name, failed=False) for name in "AB"]

    def measure(row, index):
        shown.start(row)
        shown.activity.clear()

    run_rounds(rows, 2, measure, on_round=shown.trial, counterbalance=True)
    starts = [line for line in out.getvalue().splitlines() if line.startswith("[")]
    assert starts == ["[1/2] A...", "[2/2] B...", "[1/2] B...", "[2/2] A..."]
