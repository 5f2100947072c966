"""What the input pipeline measured, as values that keep their samples, and the verdict.

* :class:`WaitTimes`: per timed step, the host time it waited for its batch (blocked in
  ``next(iterator)``, plus queuing the copy and the device stage) and the host time of the whole
  step, both from one clock; the wait share of the step is derived from these samples (median,
  p99, and over the whole run).
* :class:`CpuMeter` / :class:`CpuUse`: the CPU time the loader's worker processes used during a
  measurement, from ``/proc/<pid>/stat`` (utime + stime; Linux). Elsewhere, with no worker
  processes (``workers=0``: loading runs in the main process, beside the model's own host work),
  or if the workers changed during the measurement, it is unknown, never guessed.
* :class:`LoaderRun` (the loader alone, no model) and :class:`PipelineRun` (the model fed by
  it): items per second, and where they came from.
* :func:`verdict` and :func:`report`: input-bound or compute-bound, by how much, from the
  pipeline, loader-alone and model-alone figures of one invocation; the JSON ``data`` block
  and the console lines.

Example::

    waits = WaitTimes(wait_ms=(1.0, 0.5), step_ms=(10.0, 10.0))
    waits.share_median, waits.share_p99, waits.share_total          # 0.075, 0.0995, 0.075
    data = report(description, pipeline_run, loader_run, model_alone_per_s=2400.0)
    data.verdict.line; data.block(); data.lines()
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from microbench.measure.timing import Measurement, percentile

# The pipeline keeps up when it reaches this share of the model-alone throughput (the issue's
# target for the best worker count: 0.9); below it, the verdict says what holds it back.
KEEPS_UP = 0.9
# The pipeline feeds the model, so it cannot outrun the model alone; beyond this share of it,
# the model-alone figure was disturbed (another process, a clock ramp, too few steps) and every
# ratio to it is suspect: the verdict says so instead of "keeps 270%".
MODEL_ALONE_DISTURBED_ABOVE = 1.1


# ---------------------------------------------------------------- waits

@dataclass(frozen=True)
class WaitTimes:
    """Per-step waits and step times in milliseconds, on one host clock, in step order."""

    wait_ms: tuple[float, ...]
    step_ms: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.wait_ms) != len(self.step_ms):
            raise ValueError("one wait per step")

    @classmethod
    def merge(cls, parts: Iterable["WaitTimes"]) -> "WaitTimes":
        """Several ranks' (or trials') steps as one set of samples."""
        parts = list(parts)
        return cls(tuple(w for p in parts for w in p.wait_ms),
                   tuple(s for p in parts for s in p.step_ms))

    @property
    def steps(self) -> int:
        return len(self.wait_ms)

    @property
    def shares(self) -> tuple[float, ...]:
        """Each step's wait over that step's time."""
        return tuple(w / s if s > 0 else math.nan for w, s in zip(self.wait_ms, self.step_ms))

    @property
    def share_median(self) -> float:
        return percentile(sorted(self.shares), 50)

    @property
    def share_p99(self) -> float:
        return percentile(sorted(self.shares), 99)

    @property
    def share_total(self) -> float:
        """All waiting over all step time: the share of the run spent waiting."""
        total = math.fsum(self.step_ms)
        return math.fsum(self.wait_ms) / total if total > 0 else math.nan

    @property
    def waits(self) -> Measurement:
        return Measurement(self.wait_ms)

    def to_dict(self) -> dict:
        return {"steps": self.steps, "share_median": self.share_median,
                "share_p99": self.share_p99, "share_total": self.share_total,
                "wait_median_ms": self.waits.median, "wait_p99_ms": self.waits.p99,
                "wait_ms": list(self.wait_ms), "step_ms": list(self.step_ms),
                "basis": "host time each step was blocked in next(iterator) plus queuing its "
                         "copy to the device and the device stage, over the host time of that "
                         "step; device-side decoding and normalisation run as part of the "
                         "step on the device"}


# ---------------------------------------------------------------- worker CPU

_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc; None elsewhere or if
    it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return cpu_seconds_from_stat(stat.read().decode("ascii", "replace"))
    except (OSError, ValueError, IndexError):
        return None


def cpu_seconds_from_stat(text: str) -> float:
    """utime + stime, fields 14 and 15 of a /proc/<pid>/stat line (proc(5)), in seconds. The
    command name (field 2) may hold spaces and parentheses, so fields are counted from its
    last closing parenthesis."""
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


@dataclass(frozen=True)
class CpuUse:
    """CPU time of the loader's workers over a wall-clock interval."""

    cpu_s: float
    wall_s: float
    workers: int

    @property
    def cores(self) -> float:
        """How many cores the workers kept busy on average."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else math.nan

    @property
    def utilisation(self) -> float:
        """Busy share of the workers (1.0: every worker computing all the time)."""
        return self.cores / self.workers if self.workers else math.nan

    def to_dict(self) -> dict:
        return {"cpu_s": self.cpu_s, "wall_s": self.wall_s, "workers": self.workers,
                "cores_busy": self.cores, "utilisation": self.utilisation,
                "source": "/proc/<pid>/stat utime+stime of the loader's worker processes"}


class CpuMeter:
    """Worker CPU between :meth:`start` and :meth:`stop`; ``pids`` is asked at both ends."""

    def __init__(self, pids: Callable[[], tuple[int, ...]],
                 clock: Callable[[], float] = time.perf_counter,
                 cpu_seconds: Callable[[int], float | None] = proc_cpu_seconds):
        self._pids, self._clock, self._cpu_seconds = pids, clock, cpu_seconds
        self._start: tuple[float, tuple[int, ...], float | None] | None = None

    def _total(self, pids: tuple[int, ...]) -> float | None:
        readings = [self._cpu_seconds(pid) for pid in pids]
        known = [reading for reading in readings if reading is not None]
        return None if not pids or len(known) < len(readings) else math.fsum(known)

    def start(self) -> None:
        pids = self._pids()
        self._start = (self._clock(), pids, self._total(pids))

    def stop(self) -> CpuUse | None:
        if self._start is None:
            return None
        began, pids, cpu_before = self._start
        self._start = None
        now_pids = self._pids()
        cpu_after = self._total(now_pids)
        if cpu_before is None or cpu_after is None or now_pids != pids:
            return None
        return CpuUse(cpu_after - cpu_before, self._clock() - began, len(pids))


# ---------------------------------------------------------------- runs

@dataclass(frozen=True)
class LoaderRun:
    """The loader iterated alone (batches to the device, no model)."""

    items: int
    seconds: float
    batches: int
    worker_cpu: CpuUse | None = None

    @property
    def per_s(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else math.nan


@dataclass(frozen=True)
class ModelAloneRun:
    """The model's own step on synthetic input already on the device, timed by the run's own
    loop (device events): what the model takes when nothing feeds it."""

    batch: int
    samples_ms: tuple[float, ...]

    @property
    def per_s(self) -> float:
        total = math.fsum(self.samples_ms)
        return self.batch * len(self.samples_ms) / (total / 1e3) if total > 0 else math.nan


@dataclass(frozen=True)
class PipelineRun:
    """The model fed by the loader: its throughput (the run's own, on its basis), the waits of
    its timed steps, and the workers' CPU meanwhile."""

    per_s: float
    waits: WaitTimes
    worker_cpu: CpuUse | None = None


@dataclass(frozen=True)
class DataTrial:
    """What one process's input pipeline measured in one trial (``ProcessResult.data``): the
    settings as they took effect, the waits and worker CPU of the timed steps, the loader alone,
    the model alone, and the files skipped."""

    description: dict
    waits: WaitTimes
    worker_cpu: CpuUse | None
    loader: LoaderRun
    model_alone: ModelAloneRun
    skipped: tuple[tuple[str, str], ...] = ()
    unit: str = "images/s"


def _median_run(runs: list):
    """The median of runs by their rate (the lower middle one for an even count), as the
    summary picks its representative trial."""
    ordered = sorted(runs, key=lambda run: run.per_s)
    return ordered[(len(ordered) - 1) // 2]


def _pooled_cpu(uses: list[CpuUse | None]) -> CpuUse | None:
    """Worker CPU pooled over ranks and trials (per rank: the CPU time over the wall time);
    unknown if any part is."""
    known = [use for use in uses if use is not None]
    if not uses or len(known) < len(uses):
        return None
    return CpuUse(math.fsum(u.cpu_s for u in known), math.fsum(u.wall_s for u in known),
                  known[0].workers)


def combine(trials: list[list[DataTrial]], pipeline_per_s: float) -> "DataReport":
    """One report from every trial's ranks (``trials[i]``: trial i's DataTrial of each rank).

    ``pipeline_per_s`` is the run's headline per device (the slowest rank's basis). On the same
    basis, the loader alone and the model alone are the slowest rank's in each trial, and the
    median of the trials; the waits pool every rank's steps of every trial."""
    everything = [part for parts in trials for part in parts]
    first = everything[0]
    loader = _median_run([min((p.loader for p in parts), key=lambda run: run.per_s)
                          for parts in trials])
    model = _median_run([min((p.model_alone for p in parts), key=lambda run: run.per_s)
                         for parts in trials])
    waits = WaitTimes.merge(part.waits for part in everything)
    skipped = dict(path_reason for part in everything for path_reason in part.skipped)
    description = {**first.description, "trials": len(trials)}
    pipeline = PipelineRun(pipeline_per_s, waits,
                           _pooled_cpu([part.worker_cpu for part in everything]))
    return DataReport(description, pipeline, loader, model.per_s,
                      verdict(pipeline_per_s, loader.per_s, model.per_s, first.unit),
                      tuple(skipped.items()), first.unit, model)


# ---------------------------------------------------------------- verdict

@dataclass(frozen=True)
class Verdict:
    kind: str            # "input-bound" | "compute-bound" | "interference" | "unknown"
    kept: float          # pipeline over model-alone throughput (nan if unknown)
    line: str


def _rate(value: float, unit: str) -> str:
    return f"{value:,.0f} {unit}"


def verdict(pipeline_per_s: float | None, loader_per_s: float | None,
            model_per_s: float | None, unit: str = "images/s") -> Verdict:
    """Which side limits the pipeline, and by how much.

    The loader alone bounds what it can feed; the model alone bounds what it can take. If the
    loader alone is slower than the model alone, the run is input-bound: the GPU waits. Else it
    is compute-bound, and the pipeline should keep (nearly) all of the model's throughput; if it
    keeps less than KEEPS_UP of it although each side alone is fast enough, the two slow each
    other down (CPU cores shared by workers and the training process, memory bandwidth, copies).
    """
    if pipeline_per_s is None or loader_per_s is None or model_per_s is None or not all(
            math.isfinite(v) and v > 0 for v in (pipeline_per_s, loader_per_s, model_per_s)):
        return Verdict("unknown", math.nan, "verdict unknown: the pipeline, loader-alone and "
                                            "model-alone figures are not all known")
    kept = pipeline_per_s / model_per_s
    if kept > MODEL_ALONE_DISTURBED_ABOVE:
        return Verdict("unknown", kept,
                       f"verdict unknown: the model alone measured {_rate(model_per_s, unit)}, "
                       f"below the pipeline's {_rate(pipeline_per_s, unit)} that includes it "
                       f"({kept:.0%}), so that figure was disturbed (another process, clocks, "
                       f"too few steps); run again on a quiet machine, with more --iterations")
    pipeline = f"the pipeline keeps {kept:.0%} of the model's {_rate(model_per_s, unit)}"
    if loader_per_s < model_per_s:
        return Verdict("input-bound", kept,
                       f"input-bound: the loader alone delivers {_rate(loader_per_s, unit)}, "
                       f"{loader_per_s / model_per_s:.0%} of what the model takes alone; "
                       f"{pipeline}")
    if kept < KEEPS_UP:
        return Verdict("interference", kept,
                       f"neither side alone limits it (loader alone "
                       f"{loader_per_s / model_per_s:.1f}x the model), yet {pipeline}: loading "
                       f"and the model slow each other (CPU cores, memory bandwidth, copies)")
    return Verdict("compute-bound", kept,
                   f"compute-bound: the loader alone delivers "
                   f"{loader_per_s / model_per_s:.1f}x what the model takes; {pipeline}")


# ---------------------------------------------------------------- the data block

@dataclass(frozen=True)
class DataReport:
    """The pipeline's figures of one invocation, for the console and the JSON ``data`` block."""

    description: dict
    pipeline: PipelineRun
    loader: LoaderRun
    model_alone_per_s: float | None
    verdict: Verdict
    skipped: tuple[tuple[str, str], ...] = field(default=())
    unit: str = "images/s"
    model_alone: ModelAloneRun | None = None

    @property
    def per_device(self) -> bool:
        return self.description.get("world_size", 1) > 1

    def block(self) -> dict:
        waits = self.pipeline.waits
        return {**self.description,
                "unit": self.unit,
                "pipeline_per_s": self.pipeline.per_s,
                "loader_alone_per_s": self.loader.per_s,
                "model_alone_per_s": self.model_alone_per_s,
                "loader_alone": {"items": self.loader.items, "seconds": self.loader.seconds,
                                 "batches": self.loader.batches},
                "model_alone": (None if self.model_alone is None else
                                {"batch": self.model_alone.batch,
                                 "samples_ms": list(self.model_alone.samples_ms)}),
                "basis": ("per device: the run's throughput over the world size (the slowest "
                          "rank's timed total); the loader and the model alone of the slowest "
                          "rank" if self.per_device else "this device"),
                "wait": waits.to_dict(),
                "worker_cpu": _cpu_block(self.pipeline.worker_cpu),
                "loader_alone_worker_cpu": _cpu_block(self.loader.worker_cpu),
                "skipped_files": [{"path": path, "reason": why} for path, why in self.skipped],
                "verdict": {"kind": self.verdict.kind, "kept": self.verdict.kept,
                            "line": self.verdict.line, "keeps_up_at": KEEPS_UP}}

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) rows for the console summary."""
        description, waits = self.description, self.pipeline.waits
        each = " per device" if self.per_device else ""
        model = (_rate(self.model_alone_per_s, self.unit) if self.model_alone_per_s
                 else "unknown")
        ranks = ", all ranks" if self.per_device else ""
        rows = [
            ("Input pipeline", str(description.get("summary", description.get("source")))),
            ("Pipeline", f"{_rate(self.pipeline.per_s, self.unit)}{each}"),
            ("Loader alone", f"{_rate(self.loader.per_s, self.unit)}{each}"),
            ("Model alone", f"{model}{each} (synthetic input on the device)"),
            ("Wait for data", f"{waits.share_median:.1%} of a step (median), "
                              f"{waits.share_p99:.1%} (p99), {waits.share_total:.1%} of the "
                              f"run{ranks}"),
            ("Loader worker CPU", _cpu_text(self.pipeline.worker_cpu)),
        ]
        if self.skipped:
            path, why = self.skipped[0]
            more = f" and {len(self.skipped) - 1} more (see the JSON)" if len(self.skipped) > 1 \
                else ""
            rows.append(("Skipped files", f"{len(self.skipped)}: {path} ({why}){more}"))
        rows.append(("Verdict", self.verdict.line))
        return rows

    def lines(self) -> list[str]:
        return [f"{label:<19}: {value}" for label, value in self.rows()]


def _cpu_block(use: CpuUse | None) -> dict | None:
    return use.to_dict() if use is not None else None


def _cpu_text(use: CpuUse | None) -> str:
    if use is None:
        return "unknown (no worker processes, or not measurable here)"
    return (f"{use.cores:.1f} cores busy of {use.workers} worker"
            f"{'s' if use.workers > 1 else ''} ({use.utilisation:.0%} each)")


def report(description: dict, pipeline: PipelineRun, loader: LoaderRun,
           model_alone_per_s: float | None, skipped: Iterable[tuple[str, str]] = (),
           unit: str = "images/s") -> DataReport:
    """The verdict and everything it rests on, from one invocation's three measurements."""
    return DataReport(description, pipeline, loader, model_alone_per_s,
                      verdict(pipeline.per_s, loader.per_s, model_alone_per_s, unit),
                      tuple(skipped), unit)
