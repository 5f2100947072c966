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


def run_two_nodes(*tool_args, nproc_per_node=2, env=None):
    """Two torchrun agents on this host as two nodes (``--nnodes 2``, c10d rendezvous on
    localhost), ``nproc_per_node`` ranks each: [(returncode, stdout, stderr)] of each agent."""
    from conftest import spawn
    port, processes = free_port(), []
    for node in range(2):
        command, child = torchrun("--nnodes", "2", "--nproc-per-node", str(nproc_per_node),
                                  "--rdzv-backend", "c10d", "--rdzv-endpoint",
                                  f"127.0.0.1:{port}", "--rdzv-id", f"two-nodes-{port}",
                                  "--node-rank", str(node), env=env)
        processes.append(spawn(command + list(tool_args), cwd=ROOT, env=child,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [process.communicate(timeout=TIMEOUT) for process in processes]
    return [(process.returncode, out, err) for process, (out, err) in zip(processes, outputs)]
