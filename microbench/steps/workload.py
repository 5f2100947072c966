"""One training or inference step, built once; nothing is allocated for it per step.

Training: forward, the model family's loss (cross-entropy over classes, or next-token
cross-entropy for language models), backward, and an optimizer step (``--optimizer``: SGD as
torchvision's ImageNet reference recipe by default, or AdamW; :mod:`microbench.steps.optim`) every
``opt_step`` iterations, with two phase marks between them; transformer blocks checkpointed as
``--activation-checkpointing`` says, after the FLOPs are counted. Inference: forward under ``torch.inference_mode`` with the model in ``eval()``.
The kind of run (:mod:`microbench.scenarios`) says which step to build. The step returns the loss
tensor without reading it, so the timed loop never waits for the device.
"""
from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

import torch
from torch import nn

import fp16util
from microbench.models.archs import llama
from microbench.steps import (activation_checkpointing, low_precision, optim, quant_choice,
                              quant_layout, sharding)
from microbench.measure import flops
from microbench.settings.precision import Precision

if TYPE_CHECKING:
    from microbench.measure.timing import Recorder
    from microbench.models.archs.llama import LlamaConfig
    from microbench.models.family import ModelFamily
    from microbench.steps.sharding import ShardPlan
    from microbench.settings.config import BenchConfig


class StepSettings(Protocol):
    """What a step builder reads of the resolved spec. A ``RunSpec`` is one; it is named here,
    below the resolver, so that building a step never imports what chose the kind of run.
    Read-only: a spec is frozen."""

    @property
    def config(self) -> BenchConfig: ...

    @property
    def model(self) -> ModelFamily: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def precision(self) -> Precision: ...

    @property
    def batch_size(self) -> int: ...

    @property
    def quant(self) -> quant_layout.QuantPlan | None: ...   # --quantize resolved here


@dataclass
class Workload:
    step: Callable[[], torch.Tensor | None]
    model: nn.Module                 # what the step runs (compiled, DDP-wrapped)
    eager_model: nn.Module           # the plain module underneath
    inputs: torch.Tensor
    parameters: int
    flops_per_iteration: int | None
    phases: "PhaseMarks | None" = None          # training: forward / backward / optimizer marks
    target: torch.Tensor | None = None          # training's labels (the input pipeline fills them)
    optimizer: torch.optim.Optimizer | None = None   # training: what steps (its state measured)
    sharding: ShardPlan | None = None           # --parallel fsdp: how it is sharded
    lowp: "low_precision.LowPrecision | None" = None      # --precision fp8, --quantize: what changed


def make_sgd(params: Iterable[torch.Tensor], impl: str = "foreach") -> torch.optim.Optimizer:
    """SGD as torchvision's ImageNet recipe, with the multi-tensor or the fused implementation
    (:mod:`microbench.steps.optim` holds the recipes)."""
    return optim.make_optimizer(params, "sgd", impl)


class _PlainUpdate:
    """FP32, TF32 and BF16 autocast: gradients need no scaling."""

    def __init__(self, model: nn.Module, impl: str, name: str = "sgd"):
        self.optimizer = optim.make_optimizer(model.parameters(), name, impl)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> None:
        self.optimizer.step()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)


class _ScaledUpdate(_PlainUpdate):
    """FP16 autocast: torch.amp's dynamic loss scaling. GradScaler reads one flag from the device
    per step to skip overflowing steps; that synchronisation is part of the AMP workload."""

    def __init__(self, model: nn.Module, impl: str, device: torch.device, name: str = "sgd"):
        super().__init__(model, impl, name)
        self.scaler = torch.amp.GradScaler(device.type)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def step(self) -> None:
        self.scaler.step(self.optimizer)
        self.scaler.update()


class Update(Protocol):
    """A precision's update rule around its optimizer: ``_PlainUpdate``, ``_ScaledUpdate``,
    ``fp16util.MasterWeightOptimizer``."""

    optimizer: torch.optim.Optimizer

    def backward(self, loss: torch.Tensor) -> None: ...

    def step(self) -> None: ...

    def zero_grad(self) -> None: ...


