"""What the compiler did, observed rather than assumed: graphs compiled, graph breaks, graphs
compiled again inside the timed region, and whether CUDA (HIP) graphs were captured.

A label must never name a setting that did not take effect: ``--compileContext "{'mode':
'reduce-overhead'}"`` asks for CUDA graphs, but inductor skips them when a graph mutates an
input, on the CPU, or with several devices, and says so only in a log record. This module reads
what dynamo and inductor count (``torch._dynamo.utils.counters``: ``stats/unique_graphs``,
``graph_break``, ``inductor/cudagraph_skips``) before and after each phase, and takes inductor's
"skipping cudagraphs due to ..." records through a logging handler on its ``cudagraphs``
artifact logger, which also keeps that warning off the console (the report says it once, in
words, instead).

Example::

    watch = CompileWatch(device, config.compile_options)
    with watch.during("warm-up"):
        warm_up(...)
    with watch.during("timed"):
        measure(...)
    report = watch.report()       # CompileReport
    report.cuda_graphs            # 'replayed', 'skipped (mutated inputs)', 'not used (CPU)', ...
"""
from __future__ import annotations

import contextlib
import logging
import re
import warnings
from dataclasses import dataclass, field
from typing import Iterator

import torch

from microbench.settings.config import CUDA_GRAPH_MODES

# inductor's artifact logger for CUDA graph decisions (torch/_inductor/cudagraph_utils.py).
CUDAGRAPHS_LOGGER = "torch._inductor.cudagraph_utils.__cudagraphs"
_REASON = re.compile(r"skipping cudagraphs due to (.+?)(?:\s*\(\d+ instances?\))?(?:\.|$)",
                     re.MULTILINE)


def _counters() -> dict:
    from torch._dynamo.utils import counters
    return counters


def _snapshot() -> dict[str, int]:
    counters = _counters()
    return {"graphs": counters["stats"]["unique_graphs"],
            "graph_breaks": sum(counters["graph_break"].values()),
            "cudagraph_skips": counters["inductor"]["cudagraph_skips"],
            # inductor's FX graph cache: a graph compiled before (same code, settings and
            # versions) is loaded, not compiled: a warm compile takes a fraction of a cold one.
            "cache_hits": counters["inductor"]["fxgraph_cache_hit"],
            "cache_misses": counters["inductor"]["fxgraph_cache_miss"]}


def skip_reason(message: str) -> str:
    """``mutated inputs`` from inductor's ``skipping cudagraphs due to mutated inputs (44
    instances). Found from: ...``; the first line, trimmed, if it has another form."""
    found = _REASON.search(message)
    if found:
        return found.group(1).strip()
    return message.strip().splitlines()[0] if message.strip() else "no reason given"


def cuda_graphs_requested(options: dict) -> bool:
    """Whether these torch.compile options ask inductor for CUDA (HIP) graphs."""
    inductor = options.get("options") or {}
    return options.get("mode") in CUDA_GRAPH_MODES or bool(inductor.get("triton.cudagraphs"))


def _graph_trees_recorded(device: torch.device) -> bool | None:
    """Whether inductor's CUDA graph trees hold a recording for ``device``; None where this
    PyTorch does not say (its internals moved)."""
    try:
        from torch._inductor import cudagraph_trees
        manager = cudagraph_trees.get_manager(device.index or 0, create_if_none_exists=False)
    except (ImportError, AttributeError, TypeError, KeyError):
        return None
    return manager is not None


@dataclass(frozen=True)
class CompileReport:
    """What the compiler did in one process's warm-up and timed region."""

    graphs: int                      # graphs compiled in all (recompilations included)
    graph_breaks: int
    timed_recompiles: int            # graphs compiled inside the timed region (should be 0)
    cuda_graphs: str                 # 'replayed', 'skipped (reason)', 'not used (why)'
    skip_reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()   # Python warnings raised while compiling, once each
    cache_hits: int = 0              # graphs inductor loaded from its FX graph cache
    cache_misses: int = 0            # graphs it compiled anew

    @property
    def cache(self) -> str:
        """cold (every graph compiled anew), warm (every one from inductor's cache) or mixed:
        the first run's compile time is not a later run's."""
        if not self.cache_hits and not self.cache_misses:
            return "not consulted"
        if not self.cache_hits:
            return "cold"
        return "warm" if not self.cache_misses else "mixed"

    def summary_text(self) -> str:
        breaks = f"{self.graph_breaks} graph break{'s' * (self.graph_breaks != 1)}"
        timed = (f"{self.timed_recompiles} compiled while timed (the timing includes them)"
                 if self.timed_recompiles else "none compiled while timed")
        cached = ""
        if self.cache_hits or self.cache_misses:
            cached = (f"; {self.cache} compile ({self.cache_hits} of "
                      f"{self.cache_hits + self.cache_misses} from inductor's cache)")
        return f"{self.graphs} graph{'s' * (self.graphs != 1)}, {breaks}, {timed}{cached}"

    def to_dict(self) -> dict:
        return {"graphs": self.graphs, "graph_breaks": self.graph_breaks,
                "timed_recompiles": self.timed_recompiles, "cuda_graphs": self.cuda_graphs,
                "cuda_graph_skip_reasons": list(self.skip_reasons),
                "warnings": list(self.warnings), "cache": self.cache,
                "cache_hits": self.cache_hits, "cache_misses": self.cache_misses}


