"""Launching the tool under torchrun on the CPU: the environment a child rank gets and the
command line, shared by the multi-process tests (e2e, steps, drivers)."""
import os
import subprocess
import sys

from conftest import ROOT, SCRIPT, free_port

RUN = ["--network", "resnet18", "--image-size", "32", "--iterations", "3", "--warmup", "1",
       "--device", "cpu"]
TIMEOUT = 240


def child_env(**extra) -> dict:
    env = {key: value for key, value in os.environ.items()
           if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS")}
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **extra}


def torchrun(*args, env=None):
    command = [sys.executable, "-m", "torch.distributed.run", *args, str(SCRIPT)]
    return command, child_env(**(env or {}))


def run_torchrun(nproc, *tool_args, env=None):
    command, child = torchrun("--nproc-per-node", str(nproc), "--master-port", str(free_port()),
                              env=env)
    return subprocess.run(command + list(tool_args), cwd=ROOT, env=child, capture_output=True,
                          text=True, timeout=TIMEOUT)
