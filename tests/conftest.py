"""Shared test helpers: the CLI in-process and as a subprocess, GPU skips.

Most tests call ``main()`` in this interpreter (a new one costs 6-8 s of imports on the CI
machine); a handful run the real entry script in a subprocess where that is the point: exit
codes of the process, signals, torchrun, the op bench's entry point, the installed commands.
"""
from __future__ import annotations

import datetime
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "micro_benchmarking_pytorch.py"

# The smallest run that still exercises every phase: tiny model input, 2 images, 2+1 iterations.
TINY = ["--image-size", "32", "--batch-size", "2", "--iterations", "2", "--warmup", "1"]


def _model(name: str):
    from microbench.models import registry
    return registry.resolve(name)


# Model specs as the preset takes them (resolved, never built): images in, and token ids in.
IMAGE_MODEL, LANGUAGE_MODEL = _model("resnet50"), _model("llama_tiny")

requires_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")

# A shell starts a background job (`bash .ci/run &`, nohup in a script) with SIGINT ignored, and
# an ignored signal stays ignored across exec: the suite's Ctrl-C tests would send SIGINT to
# processes that cannot receive it, then wait on them. The tests model a user at a terminal, so
# pytest takes Ctrl-C as Python does by default, and the children it starts inherit SIG_DFL.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

_SPAWNED: list[subprocess.Popen] = []


def free_port() -> int:
    """A TCP port free on this machine now (for a rendezvous)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def spawn(argv, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen``, and whatever of it is still running when the test ends is killed
    (its whole group where it leads one): a signal test that fails half-way must not leave a
    benchmark spinning on CI's two cores for the rest of the suite."""
    process = subprocess.Popen(argv, **kwargs)
    _SPAWNED.append(process)
    return process


@pytest.fixture(autouse=True)
def _entry_leaves_the_suite_as_it_was(monkeypatch):
    """``process.entry`` makes the process a command of its own: a stop then ends everything
    below it and, 8 s later, the process itself, through a thread that hears every signal. A
    test that calls it in this process must not leave that behind: a later test's Ctrl-C
    would end pytest. The flag is put back after each test, and neither the thread nor the
    adoption of orphans starts here (their tests run entry in a process of their own)."""
    from microbench.platform import process
    monkeypatch.setattr(process, "_OWNS_PROCESS", process._OWNS_PROCESS)
    monkeypatch.setattr(process, "_watch_stopping_signals", lambda: None)
    monkeypatch.setattr(process, "_adopt_orphans", lambda: None)


@pytest.fixture(autouse=True)
def _kill_what_the_test_left_running():
    yield
    while _SPAWNED:
        process = _SPAWNED.pop()
        if process.poll() is not None:
            continue
        try:
            if os.getpgid(process.pid) == process.pid:       # started in a session of its own
                os.killpg(process.pid, signal.SIGKILL)
            else:
                process.kill()
        except ProcessLookupError:
            pass
        process.communicate()


@dataclass
class Ran:
    """What a run of the CLI left: its exit code and its output (like CompletedProcess)."""

    returncode: int
    stdout: str
    stderr: str


# A real result of schema version 2: documents that --compare, --rerun and --scaling-baseline
# read must match the published schema, so tests edit one of these instead of writing a few keys.
# Result files of earlier versions (and the older tool), read by the schema, report and gate tests.
HISTORY = ROOT / "tests" / "fixtures" / "history"
STORED_RESULT = HISTORY / "v2_62b9ba6_training.json"
_REQUIRED_SETTINGS = ("network", "batch_size", "mode", "iterations", "warmup", "nhwc", "compile",
                      "compile_options", "seed")


def stored_result(config: dict | None = None, **keys) -> dict:
    """A result document matching the schema: the settings the schema requires at their
    defaults, with ``config`` on top, and ``keys`` (top-level keys) replaced."""
    from microbench.settings.config import BenchConfig
    document = json.loads(STORED_RESULT.read_text())
    defaults = BenchConfig()
    required = {name: getattr(defaults, name) for name in _REQUIRED_SETTINGS}
    document["config"] = {**required, **(config or {})}
    document.update(keys)
    return document


def nightly_result(throughput: float, night: int, config: dict | None = None,
                   env: dict | None = None, label: str | None = None) -> dict:
    """One night of a synthetic history: :func:`stored_result` run at midnight of day
    ``night`` (counted from 2026-01-01) at ``throughput``, its per-iteration samples scaled to
    it, with ``config`` and ``env`` keys on top and ``label`` as its --label."""
    document = stored_result({**(config or {}), **({"label": label} if label else {})})
    scale = document["Throughput [img/sec]"] / throughput
    document["Throughput [img/sec]"] = throughput
    document["timing"]["samples_ms"] = [sample * scale for sample in
                                        document["timing"]["samples_ms"]]
    day = datetime.date(2026, 1, 1) + datetime.timedelta(days=night)
    document["env"].update(time_utc=f"{day.isoformat()}T00:00:00+00:00", **(env or {}))
    return document


def run_main(capture, *args: str, main=None) -> Ran:
    """Call the model benchmark's ``main()`` in this process; ``capture`` is capfd/capsys."""
    if main is None:
        from microbench.main import main
    capture.readouterr()                       # drop whatever came before
    try:
        code = main(list(args))
    except SystemExit as exit_:                # argparse's usage errors
        code = exit_.code
    out = capture.readouterr()
    return Ran(code, out.out, out.err)


def run_cli(*args: str, cwd: Path | None = None, timeout: int = 300,
            env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real entry script; the child gets one CPU thread so two can share 2 cores."""
    child_env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd or ROOT,
                          capture_output=True, text=True, timeout=timeout, env=child_env)


@pytest.fixture
def cli(tmp_path, capfd):
    """Run the CLI in-process with results under a fresh directory; returns (ran, output_dir)."""
    def invoke(*args: str):
        out_dir = tmp_path / "results"
        # The directory goes first, so a test's own --output-dir wins.
        return run_main(capfd, "--output-dir", str(out_dir), *args), out_dir
    return invoke


def assert_one_line_error(process, code: int, text: str) -> None:
    """The error contract: the documented exit code, one line on stderr, no traceback."""
    assert process.returncode == code, (process.stdout[-3000:], process.stderr[-3000:])
    lines = [line for line in process.stderr.strip().splitlines() if line]
    assert len(lines) == 1 and text in lines[0], process.stderr
    assert "Traceback" not in process.stderr


@pytest.fixture
def steady_clock(monkeypatch):
    """A fake host clock for in-process runs on the CPU: every mark of a timed region is 10 ms
    after the previous one, so throughputs are exact and a busy machine changes nothing."""
    from microbench.measure import timing
    ticks = itertools.count()
    monkeypatch.setattr(timing, "HOST_CLOCK", lambda: next(ticks) * 0.010)
