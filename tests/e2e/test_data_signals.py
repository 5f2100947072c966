"""Killing a run that reads data (SIGINT or SIGTERM to its main process) leaves no worker
processes behind and no half-made data set: each case is a real process of its own, started,
waited on until it reaches the state to interrupt (by its output, no sleeps), then signalled."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, alive, spawn
from microbench.data import cache

CHILD = """
import sys, torch
from microbench.platform.errors import Terminated
from microbench.platform.process import sigterm_raises
from microbench.data import DataSettings, ModelInput, open_pipeline

phase, root = sys.argv[1], sys.argv[2]
count = 16 if phase == "loading" else 10**6          # "building": far more than it will make
settings = DataSettings(source="loader", count=count, image_side=16, workers=2, cache_dir=root)
wanted = ModelInput("image", True, image_size=16, num_classes=10)
with sigterm_raises():
    try:
        with open_pipeline(settings, wanted, batch_size=4, device=torch.device("cpu"),
                           notify=lambda line: print(line, flush=True)) as pipeline:
            pipeline.next_batch()
            print("workers", *pipeline.batches.worker_pids(), flush=True)
            while True:
                pipeline.next_batch()
    except KeyboardInterrupt:
        sys.exit("error: interrupted")
    except Terminated:
        sys.exit("error: terminated (SIGTERM)")
"""


def start(phase: str, root) -> subprocess.Popen:
    """The child leads a process group of its own (its workers join it), as a job would."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return spawn([sys.executable, "-c", CHILD, phase, str(root)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def wait_for_line(process: subprocess.Popen, prefix: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    for line in process.stdout:
        if line.startswith(prefix):
            return line
        assert time.monotonic() < deadline, f"no '{prefix}' line in {timeout} s"
    process.wait(timeout=10)
    raise AssertionError(f"the child ended before '{prefix}': {process.stderr.read()[-3000:]}")


@pytest.mark.slow
@pytest.mark.parametrize("signal_number, to_group, text", [
    (signal.SIGINT, True, "error: interrupted"),                 # Ctrl-C at a terminal
    (signal.SIGTERM, False, "error: terminated (SIGTERM)"),      # kill PID
    (signal.SIGTERM, True, "error: terminated (SIGTERM)"),       # scancel, a job's group
], ids=["sigint-group", "sigterm-main", "sigterm-group"])
def test_a_signal_while_loading_leaves_no_worker_processes(tmp_path, signal_number, to_group,
                                                           text):
    process = start("loading", tmp_path)
    workers = [int(pid) for pid in wait_for_line(process, "workers").split()[1:]]
    assert len(workers) == 2 and all(alive(pid) for pid in workers)
    if to_group:
        os.killpg(process.pid, signal_number)
    else:
        process.send_signal(signal_number)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1 and stderr.strip() == text, stderr[-3000:]
    # Checked at once: the main process stopped and reaped its workers before it exited (an
    # orphan would live on until DataLoader's watchdog noticed, seconds later).
    assert [pid for pid in workers if alive(pid)] == []


@pytest.mark.slow
def test_sigterm_while_making_the_set_leaves_no_half_made_set(tmp_path):
    process = start("building", tmp_path)
    wait_for_line(process, "making")
    name = cache.image_set_name("jpeg", 16, 10**6)
    deadline = time.monotonic() + 60
    while not [n for n in os.listdir(tmp_path) if n.startswith(cache.BUILDING_PREFIX)]:
        assert time.monotonic() < deadline, "the build never started"
        time.sleep(0.01)                                    # waiting on a condition, bounded
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1 and stderr.strip() == "error: terminated (SIGTERM)", stderr
    assert os.listdir(tmp_path) == [f".{name}.lock"]         # no set, no temporary directory
