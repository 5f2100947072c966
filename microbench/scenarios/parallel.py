"""Training's side of issue 24: ``--parallel ddp|fsdp``, ``--reshard-after-forward``,
``--activation-checkpointing`` and ``--optimizer``, checked, built and reported.

* :func:`check_flags` -- the rules that the flags alone break (from ``scenarios.check``): these
  settings apply to training; FSDP refuses FP16 (its sharded gradients get no loss scaling),
  gradient accumulation and PyTorch's fused SGD (no DTensor kernel).
* :func:`check_model` -- the rules of the resolved model (``Training.check_spec``): FSDP shards
  the llama_* presets (built on the meta device, materialised shard by shard: the image models
  have no transformer blocks to shard, and an hf: model has no initialiser that writes shards);
  checkpointing needs transformer blocks (language models).
* :func:`build_sharded` -- the FSDP work: the model built on meta, FLOPs counted there, blocks
  checkpointed, ``fully_shard`` per block and at the root with the precision row's
  ``MixedPrecisionPolicy``, then each rank allocates and initialises its own shards only; the
  step is training's own (:func:`microbench.steps.workload.training_step`).
* :func:`console_rows` / :func:`document` -- the report: the parallel mode and world size, tokens
  per second per device and in total, MFU on torchtitan's basis beside the counted MFU, and
  each rank's memory (peaks, sharded parameter and optimizer-state bytes).

With one process, FSDP forms a one-rank process group for the trial (``sharding.process_group``,
entered by ``trials.measure_trial`` through :func:`process_group`).

Example::

    check_flags(config, training=True)              # UsageError (exit 2) on a bad combination
    work = build_sharded(spec, wrap=None, count_flops=True)
    state = sharded_state(work)                     # ShardedState of this rank
"""
from __future__ import annotations

import contextlib

import torch

from microbench.steps import activation_checkpointing, low_precision, sharding, workload
from microbench.measure import flops, token_flops
from microbench.models.archs import llama
from microbench.platform.errors import UsageError
from microbench.platform import units
from microbench.settings.config import ONE_PROCESS
from microbench.measure.results import ShardedState

FSDP = "fsdp"


# ---------------------------------------------------------------- rules

def check_flags(config, training: bool) -> None:
    """The combinations refused before anything runs (one line each, exit 2)."""
    if not training:
        for name, given, default in (("--parallel", config.parallel, "ddp"),
                                     ("--activation-checkpointing",
                                      config.activation_checkpointing, "none"),
                                     ("--optimizer", config.optimizer, "sgd")):
            if given != default:
                raise UsageError(f"{name} {given} applies to --mode training, not "
                                 f"{config.mode}")
    named(config.parallel).check_flags(config)


def check_model(spec) -> None:
    """What the model must be for these settings (its family, its blocks)."""
    config, model = spec.config, spec.model
    spec.parallel.check_model(spec)
    if config.activation_checkpointing != "none" and not model.reads_tokens:
        raise UsageError(f"--activation-checkpointing {config.activation_checkpointing} "
                         f"recomputes transformer blocks, and {model.name} is an image model "
                         f"with none: use it with a llama_* or hf: model")


# ---------------------------------------------------------------- the strategies

class Strategy:
    """How training's work is spread over the ranks, chosen once, in resolve
    (:func:`strategy_of`): one process (``single``), a replica per rank (``ddp``), or shards
    (``fsdp``). It owns its rules, its process group, how it builds the work and its rows."""

    name = ONE_PROCESS             # the result's parallel.mode
    replicates = False             # a DDP wrapper around the model of a training run
    shards = False                 # each rank holds a shard of the model

    def check_flags(self, config) -> None:
        """The rules the flags alone break (before resolve: ``--parallel`` names the class)."""
        if not config.reshard_after_forward:
            raise UsageError("--reshard-after-forward applies to --parallel fsdp (DDP keeps "
                             "whole parameters on every rank)")

    def check_model(self, spec) -> None:
        """What the resolved model must be for this strategy."""

    def process_group(self, spec):
        """The process group a trial runs in (a launcher's job has its own already)."""
        return contextlib.nullcontext()

    def build(self, spec, wrap, count_flops: bool) -> workload.Workload:
        return workload.build(spec, wrap, count_flops, training=True)

    def console_rows(self, summary) -> list[tuple[str, str]]:
        return []


