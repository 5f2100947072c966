"""What the flags alone decide of a parallel strategy: its options and its refusals, below torch
(issue 64: these refusals waited seconds for torch's import, tens on a loaded machine).

Each strategy's flag side is a class here, named after the strategy: its options (the keywords
its wrapper takes: ``OPTIONS``, an allow-list with the check of each value, given in its one
dict flag ``--<name>-options``; ``NAMED``, those with a flag of their own), its rules
(``check_flags``) and the line that refuses its flags under another strategy (``not_here``).
The strategy itself (``scenarios/<name>.py``: its wrapper, work and report) is a subclass of
its class here, so a rule and an option are declared once and the plan reads them before torch
is imported (:func:`check`, from ``settings/kinds.py``).

Example::

    check(config, training=True)            # UsageError (exit 2) on a bad combination
    FLAGS["ddp"].options(config)            # {'static_graph': False, ..., 'broadcast_buffers': ...}
"""
from __future__ import annotations

import difflib
from typing import Any, Callable, Mapping, Sequence

from microbench.platform.errors import UsageError
from microbench.settings.config import ONE_PROCESS, SCHEMA, BenchConfig
from microbench.settings.mesh import HYBRID


def boolean(where: str, value: Any) -> Any:
    """An option that is True or False."""
    if not isinstance(value, bool):
        raise UsageError(f"{where} must be True or False, got {value!r}")
    return value


class StrategyFlags:
    """One process (``single``): no options, no rules of its own."""

    name = ONE_PROCESS             # the result's parallel.mode
    # keyword -> the check of its value: what --<name>-options may give the wrapper.
    OPTIONS: dict[str, Callable[[str, Any], Any]] = {}
    # keyword -> the config field of its own flag (the older spellings, which stay).
    NAMED: dict[str, str] = {}

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

    def not_here(self, flags: list[str], chosen: "StrategyFlags",
                 takers: Sequence[str] = ()) -> UsageError:
        """The refusal of this strategy's ``flags`` under the ``chosen`` one; ``takers``: every
        strategy that takes them (hsdp takes fsdp's flag), this one where none is given."""
        return UsageError(f"{', '.join(flags)} appl{'y' if len(flags) > 1 else 'ies'} to "
                          f"--parallel {' or '.join(takers or (self.name,))}, not to "
                          f"{chosen.name}{self.unlike(chosen)}")

    def unlike(self, chosen: "StrategyFlags") -> str:
        """Why this strategy's options mean nothing under ``chosen``, in a clause ("" none)."""
        return ""

    def check_flags(self, config: BenchConfig) -> None:
        """The rules the flags alone break (before resolve: ``--parallel`` names the class)."""
        self.check_options(config)


class ReplicatedFlags(StrategyFlags):
    """``--parallel ddp``: DistributedDataParallel's keywords. Three have flags of their own,
    the older spellings (``--ddp-bucket-cap-mb``, ``--ddp-static-graph``,
    ``--ddp-gradient-as-bucket-view``); the others are given in ``--ddp-options``. A new
    keyword is its word in :data:`OPTIONS` (and its line in docs/flags.md)."""

    name = "ddp"
    OPTIONS = {"broadcast_buffers": boolean, "find_unused_parameters": boolean}
    NAMED = {"static_graph": "ddp_static_graph",
             "gradient_as_bucket_view": "ddp_gradient_as_bucket_view",
             "bucket_cap_mb": "ddp_bucket_cap_mb"}

    def not_here(self, flags: list[str], chosen: StrategyFlags,
                 takers: Sequence[str] = ()) -> UsageError:
        return UsageError(f"DistributedDataParallel's options ({', '.join(flags)}) do not apply "
                          f"to --parallel {chosen.name}: drop them or use --parallel ddp")


