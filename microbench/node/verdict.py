"""The node check's one verdict: each GPU's figures beside its peers' median, and what flags it.

A figure flags its GPU when it lies below the median of its peers' figures (every GPU of the
same model in the job, itself included) by more than ``--tolerance`` AND by more than its
measured noise: its ratio to its peers' samples is beyond the tolerance and the 95% interval
of that ratio (``measure/stats.gate``: Welch's t on the logs of both sides' samples) lies
wholly below 1, as ``--compare`` judges a regression. A difference inside the spread is not
a finding.
A GPU is flagged too when it throttles (``watch.throttling``: idle and the rated power limit
excluded), reports errors (uncorrectable ECC, retired pages), trained its PCIe link narrower
or slower than its peers, or could not run a part. A link (a pair's copy, a node's all-reduce)
is judged by the same rule against the other links.

This module computes; ``show.py`` prints and ``document.py`` writes what it found.
"""
from __future__ import annotations

import dataclasses

import statistics
from dataclasses import dataclass, field
from typing import Sequence

from microbench.measure import stats
from microbench.node.parts import DEFAULT_TOLERANCE_PCT, GPU_FIGURES, HOST_BOUND
from microbench.node.links import Collective, PairCopy
from microbench.node.program import GpuRecord
from microbench.node.watch import throttling



@dataclass(frozen=True)
class Judged:
    """One figure against its peers."""

    value: float | None
    median: float | None                 # the peers' median, this one included
    diff_pct: float | None               # (value - median) / median, in %
    flagged: bool = False
    why: str = ""                        # the finding, in words ("" not flagged)
    noise: str = ""                      # what the noise rule said


@dataclass(frozen=True)
class GpuVerdict:
    record: GpuRecord
    figures: dict[str, Judged]
    findings: tuple[str, ...]            # every reason this GPU is flagged

    @property
    def flagged(self) -> bool:
        return bool(self.findings)


@dataclass(frozen=True)
class LinkVerdict:
    name: str                            # "rank 0 -> rank 1 (host)", "node host all-reduce"
    kind: str                            # "p2p" | "allreduce"
    judged: Judged


@dataclass(frozen=True)
class Verdict:
    gpus: tuple[GpuVerdict, ...]
    links: tuple[LinkVerdict, ...]
    tolerance_pct: float
    notes: tuple[str, ...] = field(default=())

    @property
    def flagged(self) -> bool:
        return any(g.flagged for g in self.gpus) or any(l.judged.flagged for l in self.links)

    def flagged_hosts(self) -> list[str]:
        hosts = [g.record.host for g in self.gpus if g.flagged]
        hosts += [l.name.rsplit("(", 1)[-1].rstrip(")") for l in self.links
                  if l.judged.flagged and "(" in l.name]
        return sorted(set(hosts))


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def judge_figure(own: Sequence[float], peers: Sequence[Sequence[float]],
                 tolerance_pct: float) -> Judged:
    """``own`` samples against ``peers`` (every other GPU's or link's samples)."""
    value = _median(own)
    values = [_median(p) for p in peers if p] + ([value] if value is not None else [])
    median = _median(values)
    if value is None or median is None or not median:
        return Judged(value, median, None)
    diff = (value - median) / median * 100
    pooled = [s for p in peers for s in p]
    if not pooled or diff >= -tolerance_pct:
        return Judged(value, median, diff)
    gate = stats.gate(pooled, list(own), tolerance_pct)
    noise = gate.comparison.text
    if not gate.regression:
        return Judged(value, median, diff, noise=f"within its noise: {noise}")
    return Judged(value, median, diff, flagged=True, noise=noise,
                  why=f"{-diff:.0f}% below the median")


def _peers(records: Sequence[GpuRecord], record: GpuRecord) -> list[GpuRecord]:
    """The GPUs a GPU is compared with: every other one of the same model in the job."""
    return [r for r in records if r is not record and r.device_name == record.device_name]


def _pcie_findings(record: GpuRecord, peers: Sequence[GpuRecord]) -> list[str]:
    health = record.health
    if health is None:
        return []
    findings = []
    for name, label in (("pcie_width", "width x"), ("pcie_generation", "generation ")):
        own = getattr(health, name)
        theirs = [getattr(p.health, name) for p in peers
                  if p.health is not None and getattr(p.health, name) is not None]
        if own is not None and theirs and own < _median(theirs + [own]):
            findings.append(f"PCIe link {label}{own}, its peers' {label}"
                            f"{_median(theirs):g}")
    return findings


def judge_gpu(record: GpuRecord, records: Sequence[GpuRecord],
              tolerance_pct: float) -> GpuVerdict:
    peers = _peers(records, record)
    judged, findings = {}, []
    for figure in GPU_FIGURES:
        part = record.parts.get(figure.key)
        if part is None:
            continue
        if part.failure:
            findings.append(f"{figure.console} failed: {part.failure}")
        theirs = [p.parts[figure.key].samples for p in peers if figure.key in p.parts]
        judged[figure.key] = judge_figure(part.samples, theirs, tolerance_pct)
        if figure.key in HOST_BOUND:
            judged[figure.key] = dataclasses.replace(
                judged[figure.key], flagged=False, why="",
                noise="bound by the host's kernel launches: shown, not judged")
        if judged[figure.key].flagged:
            findings.append(f"{figure.console} {judged[figure.key].why}")
    reasons = throttling([p.telemetry for p in record.parts.values()], record.power_capped)
    if reasons:
        findings.append(f"throttled: {', '.join(reasons)}")
    if record.power_capped:
        findings.append(f"power limit {record.power_limit_w:g} W, below its default "
                        f"{record.default_power_limit_w:g} W")
    if record.health is not None:
        findings += record.health.errors()
    findings += _pcie_findings(record, peers)
    return GpuVerdict(record, judged, tuple(findings))


def judge_links(copies: Sequence[PairCopy], collectives: Sequence[Collective],
                tolerance_pct: float) -> list[LinkVerdict]:
    verdicts = []
    for copy in copies:
        others = [c.gbs for c in copies if c is not copy]
        verdicts.append(LinkVerdict(f"rank {copy.source_rank} -> rank {copy.target_rank} "
                                    f"({copy.host})", "p2p",
                                    judge_figure(copy.gbs, others, tolerance_pct)))
    nodes = [c for c in collectives if c.scope.startswith("node ") and c.busbw_gbs]
    for collective in nodes:
        largest = max(collective.busbw_gbs)
        others = [c.busbw_gbs.get(largest, ()) for c in nodes if c is not collective]
        verdicts.append(LinkVerdict(f"all-reduce {largest >> 20} MiB "
                                    f"({collective.scope.removeprefix('node ')})",
                                    "allreduce",
                                    judge_figure(collective.busbw_gbs[largest], others,
                                                 tolerance_pct)))
    return verdicts


def judge(records: Sequence[GpuRecord], copies: Sequence[PairCopy] = (),
          collectives: Sequence[Collective] = (),
          tolerance_pct: float = DEFAULT_TOLERANCE_PCT) -> Verdict:
    notes = []
    if len(records) < 2:
        notes.append("one GPU: its figures have no peers to be compared with (throttling "
                     "and errors are still checked)")
    models = sorted({r.device_name for r in records})
    if len(models) > 1:
        notes.append(f"{len(models)} device models ({', '.join(models)}): each GPU is "
                     f"compared with those of its own model")
    gpus = tuple(judge_gpu(r, records, tolerance_pct) for r in records)
    return Verdict(gpus, tuple(judge_links(copies, collectives, tolerance_pct)),
                   tolerance_pct, tuple(notes))