def make_update(model: nn.Module, precision: Precision, device: torch.device,
                impl: str = "foreach", name: str = "sgd") -> Update:
    """The optimizer ``name`` (microbench.steps.optim's recipes) with the precision's update rule."""
    if precision.master_weights:
        # BF16 gradients have FP32's exponent range: no loss scale (1.0); FP16's need one.
        scale = 1.0 if precision.model_dtype == torch.bfloat16 else fp16util.DEFAULT_LOSS_SCALE
        return fp16util.MasterWeightOptimizer(
            model, lambda params: optim.make_optimizer(params, name, impl), loss_scale=scale)
    if precision.grad_scaling:
        return _ScaledUpdate(model, impl, device, name)
    return _PlainUpdate(model, impl, name)


class PhaseMarks:
    """Where a training step marks the end of its forward (and loss) and of its backward pass.

    The timed loop points ``mark`` at its recorder, so each iteration is split into forward,
    backward and optimizer by two more device events, with no host synchronisation; outside the
    timed loop (warm-up, profiler passes) it does nothing.
    """

    NAMES = ("forward", "backward", "optimizer")

    def __init__(self) -> None:
        self.mark: Callable[[], None] = _nothing

    def record_on(self, recorder: Recorder) -> None:
        self.mark = recorder.mark

    def stop(self) -> None:
        self.mark = _nothing


def _nothing() -> None:
    pass


def training_step(model: nn.Module, spec: ModelFamily, inputs: torch.Tensor,
                  target: torch.Tensor,
                  precision: Precision, device: torch.device, opt_step: int,
                  phases: PhaseMarks, optimizer_impl: str = "foreach",
                  update: Update | None = None) -> Callable[[], torch.Tensor]:
    """``update`` (make_update's) is made here from ``optimizer_impl`` with SGD if not given.

    After each optimizer step the step runs the precision recipe's post-step hooks
    (:func:`post_step_hooks`): every strategy builds its step here, so a recipe registers its
    hook once and it runs under one process, DDP and FSDP alike, where it applies."""
    update = update or make_update(model, precision, device, optimizer_impl)
    after_step = post_step_hooks(model, precision)
    autocast = precision.autocast(device)
    iteration = itertools.count(1)
    # Under DDP, accumulation skips the gradient all-reduce of every micro-batch but the last
    # (DistributedDataParallel.no_sync), as real training does; one all-reduce per step.
    no_sync = getattr(model, "no_sync", None) if opt_step > 1 else None

    def step() -> torch.Tensor:
        stepping = next(iteration) % opt_step == 0
        with contextlib.nullcontext() if stepping or no_sync is None else no_sync():
            with autocast:
                loss = spec.loss(model(inputs), target)
            phases.mark()
            # Accumulated gradients average over the micro-batches, as in a real run.
            update.backward(loss / opt_step if opt_step > 1 else loss)
            phases.mark()
        if stepping:
            update.step()
            for hook in after_step:
                hook()
            update.zero_grad()
        return loss.detach()

    return step


def post_step_hooks(model: nn.Module, precision: Precision) -> tuple[Callable[[], None], ...]:
    """What must run after each optimizer step of ``model`` (the built, sharded or wrapped
    model the step runs), in order: each precision recipe's hook from the model it converted
    (FP8 under FSDP2: the weights' scales for the next all-gathers,
    :func:`microbench.steps.low_precision.post_step_hooks`). A new recipe's hook is added
    here and reaches every strategy (docs/architecture.md, "where to add")."""
    return low_precision.post_step_hooks(model, precision.fp8)


def inference_step(model: nn.Module, inputs: torch.Tensor, precision: Precision,
                   device: torch.device):
    autocast = precision.autocast(device)

    def step() -> None:
        with torch.inference_mode(), autocast:
            model(inputs)

    return step


def prepare_model(spec: StepSettings) -> nn.Module:
    """The model on its device, in the run's dtype, with its initial values."""
    torch.manual_seed(spec.config.seed)
    if spec.model.llama_config is not None:
        return _llama_on_device(spec, spec.model.llama_config)
    model = spec.model.build().to(spec.device)
    _to_model_dtype(model, spec)
    layout = spec.model.channels_last       # None for token inputs, which --nhwc refuses
    if spec.config.nhwc and layout is not None:
        model = model.to(memory_format=layout)
    return model


