"""Several GPUs under torchrun (``python3 -m pytest -m gpu`` on a machine with 2+ GPUs).

Each rank on its own GPU in every thread it uses: NCCL refuses two ranks on one GPU, so a job
that runs proves it; the records say which rank ran where. Skipped with fewer than 2 GPUs.
"""
import json
import os
import signal
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, SCRIPT, free_port, run_main, spawn
from gpu_checks import (TIMEOUT, check_job, child_env, children, fp8_device, gpu_suite,
                        has_module, left_after, needs_two_gpus, rank_of, results, run_torchrun,
                        start_logged, torchrun_command, wait_for_text)

pytestmark = [*gpu_suite, needs_two_gpus]

DDP = ["--network", "resnet18", "--image-size", "64", "--iterations", "5", "--warmup", "2",
       "--device", "cuda"]


def test_the_collective_thread_runs_on_the_callers_gpu():
    """The real runtime, not a fake: a thread starts on GPU 0, the helper takes the caller's."""
    from microbench.platform import devices, distributed
    devices.activate(torch.device("cuda", 1))
    try:
        assert distributed.interruptible(torch.cuda.current_device) == 1
        assert torch.cuda.current_device() == 1
    finally:
        devices.activate(torch.device("cuda", 0))


def test_ddp_on_two_gpus_records_every_rank_and_its_scaling(capfd, tmp_path):
    one = tmp_path / "one"
    ran = run_main(capfd, *DDP, "--batch-size", "16", "--output-dir", str(one))
    assert ran.returncode == 0, ran.stderr[-3000:]
    [baseline] = one.glob("*.json")
    two = tmp_path / "two"
    process = run_torchrun(2, *DDP, "--batch-size", "32", "--output-dir", str(two),
                           "--scaling-baseline", str(baseline))
    doc = check_job(process, two, 2)
    job = doc["distributed"]
    assert job["launcher"] == "torchrun" and job["local_batch_size"] == 16
    assert job["skew"] is not None and job["skew"] >= 0
    one_gpu = json.loads(baseline.read_text())["Throughput [img/sec]"]
    assert job["scaling_efficiency"] == pytest.approx(doc["Throughput [img/sec]"] / (2 * one_gpu))
    assert "Skew between ranks" in process.stdout and "Scaling efficiency : " in process.stdout


def test_fsdp_shards_a_llama_preset_over_two_gpus(tmp_path):
    """In FP8 where the GPUs have FP8 units and torchao is installed (issue 58: weights
    gathered in FP8, their scales precomputed after each optimizer step, the share of the
    FLOPs in FP8 printed), in AMP-BF16 otherwise: one run either way, for the suite's time."""
    fp8 = has_module("torchao") and fp8_device()
    precision = ["--precision", "fp8", "--fp8-recipe", "tensorwise"] if fp8 else \
        ["--precision", "amp-bf16"]
    process = run_torchrun(2, "--network", "llama3_1b", "--parallel", "fsdp", *precision,
                           "--optimizer", "adamw", "--seq-len", "256",
                           "--batch-size", "4", "--iterations", "3", "--warmup", "1",
                           "--device", "cuda", "--output-dir", str(tmp_path))
    doc = check_job(process, tmp_path, 2)
    parallel = doc["parallel"]
    assert parallel["mode"] == "fsdp" and parallel["world_size"] == 2
    assert parallel["tokens_per_s"] > 0 and parallel["sharding"]
    assert "Throughput [tokens/sec] :" in process.stdout
    assert process.stdout.count("Dtype: ") == 1
    if fp8:
        lowp = doc["low_precision"]
        assert lowp["fp8_all_gather"] is True and 0.5 < lowp["fp8_flops_share"] < 1, lowp
        assert f"({lowp['fp8_flops_share']:.1%} of the counted FLOPs)" in process.stdout


