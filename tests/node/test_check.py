"""The node check's run, its collectives faked: every rank measures again exactly the parts
the first measurement flagged (nothing on a healthy node), and the exit code and the printed
verdict count a flag only once the second measurement confirms it."""
from __future__ import annotations

import argparse
import json
import os

from microbench.node import check
from microbench.node.program import GpuRecord, Part
from microbench.platform.errors import EXIT_FLAGGED

STEADY = (100.0, 101.0, 99.0, 100.5, 99.5, 100.2)


def _record(rank: int, gemm: float = 1.0, memory: float = 1.0) -> GpuRecord:
    parts = {"gemm_tflops": Part("gemm_tflops", tuple(s * gemm for s in STEADY)),
             "memory_gbs": Part("memory_gbs", tuple(s * memory for s in STEADY))}
    return GpuRecord(rank=rank, host="node1", local_rank=rank, device=f"cuda:{rank}",
                     device_name="Fake H100", parts=parts)


OPTIONS = check.Options("cuda", 6, True, 60.0)


def _gathering(monkeypatch, *rounds) -> None:
    answers = iter(rounds)
    monkeypatch.setattr(check.distributed, "all_gather_objects", lambda item: next(answers))


def test_only_the_flagged_parts_are_measured_again(monkeypatch):
    first = [_record(0), _record(1, gemm=0.6), _record(2)]
    again = [_record(0), _record(1, gemm=0.6), _record(2)]
    _gathering(monkeypatch, first, again)
    asked = []

    def measure(only=None):
        asked.append(only)
        return again[1]

    assert check._recheck(first[1], measure, OPTIONS) == again
    assert asked == [("gemm_tflops",)]


def test_a_healthy_node_measures_nothing_again(monkeypatch):
    _gathering(monkeypatch, [_record(0), _record(1, gemm=0.97)])
    assert check._recheck(_record(0), lambda only=None: 1 / 0, OPTIONS) is None


def _finished(capsys, rechecks) -> tuple[int, str]:
    outcome = check.Outcome(records=[_record(0), _record(1, gemm=0.6), _record(2)],
                            rechecks=rechecks, p2p_note="not measured with --quick")
    args = argparse.Namespace(no_files=True, plot=None, save_baseline=None, json=None)
    code = check._finish(outcome, args, OPTIONS, [], 1.0)
    return code, capsys.readouterr().out


def test_a_flag_is_reported_only_once_confirmed(capsys):
    code, out = _finished(capsys, [_record(0), _record(1), _record(2)])
    assert code == 0 and "Node check: PASS" in out and "FLAGGED" not in out
    code, out = _finished(capsys, [_record(0), _record(1, gemm=0.6), _record(2)])
    assert code == EXIT_FLAGGED and "Node check: FLAGGED GPUs: node1 rank 1" in out
    assert "GEMM 40% below its peers' median (confirmed: 40% when measured again)" in out


def test_two_checks_into_one_json_keep_both_results(tmp_path, capsys, monkeypatch):
    """Issue 65's note: two checks at once with one --json both wrote it, and the first result
    was lost. The name is claimed before the GPUs are measured; a name another live check
    holds sends this one to the next free name, with a note; each writes its own, whole."""
    from microbench.platform import writing
    path = str(tmp_path / "node.json")
    (tmp_path / "node.json").write_text("{}")                # an earlier check's: replaced
    assert check.claim_json(path) == path and capsys.readouterr().out == ""
    writing.release_claims()
    # Another check, alive (this test's parent process), claimed node.json; node-2.json is an
    # earlier result of its own, never replaced by a name chosen for this one.
    (tmp_path / ".node.json.claim").write_text(f"{os.getppid()} {writing._HOST}")
    (tmp_path / "node-2.json").write_text("{}")
    monkeypatch.setattr(check, "_spawned", lambda count, options: check.Outcome(
        records=[_record(0), _record(1)], rechecks=None, p2p_note="not measured with --quick"))
    from microbench.node import arguments
    code = arguments.main(["--device", "cpu", "--quick", "--json", path])
    out = capsys.readouterr().out
    assert code == 0
    assert f"note: {path} is claimed by another node check running now; this check's " \
           f"result goes to {tmp_path / 'node-3.json'}" in out
    assert f"Result: {tmp_path / 'node-3.json'}" in out
    assert json.loads((tmp_path / "node-3.json").read_text())["node_check"]["gpus"]
    assert (tmp_path / "node.json").read_text() == "{}" == (tmp_path / "node-2.json").read_text()
    assert not (tmp_path / ".node-3.json.claim").exists()        # given back at the end


