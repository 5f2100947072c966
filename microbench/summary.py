"""One value for the numbers of a run: :class:`Summary`, from one process or from all ranks.

A single-device run is a job of one rank. Every figure is derived here, once, on one basis: the
timed total of the slowest rank (the job is done only when its slowest rank is). Throughput,
time per batch and per sample, achieved TFLOP/s and MFU all use it; every writer (console, JSON,
CSV, compare, sweep, plot) reads a Summary and computes nothing of its own, so adding a metric
touches this file and the writers that show it.

Example::

    summary = Summary.of_process(spec, env, result)          # one process
    summary = Summary.of_ranks(spec, env, result, records)   # rank 0, after gathering
    summary.throughput, summary.times.median, summary.utilization.mfu
"""
from __future__ import annotations

import math
import socket
from dataclasses import dataclass, field

from .benchmark import ProcessResult
from .config import RunSpec
from .flops import Utilization
from .generation import GenerationTimes
from .timing import NOISY_CV_THRESHOLD, Measurement
from .workload import PhaseMarks

PHASE_NAMES = PhaseMarks.NAMES


@dataclass(frozen=True)
class RankRecord:
    """What one rank measured, small enough to gather on rank 0."""

    rank: int
    local_rank: int
    host: str
    device_name: str
    batch_size: int
    samples_ms: tuple[float, ...]
    peak_allocated_mb: float | None
    peak_reserved_mb: float | None

    @property
    def times(self) -> Measurement:
        return Measurement(self.samples_ms)

    @property
    def throughput(self) -> float:
        """This rank's own images per second over its timed total."""
        times = self.times
        return self.batch_size * times.count / (times.total_ms / 1e3)


def record_of(spec: RunSpec, env: dict, result: ProcessResult) -> RankRecord:
    return RankRecord(rank=spec.launch.rank, local_rank=spec.launch.local_rank,
                      host=socket.gethostname(), device_name=env["device_name"],
                      batch_size=spec.batch_size, samples_ms=result.times.samples_ms,
                      peak_allocated_mb=result.peak_allocated_mb,
                      peak_reserved_mb=result.peak_reserved_mb)


def _max_known(values) -> float | None:
    known = [value for value in values if value is not None]
    return max(known) if known else None


@dataclass
class Summary:
    """The numbers of one run: this process's details and every rank's samples."""

    spec: RunSpec
    env: dict
    result: ProcessResult                 # the reporting process's own (rank 0's) details
    ranks: tuple[RankRecord, ...]         # sorted by rank; one for a single-device run
    backend: str | None = None
    notes: list[str] = field(default_factory=list)

    @classmethod
    def of_process(cls, spec: RunSpec, env: dict, result: ProcessResult) -> "Summary":
        return cls(spec, env, result, (record_of(spec, env, result),), notes=list(spec.notes))

    @classmethod
    def of_ranks(cls, spec: RunSpec, env: dict, result: ProcessResult, records,
                 backend: str | None = None) -> "Summary":
        return cls(spec, env, result, tuple(sorted(records, key=lambda r: r.rank)), backend,
                   notes=list(spec.notes))

    # ------------------------------------------------------------ who ran

    @property
    def distributed(self) -> bool:
        return self.spec.launch.distributed

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    @property
    def global_batch(self) -> int:
        return sum(record.batch_size for record in self.ranks)

    @property
    def own(self) -> RankRecord:
        """The reporting process's record."""
        return next(r for r in self.ranks if r.rank == self.spec.launch.rank)

    @property
    def slowest(self) -> RankRecord:
        return max(self.ranks, key=lambda r: r.times.total_ms)

    @property
    def fastest(self) -> RankRecord:
        return min(self.ranks, key=lambda r: r.times.total_ms)

    # ------------------------------------------------------------ the basis and what derives from it

    @property
    def times(self) -> Measurement:
        """The samples every figure is based on: the slowest rank's (the only rank's)."""
        return self.slowest.times

    @property
    def timed_s(self) -> float:
        return self.times.total_ms / 1e3

    @property
    def throughput(self) -> float:
        """Images of all ranks per second of the slowest rank's timed total."""
        return self.global_batch * self.times.count / self.timed_s

    @property
    def per_device_throughput(self) -> float:
        return self.throughput / self.world_size

    @property
    def time_per_batch_ms(self) -> float:
        return self.times.total_ms / self.times.count

    @property
    def time_per_sample_us(self) -> float:
        return 1e6 / self.throughput

    @property
    def tokens_per_item(self) -> int | None:
        """Tokens in one item (a sequence) for language models; None for images and clips."""
        return self.spec.model.tokens_per_item

    @property
    def token_throughput(self) -> float | None:
        """Tokens per second on the same basis: processed tokens for training and inference,
        generated tokens for generation."""
        if self.spec.generation is not None:
            return self.throughput * self.spec.generation.gen_len
        if self.tokens_per_item is None:
            return None
        return self.throughput * self.tokens_per_item

    @property
    def phase_means_ms(self) -> dict[str, float] | None:
        """Mean forward / backward / optimizer time per iteration (this process; they add up to
        its mean iteration time)."""
        if self.result.phases is None:
            return None
        return {name: phase.mean for name, phase in zip(PHASE_NAMES, self.result.phases)}

    @property
    def generation(self) -> GenerationTimes | None:
        """This process's time to first token, inter-token latencies and whole generations."""
        return self.result.generation

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Tokens generated per second by the decode steps alone (this process's batch)."""
        times = self.result.generation
        if times is None or not times.decode.count:
            return None
        return self.spec.batch_size * times.decode.count / (times.decode.total_ms / 1e3)

    @property
    def all_times(self) -> Measurement:
        """Every rank's samples together (spread across ranks, not a basis for throughput)."""
        return Measurement.merge(record.times for record in self.ranks)

    @property
    def skew(self) -> float:
        """How much longer the slowest rank's timed total was than the fastest rank's."""
        return self.slowest.times.total_ms / self.fastest.times.total_ms - 1.0

    @property
    def utilization(self) -> Utilization | None:
        """Achieved TFLOP/s per device and MFU, over the same timed total as the throughput."""
        if self.result.flops_per_iteration is None:
            return None
        return Utilization(self.result.flops_per_iteration, self.times.count, self.timed_s,
                           self.spec.peak)

    @property
    def scaling_efficiency(self) -> float | None:
        baseline = self.spec.scaling_baseline_img_s
        if baseline is None:
            return None
        return self.throughput / (self.world_size * baseline)

    # ------------------------------------------------------------ the rest

    @property
    def peak_allocated_mb(self) -> float | None:
        return _max_known(record.peak_allocated_mb for record in self.ranks)

    @property
    def peak_reserved_mb(self) -> float | None:
        return _max_known(record.peak_reserved_mb for record in self.ranks)

    @property
    def compile_s(self) -> float | None:
        return self.result.first_iteration_s if self.spec.config.compile else None

    @property
    def is_noisy(self) -> bool:
        return self.times.is_noisy

    def warnings(self) -> list[str]:
        found = []
        if self.is_noisy:
            found.append(f"coefficient of variation {self.times.cv:.1%} exceeds "
                         f"{NOISY_CV_THRESHOLD:.0%}: timings are noisy; run more --iterations, "
                         f"make sure nothing else uses the device, and check clocks and "
                         f"temperature")
        if any(not math.isfinite(loss) for loss in self.result.losses):
            found.append("non-finite loss values: the numbers still time the work, but the model "
                         "diverged (FP16 overflow?)")
        return found
