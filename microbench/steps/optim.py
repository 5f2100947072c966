"""Optimizers of training runs, chosen by name and implementation.

Each name stands for one recipe. Hyperparameters change an optimizer's cost only through the state
it keeps, so they are fixed here rather than offered as flags:

* ``sgd``   momentum 0.9, weight decay 1e-4, learning rate 0.01: torchvision's ImageNet reference
            recipe, the tool's default for every model family. Its state is one momentum buffer
            per parameter.
* ``adamw`` betas (0.9, 0.95), eps 1e-8, weight decay 0.1, learning rate 3e-4: torchtitan's
            AdamW (``default_adamw``) with the learning rate of its Llama 3 8B run, the
            optimizer LLM throughput is quoted with. Its state is two FP32 moments per parameter
            (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", arXiv:1711.05101).

Implementations: ``foreach`` (PyTorch's multi-tensor kernels, its own default on GPUs), ``fused``
(one kernel for all parameters; refused with one line where it cannot run) and ``auto`` (fused
where this build has it for these parameters, foreach otherwise). `implementation` says which
one an optimizer really uses, for the label of a run.

Example::

    optimizer = make_optimizer(model.parameters(), "adamw", "auto")
    print(implementation(optimizer))       # "fused" where the build has it, else "foreach"
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from microbench.platform.errors import UsageError

NAMES = ("sgd", "adamw")
IMPLEMENTATIONS = ("foreach", "fused", "auto")


@dataclass(frozen=True)
class Recipe:
    optimizer: Callable[..., torch.optim.Optimizer]     # its class
    hyperparameters: dict
    source: str                    # where the numbers come from, for a report


RECIPES = {
    "sgd": Recipe(torch.optim.SGD, dict(lr=0.01, momentum=0.9, weight_decay=1e-4),
                  "torchvision's ImageNet classification reference recipe"),
    "adamw": Recipe(torch.optim.AdamW, dict(lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                                            weight_decay=0.1),
                    "torchtitan's AdamW (default_adamw) at its Llama 3 8B learning rate"),
}


def make_optimizer(params: Iterable, name: str = "sgd",
                   impl: str = "foreach") -> torch.optim.Optimizer:
    """The `name` optimizer over `params` (tensors or parameter-group dicts) with `impl`.

    Raises UsageError, naming the flag to change, for an unknown name or implementation and for
    a fused kernel this build cannot run on these parameters (PyTorch itself would only find out
    at the first step, inside the timed run).
    """
    if name not in RECIPES:
        raise UsageError(f"--optimizer {name!r}: choose one of {', '.join(NAMES)}")
    if impl not in IMPLEMENTATIONS:
        raise UsageError(f"--optimizer-impl {impl!r}: choose one of {', '.join(IMPLEMENTATIONS)}")
    params = list(params)
    unsupported = _fused_unsupported(name, _tensors(params))
    if impl == "fused" and unsupported:
        raise UsageError(f"--optimizer-impl fused cannot run here ({unsupported}); use "
                         f"--optimizer-impl foreach")
    fused = impl == "fused" or (impl == "auto" and unsupported is None)
    recipe = RECIPES[name]
    try:
        return recipe.optimizer(params, **recipe.hyperparameters,
                                **({"fused": True} if fused else {"foreach": True}))
    except (RuntimeError, ValueError) as error:
        raise UsageError(f"--optimizer-impl {impl} cannot run here ({error}); use "
                         f"--optimizer-impl foreach") from None


def implementation(optimizer: torch.optim.Optimizer) -> str:
    """'fused' or 'foreach': what this optimizer really runs."""
    return "fused" if optimizer.defaults.get("fused") else "foreach"


def _tensors(params: list) -> list[torch.Tensor]:
    return [p for entry in params
            for p in (list(entry["params"]) if isinstance(entry, dict) else [entry])]


def _fused_unsupported(name: str, tensors: list[torch.Tensor]) -> str | None:
    """Why the fused kernel cannot step these parameters, or None if it can."""
    devices = _fused_device_types()
    for tensor in tensors:
        if tensor.device.type not in devices or not tensor.is_floating_point():
            return (f"this PyTorch has fused optimizer kernels for floating-point tensors on "
                    f"{', '.join(sorted(devices))}, not {tensor.dtype} on {tensor.device.type}")
    if name == "sgd" and _any_dtensor(tensors):
        # PyTorch registers no DTensor sharding strategy for the fused SGD kernel
        # (aten._fused_sgd_): FSDP2's parameters construct it, and its first step raises
        # NotImplementedError. Fused AdamW steps them. tests/steps/test_optim.py checks both against
        # the installed PyTorch, so a release that adds the strategy shows up there.
        return ("PyTorch's fused SGD kernel has no DTensor support, so it cannot step FSDP's "
                "sharded parameters")
    return None


def _fused_device_types() -> set[str]:
    """Device types with fused optimizer kernels in this build: the list PyTorch's optimizers
    check at their first step (a private helper, so an older or newer PyTorch without it gets
    the two that every build since 2.4 has)."""
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
    except ImportError:
        return {"cuda", "cpu"}
    return set(_get_fused_kernels_supported_devices())


def _any_dtensor(tensors: list[torch.Tensor]) -> bool:
    if not torch.distributed.is_available():
        return False
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:                        # PyTorch < 2.4 has no public DTensor, nor FSDP2
        return False
    return any(isinstance(t, DTensor) for t in tensors)