def test_only_the_flagged_all_reduces_are_measured_again(monkeypatch):
    """Every rank judges every all-reduce as rank 0 will; the flagged ones are measured again,
    the job's by every rank, a node's by its own ranks only (the other node's rank skips it)."""
    from microbench.node.links import Collective
    measured = lambda scope, scale=1.0: Collective(scope, (0, 1), (1 << 20,), {1 << 20: tuple(
        s * scale for s in STEADY)})
    nodes = [measured("node a"), measured("node b", 0.5), measured("node c"),
             measured("all nodes")]
    _gathering(monkeypatch, [nodes[:1] + nodes[3:], nodes[1:2], nodes[2:3]])
    asked = []
    monkeypatch.setattr(check.links, "all_reduce", lambda group, ranks, device, samples, scope:
                        asked.append((group, scope)) or measured(scope))
    groups = {"a": [0], "b": [1], "c": [2]}
    again, pairs = check._collectives_again(nodes, {"a": "ga", "b": "gb", "c": "gc"}, groups,
                                            "b", 3, None, OPTIONS, {0: "x", 1: "x", 2: "x"})
    assert asked == [("gb", "node b")] and [c.scope for c in again] == ["node b"]
    assert pairs == []                         # the job's all-reduce has no baseline here
    _gathering(monkeypatch, [nodes[:1] + nodes[3:], nodes[1:2], nodes[2:3]])
    asked.clear()
    check._collectives_again(nodes, {"a": "ga", "b": "gb", "c": "gc"}, groups, "a", 3, None,
                             OPTIONS, {0: "x", 1: "x", 2: "x"})
    assert asked == []                         # node a's rank: node b's is not its to measure


def test_the_pairs_of_nodes_are_measured_only_where_the_job_all_reduce_flagged(monkeypatch):
    """Issue 62: the job's all-reduce across 3 nodes, 55% below the baseline (340 -> 154
    GB/s), has every pair of nodes measured with the flagged all-reduces, to name the slow
    node; a healthy job measures none, and neither do 2 nodes (their one pair is the job)."""
    from microbench.node import reference
    from microbench.node.links import Collective
    size = 1 << 20
    shape = reference.LinkShape(reference.ALLREDUCE, reference.ALL_NODES, 3, 3, size)
    stored = reference.Baseline("healthy.json", {"x": {"gemm_tflops": STEADY}}, {"x": 3},
                                {"x": {shape: tuple(s * 3.4 for s in STEADY)}})
    options = check.Options("cuda", 6, True, 60.0, baseline=stored)
    job = lambda gbs: Collective("all nodes", (0, 1, 2), (size,), {size: tuple(
        s * gbs / 100 for s in STEADY)})
    measured = []
    monkeypatch.setattr(check.links, "all_reduce", lambda group, ranks, device, samples, scope:
                        job(154))
    monkeypatch.setattr(check.node_pairs, "measure", lambda groups, node, device, samples:
                        measured.append((list(groups), node)) or ["pairs"])
    groups = {"a": [0], "b": [1], "c": [2]}
    models = {0: "x", 1: "x", 2: "x"}

    def again(gbs: float, groups: dict) -> tuple[list, list]:
        # Each node's own all-reduce (one rank: nothing measured), then the job's.
        own = [[Collective(f"node {node}", tuple(ranks), (size,))] for node, ranks in
               groups.items()]
        _gathering(monkeypatch, [own[0] + [job(gbs)], *own[1:]])
        return check._collectives_again(own[1] + [job(gbs)], {}, groups, "b", 3, None,
                                        options, models)

    assert again(340, groups) == ([], []) and measured == []
    again_, pairs = again(154, groups)
    assert [c.scope for c in again_] == ["all nodes"] and pairs == ["pairs"]
    assert measured == [(["a", "b", "c"], "b")]
    measured.clear()
    shape2 = reference.LinkShape(reference.ALLREDUCE, reference.ALL_NODES, 3, 2, size)
    stored.links["x"][shape2] = stored.links["x"][shape]
    flagged, pairs = again(154, {"a": [0], "b": [1, 2]})
    assert [c.scope for c in flagged] == ["all nodes"] and pairs == [] and measured == []
