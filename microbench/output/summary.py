"""One value for the numbers of a run: :class:`Summary`, over its trials and ranks.

A run is one or more independent trials (``--repeat``); a trial is one process's measurement or
every rank's, gathered on rank 0. Every figure is derived here, once, on a basis it names:

* a trial's throughput is the images (tokens) of all ranks over the timed total of its slowest
  rank (the job is done only when its slowest rank is);
* the run's headline throughput is the geometric mean of its trials' throughputs (with one
  trial, that trial's; :class:`~microbench.measure.stats.TrialStats` says why), and time per
  batch and per sample, achieved TFLOP/s and MFU all derive from it;
* iteration-time statistics pool the basis samples (the slowest rank's) of every trial; the
  spread between trials (:class:`~microbench.measure.stats.TrialStats`) is reported apart, because
  spread within a run is not spread between runs.

Every writer (console, JSON, CSV, compare, sweep, plot) reads a Summary and computes nothing of
its own, so adding a metric touches this file and the writers that show it.

Example::

    summary = Summary(spec, env, [trial_of_process(spec, env, result)])
    summary.throughput, summary.times.median, summary.utilization.mfu, summary.trial_spread
"""
from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from microbench.measure import compile_watch, input_bound, library_log, telemetry
from microbench.measure.telemetry import TelemetryReport
from microbench.ops import peaks
from microbench.settings.config import CUDA_GRAPH_MODES
from microbench.measure.drift import LowPrecision
from microbench.measure.host_load import HostLoad
from microbench.measure.flops import BandwidthPeak, PeakChoice, Utilization
from microbench.measure.results import ProcessResult, RankRecord, Trial, merge_detail
from microbench.measure.stats import TrialStats
from microbench.measure.timing import NOISY_CV_THRESHOLD, Measurement

if TYPE_CHECKING:
    from microbench.platform.environment import DeviceInfo
    from microbench.plan.spec import RunSpec


def record_of(spec: RunSpec, env: DeviceInfo, result: ProcessResult) -> RankRecord:
    """This rank's record of ``result`` (``spec``: a RunSpec; ``env``: the DeviceInfo)."""
    return RankRecord(rank=spec.launch.rank, local_rank=spec.launch.local_rank,
                      node_rank=spec.launch.node_rank,
                      host=socket.gethostname(), device_name=env.device_name,
                      batch_size=spec.batch_size, samples_ms=result.times.samples_ms,
                      peak_allocated_mb=result.peak_allocated_mb,
                      peak_reserved_mb=result.peak_reserved_mb, telemetry=result.telemetry,
                      data=result.data, sharded=result.sharded, host_load=result.host_load)


def trial_of_process(spec: RunSpec, env: DeviceInfo, result: ProcessResult) -> Trial:
    """A trial of a single process: its result and its own record."""
    return Trial(result, (record_of(spec, env, result),))


