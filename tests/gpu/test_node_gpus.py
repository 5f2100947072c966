"""microbench-node on real GPUs (``python3 -m pytest -m gpu``): every part measured on every
GPU with telemetry and error counters, the model steps shown but not judged, the document
valid; with 2+ GPUs the all-reduce and the peer-to-peer pairs (batched: no NCCL warning),
spawned and under torchrun, the second judged against the first as its --baseline. The targets
(healthy, one GPU busy, every GPU busy with a baseline, the all-reduce against a tight loop)
are benchmarks/node_check.sh's."""
import json
import subprocess
import sys

import torch

from conftest import ROOT, free_port
from gpu_checks import TIMEOUT, child_env, gpu_suite, needs_two_gpus
from microbench.platform import devices
from microbench.platform.errors import EXIT_FLAGGED
from microbench.store import schema

pytestmark = gpu_suite


def _node(*args: str, launcher=()) -> subprocess.CompletedProcess:
    return subprocess.run([*launcher, *(["-m", "microbench.node"] if launcher
                                        else [sys.executable, "-m", "microbench.node"]), *args],
                          cwd=ROOT, env=child_env(), capture_output=True, text=True,
                          timeout=TIMEOUT)


def _check(ran, path) -> dict:
    assert ran.returncode in (0, EXIT_FLAGGED), (ran.stdout[-3000:], ran.stderr[-3000:])
    assert "Traceback" not in ran.stderr, ran.stderr[-3000:]
    document = json.loads(path.read_text())
    schema.validate_result(document, str(path))
    return document["node_check"]


def test_every_part_on_every_gpu(tmp_path):
    path = tmp_path / "node.json"
    check = _check(_node("--json", str(path)), path)
    assert len(check["gpus"]) == torch.cuda.device_count()
    for gpu in check["gpus"]:
        figures = gpu["figures"]
        assert set(figures) == {"gemm_tflops", "gemm_fp8_tflops", "memory_gbs", "h2d_gbs",
                                "d2h_gbs", "train_items_per_s", "decode_tokens_per_s"}
        measured = [f for f in figures.values() if not f["skipped"]]
        # --samples 8 repetitions of each part; the decode part keeps each step of them.
        assert all(f["value"] and len(f["samples"]) >= 8 for f in measured), figures
        for host_bound in ("train_items_per_s", "decode_tokens_per_s"):
            assert not figures[host_bound]["judged"] and not figures[host_bound]["flagged"]
        assert figures["gemm_tflops"]["judged"]
        if devices.fp8_e4m3_dtype(torch.device("cuda", gpu["local_rank"])) is not None:
            assert figures["gemm_fp8_tflops"]["value"] > figures["gemm_tflops"]["value"]
        assert figures["gemm_tflops"]["telemetry"]["samples"] >= 1
        assert gpu["health"] is not None and gpu["health"]["pcie_width"], gpu["health"]


@needs_two_gpus
def test_links_between_two_gpus_spawned_and_under_torchrun(tmp_path):
    path = tmp_path / "node.json"
    ran = _node("--processes", "2", "--json", str(path))
    check = _check(ran, path)
    assert "unbatched" not in ran.stdout + ran.stderr          # batched P2P: NCCL's advice
    assert len(check["p2p"]) == 2 and all(c["gbs"] for c in check["p2p"])
    assert check["allreduce"][0]["backend"] == "nccl"
    assert all(size["median_gbs"] for size in check["allreduce"][0]["sizes"])
    launched = tmp_path / "launched.json"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                "--master-port", str(free_port())]
    check = _check(_node("--quick", "--json", str(launched), "--baseline", str(path),
                         launcher=torchrun), launched)
    assert [g["rank"] for g in check["gpus"]] == [0, 1] and check["quick"]
    assert check["baseline"] == str(path)
    assert all(g["figures"]["gemm_tflops"]["baseline"] is not None for g in check["gpus"])