class Replicated(Strategy):
    """DDP: the whole model on every rank, gradients all-reduced."""

    name = "ddp"
    replicates = True

    def console_rows(self, summary) -> list[tuple[str, str]]:
        return [("Parallel", f"DDP over {summary.world_size} ranks (whole model on each)")]


class Sharded(Strategy):
    """FSDP2: the llama_* presets built on the meta device, each rank materialising its shards."""

    name = FSDP
    shards = True

    def check_flags(self, config) -> None:
        if "fp16" in config.precision:
            raise UsageError(f"--parallel fsdp does not run --precision {config.precision}: FP16 "
                             f"gradients need loss scaling, which FSDP's sharded gradients do not "
                             f"get here; use --precision amp-bf16 (or fp32, tf32)")
        if config.precision == "bf16":
            raise UsageError("--parallel fsdp does not run --precision bf16: its FP32 master "
                             "weights are not sharded here; use --precision amp-bf16 (FSDP keeps "
                             "FP32 shards and computes with BF16 copies)")
        if config.opt_step > 1:
            raise UsageError("--opt-step applies to --parallel ddp: under fsdp every micro-batch "
                             "would reduce-scatter its gradients")
        ddp = [flag for flag, given in (("--ddp-static-graph", config.ddp_static_graph),
                                        ("--ddp-gradient-as-bucket-view",
                                         config.ddp_gradient_as_bucket_view),
                                        ("--ddp-bucket-cap-mb", config.ddp_bucket_cap_mb != 25.0))
               if given and flag.replace("--", "").replace("-", "_") in config.explicit]
        if ddp:
            raise UsageError(f"DistributedDataParallel's options ({', '.join(ddp)}) do not apply "
                             f"to --parallel fsdp: drop them or use --parallel ddp")
        if config.optimizer == "sgd" and config.optimizer_impl == "fused":
            raise UsageError("--optimizer-impl fused cannot step FSDP's sharded parameters with "
                             "SGD (PyTorch's fused SGD kernel has no DTensor support): use "
                             "--optimizer-impl foreach or --optimizer adamw")

    def check_model(self, spec) -> None:
        model = spec.model
        if model.llama_config is None:
            kind = "an image model with no transformer blocks" if not model.reads_tokens \
                else "an hf: model, which has no initialiser that writes shards"
            raise UsageError(f"--parallel fsdp shards the llama_* presets (built on the meta "
                             f"device and materialised shard by shard); {model.name} is {kind}: "
                             f"use --parallel ddp")

    @contextlib.contextmanager
    def process_group(self, spec):
        """A one-rank process group around a single-process FSDP trial (the launcher's group
        where there is one)."""
        if not spec.scenario.updates_weights:
            yield
            return
        with sharding.process_group(spec.device, spec.config.dist_timeout):
            yield

    def build(self, spec, wrap, count_flops: bool) -> workload.Workload:
        return build_sharded(spec, wrap, count_flops)

    def console_rows(self, summary) -> list[tuple[str, str]]:
        ranks = sorted(summary.ranks, key=lambda r: r.rank)
        sharded = [r.sharded for r in ranks if r.sharded is not None]
        return [("Parallel", _plan_text(sharded[0].plan)), ("FLOPs counted", META_COUNT)] \
            if sharded else []


SINGLE, DDP, SHARDED = Strategy(), Replicated(), Sharded()
# Every strategy by the name a result gives it: ONE_PROCESS and --parallel's PARALLEL
# (microbench.settings.config, where the command line and the schema read them).
STRATEGIES: dict[str, Strategy] = {strategy.name: strategy for strategy in (SINGLE, DDP, SHARDED)}


def named(flag: str) -> Strategy:
    """The strategy ``--parallel`` names (ddp: DDP where there are ranks, else one process)."""
    return STRATEGIES[flag]


def strategy_of(config, launch) -> Strategy:
    """The run's strategy: --parallel fsdp shards; otherwise DDP across a launcher's ranks, and
    a single process with no wrapper alone."""
    strategy = named(config.parallel)
    return SINGLE if strategy is DDP and not launch.distributed else strategy


