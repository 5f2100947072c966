"""Training's side of issue 24: ``--parallel``, ``--activation-checkpointing`` and
``--optimizer``, checked and reported, and the registry of the parallel strategies.

Each strategy is one module of this package named after it (``ddp.py``, ``fsdp.py``; the base,
one process, in ``strategy.py``) that owns its options, wrapper, preset choices, refusals and
console rows; :data:`STRATEGIES` finds it by its name in ``settings/config.PARALLEL``, as
``scenarios.SCENARIOS`` finds a kind of run. A new strategy is its module and its name there.

* :func:`check_flags` -- the rules that the flags alone break (from ``scenarios.check``; declared
  in ``settings/strategy_flags.py``, below torch): these settings apply to training; a
  strategy's own rules; another strategy's options refused.
* :func:`check_model` -- the rules of the resolved model (``Training.check_spec``): the
  strategy's, and checkpointing needs transformer blocks (language models).
* :func:`console_rows` / :func:`document` -- the report: the parallel mode and world size, tokens
  per second per device and in total, MFU on torchtitan's basis beside the counted MFU, and
  each rank's memory (peaks, sharded parameter and optimizer-state bytes).

Example::

    check_flags(config, training=True)              # UsageError (exit 2) on a bad combination
    strategy = strategy_of(config, launch)          # SINGLE, or the module's Strategy
    state = sharded_state(work)                     # ShardedState of this rank
"""
from __future__ import annotations

import importlib
from typing import Sequence

from microbench.measure import token_flops
from microbench.measure.results import RankRecord, ShardedState
from microbench.platform.distributed import Launch
from microbench.scenarios.views import RunView, SummaryView, Work
from microbench.settings.config import BenchConfig
from microbench.steps.workload import Workload
from microbench.platform import units
from microbench.platform.errors import UsageError
from microbench.scenarios.strategy import Strategy
from microbench.settings import strategy_flags
from microbench.settings.config import ONE_PROCESS, PARALLEL
from microbench.steps import sharding


# ---------------------------------------------------------------- the strategies

def _strategy_named(name: str) -> Strategy:
    """The Strategy of ``name``: the class of that name in the module of that name."""
    module = importlib.import_module(f"{__package__}.{name}")
    [kind] = [value for value in vars(module).values()
              if isinstance(value, type) and issubclass(value, Strategy)
              and value.__module__ == module.__name__ and value.name == name]
    return kind()


SINGLE = Strategy()
# Every strategy by the name a result gives it: ONE_PROCESS and --parallel's PARALLEL
# (microbench.settings.config, where the command line and the schema read them).
STRATEGIES: dict[str, Strategy] = {ONE_PROCESS: SINGLE,
                                   **{name: _strategy_named(name) for name in PARALLEL}}


def named(flag: str) -> Strategy:
    """The strategy ``--parallel`` names (ddp: DDP where there are ranks, else one process)."""
    return STRATEGIES[flag]


def strategy_of(config: BenchConfig, launch: Launch) -> Strategy:
    """The run's strategy: --parallel fsdp shards; otherwise DDP across a launcher's ranks, and
    a single process with no wrapper alone."""
    strategy = named(config.parallel)
    return SINGLE if strategy.replicates and not launch.distributed else strategy


# ---------------------------------------------------------------- rules

def check_flags(config: BenchConfig, training: bool) -> None:
    """The combinations refused before anything runs (one line each, exit 2), declared below
    torch (``settings/strategy_flags.check``, which the plan runs before torch's import), here
    over every registered strategy."""
    strategy_flags.check(config, training, STRATEGIES)


def check_model(spec: RunView) -> None:
    """What the model must be for these settings (its family, its blocks)."""
    config, model = spec.config, spec.model
    spec.parallel.check_model(spec)
    if config.activation_checkpointing != "none" and not model.reads_tokens:
        raise UsageError(f"--activation-checkpointing {config.activation_checkpointing} "
                         f"recomputes transformer blocks, and {model.name} is an image model "
                         f"with none: use it with a llama_* or hf: model")


def sharded_state(work: Work) -> ShardedState | None:
    """This rank's shards of the parameters and optimizer state (after the optimizer's first
    step, which creates its state)."""
    plan = work.sharding
    if plan is None or not isinstance(work, Workload):     # a Workload is what fsdp builds
        return None
    held = sharding.local_state_bytes(work.eager_model, work.optimizer)
    return ShardedState(plan=plan.to_dict(), parameter_bytes=held.parameters,
                        optimizer_state_bytes=held.optimizer)


# ---------------------------------------------------------------- the report

def mode_of(summary: SummaryView) -> str:
    """What replicated or sharded the model: fsdp, hsdp, ddp, or single (one process, no
    wrapper)."""
    return summary.spec.parallel.name


def token_utilization(summary: SummaryView) -> token_flops.TokenUtilization | None:
    """MFU on torchtitan's basis (llama_* presets only: it needs the architecture's shape),
    at the headline's tokens per second per device."""
    model = summary.spec.model
    arch, seq_len = model.llama_config, model.tokens_per_item     # a preset's --seq-len
    if arch is None or seq_len is None or summary.token_throughput is None:
        return None
    return token_flops.TokenUtilization(token_flops.llama_flops(arch, seq_len),
                                        summary.token_throughput / summary.world_size,
                                        summary.spec.peak)


