"""The node check's one verdict: each GPU's figures beside its peers' median (and, given one, a
baseline of its model), and what flags it.

A figure flags its GPU when it lies below a reference by more than ``--tolerance`` AND by more
than its measured noise: its ratio to the reference's samples is beyond the tolerance and the
95% interval of that ratio (``measure/stats.gate``: Welch's t on the logs of both sides'
samples) lies wholly below 1, as ``--compare`` judges a regression, or its samples rank below
the reference's (Mann-Whitney U, one-sided, p < 0.01: a GPU shared with another process gives
bimodal samples, a few as fast as a healthy GPU's, whose spread hides a median two thirds down
from the t test). A difference inside the spread is not a finding. The references:

* **peers**: the median of every GPU of the same model in the job, itself included;
* **baseline** (``--baseline``, ``baseline.py``): the samples of healthy GPUs of its model
  from an earlier run, so that a node whose GPUs are all slow is seen.

Only the figures the GPU decides are judged (``parts.judged``: the one rule for every part);
a host-bound figure is shown beside both references and never flags a GPU.

A flag is **confirmed** before it counts: the check measures every flagged part again on every
GPU (``check.py``), and a figure flags its GPU only when the second measurement, judged by the
same rule against the same reference, flags it too (``recheck``). Without a second
measurement (``recheck`` None) the flags stand as first measured: the preliminary verdict that
says what to measure again.

A GPU is flagged too when it throttles (``watch.throttling``: idle and the rated power limit
excluded), reports errors (uncorrectable ECC, retired pages), trained its PCIe link narrower
or slower than its peers, or could not run a part: facts read from the device, not compared.
A link (a pair's copy, a node's all-reduce) is judged by the same rule against the other links
and, given a baseline, against the baseline's links of its model and shape
(``reference.LinkShape``: a pair's copy, or an all-reduce over as many ranks and nodes at the
same size): a node whose links are all slow is seen only so, and the job's all-reduce across
nodes, which has no peer, only so. Where that all-reduce is flagged, the all-reduce over each
pair of nodes (``node_pairs.py``) is judged against the fastest pair's, and the node in every
slow pair (each of its pairs slow, no other) is named; two nodes are one link, named as such.

This module computes; ``show.py`` prints and ``document.py`` writes what it found.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field
from typing import Sequence

from microbench.measure import stats
from microbench.node.reference import ALL_NODES, Baseline, LinkShape, P2P, collective_shape
from microbench.node import node_pairs
from microbench.node.links import Collective, PairCopy, node_groups
from microbench.node.node_pairs import NodePair
from microbench.node.parts import DEFAULT_TOLERANCE_PCT, GPU_FIGURES, HOST_BOUND, judged
from microbench.node.program import GpuRecord
from microbench.node.watch import throttling
from microbench.store import ranges

# The comparisons a figure is judged by (a finding and the document name which flagged it).
PEERS, BASELINE = "peers", "baseline"
BELOW = {PEERS: "its peers' median", BASELINE: "the baseline's median"}
# A pair of nodes is judged against the fastest pair, not the pairs' median: with 3 nodes one
# slow node is in 2 of the 3 pairs, and their median is the slow pairs' own.
FASTEST_PAIR = "the fastest pair of nodes' median"
# Beyond the tolerance, a figure is beyond its noise when Welch's t says so (as --compare) or
# when its samples rank below the reference's at this level (a GPU shared with another process:
# stats.lower_by_rank says why the t test misses it).
RANK_ALPHA = 0.01
# Without --baseline, the summary says what the check cannot see.
SELF_ONLY_NOTE = ("judged only against itself (no --baseline): a node whose GPUs are all "
                  "equally slow (a node-wide power cap, a wrong driver, a cooling fault) "
                  "passes; give --baseline a healthy run's result of the same GPU model")


@dataclass(frozen=True)
class Judged:
    """One figure against one reference (its peers, or the baseline)."""

    value: float | None
    median: float | None                 # the reference's median (peers: this one included)
    diff_pct: float | None               # (value - median) / median, in %
    flagged: bool = False
    why: str = ""                        # the finding, in words ("" not flagged)
    noise: str = ""                      # what the noise rule said
    judged: bool = True                  # False: shown, never flagging (parts.HOST_BOUND)
    recheck: "Judged | None" = None      # the second measurement, where the first flagged
    recheck_samples: tuple[float, ...] = ()


@dataclass(frozen=True)
class GpuVerdict:
    record: GpuRecord
    figures: dict[str, Judged]           # against its peers
    findings: tuple[str, ...]            # every reason this GPU is flagged
    baseline: dict[str, Judged] = field(default_factory=dict)   # against --baseline
    flagged_by: tuple[str, ...] = ()     # PEERS, BASELINE, "device" (throttling, errors,
                                         # its PCIe link, a failed part)

    @property
    def flagged(self) -> bool:
        return bool(self.findings)


@dataclass(frozen=True)
class LinkVerdict:
    name: str                            # "rank 0 -> rank 1 (host)", "all-reduce 512 MiB (host)"
    kind: str                            # "p2p" | "allreduce"
    judged: Judged                       # against the other links
    pair: tuple[int, int] | None = None  # a p2p link's ranks, lower first (both directions
                                         # are measured at once, and again together)
    baseline: Judged | None = None       # against --baseline's links of its shape
    scope: str | None = None             # an all-reduce's ("node <name>", "all nodes")
    ranks: tuple[int, ...] = ()          # a pair's (source, target); an all-reduce's

    @property
    def flagged(self) -> bool:
        return self.judged.flagged or (self.baseline is not None and self.baseline.flagged)

    @property
    def why(self) -> str:
        """Every finding of this link, in words ("" not flagged)."""
        return "; ".join(j.why for j in (self.judged, self.baseline)
                         if j is not None and j.flagged)


@dataclass(frozen=True)
class JudgedPair:
    """A pair of nodes' all-reduce (largest size) against the fastest pair's."""

    measured: NodePair
    judged: Judged

    @property
    def name(self) -> str:
        return f"all-reduce {max(self.measured.all_reduce.busbw_gbs) >> 20} MiB " \
               f"({node_pairs.scope(self.measured.nodes)})"


@dataclass(frozen=True)
class AcrossNodes:
    """Which node the job's all-reduce across nodes, flagged, is slow by (``node_pairs.py``)."""

    finding: str                         # in words, one line
    pairs: tuple[JudgedPair, ...] = ()   # each pair of nodes' all-reduce (3 or more nodes)
    slow_node: str | None = None         # the node every slow pair shares (None: no one node)


