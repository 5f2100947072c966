"""A parallel strategy: how training's work is spread over the ranks (issue 24), and what the
strategy alone knows (issue 54). Each strategy is one module of this package, named after it
(``ddp.py``, ``fsdp.py``), holding a :class:`Strategy` subclass that owns

* its options and its refusals from the flags alone (``OPTIONS``, ``NAMED``, ``check_flags``,
  ``not_here``), in its flag side, the class it inherits from ``settings/strategy_flags.py``
  (below torch, where the plan reads them before torch's import: issue 64);
* its wrapper (``wrapper``: DDP's constructor; FSDP shards in its own build);
* its preset choices (``PRESET``, what ``--preset fast`` picks under it) and its preset's
  adjustments (``adjust_preset``);
* its device mesh (``mesh``: the sizes and names of its dimensions) and its data-parallel
  degree (``data_parallel``: the ranks that each take their own share of the batch, which the
  batch split and the global batch read; every rank unless it says otherwise);
* its refusals of the resolved model (``check_model``) and its console rows.

``scenarios/parallel.py`` registers them by the names of ``settings/config.PARALLEL``.

Example::

    wrap = strategy.wrapper(spec)           # None, or the function that wraps the model
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager

import torch

from microbench.platform.distributed import Launch
from microbench.settings.config import BenchConfig
from microbench.settings.mesh import Mesh
from microbench.settings.strategy_flags import StrategyFlags
from microbench.steps import workload
from microbench.scenarios.views import RunView, SummaryView

# What wraps a training run's model on each rank (DDP's constructor).
Wrap = Callable[[torch.nn.Module], torch.nn.Module]


class Strategy(StrategyFlags):
    """How training's work is spread over the ranks, chosen once, in resolve
    (``parallel.strategy_of``): one process (``single``, this class), a replica per rank
    (``ddp``), shards over every rank (``fsdp``), or shards inside groups replicated across
    them (``hsdp``)."""

    replicates = False             # a DDP wrapper around the model of a training run
    shards = False                 # each rank holds a shard of the model
    # keyword -> value: what --preset fast chooses for a training run over several ranks.
    PRESET: dict[str, Any] = {}
    # How the result's counted FLOPs were counted (the JSON's parallel.counted_flops).
    counted_flops = "counted on the eager model before checkpointing"

    # ---------------------------------------------------------------- the preset

    def preset_choices(self, training: bool, world_size: int) -> dict:
        """The config fields --preset fast sets under this strategy: ``PRESET``'s keywords, by
        their own flag's field or in the dict flag (training over several ranks only)."""
        if not (training and world_size > 1 and self.PRESET):
            return {}
        chosen = {self.NAMED[keyword]: value for keyword, value in self.PRESET.items()
                  if keyword in self.NAMED}
        others = {keyword: value for keyword, value in self.PRESET.items()
                  if keyword not in self.NAMED}
        return {**chosen, **({self.options_field: others} if others else {})}

    def adjust_preset(self, config: BenchConfig, choices: dict) -> dict:
        """The preset's other choices as this strategy can run them."""
        return choices

    # ---------------------------------------------------------------- the mesh

    def mesh(self, config: BenchConfig, launch: Launch) -> Mesh:
        """The device mesh of the job's ranks: one dimension of them all (a UsageError where
        the launch cannot form this strategy's mesh)."""
        return Mesh((launch.world_size,), ("data",))

    def data_parallel(self, config: BenchConfig, launch: Launch) -> int:
        """Ranks that each take their own share of the global batch: every rank (a strategy
        whose ranks share a batch, tensor or pipeline parallel, gives fewer)."""
        return launch.world_size

    # ---------------------------------------------------------------- the run

    def check_model(self, spec: RunView) -> None:
        """What the resolved model must be for this strategy."""

    def wrapper(self, spec: RunView) -> Wrap | None:
        """What wraps the model of a training run on each rank (None: nothing)."""
        return None

    def process_group(self, spec: RunView) -> ContextManager[None]:
        """The process group a trial runs in (a launcher's job has its own already)."""
        return contextlib.nullcontext()

    def build(self, spec: RunView, wrap: Wrap | None, count_flops: bool) -> workload.Workload:
        return workload.build(spec, wrap, count_flops, training=True)

    def console_rows(self, summary: SummaryView) -> list[tuple[str, str]]:
        return []
