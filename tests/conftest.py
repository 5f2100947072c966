"""Shared test helpers: the repository on sys.path, the CLI as a subprocess, GPU skips."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SCRIPT = ROOT / "micro_benchmarking_pytorch.py"

# The smallest run that still exercises every phase: tiny model input, 2 images, 2+1 iterations.
TINY = ["--image-size", "32", "--batch-size", "2", "--iterations", "2", "--warmup", "1"]

requires_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def run_cli(*args: str, cwd: Path | None = None, timeout: int = 300,
            env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real entry script; the child gets one CPU thread so two can share 2 cores."""
    child_env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd or ROOT,
                          capture_output=True, text=True, timeout=timeout, env=child_env)


@pytest.fixture
def cli(tmp_path):
    """Run the CLI with results under a fresh directory; returns (process, output_dir)."""
    def invoke(*args: str, **kwargs):
        out_dir = tmp_path / "results"
        process = run_cli(*args, "--output-dir", str(out_dir), **kwargs)
        return process, out_dir
    return invoke