def pairs_to_confirm(links: Sequence[LinkVerdict]) -> frozenset:
    """The pairs of GPUs whose copy flagged a link: measured again before the flag counts."""
    return frozenset(link.pair for link in links if link.flagged and link.pair)


@dataclass(frozen=True)
class Verdict:
    gpus: tuple[GpuVerdict, ...]
    links: tuple[LinkVerdict, ...]
    tolerance_pct: float
    notes: tuple[str, ...] = field(default=())
    baseline_source: str | None = None
    across: AcrossNodes | None = None    # the job's all-reduce across nodes, split by pairs

    @property
    def flagged(self) -> bool:
        return any(g.flagged for g in self.gpus) or any(l.flagged for l in self.links)

    def flagged_hosts(self) -> list[str]:
        hosts = [g.record.node for g in self.gpus if g.flagged]
        hosts += [l.name.rsplit("(", 1)[-1].rstrip(")") for l in self.links
                  if l.flagged and "(" in l.name and l.scope != ALL_NODES]
        if self.across is not None and self.across.slow_node is not None:
            hosts.append(self.across.slow_node)
        return sorted(set(hosts))

    def flagged_by(self) -> list[str]:
        """Which comparisons flagged something, in a fixed order."""
        seen = {by for g in self.gpus for by in g.flagged_by}
        if any(l.flagged for l in self.links):
            seen.add("links")
        if any(l.baseline is not None and l.baseline.flagged for l in self.links):
            seen.add(BASELINE)
        return [by for by in (PEERS, BASELINE, "device", "links") if by in seen]

    def to_confirm(self) -> tuple[str, ...]:
        """The parts whose figure flagged some GPU against its peers or the baseline: measured
        again on every GPU before the flag counts."""
        keys = {key for g in self.gpus for judged_ in (g.figures, g.baseline)
                for key, j in judged_.items() if j.flagged}
        return tuple(figure.key for figure in GPU_FIGURES if figure.key in keys)


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _ruled(own: Sequence[float], value: float | None, median: float | None,
           reference: Sequence[float], tolerance_pct: float, below: str) -> Judged:
    if value is None or median is None or not median:
        return Judged(value, median, None)
    diff = _diff_pct(value, median)
    if diff is None or not reference or diff >= -tolerance_pct:
        return Judged(value, median, diff)
    gate = stats.gate(list(reference), list(own), tolerance_pct)
    noise = gate.comparison.text
    if not gate.regression:
        by_rank = stats.lower_by_rank(reference, own)
        if by_rank >= RANK_ALPHA:
            return Judged(value, median, diff, noise=f"within its noise: {noise}")
        noise = f"below by rank (Mann-Whitney U, p = {by_rank:.2g}); Welch's t: {noise}"
    return Judged(value, median, diff, flagged=True, noise=noise,
                  why=f"{-diff:.0f}% below {below}")


