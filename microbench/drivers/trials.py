"""Trials: the one loop that measures one configuration or many, trial after trial, and where a
trial runs.

A single run, every row of a sweep and the run the largest-batch search ends with all go through
:func:`run_rounds`: round ``i`` measures trial ``i`` of every job before round ``i + 1`` starts,
so in a sweep the configurations interleave and a drift of the device's speed hits them all
alike. :func:`measure_trial` is one trial of one job on this process (and, under DDP, every
rank's record gathered on rank 0).

With ``--repeat N`` each trial runs by default in a fresh worker process (:func:`in_worker`), as
pyperf runs its benchmarks: a new interpreter, so the compiler's caches, autotuning results
(cuDNN/MIOpen), the allocator and the device context all start cold, and the spread between
trials is the spread between runs that users see. Each trial has its own seed (the run's seed
plus the trial's index). ``--trials in-process`` runs them one after another in this process,
as earlier versions did, and says so. Under DDP every rank's process starts its own worker per
trial, and the workers form a process group of their own at a rendezvous address rank 0 chooses
for that trial.

Example::

    jobs = [Job(spec)]
    run_rounds(jobs, spec.config.repeat, lambda job, index: job.trials.append(
        in_worker(job.spec, index)))
"""
from __future__ import annotations

import dataclasses
import io
import socket
import sys
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Callable, Sequence, TextIO, TypeVar

from microbench.drivers import benchmark
from microbench.drivers.trial_count import TrialCount
from microbench.platform import devices, distributed, environment, workers
from microbench.output import console
from microbench.platform import progress
from microbench.measure.results import Trial
from microbench.output.summary import Summary, record_of, trial_of_process
from microbench.settings.config import min_noise_trials
from microbench.platform.environment import DeviceInfo

if TYPE_CHECKING:
    from microbench.plan.spec import RunSpec

MODES = ("processes", "in-process")


@dataclass
class Job:
    """One configuration being measured: its trials so far, or why it stopped."""

    spec: RunSpec
    trials: list[Trial] = field(default_factory=list)
    status: str = "ok"                 # ok | out of memory | error
    error: str | None = None
    exit_code: int = 0                 # what this job alone would have exited with

    @property
    def failed(self) -> bool:
        return self.status != "ok"

    def fail(self, status: str, error: str, exit_code: int) -> None:
        self.status, self.error, self.exit_code = status, error, exit_code


J = TypeVar("J", bound=Job)         # a Job, or a sweep's Row


def run_rounds(jobs: Sequence[J], rounds: int, measure: Callable[[J, int], None],
               between: Callable[[J], None] = lambda job: None,
               on_round: Callable[[int], None] = lambda index: None,
               until: Callable[[], bool] = lambda: False, counterbalance: bool = False) -> None:
    """Trial ``i`` of every job, for ``i`` in ``range(rounds)``; a failed job is skipped from
    then on. ``between(job)`` runs after each of a job's trials (freeing what it left);
    ``until()``, after each round, ends the rounds early when true (--max-noise).
    ``counterbalance``: every other round runs the jobs in reverse order (A B, B A, A B...), so
    that no job always runs first in its round (--ab: a position effect would pose as a
    difference)."""
    for index in range(rounds):
        on_round(index)
        for job in (jobs[::-1] if counterbalance and index % 2 else jobs):
            if job.failed:
                continue
            measure(job, index)
            between(job)
        if until():
            return


def seed_of(spec: RunSpec, index: int) -> int:
    """Trial ``index``'s seed: the run's own for the first trial, then one more per trial."""
    return (spec.config.seed + index) % 2**63


def in_workers(spec: RunSpec) -> bool:
    """Whether this run's trials each run in a fresh worker process."""
    return spec.config.trials_in_workers


@dataclass(frozen=True)
class RankHooks:
    """What a multi-process job does around a trial (nothing for a single process): wrap the
    model (DDP), meet before the timed region, meet again after an excluded iteration."""

    wrap: Callable | None = None
    before_timing: Callable[[], None] = lambda: None
    rejoin: Callable[[], None] = lambda: None


def measure_trial(spec: RunSpec, env: DeviceInfo, monitor: benchmark.Monitor,
                  hooks: RankHooks = RankHooks(),
                  on_phase: Callable[..., None] = lambda phase, timed=False: None) -> Trial | None:
    """One trial of ``spec`` on this process: a Trial on rank 0 (every rank's record gathered
    there), None on the other ranks."""
    with spec.parallel.process_group(spec):    # FSDP with one process: a one-rank group
        result = benchmark.run(spec, on_phase=on_phase, wrap=hooks.wrap,
                               before_timing=hooks.before_timing, monitor=monitor,
                               rejoin=hooks.rejoin)
    if not spec.launch.distributed:
        return trial_of_process(spec, env, result)
    distributed.barrier(spec.device)           # ...and meet again at its end
    records = distributed.gather_to_main(record_of(spec, env, result))
    if records is None:
        return None                            # rank 0 alone holds the trial
    return Trial.of_ranks(result, records, spec.launch.sharing_a_batch)


