"""The node check's result document: what every GPU and link measured, each figure beside its
peers' median, and the verdict; ``store/result.schema.json``'s ``node_check`` describes it and
``microbench-report`` reads it (``store/entry.node_gpu_entry``)."""
from __future__ import annotations

import datetime
import statistics
from typing import TYPE_CHECKING, Sequence

from microbench import __version__
from microbench.node.parts import FIGURES, HOST_BOUND
from microbench.node.links import Collective, PairCopy
from microbench.node.verdict import Judged, Verdict
from microbench.store.schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from microbench.node.verdict import GpuVerdict

METHOD = ("each figure is the median of its samples; a GPU is flagged when a figure it decides "
          "(not_judged: those bound by the host, shown only) lies below the median of its "
          "peers (the GPUs of its model), or of the baseline's samples of its model, by more "
          "than tolerance_pct and its 95% interval against them (Welch's t on log samples) "
          "lies below 1, and the part measured again on every GPU (recheck) flags it again; "
          "when it throttles (idle and the rated power limit excluded), reports uncorrectable ECC "
          "errors or retired pages, trained a narrower or slower PCIe link than its peers, or "
          "failed a part; links are judged by the same rule against the other links and, with a "
          "baseline, against its links of the same model and shape (scope, ranks, nodes, "
          "size); where the job's all-reduce across 3 or more nodes flags, the all-reduce over "
          "each pair of nodes (across_nodes) is judged against the fastest pair's, and the node "
          "in every slow pair, each of its pairs slow, is named (slow_node)")


def _judged(judged: Judged) -> dict:
    return {"value": judged.value, "median": judged.median, "diff_pct": judged.diff_pct,
            "flagged": judged.flagged, "noise": judged.noise}


def _recheck(judged: Judged | None) -> dict | None:
    """A flag's second measurement (None where the first did not flag)."""
    if judged is None or judged.recheck is None:
        return None
    return {**_judged(judged.recheck), "samples": list(judged.recheck_samples)}


def _against_baseline(judged: Judged | None) -> dict | None:
    if judged is None:
        return None
    return {**_judged(judged), "recheck": _recheck(judged)}


def _gpu(verdict: GpuVerdict) -> dict:
    record = verdict.record
    figures = {}
    for key, part in record.parts.items():
        judged = verdict.figures.get(key, Judged(part.value, None, None))
        figures[key] = {**_judged(judged), "samples": list(part.samples), "basis": part.basis,
                        "failure": part.failure, "skipped": part.skipped,
                        "telemetry": None if part.telemetry is None else part.telemetry.to_dict(),
                        "judged": key not in HOST_BOUND, "recheck": _recheck(judged),
                        "baseline": _against_baseline(verdict.baseline.get(key))}
    return {"rank": record.rank, "host": record.host, "node_rank": record.node_rank,
            "local_rank": record.local_rank,
            "device": record.device, "device_name": record.device_name,
            "flagged": verdict.flagged, "findings": list(verdict.findings),
            "flagged_by": list(verdict.flagged_by),
            "telemetry_note": record.telemetry_note, "power_limit_w": record.power_limit_w,
            "default_power_limit_w": record.default_power_limit_w,
            "health": None if record.health is None else record.health.to_dict(),
            "figures": figures}


def _collective(collective: Collective, backend: str | None) -> dict:
    return {"scope": collective.scope, "ranks": list(collective.ranks), "backend": backend,
            "sizes": [{"bytes": size, "busbw_gbs": list(values),
                       "median_gbs": statistics.median(values) if values else None}
                      for size, values in collective.busbw_gbs.items()]}


def _across(verdict: Verdict, backend: str | None) -> dict | None:
    """What split the job's all-reduce across nodes (None: it was not flagged)."""
    across = verdict.across
    if across is None:
        return None
    return {"finding": across.finding, "slow_node": across.slow_node,
            "pairs": [{"nodes": list(pair.measured.nodes),
                       "all_reduce": _collective(pair.measured.all_reduce, backend),
                       "judged": _judged(pair.judged)} for pair in across.pairs]}


def build(verdict: Verdict, collectives: Sequence[Collective], copies: Sequence[PairCopy],
          *, device_type: str, quick: bool, samples: int, command: Sequence[str],
          seconds: float, backend: str | None, p2p_note: str | None) -> dict:
    return {"schema_version": SCHEMA_VERSION, "node_check": {
        "version": __version__,
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": list(command), "device_type": device_type,
        "tolerance_pct": verdict.tolerance_pct, "quick": quick, "samples": samples,
        "seconds": seconds, "flagged": verdict.flagged,
        "flagged_hosts": verdict.flagged_hosts(), "notes": list(verdict.notes),
        "baseline": verdict.baseline_source, "flagged_by": verdict.flagged_by(),
        "not_judged": dict(HOST_BOUND),
        "method": METHOD,
        "figures": [{"key": f.key, "unit": f.unit, "label": f.console} for f in FIGURES.values()],
        "gpus": [_gpu(g) for g in verdict.gpus],
        "links": [{"name": link.name, "kind": link.kind, **_judged(link.judged),
                   "flagged": link.flagged, "recheck": _recheck(link.judged),
                   "scope": link.scope, "ranks": list(link.ranks),
                   "baseline": _against_baseline(link.baseline)} for link in verdict.links],
        "allreduce": [_collective(c, backend) for c in collectives],
        "across_nodes": _across(verdict, backend),
        "p2p": [{"host": c.host, "source_rank": c.source_rank, "target_rank": c.target_rank,
                 "gbs": list(c.gbs)} for c in copies],
        "p2p_note": p2p_note,
    }}