def console_rows(summary: SummaryView) -> list[tuple[str, str]]:
    config, strategy = summary.spec.config, summary.spec.parallel
    ranks = sorted((r for r in summary.ranks), key=lambda r: r.rank)
    rows = strategy.console_rows(summary)
    if config.activation_checkpointing != "none":
        rows.append(("Activation checkpointing",
                     f"{config.activation_checkpointing} (recomputation is not counted as "
                     f"model FLOPs)"))
    tokens = summary.token_throughput
    if tokens is not None and strategy is not SINGLE:
        devices = f"{summary.world_size} device{'s' if summary.world_size > 1 else ''}"
        rows.append(("Tokens/s", f"{tokens / summary.world_size:,.0f} per device, "
                                 f"{tokens:,.0f} total over {devices}"))
    titan = token_utilization(summary)
    # Without a peak the torchtitan basis has no MFU to give: its row would only repeat the
    # MFU line's "unknown" and add a second FLOP-per-token figure on another basis (issue 64).
    if titan is not None and titan.mfu is not None:
        rows.append(("MFU (torchtitan basis)", _titan_text(summary, titan)))
    if strategy.shards:
        rows += _memory_rows(ranks)
    return rows


# Ranks listed one by one in the console; a larger job gets its largest figures in one row
# (every rank's stay in the JSON's parallel.per_rank).
LISTED_RANKS = 8


def _memory_rows(ranks: Sequence[RankRecord]) -> list[tuple[str, str]]:
    if len(ranks) <= LISTED_RANKS:
        return [(f"Memory rank {record.rank}", _memory_text(record)) for record in ranks]
    largest = max(ranks, key=lambda r: (r.peak_reserved_mb or 0,
                                        r.sharded.total if r.sharded else 0))
    return [(f"Memory, rank {largest.rank}", _memory_text(largest) +
             f" (the largest of {len(ranks)} ranks; each rank's in the JSON)")]


def _titan_text(summary: SummaryView, titan: token_flops.TokenUtilization) -> str:
    mfu = f"{titan.mfu:.1%} of {titan.peak.tflops:g} TFLOP/s"
    counted = summary.utilization
    beside = ("; counted MFU unknown" if counted is None or counted.mfu is None
              else f"; counted MFU {counted.mfu:.1%}")
    return (f"{mfu}, {units.flops(titan.achieved_tflops * 1e12, per_second=True)} per device "
            f"at {units.flops(titan.flops.per_token)}/token{beside} (the MFU line uses the "
            f"counted FLOPs)")


def _memory_text(record: RankRecord) -> str:
    parts = []
    if record.peak_allocated_mb is not None and record.peak_reserved_mb is not None:
        parts.append(f"peak allocated {units.megabytes(record.peak_allocated_mb)}, reserved "
                     f"{units.megabytes(record.peak_reserved_mb)}")
    else:
        parts.append("peak memory unknown (the CPU does not report it)")
    if record.sharded is not None:
        parts.append(f"shards held: parameters {_bytes(record.sharded.parameter_bytes)}, "
                     f"optimizer state {_bytes(record.sharded.optimizer_state_bytes)}")
    return "; ".join(parts)


def _bytes(count: int) -> str:
    return units.megabytes(count / 1e6)


def document(summary: SummaryView) -> dict:
    """The result's ``parallel`` block."""
    config = summary.spec.config
    fsdp = summary.spec.parallel.shards
    titan = token_utilization(summary)
    tokens = summary.token_throughput
    ranks = sorted(summary.ranks, key=lambda r: r.rank)
    first = next((r.sharded for r in ranks if r.sharded is not None), None)
    mesh = summary.spec.parallel.mesh(config, summary.spec.launch)
    return {"parallel": {
        "mode": mode_of(summary), "world_size": summary.world_size,
        "data_parallel": summary.data_parallel,
        "mesh_shape": list(mesh.shape), "mesh_dims": list(mesh.names),
        "reshard_after_forward": config.reshard_after_forward if fsdp else None,
        "activation_checkpointing": config.activation_checkpointing,
        "optimizer": config.optimizer, "optimizer_impl": config.optimizer_impl,
        "sharding": first.plan if first is not None else None,
        "tokens_per_s": tokens,
        "tokens_per_s_per_device": tokens / summary.world_size if tokens is not None else None,
        "torchtitan_flops": titan.to_dict() if titan is not None else None,
        "headline_mfu_basis": "counted (FlopCounterMode, microbench.measure.flops)",
        "counted_flops": summary.spec.parallel.counted_flops,
        "per_rank": [{"rank": r.rank, "peak_allocated_mb": r.peak_allocated_mb,
                      "peak_reserved_mb": r.peak_reserved_mb,
                      "parameter_bytes": r.sharded.parameter_bytes if r.sharded else None,
                      "optimizer_state_bytes":
                          r.sharded.optimizer_state_bytes if r.sharded else None}
                     for r in ranks]}}
