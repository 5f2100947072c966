"""microbench-node end to end on the CPU: two processes over gloo run the real command; one of
them made slow by the test hook (MICROBENCH_NODE_SCALE) is flagged, alone, with exit 6, and
its document validates and reads back; bad input is one line and its documented code."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import ROOT, assert_one_line_error
from microbench.platform.errors import EXIT_FLAGGED
from microbench.store import schema


def _node(*args: str, env: dict | None = None, timeout: int = 120):
    inherited = {k: v for k, v in os.environ.items() if k != "MICROBENCH_NODE_SCALE"}
    child_env = {**inherited, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "microbench.node", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=child_env)


@pytest.mark.slow
def test_a_slow_process_is_flagged_alone_and_a_baseline_sees_a_uniformly_slow_node(tmp_path):
    """The real command, --quick (GEMM, memory, all-reduce over gloo): rank 1 made slow is
    flagged alone, once measured again, and the summary says the node was judged only against
    itself; the baseline it saves (rank 0's figures) then flags both ranks of a node slow
    everywhere (the scale hook on every rank), by the baseline, not by their peers."""
    result_path, saved = tmp_path / "node.json", tmp_path / "baseline.json"
    ran = _node("--device", "cpu", "--quick", "--samples", "3", "--tolerance", "50",
                "--json", str(result_path), "--save-baseline", str(saved),
                env={"MICROBENCH_NODE_SCALE": "1:0.05"})
    assert ran.returncode == EXIT_FLAGGED, (ran.stdout[-3000:], ran.stderr[-3000:])
    assert "Node check: FLAGGED GPUs:" in ran.stdout and "rank 1" in ran.stdout
    assert "flagged by: peers" in ran.stdout and "judged only against itself" in ran.stdout
    assert "all-reduce bus bandwidth [GB/s], node" in ran.stdout
    document = json.loads(result_path.read_text())
    schema.validate_result(document, str(result_path))
    check = document["node_check"]
    assert [g["flagged"] for g in check["gpus"]] == [False, True]
    assert any("below its peers' median (confirmed" in finding
               for finding in check["gpus"][1]["findings"])
    assert check["gpus"][1]["figures"]["gemm_tflops"]["recheck"]["flagged"]
    assert check["allreduce"][0]["backend"] == "gloo"
    assert len(check["allreduce"][0]["sizes"]) == 3
    assert check["p2p_note"] and check["quick"] and check["baseline"] is None
    stored = json.loads(saved.read_text())
    schema.validate_result(stored, str(saved))
    assert [m["gpus"] for m in stored["node_baseline"]["models"]] == [1]   # rank 1 left out
    report = subprocess.run([sys.executable, "-m", "microbench.report", str(result_path)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert report.returncode == 0 and "Node checks: 2 rows" in report.stdout, report.stderr

    slow = _node("--device", "cpu", "--quick", "--samples", "3", "--tolerance", "50",
                 "--json", str(result_path), "--baseline", str(saved),
                 env={"MICROBENCH_NODE_SCALE": "*:0.05"})
    assert slow.returncode == EXIT_FLAGGED, (slow.stdout[-3000:], slow.stderr[-3000:])
    assert "flagged by: baseline" in slow.stdout and "judged only" not in slow.stdout
    check = json.loads(result_path.read_text())["node_check"]
    assert [g["flagged_by"] for g in check["gpus"]] == [["baseline"], ["baseline"]]
    assert check["baseline"] == str(saved)


@pytest.mark.slow
def test_a_process_that_dies_ends_the_check_at_once():
    """Rank 1 fails after the rendezvous (the test hook): the parent stops rank 0, which would
    otherwise wait for it in a collective until --dist-timeout, and exits 1."""
    started = time.monotonic()
    ran = _node("--device", "cpu", "--quick", "--samples", "3", "--no-files",
                env={"MICROBENCH_FAIL_RANK": "1"})
    assert ran.returncode == 1 and "failure injected on rank 1" in ran.stderr, ran.stderr
    assert time.monotonic() - started < 90


@pytest.mark.parametrize("args, text", [
    (("--tolerance", "nan"), "--tolerance"),
    (("--processes", "0"), "--processes"),
    (("--samples", "2"), "--samples"),
    (("--device", "tpu"), "--device"),
    (("--json", ""), "--json must not be empty"),
])
def test_bad_flags_are_one_line_and_exit_2(args, text):
    assert_one_line_error(_node(*args), 2, text)


@pytest.mark.slow
def test_a_bad_scale_hook_is_one_line_and_exit_2():
    assert_one_line_error(_node("--device", "cpu", env={"MICROBENCH_NODE_SCALE": "one:half"}),
                          2, "MICROBENCH_NODE_SCALE")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_cuda_without_a_gpu_is_exit_4():
    assert_one_line_error(_node("--device", "cuda"), 4, "asked for a GPU")


def _agents(folder, nodes: int, *args: str) -> list[tuple[int, str, str]]:
    """Issue 62's one-host stand-in for ``nodes`` nodes: as many torchrun agents (c10d on
    localhost), one process each, running the check --quick on the CPU: each agent's
    (returncode, stdout, stderr), their output kept in ``folder``."""
    from conftest import free_port, spawn
    port, processes, logs = free_port(), [], []
    inherited = {k: v for k, v in os.environ.items()
                 if k not in ("MICROBENCH_NODE_SCALE", "RANK", "WORLD_SIZE", "LOCAL_RANK")}
    for node in range(nodes):
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes),
                   "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                   f"127.0.0.1:{port}", "--rdzv-id", f"agents-{port}", "--node-rank",
                   str(node), "-m", "microbench.node", "--device", "cpu", "--quick",
                   "--samples", "3", *args]
        logs.append((folder / f"agent{node}.out", folder / f"agent{node}.err"))
        with open(logs[-1][0], "w") as out, open(logs[-1][1], "w") as err:
            processes.append(spawn(command, cwd=ROOT, stdout=out, stderr=err,
                                   start_new_session=True,
                                   env={**inherited, "OMP_NUM_THREADS": "1",
                                        "PYTHONUNBUFFERED": "1"}))
    # Every rank leaves with the verdict's code, so no agent waits at torchrun's exit barrier
    # for another (300 s, deaf to SIGTERM, when rank 0 alone exited 6): all end together.
    for process in processes:
        try:
            process.wait(timeout=180)
        except subprocess.TimeoutExpired:
            for other in processes:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(other.pid, signal.SIGKILL)
            raise AssertionError(f"agent {processes.index(process)} still running after "
                                 f"180 s: {[p.poll() for p in processes]}") from None
    return [(p.returncode, out.read_text(), err.read_text())
            for p, (out, err) in zip(processes, logs)]


@pytest.mark.slow
def test_two_torchrun_agents_on_one_host_are_two_nodes(tmp_path):
    """Two torchrun agents on one host: grouped by host name alone they were one node; named
    by torchrun's node rank they are two, each with its own all-reduce, and one across them."""
    path = tmp_path / "node.json"
    ran = _agents(tmp_path, 2, "--tolerance", "50", "--json", str(path))
    assert [code for code, _, _ in ran] == [0, 0], [err[-2000:] for _, _, err in ran]
    outputs = [(out, err) for _, out, err in ran]
    check = json.loads(path.read_text())["node_check"]
    assert sorted(g["node_rank"] for g in check["gpus"]) == [0, 1]
    scopes = sorted(c["scope"] for c in check["allreduce"])
    assert len(scopes) == 3 and "all nodes" in scopes, scopes
    assert {s for s in scopes if s != "all nodes"} == {
        f"node {g['host']} node {g['node_rank']}" for g in check["gpus"]}
    [shown] = [out for out, _ in outputs if "Node check:" in out]
    assert " node 0 rank 0" in shown and " node 1 rank 1" in shown