def rank_hooks(spec: RunSpec) -> RankHooks:
    """In a multi-process job: the strategy's wrapper (DDP's, when the scenario steps an
    optimizer), meet before the timed region, meet again after an excluded iteration."""
    if not spec.launch.distributed:
        return RankHooks()
    wrap = spec.parallel.wrapper(spec)         # DDP's, when the run steps an optimizer

    def enter_timed_region() -> None:
        distributed.fail_if_asked(spec.launch)
        distributed.barrier(spec.device)       # all ranks enter the timed region together

    def rejoin() -> None:
        devices.synchronize(spec.device)
        distributed.barrier(spec.device)

    return RankHooks(wrap=wrap, before_timing=enter_timed_region, rejoin=rejoin)


# ---------------------------------------------------------------- one configuration's run

def measure(spec: RunSpec, out: TextIO) -> Summary | None:
    """Run the benchmark's trials (here, or each in a worker process); the job's Summary on
    rank 0, None elsewhere. The two places differ only in how one trial is measured
    (:class:`_InWorkers`, :class:`_Here`); the rounds, the console lines, --max-noise's stop and
    --discard-throttled's second tries are the same for both."""
    main = spec.launch.is_main
    env = environment.describe(spec.device)
    job, count = Job(spec), TrialCount.of(spec)
    place = _InWorkers(spec, out) if in_workers(spec) else _Here(spec, env, out)
    notes = list(spec.notes) + _trial_notes(spec) + place.notes
    try:
        if main:
            console.print_config(spec, env, out, notes)
        run_rounds([job], count.rounds, lambda job, index: _one_trial(job, index, place, count),
                   between=lambda job: place.between(), until=lambda: count.done(job.trials))
    finally:
        place.close()
    if not main:
        return None
    if count.stopped_by:
        print(f"Stopped after {len(job.trials)} trials: {count.stopped_by}", file=out,
              flush=True)
    return Summary(spec, env, tuple(job.trials), distributed.backend_name(), notes + count.notes(),
                   discarded=tuple(count.discarded), stopped_by=count.stopped_by)


def _one_trial(job: Job, index: int, place: _InWorkers | _Here, count: TrialCount) -> None:
    """Trial ``index``, measured again while --discard-throttled discards it, then its line."""
    spec, label = job.spec, count.label(index)
    while True:
        trial = place.once(index, label)
        if count.keep(index, trial, place.out):
            break
        place.between()
    if trial is None:               # another rank's: rank 0 holds the trials
        return
    job.trials.append(trial)
    if spec.launch.is_main and spec.config.several_trials:
        print(f"{label}{trial.throughput:.2f} {spec.model.item}s/s{place.trial_text(trial)}",
              file=place.out, flush=True)


class _InWorkers:
    """Each trial in a fresh worker process; under DDP the ranks' workers meet at a rendezvous
    of their own, and the ranks again once it is done."""

    def __init__(self, spec: RunSpec, out: TextIO):
        self.spec, self.out = spec, out
        self.notes: list[str] = []

    def once(self, index: int, label: str) -> Trial | None:
        trial = in_worker(self.spec, index, trial_rendezvous(self.spec), label)
        if self.spec.launch.distributed:
            distributed.barrier(self.spec.device)
        return trial

    def trial_text(self, trial: Trial) -> str:
        return f" (worker process {trial.result.pid}, seed {trial.result.seed})"

    def between(self) -> None:
        """Nothing: the worker took what it allocated with it."""

    def close(self) -> None:
        """Nothing: each worker watched the device itself."""


class _Here:
    """Each trial in this process, under one telemetry monitor; what a trial left is freed
    before the next."""

    def __init__(self, spec: RunSpec, env: DeviceInfo, out: TextIO):
        self.spec, self.env, self.out = spec, env, out
        self.monitor = benchmark.Monitor(spec.device, spec.config.telemetry_interval_ms / 1e3)
        self.notes = [self.monitor.note] if self.monitor.source is None and env.on_gpu else []
        self.hooks = rank_hooks(spec)

    def once(self, index: int, label: str) -> Trial | None:
        spec = self.spec
        with shown_phases(label if spec.launch.is_main else None, self.out) as activity:
            activity.start(f"{label}Building {spec.model.name}")
            return measure_trial(spec, self.env, self.monitor, self.hooks,
                                 phase_line(activity, label))

    def trial_text(self, trial: Trial) -> str:
        return ""

    def between(self) -> None:
        benchmark.release(self.spec)

    def close(self) -> None:
        self.monitor.close()