# ---------------------------------------------------------------- the sharded work

def build_sharded(spec, wrap, count_flops: bool) -> workload.Workload:
    """FSDP2 training of a llama_* preset: no rank ever holds the whole model."""
    config, device, precision = spec.config, spec.device, spec.precision
    arch = spec.model.llama_config
    model = llama.build_on_meta(arch, spec.model.attention)
    model.train()
    inputs, target = spec.model.make_batch(spec.batch_size, device, None, config.seed)
    iteration_flops, fp8_flops = _count_on_meta(model, spec) if count_flops else (None, None)
    reduced = None
    if precision.fp8:           # before sharding, as torchtitan does; no weights to compare yet
        # FP8 all-gather only where there is something to send: torchtitan turns it on only
        # with more than one FSDP rank (dp_shard_enabled); with one, the weights' casts stay
        # inside the compiled blocks instead of running eagerly in FSDP's all-gather hook.
        reduced = low_precision.fp8_measured(model, config.fp8_recipe, device, None, config.seed,
                                             fp8_flops, iteration_flops,
                                             fsdp=torch.distributed.get_world_size() > 1)
    activation_checkpointing.apply(model, config.activation_checkpointing, spec.model.name)
    plan = sharding.shard(model, device, precision,
                          reshard_after_forward=config.reshard_after_forward,
                          name=spec.model.name)
    sharding.materialize(model, device, lambda m: llama.initialize(m, config.seed))
    runnable = wrap(model) if wrap is not None else model
    phases = workload.PhaseMarks()
    update = workload.make_update(runnable, precision, device, config.optimizer_impl,
                                  config.optimizer)
    step = workload.training_step(runnable, spec.model, inputs, target, precision, device,
                                  config.opt_step, phases, update=update)
    return workload.Workload(
        step=step, model=runnable, eager_model=model, inputs=inputs,
        parameters=llama.parameter_count(arch), flops_per_iteration=iteration_flops,
        phases=phases if config.phase_timing else None, target=target,
        optimizer=update.optimizer, sharding=plan, lowp=reduced)


# How the counted FLOPs of a sharded run differ from a plain run's (FlopCounterMode counts the
# kernels that run): on the meta device SDPA takes its math form, whose backward is four matmuls;
# a fused kernel's backward is counted as five (it recomputes the scores; the CPU's fused
# kernel gets the GPU kernels' formulas in flops.py). Model FLOPs exclude recomputation, as the
# math form does.
META_COUNT = ("counted on the meta device before sharding and checkpointing; attention in SDPA's "
              "math form (no recomputation of scores, unlike a fused GPU kernel's count)")


def _count_on_meta(model: torch.nn.Module, spec) -> tuple[int, int | None]:
    """One iteration's FLOPs, counted on the meta-device model before it is checkpointed or
    sharded: the whole model's operators, without memory (FlopCounterMode reads shapes only),
    so the count is the model's and not one rank's shard of it (see META_COUNT); and, under
    --precision fp8, the FLOPs of the layers FP8 converts, from their shapes and the rows they
    multiply in that same pass (None otherwise)."""
    meta = torch.device("meta")
    inputs, target = (tensor.to(meta) for tensor in spec.model.make_batch(
        spec.batch_size, torch.device("cpu"), None, spec.config.seed))
    selected = low_precision.fp8_layers(model) if spec.precision.fp8 else []
    with low_precision.linear_rows(model, selected) as rows:
        total = flops.count_iteration_flops(model, inputs, target, spec.model.loss,
                                            contextlib.nullcontext(), training=True)
    fp8 = low_precision.linear_flops(model, rows, training=True) if spec.precision.fp8 else None
    return total, fp8


def sharded_state(work) -> ShardedState | None:
    """This rank's shards of the parameters and optimizer state (after the optimizer's first
    step, which creates its state)."""
    if getattr(work, "sharding", None) is None:
        return None
    held = sharding.local_state_bytes(work.eager_model, work.optimizer)
    return ShardedState(plan=work.sharding.to_dict(), parameter_bytes=held.parameters,
                        optimizer_state_bytes=held.optimizer)


# ---------------------------------------------------------------- the report

def mode_of(summary) -> str:
    """What replicated or sharded the model: fsdp, ddp, or single (one process, no wrapper)."""
    return summary.spec.parallel.name


