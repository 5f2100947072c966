"""--max-noise, --max-trials, --time-limit and --discard-throttled through the real command line
(CPU, in-process trials, fake clocks: nothing depends on how fast the machine is)."""
import itertools
import json
import random

import pytest

from conftest import TINY, assert_one_line_error, run_main
from microbench.measure import stats, timing
from microbench.drivers import trial_count

RUN = ["--network", "resnet18", *TINY, "--device", "cpu", "--mode", "inference",
       "--trials", "in-process"]


@pytest.fixture
def run(capfd, tmp_path):
    return lambda *args: run_main(capfd, *RUN, "--output-dir", str(tmp_path), *args)


@pytest.fixture
def noisy_clock(monkeypatch):
    """A fake host clock whose timed intervals vary (10 to 15 ms, seeded): trials differ."""
    rng, now = random.Random(7), [0.0]

    def clock():
        now[0] += 0.010 * (1 + 0.5 * rng.random())
        return now[0]
    monkeypatch.setattr(timing, "HOST_CLOCK", clock)


def result(tmp_path):
    [path] = tmp_path.glob("*.json")
    return json.loads(path.read_text())


def test_max_noise_stops_once_the_interval_is_narrow(run, tmp_path, steady_clock):
    ran = run("--max-noise", "1")
    assert ran.returncode == 0, ran.stderr
    trials = result(tmp_path)["trials"]
    assert trials["trials"] == 3                      # the fewest --max-noise measures
    assert trials["stopped_by"].startswith("noise target met")
    assert "Stopped after 3 trials: noise target met" in ran.stdout
    assert "Trial 3 (of at most 20): " in ran.stdout


def test_max_trials_stops_a_noisy_run_and_says_the_noise_left(run, tmp_path, noisy_clock):
    ran = run("--max-noise", "0.01", "--max-trials", "4")
    assert ran.returncode == 0, ran.stderr
    trials = result(tmp_path)["trials"]
    assert trials["trials"] == 4
    assert trials["stopped_by"].startswith("--max-trials 4 reached; the 95% CI's half-width is")
    assert "Stopped after 4 trials: --max-trials 4 reached" in ran.stdout


def test_time_limit_stops_on_a_fake_clock(run, tmp_path, noisy_clock, monkeypatch):
    ticks = itertools.count(0, 100.0)                 # 100 s pass between the rule's looks
    monkeypatch.setattr(trial_count, "CLOCK", lambda: next(ticks))
    ran = run("--max-noise", "0.01", "--time-limit", "150")
    assert ran.returncode == 0, ran.stderr
    assert result(tmp_path)["trials"]["stopped_by"].startswith(
        "--time-limit 150 s reached after 2 trials; the 95% CI's half-width is still ")
    assert result(tmp_path)["trials"]["trials"] == 2


def test_a_throttled_trial_is_discarded_measured_again_and_kept_on_record(
        run, tmp_path, steady_clock, monkeypatch):
    verdicts = iter(["SM clock fell to 50% of its maximum"] * 2)
    monkeypatch.setattr(stats, "throttle_reason", lambda telemetry: next(verdicts, None))
    ran = run("--repeat", "2", "--discard-throttled")
    assert ran.returncode == 0, ran.stderr
    trials = result(tmp_path)["trials"]
    assert trials["trials"] == 2 and len(trials["per_trial"]) == 2
    assert [(d["index"], d["reason"]) for d in trials["discarded"]] == \
        [(0, "SM clock fell to 50% of its maximum")] * 2
    assert all(d["throughput"] > 0 for d in trials["discarded"])
    assert "throttled (SM clock fell to 50% of its maximum): discarded, measuring it again " \
           "(1 of at most 3)" in ran.stdout
    assert any("discarded as throttled" in note for note in result(tmp_path)["notes"])


def test_discarding_is_bounded(run, tmp_path, steady_clock, monkeypatch):
    monkeypatch.setattr(stats, "throttle_reason", lambda telemetry: "throttle reasons hw_slowdown")
    monkeypatch.setattr(trial_count, "throttle_reason",
                        lambda telemetry: "throttle reasons hw_slowdown")
    ran = run("--repeat", "2", "--discard-throttled")
    assert ran.returncode == 0, ran.stderr
    trials = result(tmp_path)["trials"]
    assert len(trials["discarded"]) == trial_count.MAX_DISCARDED and trials["trials"] == 2
    assert "kept: --discard-throttled already measured 3 trials again" in ran.stdout


@pytest.mark.parametrize("argv, message", [
    (["--max-trials", "5"], "--max-trials goes with --max-noise"),
    (["--time-limit", "5", "--max-trials", "5"], "--max-trials and --time-limit go with"),
    (["--max-noise", "1", "--max-trials", "4", "--repeat", "5"], "below the 5 trials"),
    (["--max-noise", "1", "--batch-size", "2,4"], "not a sweep"),
    (["--max-noise", "0"], "--max-noise"),
    (["--compare-any-config"], "goes with --compare"),
])
def test_refused_combinations(capfd, argv, message):
    ran = run_main(capfd, *RUN, "--no-files", *argv)
    assert_one_line_error(ran, 2, message)