def _diff_pct(value: float, median: float) -> float | None:
    """How far ``value`` is from ``median``, in percent, within the range a ratio of two
    figures may take (:data:`ranges.LARGEST` either way): samples near the float range's floor
    printed a 311-character percentage (issue 65). Further above: unknown (None); further
    below: -100 (as good as nothing, and judged as such)."""
    try:
        ratio = value / median
    except (ZeroDivisionError, OverflowError):
        return None
    if not math.isfinite(ratio) or ratio > ranges.LARGEST:
        return None
    return -100.0 if ratio < 1 / ranges.LARGEST else (ratio - 1) * 100


def judge_figure(own: Sequence[float], peers: Sequence[Sequence[float]],
                 tolerance_pct: float, below: str = BELOW[PEERS]) -> Judged:
    """``own`` samples against ``peers`` (every other GPU's or link's samples)."""
    value = _median(own)
    values = [statistics.median(p) for p in peers if p] + ([value] if value is not None else [])
    return _ruled(own, value, _median(values), [s for p in peers for s in p], tolerance_pct,
                  below)


def judge_reference(own: Sequence[float], reference: Sequence[float],
                    tolerance_pct: float, below: str = BELOW[BASELINE]) -> Judged:
    """``own`` samples against a reference's samples (a baseline's of the same model)."""
    return _ruled(own, _median(own), _median(reference), reference, tolerance_pct, below)


def _peers(records: Sequence[GpuRecord], record: GpuRecord) -> list[GpuRecord]:
    """The GPUs a GPU is compared with: every other one of the same model in the job."""
    return [r for r in records if r.rank != record.rank and r.device_name == record.device_name]


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


def _samples(records: Sequence[GpuRecord], key: str) -> list[tuple[float, ...]]:
    return [r.parts[key].samples for r in records if key in r.parts]


def _confirmed(first: Judged, second: Judged | None, samples: tuple[float, ...]) -> Judged:
    """A first flag stands only where the second measurement flags too (``second`` None: no
    second measurement was taken, the preliminary verdict)."""
    if not first.flagged or second is None:
        return first
    if second.flagged:
        drop = "unknown" if second.diff_pct is None else f"{-second.diff_pct:.0f}%"
        return dataclasses.replace(first, recheck=second, recheck_samples=samples,
                                   why=f"{first.why} (confirmed: {drop} when "
                                       f"measured again)")
    again = "unknown" if second.diff_pct is None else f"{second.diff_pct:+.0f}%"
    return dataclasses.replace(first, flagged=False, why="", recheck=second,
                               recheck_samples=samples,
                               noise=f"not confirmed: {first.diff_pct:+.0f}% at first, "
                                     f"{again} when measured again")


