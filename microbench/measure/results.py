"""What a run measured, as values: one process's result, one rank's record, one trial.

This module sits below the code that produces these values (``benchmark``, the scenarios,
``distributed``) and the code that reads them (``summary``, the writers): it imports neither an
executor nor a writer, only the measurement types.

* :class:`Timed` -- what a timed loop returns: iteration times, the steps' outputs and the
  scenario's own detail (:class:`PhaseTimes` for training, the generation's token times).
* :class:`ProcessResult` -- one process's whole measurement of one trial.
* :class:`RankRecord` -- the part of it every rank sends to rank 0.
* :class:`Trial` -- one independent measurement: the reporting process's result and every rank's
  record.

Example::

    trial = Trial(result, (record,))
    trial.throughput, trial.slowest.times.median
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from microbench.measure.telemetry import TelemetryReport
from microbench.measure.timing import Measurement

if TYPE_CHECKING:
    from microbench.measure.attribution import Attribution
    from microbench.measure.input_bound import DataTrial
    from microbench.measure.drift import LowPrecision
    from microbench.measure.compile_watch import CompileReport
    from microbench.measure.host_load import HostLoad
    from microbench.measure.library_log import LibraryLog
    from microbench.measure.measured_peaks import MeasuredPeaks


def _merged(measurements: Iterable[Measurement]) -> Measurement:
    return Measurement.merge(measurements)


@dataclass(frozen=True)
class PhaseTimes:
    """A training iteration cut in three by device events: forward (with the loss), backward,
    optimizer. The three add up to the iteration exactly."""

    NAMES = ("forward", "backward", "optimizer")
    forward: Measurement
    backward: Measurement
    optimizer: Measurement

    @classmethod
    def merge(cls, parts: Iterable[PhaseTimes]) -> "PhaseTimes":
        parts = list(parts)
        return cls(*(_merged(getattr(part, name) for part in parts) for name in cls.NAMES))

    def items(self) -> list[tuple[str, Measurement]]:
        return [(name, getattr(self, name)) for name in self.NAMES]

    def means_ms(self) -> dict[str, float]:
        return {name: times.mean for name, times in self.items()}


@dataclass(frozen=True)
class GenerationTimes:
    """The token times of generation: one prefill (time to first token) and the decode steps
    (inter-token latencies) of every sequence batch, and the whole generations."""

    prefill: Measurement        # one sample per iteration: time to first token
    decode: Measurement         # one sample per decode step of every iteration
    e2e: Measurement            # one sample per iteration: prefill + all its decode steps
    decode_bytes: int = 0       # bytes the timed decode steps had to read, all of them summed
    prefill_flops: int | None = None    # FLOPs of one prefill, counted once (None: not counted)
    attribution: Attribution | None = None  # a decode step profiled after the timed loop

    @classmethod
    def merge(cls, parts: Iterable[GenerationTimes]) -> "GenerationTimes":
        parts = list(parts)
        return cls(_merged(p.prefill for p in parts), _merged(p.decode for p in parts),
                   _merged(p.e2e for p in parts), sum(p.decode_bytes for p in parts),
                   parts[0].prefill_flops,
                   next((p.attribution for p in parts if p.attribution is not None), None))


# A scenario's own detail of its iterations; None where it has none (inference).
Detail = PhaseTimes | GenerationTimes | None


def merge_detail(details: Iterable[Detail]) -> Detail:
    """Merge the scenario details of several segments or trials (None when there are none)."""
    known = [detail for detail in details if detail is not None]
    phases = [detail for detail in known if isinstance(detail, PhaseTimes)]
    generations = [detail for detail in known if isinstance(detail, GenerationTimes)]
    if not known:
        return None
    # One kind of run: every detail is the first's type.
    return PhaseTimes.merge(phases) if phases else GenerationTimes.merge(generations)


@dataclass
class Timed:
    """What a timed loop measured: iteration times, the steps' outputs (losses), and the
    scenario's detail of each iteration (phases, token times) where it has one."""

    times: Measurement
    outputs: list
    detail: Detail = None
    deepspeed_profile: str | None = None              # --flops-prof-step, rank 0

    def join(self, later: "Timed") -> "Timed":
        """Two segments of one loop (around an excluded iteration) as one."""
        return Timed(_merged((self.times, later.times)), self.outputs + later.outputs,
                     merge_detail((self.detail, later.detail)))