def _max_known(values: Iterable[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return max(known) if known else None


@dataclass
class Summary:
    """The numbers of one run: its trials, each with this process's details and every rank's
    samples."""

    spec: RunSpec
    env: DeviceInfo
    trials: tuple[Trial, ...]
    backend: str | None = None
    notes: list[str] = field(default_factory=list)
    discarded: tuple = ()              # trial_count.Discarded: throttled trials measured again
    stopped_by: str | None = None      # --max-noise: why the trials stopped

    def __post_init__(self) -> None:
        self.trials = tuple(self.trials)
        if not self.notes:
            self.notes = list(self.spec.notes)

    # ------------------------------------------------------------ who ran, which trial speaks

    @property
    def distributed(self) -> bool:
        return self.spec.launch.distributed

    @property
    def representative(self) -> Trial:
        """The median trial (the lower of the two middle ones for an even count): its ranks,
        losses and profiles stand for the run."""
        ordered = sorted(self.trials, key=lambda trial: trial.throughput)
        return ordered[(len(ordered) - 1) // 2]

    @property
    def result(self) -> ProcessResult:
        return self.representative.result

    @property
    def first(self) -> ProcessResult:
        """The first trial's details: its warm-up is the one that compiled from scratch."""
        return self.trials[0].result

    @property
    def ranks(self) -> tuple[RankRecord, ...]:
        return self.representative.ranks

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    @property
    def global_batch(self) -> int:
        return self.representative.global_batch

    @property
    def data_parallel(self) -> int:
        """Ranks that each took their own share of the global batch (the strategy's
        data-parallel degree; the world size under DDP, FSDP and HSDP)."""
        return self.world_size // self.representative.sharing_a_batch

    @property
    def own(self) -> RankRecord:
        """The reporting process's record (of the representative trial)."""
        return next(r for r in self.ranks if r.rank == self.spec.launch.rank)

    @property
    def slowest(self) -> RankRecord:
        return self.representative.slowest

    @property
    def fastest(self) -> RankRecord:
        return min(self.ranks, key=lambda r: r.times.total_ms)

    # ------------------------------------------------------------ the headline and its basis

    @property
    def trial_spread(self) -> TrialStats:
        return TrialStats(tuple(trial.throughput for trial in self.trials))

    @property
    def unit_trial_spread(self) -> TrialStats:
        """The trials in the unit of work (tokens/s for a language model, images/s for an
        image model): the spread a headline in that unit is shown with, so that an interval
        is always in its headline's unit."""
        per_item = self.scenario.units_per_item
        return TrialStats(tuple(trial.throughput * per_item for trial in self.trials))

    @property
    def throughput(self) -> float:
        """The headline: the geometric mean of the trials' throughputs."""
        return self.trial_spread.headline

    @property
    def times(self) -> Measurement:
        """The iteration times figures are based on: every trial's slowest rank's samples."""
        return Measurement.merge(trial.slowest.times for trial in self.trials)

    @property
    def per_device_throughput(self) -> float:
        """Items per second per device: every device of the job shares the work, whether it
        took its own share of the batch or split one with others (the data-parallel degree
        only decides the global batch)."""
        return self.throughput / self.world_size

    @property
    def time_per_batch_ms(self) -> float:
        return self.global_batch / self.throughput * 1e3

    @property
    def time_per_sample_us(self) -> float:
        return 1e6 / self.throughput

    @property
    def scenario(self):
        return self.spec.scenario

    @property
    def unit_throughput(self) -> float:
        """Units of work per second (images, tokens, generated tokens: the scenario's unit) on
        the headline's basis."""
        return self.throughput * self.scenario.units_per_item

    @property
    def token_throughput(self) -> float | None:
        """Tokens per second on the same basis (processed tokens for training and inference,
        generated tokens for generation); None for image models."""
        return self.unit_throughput if self.scenario.counts_tokens else None

    @property
    def utilization(self) -> Utilization | None:
        """Achieved TFLOP/s per device and MFU, at the headline throughput's iteration rate."""
        if self.result.flops_per_iteration is None:
            return None
        # A rank counts the model's FLOPs at its share of the batch; ranks that share one split
        # that work between them.
        per_device = self.result.flops_per_iteration // self.representative.sharing_a_batch
        return Utilization(per_device, self.throughput / self.global_batch, self.spec.peak)

    # ------------------------------------------------------------ measured peaks

    @property
    def measured_peaks(self) -> "peaks.MeasuredPeaks | None":
        """This device's probe (--measure-peaks): the process's, or with several trials the
        one of median GEMM rate; None when off."""
        return peaks.representative([trial.result.peaks for trial in self.trials])

    @property
    def measured_peak(self) -> PeakChoice | None:
        """The second denominator of MFU: the probe's GEMM rate."""
        measured = self.measured_peaks
        if measured is None or measured.tflops is None:
            return None
        return PeakChoice(measured.tflops, f"measured: {measured.gemm_label}, this run")

    @property
    def measured_bandwidth(self) -> BandwidthPeak | None:
        """The second denominator of MBU: the probe's copy rate (read + written)."""
        measured = self.measured_peaks
        if measured is None or measured.gbs is None:
            return None
        return BandwidthPeak(measured.gbs, f"measured: {measured.copy_label}, this run")

    @property
    def measured_utilization(self) -> Utilization | None:
        """MFU against the measured GEMM rate, at the same achieved TFLOP/s."""
        use, peak = self.utilization, self.measured_peak
        if use is None or peak is None:
            return None
        return Utilization(use.flops_per_iteration, use.iterations_per_s, peak)

    @property
    def peak_warnings(self) -> list[str]:
        """A warning when the measured peaks are far below the datasheet's."""
        measured = self.measured_peaks
        if measured is None:
            return []
        return peaks.warnings(measured, self.spec.peak.tflops, self.spec.bandwidth.gbs)

    @property
    def second_utilization(self) -> Utilization | None:
        """The same achieved rate against the run's second peak (--precision fp8: the BF16
        peak the rest of the model runs at); None where the run has none."""
        use, second = self.utilization, self.spec.second_peak
        if use is None or second is None:
            return None
        return Utilization(use.flops_per_iteration, use.iterations_per_s, second)

    @property
    def lowp(self) -> LowPrecision | None:
        """What --precision fp8 or --quantize did, with how far it moved the numbers
        (measure.drift.LowPrecision, measured by the representative trial); None
        otherwise."""
        return self.result.lowp

    @property
    def scaling_efficiency(self) -> float | None:
        baseline = self.spec.scaling_baseline_img_s
        if baseline is None:
            return None
        return self.throughput / (self.world_size * baseline)

    @property
    def skew(self) -> float:
        """How much longer the slowest rank's timed total was than the fastest rank's."""
        return self.slowest.times.total_ms / self.fastest.times.total_ms - 1.0

    @property
    def all_times(self) -> Measurement:
        """Every rank's samples of every trial (spread across ranks, not a basis)."""
        return Measurement.merge(r.times for trial in self.trials for r in trial.ranks)

    # ------------------------------------------------------------ the scenario's detail

    @property
    def detail(self):
        """The scenario's own measurements (training phases, generation token times) of this
        process, merged over all trials; None where it has none."""
        return merge_detail(trial.result.detail for trial in self.trials)

    @property
    def data(self):
        """The input pipeline's figures (``--data loader|folder``) on the headline's basis, per
        device (measure.input_bound.combine); None with synthetic inputs."""
        parts = [[r.data for r in trial.ranks if r.data is not None] for trial in self.trials]
        parts = [trial_parts for trial_parts in parts if trial_parts]
        if not parts:
            return None
        return input_bound.combine(parts, self.per_device_throughput)

    # ------------------------------------------------------------ the rest

    @property
    def telemetry(self) -> TelemetryReport | None:
        """Clocks, power and energy of every GPU over every trial's timed region, pooled."""
        reports = [r.telemetry for trial in self.trials for r in trial.ranks
                   if r.telemetry is not None]
        return telemetry.combine(reports) if reports else None

    @property
    def host_load(self) -> HostLoad | None:
        """The host's load around this process's timed region, in the representative trial
        (measure/host_load.py); every trial's and every rank's are in their own records."""
        return self.result.host_load

    @property
    def loaded_host(self) -> str | None:
        """The words naming the host's load where it is the likely cause of noise or drift:
        of the records that find the host loaded (every trial's, every rank's), the one whose
        other processes took the most, with the trials and ranks it was seen in; None when
        no record does."""
        found = [(index, record.rank, record.host_load)
                 for index, trial in enumerate(self.trials, 1) for record in trial.ranks
                 if record.host_load is not None and record.host_load.loaded]
        if not found:
            return None
        where = []
        indices = sorted({index for index, _, _ in found})
        if len(indices) == len(self.trials) > 1:
            where.append(f"in all {len(self.trials)} trials")
        elif len(self.trials) > 1:
            where.append(f"in trial{'s' * (len(indices) > 1)} "
                         f"{', '.join(map(str, indices))} of {len(self.trials)}")
        if self.distributed:
            ranks = sorted({rank for _, rank, _ in found})
            where.append(f"on the host of rank{'s' * (len(ranks) > 1)} "
                         f"{', '.join(map(str, ranks))}")
        worst = max(found, key=lambda item: item[2].others_cpu_percent or 0.0)[2]
        return worst.cause(" ".join(where))

    @property
    def peak_allocated_mb(self) -> float | None:
        return _max_known(r.peak_allocated_mb for trial in self.trials for r in trial.ranks)

    @property
    def peak_reserved_mb(self) -> float | None:
        return _max_known(r.peak_reserved_mb for trial in self.trials for r in trial.ranks)

    @property
    def graph_pools_hidden(self) -> bool:
        """CUDA (HIP) graphs keep their tensors in private pools that the allocator's peak
        'allocated' does not see after warm-up; 'reserved' does."""
        mode = self.spec.config.compile_options.get("mode")
        return bool(self.spec.config.compile and mode in CUDA_GRAPH_MODES
                    and self.peak_allocated_mb is not None)

    @property
    def compiler(self):
        """What the compiler did (a ``compile_watch.CompileReport``), None without --compile."""
        return compile_watch.combine([trial.result.compiler for trial in self.trials])

    @property
    def library_log(self):
        """torch's and torchao's log records in every trial of this process (rank 0's under
        DDP), kept off the console (a ``library_log.LibraryLog``)."""
        return library_log.combine([trial.result.library_log for trial in self.trials])

    @property
    def compile_s(self) -> float | None:
        return self.first.first_iteration_s if self.spec.config.compile else None

    @property
    def is_noisy(self) -> bool:
        return self.times.is_noisy

    def warnings(self) -> list[str]:
        found = []
        if self.spec.config.warmup == 0:
            found.append("--warmup 0: the first timed iteration carries one-time costs (kernel "
                         "selection, autotuning, allocator growth); its time is in the "
                         "statistics")
        loaded = self.loaded_host
        if self.is_noisy:
            noisy = (f"coefficient of variation {self.times.cv:.1%} exceeds "
                     f"{NOISY_CV_THRESHOLD:.0%}: timings are noisy; ")
            found.append(noisy + (f"the likely cause: {loaded}; run when the host is idle, run "
                                  f"more --iterations, and check clocks and temperature"
                                  if loaded else
                                  "run more --iterations, make sure nothing else uses the "
                                  "device, and check clocks and temperature"))
        spread = self.trial_spread
        if spread.count > 1 and spread.cv > NOISY_CV_THRESHOLD:
            differ = (f"the {spread.count} trials differ by {spread.cv:.1%} (CV of their "
                      f"throughputs): ")
            found.append(differ + (f"likely because {loaded}, not because the device's speed "
                                   f"drifted" if loaded else
                                   "the device's speed drifted between trials"))
        if not all(trial.finite_losses for trial in self.trials):
            found.append("non-finite loss values: the numbers still time the work, but the model "
                         "diverged (FP16 overflow?)")
        if self.telemetry is not None:
            found.extend(self.telemetry.warnings())
        return found
