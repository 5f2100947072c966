"""--ab through the real command line (CPU, in-process trials, a fake clock whose tick B's flag
sets): the paired ratio, its interval, the verdict, the files, and --fail-if slower."""
import itertools
import json
import os

import pytest

from conftest import TINY, assert_one_line_error, run_main
from microbench.drivers import benchmark
from microbench.measure import timing

RUN = ["--network", "resnet18", *TINY, "--device", "cpu", "--mode", "inference",
       "--trials", "in-process", "--repeat", "3"]


@pytest.fixture
def b_runs_at(monkeypatch):
    """A fake host clock: every mark 10 ms after the last while A runs, ``factor`` x 10 ms while
    B (the --nhwc side) runs, so the ratio B/A is known exactly."""
    def install(factor):
        now, tick, order = [0.0], [0.010], []
        real_run = benchmark.run

        def run(spec, **kwargs):
            order.append("B" if spec.config.nhwc else "A")
            tick[0] = 0.010 * (factor if spec.config.nhwc else 1.0)
            return real_run(spec, **kwargs)

        def clock():
            now[0] += tick[0]
            return now[0]
        monkeypatch.setattr(benchmark, "run", run)
        monkeypatch.setattr(timing, "HOST_CLOCK", clock)
        return order
    return install


def ab_document(directory):
    [path] = directory.glob("ab_*.json")
    return json.loads(path.read_text())["ab"]


@pytest.mark.slow
def test_b_twice_as_fast_is_faster_with_its_interval_and_both_sides_trials(
        capfd, tmp_path, b_runs_at):
    order = b_runs_at(0.5)
    ran = run_main(capfd, *RUN, "--output-dir", str(tmp_path), "--ab", "--nhwc")
    assert ran.returncode == 0, ran.stderr
    assert order == ["A", "B", "B", "A", "A", "B"]     # paired by round, A first every other
    ab = ab_document(tmp_path)
    assert ab["ratio"] == pytest.approx(2.0) and ab["verdict"] == "faster"
    assert ab["ci95"] == pytest.approx([2.0, 2.0]) and ab["rounds"] == 3
    assert len(ab["a_trials"]["values"]) == len(ab["b_trials"]["values"]) == 3
    assert ab["flags_b"] == "--nhwc"
    assert json.loads(open(ab["b_result"]).read())["config"]["nhwc"] is True
    assert "A/B: B (--nhwc) / A = 2.000: faster (interval 2.000-2.000) [" in ran.stdout
    summary_is_read_by_the_report_and_rerun(capfd, tmp_path)


def summary_is_read_by_the_report_and_rerun(capfd, folder):
    """The A/B summary is one of the tool's documents: it carries schema_version and matches
    the published schema; the report shows a row per side (each side's own file counted once)
    with the verdict; --rerun of it replays side A and says how to replay B."""
    from microbench.plan import rerun
    from microbench.report import command
    from microbench.store import schema
    [path] = folder.glob("ab_*.json")
    summary = json.loads(path.read_text())
    assert summary["schema_version"] == 2 and schema.document_kind(summary) == schema.AB
    schema.validate_result(summary, str(path))
    shown = run_main(capfd, str(folder), "--format", "json", main=command.main)
    assert shown.returncode == 0, shown.stderr
    [model] = json.loads(shown.stdout)["tables"]
    assert [row["settings"]["A/B side"] for row in model["rows"]] == ["A", "B: --nhwc"]
    assert any("B (--nhwc) / A = 2.000 over 3 rounds: faster (interval 2.000-2.000)" in note
               for note in model["notes"])
    flags, notes = rerun.flags_of(str(path))
    assert "--nhwc" not in flags and "--network=resnet18" in flags
    assert "replaying side A" in notes[0] and "--ab --nhwc" in notes[0]   # shell-quoted where needed (issue 46)
    # Side B's own file gone: its row comes from the summary's trials, and a line says so.
    side_b = folder / os.path.basename(summary["ab"]["b_result"])
    side_b.unlink()
    shown = run_main(capfd, str(path), "--format", "json", main=command.main)
    [model] = json.loads(shown.stdout)["tables"]
    assert len(model["rows"]) == 2 and "side B's result" in shown.stderr


def test_no_change_is_the_same_within_the_tolerance(capfd, tmp_path, b_runs_at):
    b_runs_at(1.0)
    ran = run_main(capfd, *RUN, "--no-files", "--ab", "--nhwc")
    assert ran.returncode == 0, ran.stderr
    assert ": same within 5% (interval 1.000-1.000) [" in ran.stdout


@pytest.mark.slow
def test_fail_if_slower_exits_5_only_when_b_is_slower(capfd, tmp_path, b_runs_at):
    b_runs_at(2.0)
    ran = run_main(capfd, *RUN, "--no-files", "--ab", "--nhwc")
    assert ran.returncode == 0 and "= 0.500: slower (interval" in ran.stdout
    ran = run_main(capfd, *RUN, "--no-files", "--ab", "--nhwc", "--fail-if", "slower")
    assert_one_line_error(ran, 5, "--ab: B (--nhwc) is slower than A: ratio 0.500")


@pytest.mark.parametrize("argv, message", [
    (["--ab", "--seed 0"], "changes no setting"),
    (["--ab", "--batch-size 2,4"], "makes B a sweep"),
    (["--ab", "--repeat 9"], "B may not change --repeat"),
    (["--ab", "--nhwc", "--output-file", "x"], "--ab takes one configuration"),
    (["--ab", "--nhwc", "--max-noise", "2"], "drop --max-noise"),
    (["--fail-if", "slower"], "--fail-if goes with --compare or --ab"),
])
def test_refused_ab(capfd, argv, message):
    ran = run_main(capfd, *RUN, "--no-files", *argv)
    assert_one_line_error(ran, 2, message)


@pytest.mark.parametrize("cv, fails", [(0.5, False), (0.01, True)])
def test_fail_if_slower_spares_one_round_inside_the_sides_iteration_noise(cv, fails):
    """--ab --repeat 1 --fail-if slower: a ratio of 0.8 inside the band the sides' iteration
    CVs allow (50% each) is 'within noise' and exits 0; with tight iterations (1%) it is
    slower, exit 5 (issue 64)."""
    from types import SimpleNamespace

    from microbench.drivers import ab
    from microbench.measure import stats
    from microbench.platform.errors import Regression
    result = stats.paired_ab([100.0], [80.0], 5.0)
    assert result.verdict == "slower" and result.comparison.interval is None
    rows = [SimpleNamespace(entry=SimpleNamespace(figures={"cv": cv}, samples_ms=()))
            for _ in "AB"]
    plan = SimpleNamespace(fail_if_slower=True, flags="--nhwc")
    if fails:
        with pytest.raises(Regression):
            ab.fail_if_slower(result, plan, rows)
    else:
        ab.fail_if_slower(result, plan, rows)
