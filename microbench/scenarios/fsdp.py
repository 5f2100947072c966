"""``--parallel fsdp``: FSDP2 sharding of the llama_* presets; everything this tool knows of
FSDP is here (issue 24; one module a strategy since issue 54).

* its rules: those of the flags alone (FP16, BF16 weights, gradient accumulation and fused SGD
  refused) in its flag side, ``settings/strategy_flags.ShardedFlags`` (below torch); it
  shards the llama_* presets only (built on the meta device, materialised shard by shard: the
  image models have no transformer blocks to shard, and an hf: model has no initialiser that
  writes shards);
* its options: fully_shard's keywords (``--reshard-after-forward``, in its flag side);
* :func:`build_sharded` -- the work: the model built on meta, FLOPs counted there, blocks
  checkpointed, ``fully_shard`` per block and at the root with the precision row's
  ``MixedPrecisionPolicy``, then each rank allocates and initialises its own shards only; the
  step is training's own (:func:`microbench.steps.workload.training_step`);
* with one process, a one-rank process group for the trial (``sharding.process_group``,
  entered by ``trials.measure_trial`` through ``process_group``);
* its console row (the sharding plan) and how its FLOPs were counted (:data:`META_COUNT`).

Example::

    work = Sharded().build(spec, wrap=None, count_flops=True)
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from microbench.measure import flops
from microbench.models.archs import llama
from microbench.platform.errors import UsageError
from microbench.models.language import LanguageModelSpec
from microbench.scenarios.strategy import Strategy, Wrap
from microbench.scenarios.views import RunView, SummaryView
from microbench.settings.config import BenchConfig
from microbench.settings.mesh import Mesh
from microbench.settings.strategy_flags import ShardedFlags
from microbench.steps import activation_checkpointing, low_precision, sharding, workload

# How the counted FLOPs of a sharded run differ from a plain run's (FlopCounterMode counts the
# kernels that run): on the meta device SDPA takes its math form, whose backward is four matmuls;
# a fused kernel's backward is counted as five (it recomputes the scores; the CPU's fused
# kernel gets the GPU kernels' formulas in flops.py). Model FLOPs exclude recomputation, as the
# math form does.
META_COUNT = ("counted on the meta device before sharding and checkpointing; attention in SDPA's "
              "math form (no recomputation of scores, unlike a fused GPU kernel's count)")


class Sharded(ShardedFlags, Strategy):
    """FSDP2: the llama_* presets built on the meta device, each rank materialising its shards."""

    shards = True
    counted_flops = META_COUNT

    def adjust_preset(self, config: BenchConfig, choices: dict) -> dict:
        """PyTorch has no fused SGD kernel for sharded (DTensor) parameters, and CUDA graphs
        are not captured around FSDP's collectives here: compiled without a graph mode
        instead."""
        kept = dict(choices)
        if config.optimizer == "sgd":
            kept.pop("optimizer_impl", None)
        if kept.get("compile_options", {}).get("mode") in ("reduce-overhead", "max-autotune"):
            kept["compile_options"] = {}
        return kept

    def check_model(self, spec: RunView) -> None:
        model = spec.model
        if model.llama_config is None:
            kind = "an image model with no transformer blocks" if not model.reads_tokens \
                else "an hf: model, which has no initialiser that writes shards"
            raise UsageError(f"--parallel {self.name} shards the llama_* presets (built on the "
                             f"meta device and materialised shard by shard); {model.name} is "
                             f"{kind}: use --parallel ddp")

    @contextlib.contextmanager
    def process_group(self, spec: RunView) -> Iterator[None]:
        """A one-rank process group around a single-process FSDP trial (the launcher's group
        where there is one)."""
        if not spec.scenario.updates_weights:
            yield
            return
        with sharding.process_group(spec.device, spec.config.dist_timeout):
            yield

    def build(self, spec: RunView, wrap: Wrap | None, count_flops: bool) -> workload.Workload:
        return build_sharded(spec, wrap, count_flops, self.options(spec.config),
                             self.mesh(spec.config, spec.launch), self.name)

    def console_rows(self, summary: SummaryView) -> list[tuple[str, str]]:
        ranks = sorted(summary.ranks, key=lambda r: r.rank)
        sharded = [r.sharded for r in ranks if r.sharded is not None]
        return [("Parallel", _plan_text(sharded[0].plan)), ("FLOPs counted", META_COUNT)] \
            if sharded else []


# ---------------------------------------------------------------- the sharded work

def build_sharded(spec: RunView, wrap: Wrap | None, count_flops: bool, options: dict,
                  mesh: Mesh | None = None, strategy: str = "fsdp") -> workload.Workload:
    """FSDP2 training of a llama_* preset: no rank ever holds the whole model (``options``:
    fully_shard's keywords for each block; ``mesh``: the strategy's device mesh, one
    dimension of every rank by default, or HSDP's replicas x shards)."""
    config, device, precision = spec.config, spec.device, spec.precision
    language = spec.model
    arch = language.llama_config
    if arch is None or not isinstance(language, LanguageModelSpec):     # check_model's rule
        raise UsageError(f"--parallel {strategy} shards the llama_* presets; {language.name} is "
                         f"not one: use --parallel ddp")
    model = llama.build_on_meta(arch, language.attention)
    model.train()
    inputs, target = spec.model.make_batch(spec.batch_size, device, None, config.seed)
    iteration_flops, fp8_flops = _count_on_meta(model, spec) if count_flops else (None, None)
    shape = mesh.shape if mesh is not None else (torch.distributed.get_world_size(),)
    reduced = None
    if precision.fp8:           # before sharding, as torchtitan does; no weights to compare yet
        # FP8 all-gather only where there is something to send: torchtitan turns it on only
        # with more than one FSDP rank (dp_shard_enabled: the mesh's shard dimension; HSDP's
        # replicas all-reduce gradients and gather nothing); with one, the weights' casts stay
        # inside the compiled blocks instead of running eagerly in FSDP's all-gather hook.
        reduced = low_precision.fp8_measured(model, config.fp8_recipe, device, None, config.seed,
                                             fp8_flops, iteration_flops, fsdp=shape[-1] > 1)
    activation_checkpointing.apply(model, config.activation_checkpointing, spec.model.name)
    plan = sharding.shard(model, device, precision, name=spec.model.name, mesh=shape,
                          parallel=strategy, **options)
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


def _count_on_meta(model: torch.nn.Module, spec: RunView) -> tuple[int, int | None]:
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


def _plan_text(plan: dict) -> str:
    reshard = "resharded after forward but the last" if plan["reshard_after_forward"] else \
        "kept gathered to backward"
    ranks = plan["world_size"]
    mesh = plan.get("mesh_shape") or [ranks]
    over = f"{ranks} rank{'s' if ranks > 1 else ''}"
    if len(mesh) > 1:
        over += f", mesh {sharding.mesh_text(mesh)}"
    return (f"FSDP2 over {over} ({plan['blocks']} blocks + "
            f"root, {reshard}; compute {plan['param_dtype'].upper()}, gradients reduced in "
            f"{plan['reduce_dtype'].upper()})")
