"""Training: forward, the model family's loss, backward and an optimizer step per iteration.

Every iteration is cut in three by two extra device events (forward with the loss, backward,
optimizer), unless ``--no-phases``; the step itself is built by :mod:`microbench.steps.workload`.

Example::

    scenario = Training(config, model)
    work = scenario.build(spec, wrap=None, count_flops=True)
"""
from __future__ import annotations

from typing import Callable

import torch

from microbench.measure.results import PhaseTimes, ShardedState
from microbench.platform import units
from microbench.scenarios import parallel
from microbench.scenarios.base import Scenario
from microbench.scenarios.feeding import PipelineFed
from microbench.scenarios.views import RunView, SummaryView, Work


class Training(PipelineFed, Scenario):
    mode = "training"
    updates_weights = True
    flops_counted = "forward + backward"

    def check_spec(self, spec: RunView) -> None:
        super().check_spec(spec)
        parallel.check_model(spec)

    def build(self, spec: RunView, wrap: Callable[[torch.nn.Module], torch.nn.Module] | None,
              count_flops: bool) -> Work:
        return spec.parallel.build(spec, wrap, count_flops)

    def sharded_state(self, work: Work) -> ShardedState | None:
        return parallel.sharded_state(work)

    def mode_text(self) -> str:
        if self.config.opt_step > 1:
            return f"training (optimizer step every {self.config.opt_step} iterations)"
        return "training"

    def console_rows(self, summary: SummaryView) -> list[tuple[str, str]]:
        phases = summary.detail
        if not isinstance(phases, PhaseTimes):          # --no-phases: None
            return super().console_rows(summary) + parallel.console_rows(summary)
        means = phases.means_ms()
        total = sum(means.values())
        parts = "  ".join(f"{name} {units.duration_ms(ms)} ({ms / total:.0%})"
                          for name, ms in means.items())
        whose = ", rank 0" if summary.distributed else ""
        return ([(f"Phases (mean{whose})", parts)] + super().console_rows(summary)
                + parallel.console_rows(summary))

    def document(self, summary: SummaryView) -> dict:
        phases = summary.detail
        if not isinstance(phases, PhaseTimes):
            return {**super().document(summary), **parallel.document(summary)}
        return {"phases": {name: {"mean_ms": times.mean, "stats": times.stats(),
                                  "samples_ms": list(times.samples_ms)}
                           for name, times in phases.items()}, **super().document(summary),
                **parallel.document(summary)}