class ShardedFlags(StrategyFlags):
    """``--parallel fsdp``: FSDP refuses FP16 (its sharded gradients get no loss scaling), BF16
    weights (no sharded FP32 master), gradient accumulation and PyTorch's fused SGD (no DTensor
    kernel)."""

    name = "fsdp"
    # fully_shard's keywords: the one with a flag of its own. fully_shard has no other scalar
    # keyword yet; the first one gets the dict flag --fsdp-options (a field fsdp_options, as
    # ddp_options) and its word in OPTIONS, with the check of its value.
    NAMED = {"reshard_after_forward": "reshard_after_forward"}

    def check_flags(self, config: BenchConfig) -> None:
        super().check_flags(config)
        flag = f"--parallel {self.name}"
        if "fp16" in config.precision:
            raise UsageError(f"{flag} does not run --precision {config.precision}: FP16 "
                             f"gradients need loss scaling, which FSDP's sharded gradients do not "
                             f"get here; use --precision amp-bf16 (or fp32, tf32)")
        if config.precision == "bf16":
            raise UsageError(f"{flag} does not run --precision bf16: its FP32 master "
                             f"weights are not sharded here; use --precision amp-bf16 (FSDP keeps "
                             f"FP32 shards and computes with BF16 copies)")
        if config.opt_step > 1:
            raise UsageError(f"--opt-step applies to --parallel ddp: under {self.name} every "
                             f"micro-batch would reduce-scatter its gradients")
        if config.optimizer == "sgd" and config.optimizer_impl == "fused":
            raise UsageError("--optimizer-impl fused cannot step FSDP's sharded parameters with "
                             "SGD (PyTorch's fused SGD kernel has no DTensor support): use "
                             "--optimizer-impl foreach or --optimizer adamw")

    def unlike(self, chosen: StrategyFlags) -> str:
        return " (DDP keeps whole parameters on every rank)" \
            if isinstance(chosen, ReplicatedFlags) else ""


class HybridFlags(ShardedFlags):
    """``--parallel hsdp``: FSDP's rules and its flag, and the shard group's size
    (``--hsdp-shard-size``), which sizes the mesh rather than being a fully_shard keyword."""

    name = HYBRID
    NAMED = {**ShardedFlags.NAMED, "shard_size": "hsdp_shard_size"}

    def options(self, config: BenchConfig) -> dict:
        """fully_shard's keywords (the shard group's size is the mesh's, not fully_shard's)."""
        return {keyword: value for keyword, value in super().options(config).items()
                if keyword != "shard_size"}


# Each strategy's flag side by its name (ONE_PROCESS and settings/config.PARALLEL);
# scenarios/parallel.STRATEGIES holds the strategies themselves, each a subclass of its row
# (tests/test_structure.py holds the two to the same names).
FLAGS: dict[str, StrategyFlags] = {flags.name: flags for flags in (
    StrategyFlags(), ReplicatedFlags(), ShardedFlags(), HybridFlags())}


def check(config: BenchConfig, training: bool,
          strategies: Mapping[str, StrategyFlags] = FLAGS) -> None:
    """The combinations refused before anything runs (one line each, exit 2): these settings
    apply to training; the chosen strategy's rules; another strategy's options refused.
    ``strategies``: these (below torch), or ``parallel.STRATEGIES`` (every registered one)."""
    if not training:
        for name, given, default in (("--parallel", config.parallel, "ddp"),
                                     ("--activation-checkpointing",
                                      config.activation_checkpointing, "none"),
                                     ("--optimizer", config.optimizer, "sgd")):
            if given != default:
                raise UsageError(f"{name} {given} applies to --mode training, not "
                                 f"{config.mode}")
    chosen = strategies.get(config.parallel)
    if chosen is None:                   # a strategy registered above (its rules checked there)
        return
    chosen.check_flags(config)
    taken = chosen.flags_given(config)          # a flag two strategies take (hsdp's fsdp's)
    for other in strategies.values():
        flags = [flag for flag in other.flags_given(config) if flag not in taken] \
            if other is not chosen else []
        if flags:
            takers = [strategy.name for strategy in strategies.values()
                      if strategy is not chosen and set(flags) <= set(strategy.flags_given(config))]
            raise other.not_here(flags, chosen, takers)
