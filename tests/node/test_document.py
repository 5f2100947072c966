"""The node check's result document: it validates against the published schema, a document
that breaks it is refused in one line, and microbench-report reads one row per GPU."""
from __future__ import annotations

import io
import json

import pytest

from microbench.node import document, show
from microbench.node.links import Collective, PairCopy
from microbench.node.program import GpuRecord, Part
from microbench.node.verdict import judge
from microbench.node.watch import PartTelemetry
from microbench.measure.telemetry.health import DeviceHealth
from microbench.platform.errors import UsageError
from microbench.report import command as report_command
from microbench.store import schema
from microbench.store.entry import entries_of

STEADY = (100.0, 101.0, 99.0, 100.5)


def _verdict_and_document():
    records = []
    for rank, scale in enumerate((1.0, 1.0, 0.5)):
        parts = {"gemm_tflops": Part("gemm_tflops", tuple(s * scale for s in STEADY),
                                     basis="bf16 GEMM",
                                     telemetry=PartTelemetry(2, 1980.0, 2619.0, 600.0, 61.0,
                                                             ())),
                 "memory_gbs": Part("memory_gbs", STEADY),
                 "h2d_gbs": Part("h2d_gbs", skipped="no host-device link on the CPU")}
        records.append(GpuRecord(rank, "node1", rank, f"cuda:{rank}", "Fake H100", parts,
                                 DeviceHealth(ecc_uncorrected=0, pcie_width=16)))
    collectives = [Collective("node node1", (0, 1, 2), (1 << 20,), {1 << 20: STEADY})]
    copies = [PairCopy("node1", 0, 1, STEADY), PairCopy("node1", 1, 0, STEADY)]
    verdict = judge(records, copies, collectives)
    built = document.build(verdict, collectives, copies, device_type="cuda", quick=False,
                           samples=4, command=["microbench-node"], seconds=12.5,
                           backend="nccl", p2p_note=None)
    return verdict, json.loads(json.dumps(built))


def test_the_document_validates_and_says_what_was_flagged():
    verdict, built = _verdict_and_document()
    schema.validate_result(built, "node.json")
    assert schema.document_kind(built) == schema.NODE
    check = built["node_check"]
    assert check["flagged"] and check["flagged_hosts"] == ["node1"]
    assert [g["flagged"] for g in check["gpus"]] == [False, False, True]
    assert check["gpus"][2]["figures"]["gemm_tflops"]["diff_pct"] == pytest.approx(-50, abs=1)
    assert check["allreduce"][0]["sizes"][0]["median_gbs"] == pytest.approx(100.25)
    assert {f["key"] for f in check["figures"]} >= {"gemm_tflops", "allreduce_busbw_gbs"}


@pytest.mark.parametrize("path, value", [
    (("node_check", "gpus", 0, "figures", "gemm_tflops", "flagged"), "yes"),
    (("node_check", "gpus", 0, "figures", "not_a_figure"), {}),
    (("node_check", "tolerance_pct"), -1),
    (("node_check", "links", 0, "kind"), "telepathy"),
])
def test_a_broken_document_is_refused_in_one_line(path, value):
    _, built = _verdict_and_document()
    target = built
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(UsageError, match="node.json: does not match the result schema"):
        schema.validate_result(built, "node.json")


def test_the_report_lists_node_checks_with_host_rank_and_verdict(tmp_path, capsys):
    """Node-check documents are their own table, one row per GPU (host, rank, verdict and its
    figures), not rows of the op bench's table."""
    _, built = _verdict_and_document()
    entries = entries_of(built, "node.json")
    assert [e.settings["rank"] for e in entries] == [0, 1, 2]
    assert [e.settings["verdict"] for e in entries] == ["ok", "ok", "flagged"]
    assert entries[2].figures["gemm_tflops"] == pytest.approx(50.125)   # the median sample
    path = tmp_path / "node_check.json"
    path.write_text(json.dumps(built))
    assert report_command.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "Node checks: 3 rows" in out and "Op bench results" not in out
    header = next(line for line in out.splitlines() if line.lstrip().startswith("#"))
    assert all(word in header for word in ("host", "rank", "verdict", "GEMM TFLOP/s"))
    rows = [line.split() for line in out.splitlines() if "node1" in line and "Files" not in line
            and not line.startswith("  #")]
    assert [(row[1], row[2], row[5]) for row in rows] == [
        ("node1", "0", "ok"), ("node1", "1", "ok"), ("node1", "2", "flagged")]
    assert "GEMM 50% below its peers' median" in out           # the flagged GPU's finding


def test_the_console_table_puts_each_figure_beside_the_median():
    verdict, _ = _verdict_and_document()
    header, rows, not_judged = show.gpu_table(verdict)
    assert header[:3] == ["GPU", "device", "GEMM [TFLOP/s]"]
    assert rows[2][2] == "50.1 (-50%) !" and rows[2][-1] == "FLAGGED"
    assert rows[-1][0] == "median" and rows[-1][2] == "100"
    assert not_judged is None                        # every column shown here is judged


def test_the_plot_draws_every_gpu_against_the_median(tmp_path):
    pytest.importorskip("matplotlib")
    from microbench.node import plot
    verdict, _ = _verdict_and_document()
    path = tmp_path / "node.png"
    plot.write(verdict, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    title = plot.title(verdict)
    assert "3 x Fake H100" in title and "FLAGGED: node1 rank 2" in title
    assert "peers only (no --baseline)" in title


@pytest.mark.parametrize("device, counted", [("cuda:{}", "2 GPUs"),
                                             ("cpu", "2 processes on the CPU")])
def test_a_passing_check_counts_what_it_measured(device, counted):
    records = [GpuRecord(rank, "node1", rank, device.format(rank), "Fake", {
        "gemm_tflops": Part("gemm_tflops", STEADY)}) for rank in range(2)]
    out = io.StringIO()
    show.print_verdict(judge(records), [], None, out)
    assert f"Node check: PASS, {counted}, nothing flagged" in out.getvalue()


def test_the_report_does_not_chart_node_checks_but_says_why(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    _, built = _verdict_and_document()
    path = tmp_path / "node_check.json"
    path.write_text(json.dumps(built))
    assert report_command.main([str(path), "--plot", str(tmp_path / "chart.png")]) == 2
    assert "microbench-node --plot" in capsys.readouterr().err
