"""How many trials one run measures: ``--repeat N``, ``--max-noise`` with its limits, and the
trials ``--discard-throttled`` measures again.

The runner asks a :class:`TrialCount` how many rounds there can be (:attr:`~TrialCount.rounds`),
what to call each trial on the console (:meth:`~TrialCount.label`), whether a trial just
measured is kept or discarded as throttled (:meth:`~TrialCount.keep`) and, after each trial,
whether to stop (:meth:`~TrialCount.done`). The statistics are :mod:`microbench.measure.stats`'s
(:class:`~microbench.measure.stats.StoppingRule`, :class:`~microbench.measure.stats.DiscardPolicy`); this
module only keeps the record: why the run stopped, and every discarded trial with its reason,
which the result file keeps beside the trials that count.

Both decisions are taken by the one process that sees the trials, so they take a single-process
run (the ranks of a DDP job would each decide alone): a distributed launch is refused.

Example::

    count = TrialCount.of(spec)
    trials.run_rounds([job], count.rounds, measure, until=lambda: count.done(job.trials))
    Summary(..., discarded=count.discarded, stopped_by=count.stopped_by)
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence, TextIO

from microbench.settings.config import min_noise_trials
from microbench.platform.errors import UsageError
from microbench.measure.results import Trial
from microbench.measure.stats import DiscardPolicy, StoppingRule, throttle_reason

if TYPE_CHECKING:
    from microbench.plan.spec import RunSpec

# --discard-throttled measures at most this many trials again in one run; later throttled
# trials are kept, flagged, and the run says so (a device that throttles all the time must not
# run forever).
MAX_DISCARDED = 3
# --time-limit's clock (seconds; tests replace it).
CLOCK: Callable[[], float] = time.monotonic


@dataclass(frozen=True)
class Discarded:
    """A trial measured and set aside: its index, why, and what it measured."""

    index: int
    reason: str
    trial: Trial


@dataclass
class TrialCount:
    repeat: int
    rule: StoppingRule | None = None
    policy: DiscardPolicy | None = None
    discarded: list[Discarded] = field(default_factory=list)
    stopped_by: str | None = None

    @classmethod
    def of(cls, spec: RunSpec, clock: Callable[[], float] | None = None) -> TrialCount:
        config = spec.config
        if spec.launch.distributed and (config.max_noise_pct is not None
                                        or config.discard_throttled):
            raise UsageError("--max-noise and --discard-throttled decide on one process's "
                             "trials: run them without torchrun, srun or several --device_ids")
        rule = None
        if config.max_noise_pct is not None:
            rule = StoppingRule(config.max_noise_pct, config.max_trials, config.time_limit_s,
                                min_trials=min_noise_trials(config), clock=clock or CLOCK)
        policy = DiscardPolicy(MAX_DISCARDED) if config.discard_throttled else None
        return cls(config.repeat, rule, policy)

    @property
    def rounds(self) -> int:
        """The most trials this run can measure (discarded ones apart)."""
        return self.rule.max_trials if self.rule is not None else self.repeat

    def label(self, index: int) -> str:
        """``Trial 2/5: `` (a fixed count), ``Trial 2 (of at most 20): `` (--max-noise), or
        nothing for a single trial."""
        if self.rule is not None:
            return f"Trial {index + 1} (of at most {self.rule.max_trials}): "
        return f"Trial {index + 1}/{self.repeat}: " if self.repeat > 1 else ""

    def keep(self, index: int, trial: Trial | None, out: TextIO) -> bool:
        """Whether trial ``index`` counts; a throttled one is discarded (and measured again by
        the caller) while the policy allows, and said so. None (another rank's) is kept."""
        if trial is None or self.policy is None:
            return True
        telemetry = trial.result.telemetry
        if not self.policy.rerun(index, telemetry):
            reason = throttle_reason(telemetry)
            if reason is not None:
                print(f"{self.label(index)}throttled ({reason}), kept: --discard-throttled "
                      f"already measured {MAX_DISCARDED} trials again", file=out, flush=True)
            return True
        reason = self.policy.discarded[-1][1]
        self.discarded.append(Discarded(index, reason, trial))
        print(f"{self.label(index)}{trial.throughput:.2f}/s throttled ({reason}): discarded, "
              f"measuring it again ({len(self.discarded)} of at most {MAX_DISCARDED})",
              file=out, flush=True)
        return False

    def done(self, trials: Sequence[Trial]) -> bool:
        """After a trial: whether --max-noise's rule stops the run (its reason kept)."""
        if self.rule is None:
            return False
        self.rule.add(trials[-1].throughput)
        self.stopped_by = self.rule.reason()
        return self.stopped_by is not None

    def notes(self) -> list[str]:
        """What the result file and the summary say about how many trials there were."""
        found = [f"--max-noise: stopped: {self.stopped_by}"] if self.stopped_by else []
        found += [f"trial {d.index + 1} discarded as throttled ({d.reason}) and measured again"
                  for d in self.discarded]
        return found
