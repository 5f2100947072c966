"""--ab through the real command line (CPU, in-process trials, a fake clock whose tick B's flag
sets): the paired ratio, its interval, the verdict, the files, and --fail-if slower."""
import itertools
import json

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
    assert "A/B: B (--nhwc) / A = 2.000 (95% CI 2.000 to 2.000): faster" in ran.stdout


def test_no_change_is_no_difference_detected(capfd, tmp_path, b_runs_at):
    b_runs_at(1.0)
    ran = run_main(capfd, *RUN, "--no-files", "--ab", "--nhwc")
    assert ran.returncode == 0, ran.stderr
    assert ": no difference detected [" in ran.stdout


def test_fail_if_slower_exits_5_only_when_b_is_slower(capfd, tmp_path, b_runs_at):
    b_runs_at(2.0)
    ran = run_main(capfd, *RUN, "--no-files", "--ab", "--nhwc")
    assert ran.returncode == 0 and "= 0.500" in ran.stdout and ": slower [" in ran.stdout
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