def _shown(judged_: Judged, key: str) -> Judged:
    return dataclasses.replace(judged_, flagged=False, why="", judged=False,
                               noise=f"shown, not judged: {HOST_BOUND[key]}")


def judge_gpu(record: GpuRecord, records: Sequence[GpuRecord],
              tolerance_pct: float, baseline: Baseline | None = None,
              recheck: Sequence[GpuRecord] | None = None) -> GpuVerdict:
    peers = _peers(records, record)
    again = {r.rank: r for r in recheck} if recheck is not None else None
    mine_again = again.get(record.rank) if again is not None else None
    peers_again = _peers(list(again.values()), record) if again is not None else []
    against_peers, against_baseline, findings, by = {}, {}, [], []
    for figure in GPU_FIGURES:
        key = figure.key
        part = record.parts.get(key)
        if part is None:
            continue
        if part.failure:
            findings.append(f"{figure.console} failed: {part.failure}")
            by.append("device")
        peer = judge_figure(part.samples, _samples(peers, key), tolerance_pct)
        reference = baseline.samples(record.device_name, key) if baseline else ()
        base = judge_reference(part.samples, reference, tolerance_pct) if reference else None
        if not judged(key):
            against_peers[key] = _shown(peer, key)
            if base is not None:
                against_baseline[key] = _shown(base, key)
            continue
        second = mine_again.parts.get(key) if mine_again is not None else None
        if again is not None and (peer.flagged or (base is not None and base.flagged)):
            if second is None or second.failure or not second.samples:
                # Not measured again, or failed this time: the first flag stands (a failure
                # is a finding of its own).
                if second is not None and second.failure:
                    findings.append(f"{figure.console} failed when measured again: "
                                    f"{second.failure}")
                    by.append("device")
                second = None
        samples = second.samples if second is not None else ()
        if again is not None and second is not None:
            peer = _confirmed(peer, judge_figure(samples, _samples(peers_again, key),
                                                 tolerance_pct), samples)
            if base is not None:
                base = _confirmed(base, judge_reference(samples, reference, tolerance_pct),
                                  samples)
        against_peers[key] = peer
        if peer.flagged:
            findings.append(f"{figure.console} {peer.why}")
            by.append(PEERS)
        if base is not None:
            against_baseline[key] = base
            if base.flagged:
                findings.append(f"{figure.console} {base.why}")
                by.append(BASELINE)
    reasons = throttling([p.telemetry for p in record.parts.values()], record.power_capped)
    if reasons:
        findings.append(f"throttled: {', '.join(reasons)}")
    if record.power_capped:
        findings.append(f"power limit {record.power_limit_w:g} W, below its default "
                        f"{record.default_power_limit_w:g} W")
    health = []
    if record.health is not None:
        health += record.health.errors()
    health += _pcie_findings(record, peers)
    findings += health
    if reasons or record.power_capped or health:
        by.append("device")
    return GpuVerdict(record, against_peers, tuple(findings), against_baseline,
                      tuple(dict.fromkeys(by)))


