"""Trials: the one loop that measures one configuration or many, trial after trial.

A single run, every row of a sweep and the run the largest-batch search ends with all go through
:func:`run_rounds`: round ``i`` measures trial ``i`` of every job before round ``i + 1`` starts,
so in a sweep the configurations interleave and a drift of the device's speed hits them all
alike. :func:`measure_trial` is one trial of one job on this process (and, under DDP, every
rank's record gathered on rank 0).

Example::

    jobs = [Job(spec)]
    run_rounds(jobs, spec.config.repeat, lambda job, index: job.trials.append(
        measure_trial(job.spec, env, monitor)))
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from . import benchmark, distributed
from .results import Trial
from .summary import record_of, trial_of_process


@dataclass
class Job:
    """One configuration being measured: its trials so far, or why it stopped."""

    spec: object                       # the RunSpec
    trials: list[Trial] = field(default_factory=list)
    status: str = "ok"                 # ok | out of memory | error
    error: str | None = None
    exit_code: int = 0                 # what this job alone would have exited with

    @property
    def failed(self) -> bool:
        return self.status != "ok"

    def fail(self, status: str, error: str, exit_code: int) -> None:
        self.status, self.error, self.exit_code = status, error, exit_code


def run_rounds(jobs: list[Job], rounds: int, measure: Callable[[Job, int], None],
               between: Callable[[Job], None] = lambda job: None,
               on_round: Callable[[int], None] = lambda index: None) -> None:
    """Trial ``i`` of every job, for ``i`` in ``range(rounds)``; a failed job is skipped from
    then on. ``between(job)`` runs after each of a job's trials (freeing what it left)."""
    for index in range(rounds):
        on_round(index)
        for job in jobs:
            if job.failed:
                continue
            measure(job, index)
            between(job)


@dataclass(frozen=True)
class RankHooks:
    """What a multi-process job does around a trial (nothing for a single process): wrap the
    model (DDP), meet before the timed region, meet again after an excluded iteration."""

    wrap: Callable | None = None
    before_timing: Callable[[], None] = lambda: None
    rejoin: Callable[[], None] = lambda: None


def measure_trial(spec, env, monitor: benchmark.Monitor, hooks: RankHooks = RankHooks(),
                  on_phase: Callable[[str], None] = lambda phase: None) -> Trial | None:
    """One trial of ``spec`` on this process: a Trial on rank 0 (every rank's record gathered
    there), None on the other ranks."""
    result = benchmark.run(spec, on_phase=on_phase, wrap=hooks.wrap,
                           before_timing=hooks.before_timing, monitor=monitor,
                           rejoin=hooks.rejoin)
    if not spec.launch.distributed:
        return trial_of_process(spec, env, result)
    distributed.barrier(spec.device)           # ...and meet again at its end
    records = distributed.gather_to_main(record_of(spec, env, result))
    return Trial.of_ranks(result, records) if spec.launch.is_main else None