def _unreachable_baseline(path) -> None:
    """A baseline whose all-reduce across 3 nodes (one rank each, at the CPU's largest size)
    no CPU reaches, and whose GEMM any does: the job's all-reduce is flagged, no process."""
    from microbench.node.links import CPU_SIZES
    path.write_text(json.dumps({"schema_version": 2, "node_baseline": {
        "version": "test", "time": "2026-01-01T00:00:00+00:00", "models": [{
            "device_name": "cpu", "gpus": 3,
            "figures": {"gemm_tflops": {"median": 1e-6, "samples": [1e-6, 1.1e-6, 0.9e-6]}},
            "links": [{"figure": "allreduce_busbw_gbs", "scope": "all nodes", "ranks": 3,
                       "nodes": 3, "bytes": max(CPU_SIZES), "median": 1e4,
                       "samples": [1e4, 1.01e4, 0.99e4]}]}]}}))


@pytest.mark.slow
def test_three_agents_split_a_slow_all_reduce_across_nodes_by_pairs_of_nodes(tmp_path):
    """Issue 62: three torchrun agents as three nodes, the job's all-reduce across them far
    below the baseline's: flagged, measured again, and every pair of nodes measured to say
    which node is slow. On one host the pairs are alike, so the verdict may name a node, list
    slow pairs or say no pair is slower; it says one of them, on rank 0, and in the document."""
    path, baseline = tmp_path / "node.json", tmp_path / "baseline.json"
    _unreachable_baseline(baseline)
    ran = _agents(tmp_path, 3, "--tolerance", "50", "--json", str(path), "--baseline",
                  str(baseline))
    [(code, shown, _)] = [agent for agent in ran if "Node check:" in agent[1]]
    assert code != 0 and "Node check: FLAGGED" in shown, [err[-2000:] for _, _, err in ran]
    assert all(agent_code != 0 for agent_code, _, _ in ran), [c for c, _, _ in ran]   # alike
    assert "all-reduce 4 MiB (all 3 nodes): " in shown and "FLAGGED" in shown
    [line] = [line for line in shown.splitlines()
              if line.startswith("all-reduce across nodes: ")]
    findings = ("is slow: every pair of nodes with it", "no single node explains it",
                "no pair of nodes is slower than the others")
    assert any(finding in line for finding in findings), line
    check = json.loads(path.read_text())["node_check"]
    schema.validate_result({"schema_version": 2, "node_check": check}, str(path))
    across = check["across_nodes"]
    nodes = sorted(f"{g['host']} node {g['node_rank']}" for g in check["gpus"])
    assert sorted(tuple(pair["nodes"]) for pair in across["pairs"]) == [
        (nodes[0], nodes[1]), (nodes[0], nodes[2]), (nodes[1], nodes[2])]
    assert all(len(pair["all_reduce"]["ranks"]) == 2 and pair["all_reduce"]["sizes"]
               for pair in across["pairs"])
    assert across["finding"] in line and (across["slow_node"] is None
                                          or across["slow_node"] in check["flagged_hosts"])