def token_utilization(summary) -> token_flops.TokenUtilization | None:
    """MFU on torchtitan's basis (llama_* presets only: it needs the architecture's shape),
    at the headline's tokens per second per device."""
    arch = summary.spec.model.llama_config
    if arch is None or summary.token_throughput is None:
        return None
    return token_flops.TokenUtilization(token_flops.llama_flops(arch, summary.spec.model.seq_len),
                                        summary.token_throughput / summary.world_size,
                                        summary.spec.peak)


def console_rows(summary) -> list[tuple[str, str]]:
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
    if titan is not None:
        rows.append(("MFU (torchtitan basis)", _titan_text(summary, titan)))
    if strategy.shards:
        rows += _memory_rows(ranks)
    return rows


# Ranks listed one by one in the console; a larger job gets its largest figures in one row
# (every rank's stay in the JSON's parallel.per_rank).
LISTED_RANKS = 8


def _memory_rows(ranks) -> list[tuple[str, str]]:
    if len(ranks) <= LISTED_RANKS:
        return [(f"Memory rank {record.rank}", _memory_text(record)) for record in ranks]
    largest = max(ranks, key=lambda r: (r.peak_reserved_mb or 0,
                                        r.sharded.total if r.sharded else 0))
    return [(f"Memory, rank {largest.rank}", _memory_text(largest) +
             f" (the largest of {len(ranks)} ranks; each rank's in the JSON)")]


def _plan_text(plan: dict) -> str:
    reshard = "resharded after forward but the last" if plan["reshard_after_forward"] else \
        "kept gathered to backward"
    ranks = plan["world_size"]
    return (f"FSDP2 over {ranks} rank{'s' if ranks > 1 else ''} ({plan['blocks']} blocks + "
            f"root, {reshard}; compute {plan['param_dtype'].upper()}, gradients reduced in "
            f"{plan['reduce_dtype'].upper()})")


def _titan_text(summary, titan: token_flops.TokenUtilization) -> str:
    mfu = (f"{titan.mfu:.1%} of {titan.peak.tflops:g} TFLOP/s" if titan.mfu is not None
           else f"unknown ({titan.peak.source})")
    counted = summary.utilization
    beside = ("; counted MFU unknown" if counted is None or counted.mfu is None
              else f"; counted MFU {counted.mfu:.1%}")
    return (f"{mfu}, {units.flops(titan.achieved_tflops * 1e12, per_second=True)} per device "
            f"at {units.flops(titan.flops.per_token)}/token{beside} (the MFU line uses the "
            f"counted FLOPs)")


def _memory_text(record) -> str:
    parts = []
    if record.peak_allocated_mb is not None:
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


def document(summary) -> dict:
    """The result's ``parallel`` block."""
    config = summary.spec.config
    fsdp = summary.spec.parallel.shards
    titan = token_utilization(summary)
    tokens = summary.token_throughput
    ranks = sorted(summary.ranks, key=lambda r: r.rank)
    first = next((r.sharded for r in ranks if r.sharded is not None), None)
    return {"parallel": {
        "mode": mode_of(summary), "world_size": summary.world_size,
        "reshard_after_forward": config.reshard_after_forward if fsdp else None,
        "activation_checkpointing": config.activation_checkpointing,
        "optimizer": config.optimizer, "optimizer_impl": config.optimizer_impl,
        "sharding": first.plan if first is not None else None,
        "tokens_per_s": tokens,
        "tokens_per_s_per_device": tokens / summary.world_size if tokens is not None else None,
        "torchtitan_flops": titan.to_dict() if titan is not None else None,
        "headline_mfu_basis": "counted (FlopCounterMode, microbench.measure.flops)",
        "counted_flops": META_COUNT if fsdp else "counted on the eager model before "
                                                 "checkpointing",
        "per_rank": [{"rank": r.rank, "peak_allocated_mb": r.peak_allocated_mb,
                      "peak_reserved_mb": r.peak_reserved_mb,
                      "parameter_bytes": r.sharded.parameter_bytes if r.sharded else None,
                      "optimizer_state_bytes":
                          r.sharded.optimizer_state_bytes if r.sharded else None}
                     for r in ranks]}}
