"""Kinds of run: one module each, and the one place that knows which kinds there are.

A scenario owns what differs between kinds of run: how its work is built, its timed loop, its unit
of work (images, tokens, generated tokens: defined once, in :class:`~.base.Scenario`), the rows
it adds to the console summary, its JSON block and its CSV cells. Outside this package no module
branches on the mode; they ask the run's scenario (``spec.scenario``).

* :mod:`.training`  -- forward, loss, backward, optimizer step (phases split by device events);
* :mod:`.inference` -- forward in inference mode;
* :mod:`.generate`  -- prefill a prompt, then decode token by token with a KV cache
  (:mod:`.decoding` is its engine).

A new kind of run is a module here, named after its mode, with a :class:`~.base.Scenario`
subclass whose ``mode`` is that name, and the name in :data:`microbench.settings.config.MODES`
(where the command line's choices and the result schema's enum read it, below torch).

Example::

    scenario = for_config(config, model_spec)
    scenario.unit, scenario.units_per_item          # 'generated token', 128
"""
from __future__ import annotations

import importlib

from microbench.models.family import ModelFamily
from microbench.scenarios import parallel
from microbench.scenarios.base import Scenario
from microbench.settings import kinds
from microbench.settings.config import MODES, BenchConfig


def _scenario_of(mode: str) -> type[Scenario]:
    """The Scenario of ``mode``: the class of that mode in the module of that name."""
    module = importlib.import_module(f"{__name__}.{mode}")
    [kind] = [value for value in vars(module).values()
              if isinstance(value, type) and issubclass(value, Scenario)
              and value.__module__ == module.__name__ and value.mode == mode]
    return kind


SCENARIOS: dict[str, type[Scenario]] = {mode: _scenario_of(mode) for mode in MODES}


def kind_of(mode: str) -> type[Scenario]:
    return SCENARIOS[mode]


def check(config: BenchConfig) -> None:
    """The rules of the configuration's kind of run (a UsageError where one is broken), of its
    input data (which only some kinds take), its strategy and its precision: those of
    ``settings/kinds.py`` (which the plan runs before torch's import), here with the registered
    scenario's class flags and every registered strategy."""
    kinds.check(config, kind_of(config.mode).kind(), parallel.STRATEGIES)


def for_config(config: BenchConfig, model: ModelFamily) -> Scenario:
    """The scenario of ``config`` for its configured model spec."""
    return kind_of(config.mode)(config, model)
