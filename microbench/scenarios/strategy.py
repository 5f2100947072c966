"""A parallel strategy: how training's work is spread over the ranks (issue 24), and what the
strategy alone knows (issue 54). Each strategy is one module of this package, named after it
(``ddp.py``, ``fsdp.py``), holding a :class:`Strategy` subclass that owns

* its options: the keywords its wrapper takes (``OPTIONS``, an allow-list, each with the check
  of its value), given in its one dict flag (``--<name>-options``, the config field
  ``<name>_options``), beside the flags of their own that users already have (``NAMED``);
* its wrapper (``wrapper``: DDP's constructor; FSDP shards in its own build);
* its preset choices (``PRESET``, what ``--preset fast`` picks under it) and its preset's
  adjustments (``adjust_preset``);
* its device mesh (``mesh``: the sizes and names of its dimensions) and its data-parallel
  degree (``data_parallel``: the ranks that each take their own share of the batch, which the
  batch split and the global batch read; every rank unless it says otherwise);
* its refusals (``check_flags``, ``check_model``) and its console rows.

``scenarios/parallel.py`` registers them by the names of ``settings/config.PARALLEL``.

Example::

    strategy.check_options(config)          # UsageError on a keyword not in OPTIONS
    wrap = strategy.wrapper(spec)           # None, or the function that wraps the model
"""
from __future__ import annotations

import contextlib
import difflib
from typing import Any, Callable, ContextManager

import torch

from microbench.platform.distributed import Launch
from microbench.platform.errors import UsageError
from microbench.settings.config import ONE_PROCESS, SCHEMA, BenchConfig
from microbench.settings.mesh import Mesh
from microbench.steps import workload
from microbench.scenarios.views import RunView, SummaryView

# What wraps a training run's model on each rank (DDP's constructor).
Wrap = Callable[[torch.nn.Module], torch.nn.Module]


def boolean(where: str, value: Any) -> Any:
    """An option that is True or False."""
    if not isinstance(value, bool):
        raise UsageError(f"{where} must be True or False, got {value!r}")
    return value


class Strategy:
    """How training's work is spread over the ranks, chosen once, in resolve
    (``parallel.strategy_of``): one process (``single``, this class), a replica per rank
    (``ddp``), shards over every rank (``fsdp``), or shards inside groups replicated across
    them (``hsdp``)."""

    name = ONE_PROCESS             # the result's parallel.mode
    replicates = False             # a DDP wrapper around the model of a training run
    shards = False                 # each rank holds a shard of the model
    # keyword -> the check of its value: what --<name>-options may give the wrapper.
    OPTIONS: dict[str, Callable[[str, Any], Any]] = {}
    # keyword -> the config field of its own flag (the older spellings, which stay).
    NAMED: dict[str, str] = {}
    # keyword -> value: what --preset fast chooses for a training run over several ranks.
    PRESET: dict[str, Any] = {}
    # How the result's counted FLOPs were counted (the JSON's parallel.counted_flops).
    counted_flops = "counted on the eager model before checkpointing"

    # ---------------------------------------------------------------- options

    @property
    def options_field(self) -> str:
        return f"{self.name}_options"

    @property
    def options_flag(self) -> str:
        return f"--{self.name}-options"

    def given_options(self, config: BenchConfig) -> dict:
        """What the dict flag gave (empty for a strategy without one)."""
        return dict(getattr(config, self.options_field, None) or {})

    def options(self, config: BenchConfig) -> dict:
        """Every keyword the wrapper takes: the named flags' values, then the dict flag's."""
        return {**{keyword: getattr(config, name) for keyword, name in self.NAMED.items()},
                **self.given_options(config)}

    def flags_given(self, config: BenchConfig) -> list[str]:
        """This strategy's option flags the command line set to other than their default (to
        refuse them under another strategy)."""
        flags = [SCHEMA[name].flag for name in self.NAMED.values()
                 if name in config.explicit and getattr(config, name) != SCHEMA[name].default]
        if self.given_options(config):
            flags.append(self.options_flag)
        return flags

    def check_options(self, config: BenchConfig) -> None:
        """Every keyword of the dict flag is in the allow-list, with a value it takes; one with
        a flag of its own is given there (one spelling a setting, one identity a result)."""
        for keyword, value in self.given_options(config).items():
            if keyword in self.NAMED:
                raise UsageError(f"{self.options_flag}: '{keyword}' has a flag of its own: use "
                                 f"{SCHEMA[self.NAMED[keyword]].flag}")
            if keyword not in self.OPTIONS:
                close = difflib.get_close_matches(keyword, self.OPTIONS, n=3)
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                known = ", ".join(sorted(self.OPTIONS)) or "none"
                raise UsageError(f"{self.options_flag}: unknown option '{keyword}'{hint}; it "
                                 f"takes {known} (docs/flags.md)")
            self.OPTIONS[keyword](f"{self.options_flag} '{keyword}'", value)

    def not_here(self, flags: list[str], chosen: "Strategy") -> UsageError:
        """The refusal of this strategy's ``flags`` under the ``chosen`` one."""
        return UsageError(f"{', '.join(flags)} appl{'y' if len(flags) > 1 else 'ies'} to "
                          f"--parallel {self.name}, not to {chosen.name}")

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

    def check_flags(self, config: BenchConfig) -> None:
        """The rules the flags alone break (before resolve: ``--parallel`` names the class)."""
        self.check_options(config)

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