def _trial_notes(spec: RunSpec) -> list[str]:
    if not spec.config.several_trials:
        return []
    config = spec.config
    if config.max_noise_pct is not None:
        limit = f" or {config.time_limit_s:g} s" if config.time_limit_s is not None else ""
        how = (f"{min_noise_trials(config)} to {config.max_trials} trials (--max-noise "
               f"{config.max_noise_pct:g}%{limit})")
    else:
        how = f"{config.repeat} trials"
    if in_workers(spec):
        return [f"{how}, each in a fresh worker process with its own "
                f"seed (the compiler, autotuning, allocator and device context start cold "
                f"every time)"]
    return [f"{how} in this one process (--trials in-process): later "
            f"trials reuse the first one's compiled graphs, autotuning results and allocator"]


# ---------------------------------------------------------------- trials in worker processes

def trial_rendezvous(spec: RunSpec) -> str | None:
    """Where the workers of this trial meet (multi-process jobs only): rank 0's host, as the job
    reaches it, at a port rank 0 finds free now, told to every rank."""
    launch = spec.launch
    if not launch.distributed:
        return None
    chosen = [None]
    if launch.is_main:
        with socket.socket() as probe:
            probe.bind(("", 0))
            chosen = [probe.getsockname()[1]]
    distributed.broadcast_from_main(chosen, spec.device)
    return f"tcp://{distributed.rendezvous_host(launch)}:{chosen[0]}"


def in_worker(spec: RunSpec, index: int, rendezvous: str | None = None,
              label: str | None = None) -> Trial | None:
    """Trial ``index`` of ``spec`` in a fresh worker process; its Trial on rank 0, None on the
    other ranks. ``label`` prefixes the worker's progress lines (None: it shows none). The
    worker's expected failure is raised here (one line, its exit code)."""
    trial_spec = dataclasses.replace(
        spec, config=dataclasses.replace(spec.config, seed=seed_of(spec, index)))
    [trial] = workers.run(f"{__name__}:_worker_main", [(trial_spec, rendezvous, label)],
                          [f"microbench-trial-{index + 1}"],
                          lambda _: f"the worker process of trial {index + 1}",
                          f"the worker process of trial {index + 1}",
                          "use --trials in-process, or free processes")
    return trial


def _worker_main(spec: RunSpec, rendezvous: str | None, label: str | None, connection: Connection
                ) -> None:
    """The worker process (started through process.orphan_safe_worker, which ends it quietly
    when the parent dies): one trial, its Trial (or its error) sent back to the parent."""
    workers.serve(connection, lambda: _measure_here(spec, rendezvous, label),
                  "the worker of a trial")


def _measure_here(spec: RunSpec, rendezvous: str | None, label: str | None) -> Trial | None:
    devices.activate(spec.device)
    env = environment.describe(spec.device)
    monitor = benchmark.Monitor(spec.device, spec.config.telemetry_interval_ms / 1e3)
    launch = spec.launch
    try:
        with distributed.leaving_group():
            if launch.distributed and rendezvous is not None:   # trial_rendezvous gave it
                distributed.init_trial_group(launch, spec.device, spec.config.dist_timeout,
                                             rendezvous)
            with shown_phases(label if launch.is_main else None) as activity:
                activity.start(f"{label or ''}Building {spec.model.name}")
                return measure_trial(spec, env, monitor, rank_hooks(spec),
                                     on_phase=phase_line(activity, label))
    finally:
        monitor.close()


def shown_phases(label: str | None, out: TextIO | None = None) -> progress.Activity:
    """Where a trial shows its phases: ``out`` (the terminal or log) for the process that speaks
    for the job, nowhere for the others (``label`` None: their lines would repeat rank 0's)."""
    if label is None:
        return progress.Activity(io.StringIO(), live=False)
    return progress.Activity(out or sys.stdout)


# What benchmark.run's phases are called on the terminal.
_PHASE_TEXT = {"compiling and warming up":
               "Compiling and warming up (torch.compile can take minutes the first time)",
               "warming up": "Warming up"}


def phase_line(activity: progress.Activity, label: str | None):
    """benchmark.run's ``on_phase``: each phase on its own line; the timed one is announced
    once and never redrawn while it runs (nothing prints between its first and last
    iteration), its elapsed time shown when it ends."""
    def on_phase(phase: str, timed: bool = False) -> None:
        activity.start((label or "") + _PHASE_TEXT.get(phase, phase[:1].upper() + phase[1:]),
                       tick=not timed)
    return on_phase
