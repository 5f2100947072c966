"""What every GPU run of the suite must show, whatever the GPU: exit 0, no traceback, device
events as the clock, memory tracked, a throughput above zero, its result document.

The GPU suite (``python3 -m pytest -m gpu``) runs every feature on a real GPU and, with two or
more, under torchrun. It asserts what a run must show, never a machine-dependent number, and
every test skips cleanly on a machine without the GPUs it needs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT, SCRIPT, free_port, requires_gpu, spawn

# Small enough for seconds a run, large enough to launch real kernels on every path.
IMAGES = ["--network", "resnet18", "--image-size", "64", "--batch-size", "8", "--iterations",
          "3", "--warmup", "1", "--device", "cuda"]
TOKENS = ["--network", "llama_tiny", "--seq-len", "128", "--batch-size", "2", "--iterations",
          "3", "--warmup", "1", "--device", "cuda"]
GENERATE = ["--network", "llama_tiny", "--mode", "generate", "--prompt-len", "32", "--gen-len",
            "16", "--iterations", "3", "--warmup", "3", "--device", "cuda"]
CLOCKS = ("CUDA events", "HIP events")
TIMEOUT = 420

needs_two_gpus = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs")
gpu_suite = [requires_gpu, pytest.mark.gpu]


def has_module(module: str) -> bool:
    """Whether an optional library imports here (a feature's test skips without it)."""
    try:
        __import__(module)
    except Exception:                     # noqa: BLE001 (absent, or broken on this machine)
        return False
    return True


def fp8_device() -> bool:
    """Whether GPU 0 has FP8 matrix units (the device layer's answer)."""
    from microbench.platform import devices
    return torch.cuda.is_available() and bool(devices.fp8_formats(torch.device("cuda", 0)))


def results(out_dir: Path) -> list[dict]:
    """The run result documents a run wrote (traces, sweep and A/B summaries aside)."""
    return [json.loads(path.read_text()) for path in sorted(out_dir.glob("*.json"))
            if "_trace" not in path.name and not path.name.startswith(("ab_", "sweep_"))]


def check_run(ran, out_dir: Path) -> dict:
    """The run's one result document, after the checks every GPU run must pass."""
    assert ran.returncode == 0, (ran.stdout[-3000:], ran.stderr[-3000:])
    assert "Traceback" not in ran.stderr and "Traceback" not in ran.stdout, ran.stderr[-3000:]
    [doc] = results(out_dir)
    check_document(doc)
    return doc


def check_document(doc: dict) -> None:
    assert doc["env"]["device_type"] == "gpu", doc["env"]
    assert doc["env"]["gpu_runtime"] == ("ROCm" if torch.version.hip else "CUDA")
    assert doc["timing"]["clock"] in CLOCKS
    assert doc["memory"]["peak_allocated_mb"] > 0
    assert doc["memory"]["peak_reserved_mb"] >= doc["memory"]["peak_allocated_mb"]
    assert doc["Throughput [img/sec]"] > 0 and doc["Time per mini-batch"] > 0
    assert all(sample > 0 for sample in doc["timing"]["samples_ms"])


# ---------------------------------------------------------------- processes of several ranks

def child_env(**extra) -> dict:
    """The suite's environment without any launcher's variables (pytest may run under one)."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                          "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def torchrun_command(nproc: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
            "--master-port", str(free_port()), str(SCRIPT), *args]


def run_torchrun(nproc: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(torchrun_command(nproc, *args), cwd=ROOT, env=child_env(),
                          capture_output=True, text=True, timeout=TIMEOUT)


def check_job(process: subprocess.CompletedProcess, out_dir: Path, world: int) -> dict:
    """A torchrun job's one result (rank 0 writes it), every rank on a GPU of its own."""
    assert process.returncode == 0, (process.stdout[-3000:], process.stderr[-3000:])
    assert "Traceback" not in process.stderr, process.stderr[-3000:]
    assert process.stdout.count("--------------------SUMMARY") == 1
    assert f"Num devices: {world}" in process.stdout
    [doc] = results(out_dir)
    check_document(doc)
    job = doc["distributed"]
    assert job["world_size"] == world and job["backend"] == "nccl"
    assert [r["rank"] for r in job["per_rank"]] == list(range(world))
    assert sorted(r["local_rank"] for r in job["per_rank"]) == list(range(world))
    assert all(r["peak_allocated_mb"] > 0 for r in job["per_rank"])
    return doc


# Fields of /proc/PID/stat after the command name: state, parent, group, session.
_PARENT, _SESSION = 1, 4


def _live(field: int, value: int) -> list[int]:
    """The live (not zombie) processes whose stat ``field`` is ``value``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(fields[field]) == value and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``."""
    return _live(_PARENT, pid)


def session_members(session: int) -> list[int]:
    """The live processes of a session (a run started with ``start_new_session``, and every
    process it started: ranks, loader workers, the compiler's workers)."""
    return _live(_SESSION, session)


def rank_of(pid: int) -> int | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    for item in environ:
        if item.startswith(b"RANK="):
            return int(item[5:])
    return None


def start_logged(argv: list[str], logs: Path) -> subprocess.Popen:
    """A run in a session of its own, its output in files (a pipe would stay open for as long
    as any process it started lives, and a read of it would wait for that)."""
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / "out", "w") as out, open(logs / "err", "w") as err:
        return spawn(argv, cwd=ROOT, env=child_env(), stdout=out, stderr=err,
                     start_new_session=True)


def wait_for_text(process: subprocess.Popen, path: Path, text: str, limit_s: float) -> None:
    """Until ``path`` holds ``text`` (a condition, not a duration; the wait between looks is
    the process's own wait, so an early exit ends it at once)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if text in path.read_text():
            return
        try:
            process.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            pass
    pytest.fail(f"no {text!r} (exit {process.poll()}): {path.read_text()[-3000:]}")


def left_after(process: subprocess.Popen, limit_s: float) -> list[str]:
    """What of the run (its session: the run and every process it started) is still alive
    ``limit_s`` after now: empty when everything ended; else each process's pid, rank and
    command line, for the failure message."""
    deadline = time.monotonic() + limit_s
    try:
        process.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        pass
    while session_members(process.pid) and time.monotonic() < deadline:
        time.sleep(0.2)           # a condition polled, not a duration waited for
    left = []
    for pid in session_members(process.pid):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:200]
        except (FileNotFoundError, ProcessLookupError):
            continue
        left.append(f"pid {pid} rank {rank_of(pid)}: {command.decode(errors='replace')}")
    return left