def _llama_on_device(spec: StepSettings, config: LlamaConfig) -> nn.Module:
    """A llama preset built where it runs: shapes on the meta device, converted to the run's
    dtype there, then memory on the device and values drawn one parameter at a time
    (``llama.initialize``, as FSDP materialises its shards). Built whole in FP32 on the host
    and then moved, llama3_8b took two minutes and 32 GB of host memory before its first step
    (4x H200 host, 2026-11-28); here the largest temporary is one parameter."""
    model = llama.build_on_meta(config, spec.model.attention)
    _to_model_dtype(model, spec)
    sharding.materialize(model, spec.device, lambda built: llama.initialize(built,
                                                                          spec.config.seed))
    return model


def _to_model_dtype(model: nn.Module, spec: StepSettings) -> None:
    if spec.precision.model_dtype in (torch.float16, torch.bfloat16):
        fp16util.network_to_half(model, spec.precision.model_dtype)


def build(spec: StepSettings, wrap: Callable[[nn.Module], nn.Module] | None = None,
          count_flops: bool = True, training: bool = True) -> Workload:
    """The model, its inputs and the training (or inference) step for one run.

    ``wrap`` is applied last to the ready model (``torch.compile``, a DDP wrapper). FLOPs are
    counted before that, on the eager model, so no compiled graph or DDP hook sees the count.
    """
    model, device, precision = prepare_model(spec), spec.device, spec.precision
    parameters = sum(p.numel() for p in model.parameters())
    inputs, target = spec.model.make_batch(spec.batch_size, device, precision.model_dtype,
                                           spec.config.seed)
    layout = spec.model.channels_last
    if spec.config.nhwc and layout is not None:
        inputs = inputs.contiguous(memory_format=layout)
    model.train(training)
    iteration_flops = fp8_flops = None
    if count_flops:         # before FP8 (torch counts no FLOPs for its FP8 matmul, _scaled_mm)
        selected = low_precision.fp8_layers(model) if precision.fp8 else []
        with low_precision.linear_rows(model, selected) as rows:
            iteration_flops = flops.count_iteration_flops(
                model, inputs, target, spec.model.loss, precision.autocast(device),
                training=training)
        fp8_flops = low_precision.linear_flops(model, rows, training) if precision.fp8 else None
    reduced = _measured_low_precision(spec, model, inputs, target, fp8_flops, iteration_flops)
    if training:        # after counting: recomputation is not the model's work
        activation_checkpointing.apply(model, spec.config.activation_checkpointing,
                                       spec.model.name)
    runnable = wrap(model) if wrap is not None else model
    phases, update = PhaseMarks(), None
    if training:
        update = make_update(runnable, precision, device, spec.config.optimizer_impl,
                             spec.config.optimizer)
        step = training_step(runnable, spec.model, inputs, target, precision, device,
                             spec.config.opt_step, phases, update=update)
    else:
        step = inference_step(runnable, inputs, precision, device)
    return Workload(step=step, model=runnable, eager_model=model, inputs=inputs,
                    parameters=parameters, optimizer=update.optimizer if update else None,
                    flops_per_iteration=iteration_flops,
                    phases=phases if training and spec.config.phase_timing else None,
                    target=target if training else None, lowp=reduced)


def _measured_low_precision(spec: StepSettings, model: nn.Module, inputs: torch.Tensor,
                            target: torch.Tensor, fp8_flops: int | None, iteration_flops: int | None
                           ) -> "low_precision.LowPrecision | None":
    """``--precision fp8`` or ``--quantize`` applied to the ready model, with how far each moved
    the numbers (:mod:`microbench.steps.low_precision`); None for the other precisions."""
    config, device, precision = spec.config, spec.device, spec.precision
    if precision.fp8:
        def make_step():
            update = make_update(model, precision, device, config.optimizer_impl,
                                 config.optimizer)
            return training_step(model, spec.model, inputs, target, precision, device, 1,
                                 PhaseMarks(), update=update)
        return low_precision.fp8_measured(model, config.fp8_recipe, device, make_step, config.seed,
                                 fp8_flops, iteration_flops)
    if spec.quant is not None:          # one phase: the forward, rows counted on the batch
        with precision.autocast(device):
            rows = quant_choice.count_rows(model, lambda: model(inputs))
        options = config.compile_options if config.compile else None
        report = low_precision.quantize_measured(
            model, spec.quant, (quant_choice.Phase("forward", rows),),
            low_precision.probe_rows(inputs), device, precision.label,
            compile_options=lambda phase: quant_layout.product_compile_options(options, phase))
        return low_precision.with_compile_record(report, config, device, {"forward": {}})
    return None
