"""int8 weight-only linear layers as plain tensors of the layer: the ``unwrapped`` layout of
``--quantize int8wo``.

torchao 0.18's ``Int8Tensor`` (``Int8WeightOnlyConfig``, per row) already writes the product in
gpt-fast's form, ``mm(x, int8_weight.t().to(bf16)) * scale`` (its ``F.linear`` for weight-only,
``torchao/quantization/quantize_/workflows/int8/int8_tensor.py``): the ATen graphs torch.compile
builds from the two are the same but for a cast of the FP32 scale to BF16 (checked on the CPU,
issue 53). What differs is the tensor subclass around the weight: on every call of a compiled
step AOTAutograd flattens each subclass weight into its inner tensors in Python, and Dynamo
guards them, one Python call per weight per step, 129 on an 8B llama; gpt-fast's weights are
plain tensors of its own module. torchao 0.18 offers no configuration that quantizes into
plain tensors, so this module holds torchao's own quantized values (the int8 data and the
per-row scales ``quantize_`` computed) as two plain parameters and multiplies them as gpt-fast
does: the same numbers, no subclass. Which of the two is faster on a GPU is
benchmarks/quant_decode.py's to say (the tool against a loop on torchao's subclass and a loop
in gpt-fast's form, one job).

Example::

    quantize_(model, Int8WeightOnlyConfig(granularity=PerRow()))
    unwrap(model)          # every Int8Tensor per-row weight-only linear layer -> Int8WeightOnlyLinear
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class Int8WeightOnlyLinear(nn.Linear):
    """A linear layer over an int8 weight (out, in) and a scale per output row, both plain
    parameters (counted as stored by ``weight_bytes``; never trained): ``x @ W.T`` with W cast
    to the activations' dtype inside the product (inductor fuses the cast into the product's
    loads), then the scale, as gpt-fast's ``WeightOnlyInt8Linear`` does."""

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype,
                 bias: torch.Tensor | None = None) -> None:
        out_features, in_features = qdata.shape
        super().__init__(in_features, out_features, bias=False, device="meta")
        self.weight = nn.Parameter(qdata, requires_grad=False)
        # torchao casts its FP32 scale to the activations' dtype on every call; cast once here.
        self.scale = nn.Parameter(scale.reshape(out_features).to(dtype), requires_grad=False)
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x, self.weight.to(x.dtype)) * self.scale
        return out if self.bias is None else out + self.bias


def convertible(weight: torch.Tensor) -> bool:
    """A torchao Int8Tensor quantized weight-only with a scale per row (or per tensor)."""
    if type(weight).__name__ != "Int8Tensor":
        return False
    if getattr(weight, "act_quant_kwargs", None) is not None:       # dynamic activations
        return False
    if getattr(weight, "act_pre_scale", None) is not None:          # AWQ/SmoothQuant scaling
        return False
    block = list(getattr(weight, "block_size", []) or [])
    return bool(block) and block[-1] == weight.shape[-1]            # not per group


def unwrap(model: nn.Module) -> int:
    """Replace, in place, every linear layer whose weight :func:`convertible` admits with an
    :class:`Int8WeightOnlyLinear` over the same int8 data and scales; how many it replaced."""
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and not isinstance(child, Int8WeightOnlyLinear) \
                    and convertible(child.weight):
                weight = child.weight
                scale = weight.scale.expand(weight.shape[0], 1) if weight.scale.numel() == 1 \
                    else weight.scale
                setattr(parent, name, Int8WeightOnlyLinear(
                    weight.qdata.detach(), scale.detach(), weight.dtype, child.bias))
                replaced += 1
    return replaced
