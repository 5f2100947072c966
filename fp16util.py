"""FP16 training helpers: an FP16 network with FP32 normalisation layers, and FP32 master weights.

``--fp16 1`` runs the whole network in half precision. Normalisation layers keep FP32 parameters
and statistics (their half-precision variance loses too much). Batch norm takes FP16 activations
with FP32 parameters natively (cuDNN, MIOpen and the CPU kernels all accept the mix); group, layer
and instance norm do not on every device (CUDA's group_norm refuses it), so their input is cast
to FP32 and their output back to FP16 around the layer. The optimizer steps on FP32 master
copies of the parameters, and the updated values are copied back into the FP16 model, as in
Micikevicius et al., "Mixed Precision Training" (ICLR 2018), section 3.1. The older tool's
version stepped on detached copies that never received gradients; :class:`MasterWeightOptimizer`
copies gradients in and weights out on every step.

Example::

    model = network_to_half(model)
    updater = MasterWeightOptimizer(model, lambda params: torch.optim.SGD(params, lr=0.01))
    updater.backward(loss)
    updater.step()
    updater.zero_grad()
"""
from __future__ import annotations

from typing import Callable, Iterable

import torch
from torch import nn

NORM_LAYERS = (nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.LayerNorm,
               nn.modules.instancenorm._InstanceNorm)
MIXED_DTYPE_NATIVE = (nn.modules.batchnorm._BatchNorm,)

# A static loss scale keeps small FP16 gradients from flushing to zero without the per-step
# host synchronisation that dynamic scaling needs to skip overflowing steps. 128 is the static
# scale NVIDIA's APEX examples used for ImageNet training.
DEFAULT_LOSS_SCALE = 128.0


def _input_to_fp32(module: nn.Module, args: tuple) -> tuple:
    return (args[0].float(),) + tuple(args[1:])


def _output_to(dtype: torch.dtype):
    def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        return output.to(dtype)
    return hook


def network_to_half(model: nn.Module, dtype: torch.dtype = torch.float16) -> nn.Module:
    """Convert ``model`` to FP16 (or ``dtype``, BF16) in place, parameters and buffers,
    keeping torch's normalisation layers in FP32."""
    model.to(dtype)
    for module in model.modules():
        if isinstance(module, NORM_LAYERS):
            module.float()
            if not isinstance(module, MIXED_DTYPE_NATIVE):
                module.register_forward_pre_hook(_input_to_fp32)
                module.register_forward_hook(_output_to(dtype))
    return model


def get_param_copy(model: nn.Module) -> list[torch.Tensor]:
    """FP32 master copies of the trainable parameters (the older tool's name, kept)."""
    return [p.detach().clone().float().requires_grad_(True)
            for p in model.parameters() if p.requires_grad]


def _copy_all(destinations: list[torch.Tensor], sources: list[torch.Tensor]) -> None:
    """Copy each source into its destination with one fused kernel per (source dtype, device):
    torch's foreach kernels take their fast path only when every tensor of a list has one dtype,
    and a model in FP16 keeps its norm layers in FP32, so a single mixed list would fall back to
    one copy per parameter."""
    groups: dict[tuple[torch.dtype, torch.dtype, torch.device],
                 tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
    for destination, source in zip(destinations, sources):
        key = (source.dtype, destination.dtype, source.device)
        groups.setdefault(key, ([], []))
        groups[key][0].append(destination)
        groups[key][1].append(source)
    for group_destinations, group_sources in groups.values():
        if hasattr(torch, "_foreach_copy_"):
            torch._foreach_copy_(group_destinations, group_sources)
        else:   # older PyTorch: one copy per tensor
            for destination, source in zip(group_destinations, group_sources):
                destination.copy_(source)


class MasterWeightOptimizer:
    """Runs an FP32 optimizer on master weights for an FP16 model."""

    def __init__(self, model: nn.Module,
                 make_optimizer: Callable[[Iterable[torch.Tensor]], torch.optim.Optimizer],
                 loss_scale: float = DEFAULT_LOSS_SCALE):
        self.model_params = [p for p in model.parameters() if p.requires_grad]
        self.master_params = get_param_copy(model)
        # Gradient buffers allocated once and refilled every step.
        self.master_grads = [torch.zeros_like(master) for master in self.master_params]
        self.optimizer = make_optimizer(self.master_params)
        self.loss_scale = loss_scale

    def backward(self, loss: torch.Tensor) -> None:
        (loss.float() * self.loss_scale).backward()

    @torch.no_grad()
    def step(self) -> None:
        masters: list[torch.Tensor] = []
        master_grads: list[torch.Tensor] = []           # each the master's .grad, its buffer
        params: list[torch.Tensor] = []
        grads: list[torch.Tensor] = []
        for master, buffer, param in zip(self.master_params, self.master_grads,
                                         self.model_params):
            # A parameter that got no gradient this step is not stepped (SGD would still apply
            # momentum and weight decay to it): the optimizer skips a None gradient.
            master.grad = buffer if param.grad is not None else None
            if param.grad is not None:
                masters.append(master)
                master_grads.append(buffer)
                params.append(param)
                grads.append(param.grad)
        if not masters:
            return
        _copy_all(master_grads, grads)
        torch._foreach_mul_(master_grads, 1.0 / self.loss_scale)
        self.optimizer.step()
        _copy_all(params, masters)

    def zero_grad(self) -> None:
        for param in self.model_params:
            param.grad = None
