"""Trials in fresh worker processes: each its own process and seed, errors as one line, and a
stopped parent takes its worker with it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, SCRIPT, TINY, assert_one_line_error, run_main, spawn

RUN = ["--network", "resnet18", *TINY, "--device", "cpu"]


def only_json(directory):
    [path] = directory.glob("*.json")
    return json.loads(path.read_text())


@pytest.mark.slow
def test_each_trial_runs_in_its_own_fresh_process_with_its_own_seed(tmp_path, capfd):
    ran = run_main(capfd, *RUN, "--repeat", "2", "--output-dir", str(tmp_path))
    assert ran.returncode == 0, ran.stderr
    trials = only_json(tmp_path)["trials"]
    pids = [trial["pid"] for trial in trials["per_trial"]]
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert [trial["seed"] for trial in trials["per_trial"]] == [0, 1]
    assert trials["where"] == "worker processes"
    assert "each in a fresh worker process" in ran.stdout
    assert f"(worker process {pids[0]}, seed 0)" in ran.stdout


def test_in_process_trials_say_so(tmp_path, capfd):
    ran = run_main(capfd, *RUN, "--repeat", "2", "--trials", "in-process", "--output-dir",
                   str(tmp_path))
    assert ran.returncode == 0, ran.stderr
    trials = only_json(tmp_path)["trials"]
    assert {trial["pid"] for trial in trials["per_trial"]} == {os.getpid()}
    assert trials["where"] == "this process" and "--trials in-process" in ran.stdout
    # The Iteration lines are one trial's, and a line says which.
    lines = ran.stdout.splitlines()
    [header] = [i for i, line in enumerate(lines) if line.startswith("Iterations of trial ")]
    assert lines[header].startswith(("Iterations of trial 1 of 2", "Iterations of trial 2 of 2"))
    assert lines[header + 1].startswith("Iteration 0:")


@pytest.mark.slow
def test_a_workers_expected_failure_is_one_line_with_its_code(tmp_path, capfd):
    # Batch norm in training cannot normalise one value per channel: the worker finds out.
    ran = run_main(capfd, "--network", "resnet18", "--image-size", "32", "--batch-size", "1",
                   "--iterations", "2", "--warmup", "1", "--repeat", "2", "--output-dir",
                   str(tmp_path))
    assert_one_line_error(ran, 2, "batch normalisation in training needs more than one value")
    assert not tmp_path.exists() or list(tmp_path.glob("*.json")) == []


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as stream:
            return [int(child) for child in stream.read().split()]
    except OSError:
        return []


@pytest.mark.slow
def test_sigterm_to_the_parent_stops_its_worker_too(tmp_path):
    parent = spawn([sys.executable, str(SCRIPT), *RUN, "--iterations", "100000",
                               "--repeat", "2", "--output-dir", str(tmp_path)], cwd=ROOT,
                              env={**os.environ, "OMP_NUM_THREADS": "1"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in parent.stdout:               # a condition, not a duration
            if line.startswith("Trial 1/2: Timing"):
                break
        workers = [child for child in _children(parent.pid)
                   if "resource_tracker" not in _command(child)]
        assert workers, "no worker process found"
        parent.send_signal(signal.SIGTERM)
        out, err = parent.communicate(timeout=120)
    finally:
        parent.kill()
    assert parent.returncode == 143, err[-2000:]
    assert err.strip().splitlines()[-1] == "error: terminated (SIGTERM)"
    for worker in workers:
        for _ in range(600):                     # its own cleanup may take a moment
            if not os.path.exists(f"/proc/{worker}") or _zombie(worker):
                break
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{worker}") or _zombie(worker)
    assert list(tmp_path.glob("*.json")) == []


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as stream:
            return stream.read().decode(errors="replace")
    except OSError:
        return ""


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stream:
            return stream.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