class _SkipRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        reason = skip_reason(record.getMessage())
        if reason not in self.reasons:
            self.reasons.append(reason)


@dataclass
class CompileWatch:
    """Counts what the compiler does during named phases of one process's run."""

    device: torch.device
    options: dict
    phases: dict[str, dict[str, int]] = field(default_factory=dict)
    _records: _SkipRecords = field(default_factory=_SkipRecords)
    warnings: list[str] = field(default_factory=list)

    @contextlib.contextmanager
    def during(self, phase: str) -> Iterator[None]:
        """Count what the compiler does while the block runs, as ``phase``; keep the Python
        warnings it raises (inductor's TF32 advice, say) for the report, off the console."""
        logger = logging.getLogger(CUDAGRAPHS_LOGGER)
        before, propagate = _snapshot(), logger.propagate
        logger.addHandler(self._records)
        logger.propagate = False          # ours to report, not the console's
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("default")
                try:
                    yield
                finally:
                    self._keep(caught)
        finally:
            logger.removeHandler(self._records)
            logger.propagate = propagate
            after = _snapshot()
            self.phases[phase] = {key: after[key] - before[key] for key in after}

    def _keep(self, caught: list) -> None:
        for record in caught:
            text = f"{record.category.__name__}: {' '.join(str(record.message).split())[:300]}"
            if text not in self.warnings:
                self.warnings.append(text)

    def _total(self, key: str) -> int:
        return sum(counts[key] for counts in self.phases.values())

    def cuda_graphs(self) -> str:
        skips = self._total("cudagraph_skips")
        if skips or self._records.reasons:
            return f"skipped ({'; '.join(self._records.reasons) or 'reason not logged'})"
        if self.device.type == "cpu":
            return "not used (CPU)"
        if not cuda_graphs_requested(self.options):
            return f"not used (compile mode {self.options.get('mode', 'default')})"
        if self._total("graphs") == 0:
            return "not used (no graph compiled)"
        recorded = _graph_trees_recorded(self.device)
        if recorded is None:
            return "requested, no skip reported"
        return "replayed" if recorded else "not captured (inductor recorded no graph)"

    def report(self) -> CompileReport:
        timed = self.phases.get("timed", {})
        return CompileReport(graphs=self._total("graphs"),
                             graph_breaks=self._total("graph_breaks"),
                             timed_recompiles=timed.get("graphs", 0),
                             cuda_graphs=self.cuda_graphs(),
                             skip_reasons=tuple(self._records.reasons),
                             warnings=tuple(self.warnings),
                             cache_hits=self._total("cache_hits"),
                             cache_misses=self._total("cache_misses"))


def combine(reports: list[CompileReport | None]) -> CompileReport | None:
    """One report for several trials: the first trial's compilation (later trials in the same
    process reuse its graphs), every trial's recompilations while timed, every skip reason."""
    known = [report for report in reports if report is not None]
    if not known:
        return None
    reasons = tuple(dict.fromkeys(r for report in known for r in report.skip_reasons))
    first = known[0]
    skipped = next((r.cuda_graphs for r in known if r.cuda_graphs.startswith("skipped")), None)
    said = tuple(dict.fromkeys(w for report in known for w in report.warnings))
    return CompileReport(graphs=first.graphs, graph_breaks=first.graph_breaks,
                         timed_recompiles=sum(r.timed_recompiles for r in known),
                         cuda_graphs=skipped or first.cuda_graphs, skip_reasons=reasons,
                         warnings=said, cache_hits=first.cache_hits,
                         cache_misses=first.cache_misses)