def test_a_rank_started_with_other_flags_is_refused_on_every_rank(tmp_path):
    port = free_port()
    ranks = []
    for rank, iterations in ((0, "3"), (1, "4")):
        env = child_env(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        ranks.append(spawn([sys.executable, str(SCRIPT), *DDP, "--batch-size", "16",
                            "--iterations", iterations, "--output-dir", str(tmp_path)],
                           cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True))
    for rank, process in enumerate(ranks):
        _, err = process.communicate(timeout=TIMEOUT)
        assert process.returncode == 2, err[-3000:]
        [line] = err.strip().splitlines()
        assert line.startswith(f"[rank {rank}] error: ranks were started with different "
                               f"settings: --iterations is 3 on rank 0, 4 on rank 1"), line
    assert results(tmp_path) == []


def test_sigterm_to_one_rank_ends_every_rank(tmp_path):
    logs = tmp_path / "logs"
    launcher = start_logged(torchrun_command(2, *DDP, "--batch-size", "32", "--iterations",
                                             "100000", "--output-dir", str(tmp_path / "out")),
                            logs)
    wait_for_text(launcher, logs / "out", "Timing", TIMEOUT)      # every rank is in the loop
    ranks = {rank_of(pid): pid for pid in children(launcher.pid)}
    assert set(ranks) == {0, 1}, ranks
    os.kill(ranks[1], signal.SIGTERM)
    # torchrun ends the other rank (SIGTERM, then SIGKILL after its own 30 s grace).
    left = left_after(launcher, 90)
    err = (logs / "err").read_text()
    assert left == [], (left, err[-3000:], (logs / "out").read_text()[-1500:])
    assert launcher.returncode != 0
    assert "[rank 1] error: terminated (SIGTERM)" in err, err[-3000:]
    assert results(tmp_path / "out") == []        # none written (a missing folder has none)


def _two_agents(tool: list[str], tmp_path) -> list[tuple[str, str]]:
    """Two torchrun agents on this host (--nnodes 2, c10d on localhost), one process and one
    GPU each: issue 62's stand-in for two nodes, whose ranks both have local rank 0."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0,1").split(",")
    port, processes = free_port(), []
    for node in range(2):
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                   "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                   f"127.0.0.1:{port}", "--rdzv-id", f"agents-{port}", "--node-rank",
                   str(node), *tool]
        processes.append(spawn(command, cwd=ROOT,
                               env=child_env(CUDA_VISIBLE_DEVICES=visible[node]),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=TIMEOUT) for p in processes]
    assert [p.returncode for p in processes] == [0, 0], [e[-3000:] for _, e in outputs]
    return outputs


def test_hsdp_on_two_agents_replicates_across_the_nodes(tmp_path):
    """Issue 62: --parallel hsdp over two torchrun agents of one GPU each (two nodes of one
    rank): the shard group is a node (LOCAL_WORLD_SIZE 1), so the mesh is 2 replicas x 1
    shard, each rank holding the whole model and all-reducing its gradients across nodes."""
    out = tmp_path / "hsdp"
    outputs = _two_agents([str(SCRIPT), "--network", "llama_tiny", "--parallel", "hsdp",
                           "--precision", "amp-bf16", "--optimizer", "adamw", "--seq-len",
                           "256", "--batch-size", "4", "--iterations", "3", "--warmup", "1",
                           "--device", "cuda", "--output-dir", str(out)], tmp_path)
    [doc] = results(out)
    assert doc["distributed"]["world_size"] == 2 and doc["distributed"]["backend"] == "nccl"
    parallel = doc["parallel"]
    assert (parallel["mode"], parallel["mesh_shape"], parallel["sharding"]["mesh_shape"],
            parallel["data_parallel"]) == ("hsdp", [2, 1], [2, 1], 2)
    assert sorted(r["node_rank"] for r in doc["distributed"]["per_rank"]) == [0, 1]
    whole = 4 * doc["model"]["parameters"]
    assert [r["parameter_bytes"] for r in parallel["per_rank"]] == [whole, whole]
    assert all(r["peak_allocated_mb"] > 0 for r in parallel["per_rank"])
    assert any("mesh 2 replicas x 1 shard " in o for o, _ in outputs)
    assert parallel["tokens_per_s"] > 0


def test_ddp_and_the_node_check_on_two_agents_of_one_host_are_two_nodes(tmp_path):
    """The several-node path on GPUs (issue 62): DDP over two torchrun agents (nodes 0 and 1,
    one host name) and the node check, which measures each node's all-reduce and the one
    across them; every rank named by its node."""
    out = tmp_path / "ddp"
    outputs = _two_agents([str(SCRIPT), *DDP, "--batch-size", "32", "--output-dir", str(out)],
                          tmp_path)
    [doc] = results(out)
    job = doc["distributed"]
    assert job["world_size"] == 2 and job["backend"] == "nccl"
    assert sorted((r["node_rank"], r["local_rank"]) for r in job["per_rank"]) == [(0, 0), (1, 0)]
    assert any(" rank local  node  host" in o for o, _ in outputs)
    path = tmp_path / "node.json"
    _two_agents(["-m", "microbench.node", "--quick", "--json", str(path)], tmp_path)
    check = json.loads(path.read_text())["node_check"]
    assert sorted(g["node_rank"] for g in check["gpus"]) == [0, 1]
    scopes = [c["scope"] for c in check["allreduce"]]
    assert len(scopes) == 3 and "all nodes" in scopes, scopes
    assert all(c["backend"] == "nccl" for c in check["allreduce"])