def judge_links(copies: Sequence[PairCopy], collectives: Sequence[Collective],
                tolerance_pct: float, recheck: Sequence[PairCopy] | None = None,
                baseline: Baseline | None = None, models: dict[int, str] | None = None,
                collectives_again: Sequence[Collective] = ()) -> list[LinkVerdict]:
    """``recheck``: the flagged pairs' copies measured again, each judged against the other
    pairs' first measurement and the baseline (None: the preliminary verdict, flags as first
    measured), and ``collectives_again`` the flagged all-reduces measured again.
    ``models``: each rank's device model, whose baseline links a link is judged against (a
    pair's by its receiver, an all-reduce's where all its ranks are of one)."""
    verdicts = []
    below = "the other links' median"
    models = models or {}
    again = {(c.source_rank, c.target_rank): c for c in recheck or ()}
    reduced_again = {c.scope: c for c in collectives_again}
    for copy in copies:
        others = [c.gbs for c in copies if c is not copy]
        judged_ = judge_figure(copy.gbs, others, tolerance_pct, below)
        reference = (baseline.link_samples(models.get(copy.target_rank), LinkShape(P2P))
                     if baseline is not None else ())
        base = judge_reference(copy.gbs, reference, tolerance_pct) if reference else None
        second = again.get((copy.source_rank, copy.target_rank))
        if recheck is not None and second is not None:
            judged_ = _confirmed(judged_, judge_figure(second.gbs, others, tolerance_pct, below),
                                 second.gbs)
            if base is not None:
                base = _confirmed(base, judge_reference(second.gbs, reference, tolerance_pct),
                                  second.gbs)
        pair = (min(copy.source_rank, copy.target_rank), max(copy.source_rank, copy.target_rank))
        verdicts.append(LinkVerdict(f"rank {copy.source_rank} -> rank {copy.target_rank} "
                                    f"({copy.host})", "p2p", judged_, pair, base,
                                    ranks=(copy.source_rank, copy.target_rank)))
    nodes = [c for c in collectives if c.scope.startswith("node ")]
    measured = [c for c in nodes if c.busbw_gbs]
    for collective in [c for c in collectives if c.busbw_gbs]:
        largest = max(collective.busbw_gbs)
        own = collective.busbw_gbs[largest]
        if collective in measured:
            others = [c.busbw_gbs.get(largest, ()) for c in measured if c is not collective]
            judged_ = judge_figure(own, others, tolerance_pct, below)
        else:                           # the job's, across nodes: no other link is like it
            judged_ = Judged(_median(own), None, None)
        shape = collective_shape(collective.scope, len(collective.ranks), len(nodes), largest)
        kinds = {models.get(rank) for rank in collective.ranks}
        reference = (baseline.link_samples(kinds.pop(), shape)
                     if baseline is not None and len(kinds) == 1 else ())
        base = judge_reference(own, reference, tolerance_pct) if reference else None
        if judged_.median is None and base is None:
            continue                    # nothing to judge it against: shown, not a link
        measured_again = reduced_again.get(collective.scope)
        samples = measured_again.busbw_gbs.get(largest, ()) if measured_again else ()
        if recheck is not None and samples:
            if collective in measured:
                judged_ = _confirmed(judged_, judge_figure(samples, others, tolerance_pct,
                                                           below), samples)
            if base is not None:
                base = _confirmed(base, judge_reference(samples, reference, tolerance_pct),
                                  samples)
        where = (collective.scope.removeprefix("node ") if collective in nodes
                 else f"all {len(nodes)} nodes")
        verdicts.append(LinkVerdict(f"all-reduce {largest >> 20} MiB ({where})", "allreduce",
                                    judged_, baseline=base, scope=collective.scope,
                                    ranks=collective.ranks))
    return verdicts


def judge_across(links: Sequence[LinkVerdict], nodes: Sequence[str],
                 pairs: Sequence[NodePair], tolerance_pct: float) -> AcrossNodes | None:
    """What splits the job's all-reduce across nodes, where it is flagged: two nodes are one
    link; 3 or more have their pairs (measured where it flagged at first), each judged against
    the fastest pair, and the node every slow pair shares named. None: nothing to say (not
    flagged, and no pair measured)."""
    flagged = any(link.flagged for link in links if link.scope == ALL_NODES)
    if len(nodes) == 2:
        return AcrossNodes(node_pairs.one_link(nodes)) if flagged else None
    order = {node: index for index, node in enumerate(nodes)}
    measured = sorted((pair for pair in pairs if pair.all_reduce.busbw_gbs),
                      key=lambda pair: [order.get(node, len(order)) for node in pair.nodes])
    if not measured:
        return None
    judged = _judged_pairs(measured, tolerance_pct)
    if not flagged:             # flagged at first, not when measured again: nothing to split
        return AcrossNodes(node_pairs.not_confirmed(), judged)
    slow = {pair.measured.nodes: pair.judged.flagged for pair in judged}
    named = node_pairs.slow_node(nodes, slow)
    return AcrossNodes(node_pairs.finding(named, slow), judged, named)