@dataclass
class ProcessResult:
    """What one process measured in one trial; :class:`microbench.output.summary.Summary`
    reads it."""

    times: Measurement
    losses: list[float]
    warmup_s: float
    first_iteration_s: float | None      # includes compilation when --compile is on
    peak_allocated_mb: float | None
    peak_reserved_mb: float | None
    parameters: int
    flops_per_iteration: int | None = None
    profile_reports: list[str] = field(default_factory=list)
    detail: Detail = None                # the scenario's: training's phases, generation's times
    telemetry: TelemetryReport | None = None   # clocks, power, energy while timed
    pid: int = 0                         # the process that measured it
    seed: int = 0                        # the seed of its weights and inputs
    data: DataTrial | None = None        # --data loader|folder: the input pipeline's
    compiler: CompileReport | None = None    # --compile: what the compiler did
    sharded: "ShardedState | None" = None   # --parallel fsdp: what this rank holds
    peaks: MeasuredPeaks | None = None   # --measure-peaks: the probe (microbench.ops.peaks)
    lowp: LowPrecision | None = None     # --precision fp8, --quantize: what they did
    library_log: "LibraryLog | None" = None  # torch's and torchao's log records, kept
    host_load: "HostLoad | None" = None  # the host's load around the timed region


@dataclass(frozen=True)
class ShardedState:
    """What one rank of an FSDP run holds between steps, measured from its tensors after the
    timed loop (microbench.steps.sharding): its shards of the parameters and of the optimizer state."""

    plan: dict                           # sharding.ShardPlan.to_dict()
    parameter_bytes: int
    optimizer_state_bytes: int

    @property
    def total(self) -> int:
        return self.parameter_bytes + self.optimizer_state_bytes


@dataclass(frozen=True)
class RankRecord:
    """What one rank measured in one trial, small enough to gather on rank 0."""

    rank: int
    local_rank: int
    host: str
    device_name: str
    batch_size: int
    samples_ms: tuple[float, ...]
    peak_allocated_mb: float | None
    peak_reserved_mb: float | None
    telemetry: TelemetryReport | None = None
    node_rank: int | None = None         # the launcher's number of this rank's node
    data: DataTrial | None = None        # this rank's input pipeline (--data loader|folder)
    sharded: ShardedState | None = None  # --parallel fsdp: this rank's shards
    host_load: "HostLoad | None" = None  # this rank's host around its timed region

    @property
    def times(self) -> Measurement:
        return Measurement(self.samples_ms)

    @property
    def throughput(self) -> float:
        """This rank's own items per second over its timed total."""
        times = self.times
        return self.batch_size * times.count / (times.total_ms / 1e3)


@dataclass(frozen=True)
class Trial:
    """One independent measurement: the reporting process's details and every rank's record."""

    result: ProcessResult
    ranks: tuple[RankRecord, ...]          # sorted by rank; one for a single-device run
    # Ranks that take the same share of the batch (the launch's world size over its
    # data-parallel degree): 1 under DDP, FSDP and HSDP, where every rank takes its own.
    sharing_a_batch: int = 1

    @classmethod
    def of_ranks(cls, result: ProcessResult, records: Iterable[RankRecord],
                 sharing_a_batch: int = 1) -> "Trial":
        return cls(result, tuple(sorted(records, key=lambda r: r.rank)), sharing_a_batch)

    @property
    def slowest(self) -> RankRecord:
        return max(self.ranks, key=lambda r: r.times.total_ms)

    @property
    def global_batch(self) -> int:
        """Items of one iteration of the job: every rank's, each share counted once."""
        return sum(record.batch_size for record in self.ranks) // self.sharing_a_batch

    @property
    def throughput(self) -> float:
        """Items of all ranks per second of the slowest rank's timed total."""
        times = self.slowest.times
        return self.global_batch * times.count / (times.total_ms / 1e3)

    @property
    def finite_losses(self) -> bool:
        return all(math.isfinite(loss) for loss in self.result.losses)
