"""One training or inference step, built once; nothing is allocated for it per step.

Training: forward, cross-entropy loss, backward, and an SGD step (momentum 0.9, weight decay
1e-4, as torchvision's ImageNet reference recipe) every ``opt_step`` iterations. Inference: forward
under ``torch.inference_mode`` with the model in ``eval()``. The step returns the loss tensor
without reading it, so the timed loop never waits for the device.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

import fp16util
from . import flops
from .models import ModelSpec
from .precision import Precision

LEARNING_RATE = 0.01
MOMENTUM = 0.9
WEIGHT_DECAY = 1e-4


@dataclass
class Workload:
    step: Callable[[], torch.Tensor | None]
    model: nn.Module                 # what the step runs (compiled, DDP-wrapped)
    eager_model: nn.Module           # the plain module underneath
    inputs: torch.Tensor
    target: torch.Tensor
    parameters: int
    flops_per_iteration: int | None


def make_sgd(params) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=LEARNING_RATE, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)


class _PlainUpdate:
    """FP32, TF32 and BF16 autocast: gradients need no scaling."""

    def __init__(self, model: nn.Module):
        self.optimizer = make_sgd(model.parameters())

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> None:
        self.optimizer.step()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)


class _ScaledUpdate(_PlainUpdate):
    """FP16 autocast: torch.amp's dynamic loss scaling. GradScaler reads one flag from the device
    per step to skip overflowing steps; that synchronisation is part of the AMP workload."""

    def __init__(self, model: nn.Module, device: torch.device):
        super().__init__(model)
        self.scaler = torch.amp.GradScaler(device.type)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def step(self) -> None:
        self.scaler.step(self.optimizer)
        self.scaler.update()


def make_update(model: nn.Module, precision: Precision, device: torch.device):
    if precision.master_weights:
        return fp16util.MasterWeightOptimizer(model, make_sgd)
    if precision.grad_scaling:
        return _ScaledUpdate(model, device)
    return _PlainUpdate(model)


def training_step(model: nn.Module, spec: ModelSpec, inputs: torch.Tensor, target: torch.Tensor,
                  precision: Precision, device: torch.device, opt_step: int):
    update = make_update(model, precision, device)
    autocast = precision.autocast(device)
    iteration = itertools.count(1)

    def step() -> torch.Tensor:
        with autocast:
            loss = nn.functional.cross_entropy(spec.logits(model(inputs)), target)
        # Accumulated gradients average over the micro-batches, as in a real run.
        update.backward(loss / opt_step if opt_step > 1 else loss)
        if next(iteration) % opt_step == 0:
            update.step()
            update.zero_grad()
        return loss.detach()

    return step


def inference_step(model: nn.Module, inputs: torch.Tensor, precision: Precision,
                   device: torch.device):
    autocast = precision.autocast(device)

    def step() -> None:
        with torch.inference_mode(), autocast:
            model(inputs)

    return step


def memory_format(spec: ModelSpec) -> torch.memory_format:
    return torch.channels_last_3d if spec.family == "video" else torch.channels_last


def prepare_model(spec: ModelSpec, image_size: int, precision: Precision, device: torch.device,
                  nhwc: bool, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    model = spec.build(image_size).to(device)
    if precision.model_dtype == torch.float16:
        fp16util.network_to_half(model)
    if nhwc:
        model = model.to(memory_format=memory_format(spec))
    return model


def build(spec: ModelSpec, image_size: int, batch_size: int, mode: str, precision: Precision,
          device: torch.device, nhwc: bool = False, opt_step: int = 1, seed: int = 0,
          wrap: Callable[[nn.Module], nn.Module] | None = None,
          count_flops: bool = True) -> Workload:
    """The model, its inputs and the step function for one run.

    ``wrap`` is applied last to the ready model (``torch.compile``, a DDP wrapper). FLOPs are
    counted before that, on the eager model, so no compiled graph or DDP hook sees the count.
    """
    model = prepare_model(spec, image_size, precision, device, nhwc, seed)
    parameters = sum(p.numel() for p in model.parameters())
    inputs, target = spec.make_batch(batch_size, image_size, device, precision.model_dtype, seed)
    if nhwc:
        inputs = inputs.contiguous(memory_format=memory_format(spec))
    model.train(mode == "training")
    iteration_flops = None
    if count_flops:
        iteration_flops = flops.count_iteration_flops(model, inputs, target, spec.logits,
                                                      precision.autocast(device),
                                                      training=mode == "training")
    runnable = wrap(model) if wrap is not None else model
    if mode == "training":
        step = training_step(runnable, spec, inputs, target, precision, device, opt_step)
    else:
        step = inference_step(runnable, inputs, precision, device)
    return Workload(step=step, model=runnable, eager_model=model, inputs=inputs, target=target,
                    parameters=parameters, flops_per_iteration=iteration_flops)