def _judged_pairs(pairs: Sequence[NodePair], tolerance_pct: float) -> tuple[JudgedPair, ...]:
    """Each pair's all-reduce at its largest size against the fastest pair's samples."""
    def largest(pair: NodePair) -> tuple[float, ...]:
        return pair.all_reduce.busbw_gbs[max(pair.all_reduce.busbw_gbs)]

    fastest = max((largest(pair) for pair in pairs), key=statistics.median)
    return tuple(JudgedPair(pair, judge_reference(largest(pair), fastest, tolerance_pct,
                                                  FASTEST_PAIR)) for pair in pairs)


def link_notes(collectives: Sequence[Collective], baseline: Baseline,
               models: dict[int, str]) -> list[str]:
    """What the baseline cannot judge: an all-reduce of a shape it lacks (another count of
    ranks or nodes: bus bandwidth differs with them)."""
    nodes = sum(1 for c in collectives if c.scope.startswith("node "))
    missing = []
    for collective in collectives:
        kinds = {models.get(rank) for rank in collective.ranks}
        if not collective.busbw_gbs or len(kinds) != 1:
            continue
        shape = collective_shape(collective.scope, len(collective.ranks), nodes,
                                 max(collective.busbw_gbs))
        if not baseline.link_samples(kinds.pop(), shape):
            missing.append(shape.words())
    if not missing:
        return []
    return [f"the baseline {baseline.source} has no {', '.join(dict.fromkeys(missing))}: "
            f"judged against the other links only"]


def judge(records: Sequence[GpuRecord], copies: Sequence[PairCopy] = (),
          collectives: Sequence[Collective] = (),
          tolerance_pct: float = DEFAULT_TOLERANCE_PCT, baseline: Baseline | None = None,
          recheck: Sequence[GpuRecord] | None = None,
          copies_again: Sequence[PairCopy] | None = None,
          collectives_again: Sequence[Collective] = (),
          pairs_of_nodes: Sequence[NodePair] = ()) -> Verdict:
    """``recheck``: every GPU's second measurement of the parts the first flagged;
    ``copies_again``: the flagged pairs' copies measured again (None: the preliminary verdict,
    flags as first measured), ``collectives_again`` the flagged all-reduces, and
    ``pairs_of_nodes`` the all-reduce over each pair of nodes (where the job's flagged)."""
    notes = []
    if len(records) < 2:
        notes.append("one GPU: its figures have no peers to be compared with (throttling "
                     "and errors are still checked)")
    models = sorted({r.device_name for r in records})
    if len(models) > 1:
        notes.append(f"{len(models)} device models ({', '.join(models)}): each GPU is "
                     f"compared with those of its own model")
    if baseline is None:
        notes.append(SELF_ONLY_NOTE)
    else:
        missing = [m for m in models if not any(baseline.models.get(m, {}).values())]
        if missing:
            notes.append(f"the baseline {baseline.source} has no figures of "
                         f"{', '.join(missing)}: judged against its peers only")
    models_of = {r.rank: r.device_name for r in records}
    if baseline is not None:
        notes += link_notes(collectives, baseline, models_of)
    gpus = tuple(judge_gpu(r, records, tolerance_pct, baseline, recheck) for r in records)
    links = judge_links(copies, collectives, tolerance_pct, copies_again, baseline, models_of,
                        collectives_again)
    nodes = list(node_groups([r.node for r in records]))
    return Verdict(gpus, tuple(links), tolerance_pct, tuple(notes),
                   baseline_source=None if baseline is None else baseline.source,
                   across=judge_across(links, nodes, pairs_of_nodes, tolerance_pct))
