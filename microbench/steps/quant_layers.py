"""The quantized linear layers this tool defines, beside torchao's tensor subclasses: the layouts
whose weights are plain tensors of the layer, and the layer that runs one kernel for a decode
step and another for a prompt (issue 61).

* :class:`Int8WeightOnlyLinear` (``--quant-layout unwrapped``): torchao's int8 values and row
  scales as plain parameters, multiplied in gpt-fast's form (``F.linear(x, W.to(x.dtype)) *
  scale``). torchao 0.18's ``Int8Tensor`` already writes the same product: the ATen graphs
  torch.compile builds from the two are the same but for a cast of the FP32 scale (checked on the
  CPU, issue 53). What differs is the tensor subclass: on every call of a compiled step
  AOTAutograd flattens each subclass weight into its inner tensors in Python and Dynamo guards
  them, one Python call per weight per step.
* :class:`Float8WeightOnlyLinear` (``--quant-layout unwrapped`` of float8wo): torchao's FP8
  values and row scales as plain parameters, multiplied as torchao 0.18's ``Float8Tensor``
  multiplies a weight-only FP8 weight (the weight dequantized in FP32, cast to the activations'
  dtype, inside the product): the same numbers, no tensor subclass.
* :class:`GemliteLinear` (``--quant-layout gemlite`` of int8wo and float8wo): the unwrapped
  layer's values and row scales repacked by gemlite's ``A16W8`` helper and multiplied by
  gemlite's Triton kernels (``gemlite::forward_functional``: a split-K GEMV for a few rows, a
  GEMM for many), which read the 8-bit weight as stored whatever the rows, where a prompt's
  rows otherwise reach cuBLAS through a BF16 copy of the weight. The same values; the scales
  applied where the unwrapped layer applies them (see the class).
* :class:`Int4TinygemmLinear` (``--quant-layout tinygemm``): torchao's tinygemm values (its
  ``Int4TilePackedTo4dTensor``) as plain parameters, multiplied by the same kernel: the same
  bits out, without a tensor subclass to unwrap per weight on every call (see above).
* :class:`Int4InductorLinear` (``--quant-layout inductor``): tinygemm's int4 values (torchao's own
  tinygemm quantization: ``w = (q - 8) * scale + zero``, groups of 128 along the input) two to a
  byte, with their scales and zero points, as plain parameters. Its product is written in torch
  operations for inductor to compile: for a few rows a reduction over the packed bytes (one
  pass over 4-bit weights, as gpt-fast's int8 product is one pass over 8-bit ones); for more, the
  weight dequantized to BF16 and a BF16 GEMM (cuBLAS), which a prompt's many rows need, as the
  serving engines do above their small-row kernels (vLLM's dequantize + matmul past Marlin's
  rows). The same values as tinygemm's, so the two may serve one model's two phases.
* :class:`PhaseLinear`: a layer whose product runs one layer (a kernel, in its layout) up to
  ``decode_rows`` rows and another above: a decode step's and a prompt's kernels, each chosen
  by measurement (:mod:`microbench.steps.quant_choice`). Under torch.compile (static shapes) the
  row count is known when the graph is traced, so each graph holds one kernel.

Example::

    quantize_(model, Int8WeightOnlyConfig(granularity=PerRow()))
    unwrap(model)          # each per-row Int8Tensor weight-only layer -> Int8WeightOnlyLinear
    GemliteLinear.repack(model[0], torch.bfloat16)    # the same int8 values, gemlite's kernels
    layer = Int4InductorLinear.from_linear(linear)          # tinygemm's int4 values, plain
    PhaseLinear(decode=tinygemm_layer, prompt=layer, decode_rows=1)
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import importlib

import torch
from torch import nn
from torch.nn import functional as F

# The int4 groups along the input dimension (torchao's Int4WeightOnlyConfig default, and the
# group size every --quantize int4wo layout here uses).
INT4_GROUP = 128
# Up to this many rows Int4InductorLinear writes its product as one reduction over the packed
# bytes; a reduction reads the weight once per row, so past a few rows dequantizing once and a
# GEMM reads less.
INT4_REDUCE_ROWS = 4


def rows_of(x: torch.Tensor) -> int:
    """The rows a linear layer multiplies: every leading dimension of its input flattened."""
    return x.numel() // x.shape[-1] if x.shape[-1] else 0


# Columns of the identity pushed through a kernel at once by :func:`through_identity`: a
# 14336-wide layer then needs no 400 MB identity.
IDENTITY_SLICE = 1024


def through_identity(product: Callable[[torch.Tensor], torch.Tensor], columns: int,
                     dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The weight (out, ``columns``) a linear ``product`` multiplies by, recovered by pushing
    the identity through it in slices of rows: for weights whose kernel is their only reader
    (torchao's int4 tensors, tinygemm's packing)."""
    slices = []
    with torch.inference_mode():
        for start in range(0, columns, IDENTITY_SLICE):
            stop = min(start + IDENTITY_SLICE, columns)
            eye = torch.zeros(stop - start, columns, dtype=dtype, device=device)
            eye[:, start:stop].fill_diagonal_(1)
            slices.append(product(eye))                 # (rows, out) = W^T's rows
    return torch.cat(slices).t()


class Int8WeightOnlyLinear(nn.Linear):
    """A linear layer over an int8 weight (out, in) and a scale per output row, both plain
    parameters (counted as stored by ``weight_bytes``; never trained): ``x @ W.T`` with W cast
    to the activations' dtype inside the product (inductor fuses the cast into the product's
    loads), then the scale, as gpt-fast's ``WeightOnlyInt8Linear`` does."""

    # Its input is worth a buffer of its own: inductor fuses the cast into a one-row product's
    # reduction, and would recompute a pointwise producer (the SwiGLU product before the down
    # projection) there per weight element (microbench.models.archs.llama.materialized).
    materialize_input = True

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype,
                 bias: nn.Parameter | None = None) -> None:
        out_features, in_features = qdata.shape
        super().__init__(in_features, out_features, bias=False, device="meta")
        self.weight = nn.Parameter(qdata, requires_grad=False)
        # torchao casts its FP32 scale to the activations' dtype on every call; cast once here.
        self.scale = nn.Parameter(scale.reshape(out_features).to(dtype), requires_grad=False)
        self.register_parameter("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x, self.weight.to(x.dtype)) * self.scale
        return out if self.bias is None else out + self.bias

    def dequantize(self) -> torch.Tensor:
        return self.weight.to(self.scale.dtype) * self.scale[:, None]


class Float8WeightOnlyLinear(nn.Linear):
    """A linear layer over an FP8 weight (out, in) and an FP32 scale per output row, both plain
    parameters (never trained): ``x @ W.T`` with W dequantized as torchao's ``Float8Tensor``
    dequantizes it (``(W.float() * scale).to(x.dtype)``) inside the product, which inductor
    fuses into the product's loads of a decode step."""

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor,
                 bias: nn.Parameter | None = None) -> None:
        out_features, in_features = qdata.shape
        super().__init__(in_features, out_features, bias=False, device="meta")
        self.weight = nn.Parameter(qdata, requires_grad=False)
        self.scale = nn.Parameter(scale.reshape(out_features, 1).float(), requires_grad=False)
        self.register_parameter("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x, self.dequantize().to(x.dtype))
        return out if self.bias is None else out + self.bias

    def dequantize(self) -> torch.Tensor:
        return self.weight.float() * self.scale


# torchao's weight-only tensors the unwrapped layout holds as plain parameters.
UNWRAPPED = ("Int8Tensor", "Float8Tensor")


def convertible(weight: torch.Tensor) -> bool:
    """A torchao Int8Tensor or Float8Tensor quantized weight-only with a scale per row (or per
    tensor)."""
    if type(weight).__name__ not in UNWRAPPED:
        return False
    if getattr(weight, "act_quant_kwargs", None) is not None:       # dynamic activations
        return False
    if getattr(weight, "act_pre_scale", None) is not None:          # AWQ/SmoothQuant scaling
        return False
    block = list(getattr(weight, "block_size", []) or [])
    return bool(block) and block[-1] == weight.shape[-1]            # not per group


def unwrapped(layer: nn.Linear) -> nn.Linear:
    """``layer`` as an :class:`Int8WeightOnlyLinear` or :class:`Float8WeightOnlyLinear` over the
    same data and scales where its weight is :func:`convertible`; else ``layer`` itself."""
    weight: Any = layer.weight              # torchao's Int8Tensor or Float8Tensor
    if isinstance(layer, (Int8WeightOnlyLinear, Float8WeightOnlyLinear)) or \
            not convertible(weight):
        return layer
    scale = weight.scale.expand(weight.shape[0], 1) if weight.scale.numel() == 1 else weight.scale
    if type(weight).__name__ == "Float8Tensor":
        return Float8WeightOnlyLinear(weight.qdata.detach(), scale.detach(), layer.bias)
    return Int8WeightOnlyLinear(weight.qdata.detach(), scale.detach(), weight.dtype, layer.bias)


def unwrap(model: nn.Module) -> int:
    """Replace, in place, every linear layer whose weight :func:`convertible` admits with its
    :func:`unwrapped` layer; how many it replaced."""
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and unwrapped(child) is not child:
                setattr(parent, name, unwrapped(child))
                replaced += 1
    return replaced


class GemliteLinear(nn.Linear):
    """An int8 or FP8 weight with a scale per output row, packed by gemlite's ``A16W8`` helper
    (gemlite 0.6: https://github.com/dropbox/gemlite, ``gemlite/helper.py``), multiplied with
    BF16 activations by gemlite's Triton kernels through its custom op
    ``gemlite::forward_functional``, which has a fake kernel, so torch.compile traces it. What
    gemlite's packed layer holds (``get_tensor_args``: the weight, the scales, the zero points
    and a meta scale) are plain parameters here, never trained, and its ``get_meta_args`` a
    tuple of ints: no gemlite module, no tensor subclass.

    Built from the unwrapped layer (:meth:`repack`), the same values and scales, each scale
    applied where that layer applies it, so that the two differ in their kernels only:

    * int8 (:class:`Int8WeightOnlyLinear`: ``bf16(x @ W) * bf16 scale``): ``post_scale`` with
      the BF16 scales, gemlite's ``channel_scale_mode`` 1, ``acc.to(scale dtype) * scale``
      after the product (gemv_splitK_kernels.py);
    * FP8 (:class:`Float8WeightOnlyLinear`: ``x @ bf16(W.float() * fp32 scale)``): gemlite's
      default pre-scaling (``W_group_mode`` 2, ``W.to(scale dtype) * scale`` before the product,
      utils.py ``dequantize``) with the FP32 scales.

    gemlite 0.6 takes the scales' dtype as given (its ``fp32_scale`` is unused) and, unless
    ``dtype`` is given, would take FP16 activations beside FP32 scales: ``dtype`` is always
    given. Outputs differ from the unwrapped layer's by the order of accumulation only (its
    split-K GEMV adds partial sums in BF16)."""

    # What get_tensor_args gives, in its order (gemlite before 0.5 gave the first three).
    TENSOR_NAMES = ("weight", "scale", "zeros", "meta_scale")
    scale: nn.Parameter             # (1, out): the row scales, BF16 (int8) or FP32 (FP8)

    def __init__(self, tensor_args: list[torch.Tensor], meta_args: list[int], in_features: int,
                 out_features: int, post_scale: bool, bias: nn.Parameter | None = None) -> None:
        super().__init__(in_features, out_features, bias=False, device="meta")
        if not 3 <= len(tensor_args) <= len(self.TENSOR_NAMES):
            raise ValueError(f"gemlite's A16W8 gave {len(tensor_args)} tensors, where this "
                             f"tool knows 3 or 4")
        self.tensor_names = self.TENSOR_NAMES[:len(tensor_args)]
        for name, tensor in zip(self.tensor_names, tensor_args):
            # gemlite's weight is the values transposed, a view: kept with its strides
            setattr(self, name, nn.Parameter(tensor.detach(), requires_grad=False))
        self.meta_args = tuple(int(value) for value in meta_args)
        self.post_scale = post_scale
        self.register_parameter("bias", bias)

    @property
    def fp8(self) -> bool:
        return self.weight.dtype.is_floating_point

    @classmethod
    def repack(cls, layer: nn.Linear, dtype: torch.dtype) -> "GemliteLinear":
        """``layer`` (an :class:`Int8WeightOnlyLinear` or :class:`Float8WeightOnlyLinear`)
        packed by gemlite for ``dtype`` (BF16) activations; refused in words where gemlite
        did not keep the values and scales as given (another gemlite's packing)."""
        if not isinstance(layer, (Int8WeightOnlyLinear, Float8WeightOnlyLinear)):
            raise TypeError(f"gemlite repacks the unwrapped layout's layers, not "
                            f"{type(layer).__name__}")
        values = layer.weight.detach()
        post_scale = isinstance(layer, Int8WeightOnlyLinear)
        scale = layer.scale.detach().reshape(layer.out_features, 1)
        helper = importlib.import_module("gemlite.helper")
        packer = helper.A16W8(device=values.device, dtype=dtype,
                              fp8=values.dtype if values.dtype.is_floating_point else None,
                              post_scale=post_scale)
        packed = packer.from_weights(values, scales=scale)
        tensor_args = list(packed.get_tensor_args())
        built = cls(tensor_args, list(packed.get_meta_args()), layer.in_features,
                    layer.out_features, post_scale, layer.bias)
        if not (_same(built.weight.t(), values) and _same(built.scale.reshape(-1, 1), scale)):
            raise ValueError("gemlite's A16W8 did not keep the values and row scales as given "
                             "(an A16W8 packing this tool does not know)")
        return built

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = gemlite_product(x, [getattr(self, name) for name in self.tensor_names],
                              list(self.meta_args))
        return out if self.bias is None else out + self.bias

    def dequantize(self) -> torch.Tensor:
        """The weight (out, in) from the values and scales it was built from, as the
        unwrapped layer dequantizes them (BF16 for int8, FP32 for FP8)."""
        values, scale = self.weight.t(), self.scale.reshape(-1, 1)
        return values.float() * scale if self.fp8 else values.to(scale.dtype) * scale


def _same(held: torch.Tensor, given: torch.Tensor) -> bool:
    """Whether ``held`` is ``given``: the same tensor viewed alike, or equal values."""
    if held.shape != given.shape or held.dtype != given.dtype:
        return False
    if held.data_ptr() == given.data_ptr() and held.stride() == given.stride():
        return True
    if held.dtype.is_floating_point and held.element_size() == 1:     # FP8: compare the bits
        return torch.equal(held.view(torch.uint8), given.view(torch.uint8))
    return torch.equal(held, given)


def gemlite_product(x: torch.Tensor, tensor_args: list[torch.Tensor],
                    meta_args: list[int]) -> torch.Tensor:
    """gemlite's product (its Triton kernels, on GPUs; a seam the CPU tests replace). The bias
    is left to the layer, as the unwrapped layer adds it."""
    return torch.ops.gemlite.forward_functional(x, None, tensor_args, meta_args)


class KernelInt4Linear(nn.Linear):
    """An int4 layer whose weight only its kernel reads (tinygemm's or mslk's packing, as plain
    parameters): the bias added to the kernel's product, and the weight recovered through the
    kernel. A subclass says how it multiplies (``_product``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self._product(x)
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out.to(x.dtype)

    def _product(self, x: torch.Tensor) -> torch.Tensor:
        """x @ W.T in BF16, the bias left out."""
        raise NotImplementedError

    def dequantize(self) -> torch.Tensor:
        """The weight (out, in) in BF16, as the kernel sees it."""
        return through_identity(self._product, self.in_features, torch.bfloat16,
                                self.weight.device)


class Int4TinygemmLinear(KernelInt4Linear):
    """tinygemm's int4 weight (``--quant-layout tinygemm``) as plain parameters of the layer:
    torchao's tile-packed int32 values and its interleaved scales and zero points, multiplied by
    the kernel torchao's ``Int4TilePackedTo4dTensor`` calls (``aten._weight_int4pack_mm``), the
    input padded to the packed width as torchao pads it. The same kernel and values; what
    differs is that no tensor subclass is unwrapped in Python on every call of a compiled step
    (one per weight per decode step)."""

    def __init__(self, qdata: torch.Tensor, scale_and_zero: torch.Tensor, out_features: int,
                 in_features: int, group: int, bias: nn.Parameter | None = None) -> None:
        super().__init__(in_features, out_features, bias=False, device="meta")
        self.weight = nn.Parameter(qdata, requires_grad=False)
        self.scale_and_zero = nn.Parameter(scale_and_zero, requires_grad=False)
        self.group = group
        # torchao packs the input dimension padded to a multiple of 1024
        self.packed_in = -(-in_features // 1024) * 1024
        self.register_parameter("bias", bias)

    @classmethod
    def of(cls, layer: nn.Linear) -> "Int4TinygemmLinear":
        """The plain form of a layer whose weight is torchao's Int4TilePackedTo4dTensor."""
        weight: Any = layer.weight          # its qdata, scale_and_zero and block_size
        out_features, in_features = weight.shape
        return cls(weight.qdata.detach(), weight.scale_and_zero.detach(), out_features,
                   in_features, int(weight.block_size[-1]), layer.bias)

    def _product(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)
        if self.packed_in != self.in_features:
            rows = F.pad(rows, (0, self.packed_in - self.in_features))
        out = int4pack_mm(rows, self.weight, self.group, self.scale_and_zero)
        return out[:, :self.out_features].reshape(*x.shape[:-1], self.out_features)


# The mslk operator each mslk int4 layout multiplies by with BF16 activations (torchao 0.18:
# Int4Tensor's and Int4PreshuffledTensor's F.linear).
MSLK_OPS = {"plain": "bf16i4bf16_rowwise", "preshuffled": "bf16i4bf16_shuffled"}
# torchao's tensor class of each, and the names of its values, scales and zero points.
MSLK_TENSORS = {"Int4Tensor": ("plain", "qdata", "scale", "zero_point"),
                "Int4PreshuffledTensor": ("preshuffled", "qdata", "group_scale", "group_zero")}


class Int4MslkLinear(KernelInt4Linear):
    """mslk's int4 weight (``--quant-layout plain`` or ``preshuffled``) as plain parameters of
    the layer: the values, group scales and zero points of torchao's ``Int4Tensor`` or
    ``Int4PreshuffledTensor``, multiplied by the mslk operator that tensor calls with BF16
    activations (:data:`MSLK_OPS`). The same kernel and values; what differs is that no tensor
    subclass is unwrapped in Python on every call of a compiled graph, which cost the host about
    2 ms per prompt over llama3_8b's 161 weights, as it cost tinygemm's decode step
    (:class:`Int4TinygemmLinear`)."""

    def __init__(self, layout: str, qdata: torch.Tensor, scale: torch.Tensor,
                 zero: torch.Tensor, out_features: int, in_features: int,
                 bias: nn.Parameter | None = None) -> None:
        super().__init__(in_features, out_features, bias=False, device="meta")
        self.layout = layout
        self.weight = nn.Parameter(qdata.contiguous(), requires_grad=False)
        self.scale = nn.Parameter(scale.contiguous(), requires_grad=False)
        self.zero = nn.Parameter(zero.contiguous(), requires_grad=False)
        self.register_parameter("bias", bias)

    @classmethod
    def takes(cls, weight: Any) -> bool:
        """Whether ``weight`` is an mslk int4 tensor with BF16 activations (the FP8-activation
        forms call other operators and stay torchao's tensors)."""
        names = MSLK_TENSORS.get(type(weight).__name__)
        return names is not None and getattr(weight, names[3], None) is not None \
            and getattr(weight, "act_pre_scale", None) is None \
            and getattr(weight, "activation_dtype", torch.bfloat16) == torch.bfloat16

    @classmethod
    def of(cls, layer: nn.Linear) -> "Int4MslkLinear":
        """The plain form of a layer whose weight :meth:`takes`."""
        weight: Any = layer.weight          # torchao's tensor: its values and scales
        layout, values, scale, zero = MSLK_TENSORS[type(weight).__name__]
        out_features, in_features = weight.shape
        return cls(layout, getattr(weight, values).detach(), getattr(weight, scale).detach(),
                   getattr(weight, zero).detach(), out_features, in_features, layer.bias)

    def _product(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)
        out = mslk_int4_mm(self.layout, rows, self.weight, self.scale, self.zero)
        return out.reshape(*x.shape[:-1], self.out_features)


def mslk_int4_mm(layout: str, rows: torch.Tensor, values: torch.Tensor, scale: torch.Tensor,
                 zero: torch.Tensor) -> torch.Tensor:
    """mslk's product of ``layout`` (NVIDIA sm_90 builds; a seam the CPU tests replace)."""
    return getattr(torch.ops.mslk, MSLK_OPS[layout])(rows, values, scale, zero)


def int4pack_mm(rows: torch.Tensor, packed: torch.Tensor, group: int,
                scale_and_zero: torch.Tensor) -> torch.Tensor:
    """tinygemm's product (CUDA and ROCm only; a seam the CPU tests replace)."""
    return torch.ops.aten._weight_int4pack_mm(rows, packed, group, scale_and_zero)


def int4_values(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """tinygemm's int4 values of a BF16 ``weight`` (out, in), by torchao's own tinygemm
    quantization (asymmetric, groups of :data:`INT4_GROUP`): the values 0..15, and the scales and
    zero points (out, in / 128) such that ``w = (q - 8) * scale + zero``."""
    from torchao.quantization.quant_primitives import (MappingType,
                                                       _choose_qparams_affine_tinygemm,
                                                       _quantize_affine_tinygemm)
    block = (1, INT4_GROUP)
    scale, zero = _choose_qparams_affine_tinygemm(weight, MappingType.ASYMMETRIC, block,
                                                  torch.int32, 0, 15, scale_dtype=weight.dtype,
                                                  zero_point_dtype=weight.dtype)
    values = _quantize_affine_tinygemm(weight, block, scale, zero, torch.int32, 0, 15)
    rows = weight.shape[0]
    return values, scale.reshape(rows, -1), zero.reshape(rows, -1)


class Int4InductorLinear(nn.Linear):
    """int4 weights two to a byte (even input index in the low nibble, odd in the high one, as
    mslk's ``pack_int4`` packs), scales and zero points per group of 128 inputs, all plain
    parameters; the product in torch operations that inductor compiles (see the module)."""

    def __init__(self, packed: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor,
                 bias: nn.Parameter | None = None) -> None:
        out_features, half = packed.shape
        super().__init__(half * 2, out_features, bias=False, device="meta")
        if (half * 2) % INT4_GROUP:
            raise ValueError(f"int4 groups of {INT4_GROUP} need in_features divisible by it, "
                             f"not {half * 2}")
        self.weight = nn.Parameter(packed, requires_grad=False)
        self.scale = nn.Parameter(scale, requires_grad=False)
        self.zero = nn.Parameter(zero, requires_grad=False)
        self.register_parameter("bias", bias)

    @classmethod
    def from_linear(cls, layer: nn.Linear) -> "Int4InductorLinear":
        values, scale, zero = int4_values(layer.weight.detach())
        packed = (values[:, 0::2] | (values[:, 1::2] << 4)).to(torch.uint8)
        return cls(packed, scale, zero, layer.bias)

    def _grouped(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The low and high nibbles as (out, groups, 64), each minus 8, in ``dtype`` (exact:
        small integers)."""
        groups = self.in_features // INT4_GROUP
        packed = self.weight.view(self.out_features, groups, INT4_GROUP // 2)
        return (packed & 0xF).to(dtype) - 8, (packed >> 4).to(dtype) - 8

    def dequantize(self) -> torch.Tensor:
        """The weight (out, in) in the scales' dtype (BF16), as tinygemm's kernel sees it."""
        low, high = self._grouped(self.scale.dtype)
        values = torch.stack((low, high), dim=-1).reshape(self.out_features, -1, INT4_GROUP)
        weight = values * self.scale[..., None] + self.zero[..., None]
        return weight.reshape(self.out_features, self.in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if rows_of(x) <= INT4_REDUCE_ROWS:
            out = self._reduce(x)
        else:
            out = F.linear(x, self.dequantize().to(x.dtype))
        return out if self.bias is None else out + self.bias

    def _reduce(self, x: torch.Tensor) -> torch.Tensor:
        """sum over the inputs of x * ((q - 8) * scale + zero), in FP32, per group: the even
        inputs against the low nibbles, the odd against the high ones, so each byte is read
        once; inductor fuses it into one reduction over the packed weight."""
        lead = x.shape[:-1]
        groups = self.in_features // INT4_GROUP
        pairs = x.reshape(-1, 1, groups, INT4_GROUP // 2, 2).float()
        even, odd = pairs[..., 0], pairs[..., 1]
        low, high = self._grouped(torch.float32)
        scale = self.scale.float()[None, :, :, None]
        zero = self.zero.float()[None, :, :, None]
        terms = (even * low + odd * high) * scale + (even + odd) * zero
        return terms.sum(dim=(-1, -2)).reshape(*lead, self.out_features).to(x.dtype)


class PhaseLinear(nn.Linear):
    """One linear layer with a kernel per phase: ``decode`` for inputs of up to ``decode_rows``
    rows (a decode step: one per sequence), ``prompt`` for more (the prompt's rows). Each is a
    quantized layer of the same BF16 weight; both are kept (the summary counts their bytes)."""

    def __init__(self, decode: nn.Linear, prompt: nn.Linear, decode_rows: int) -> None:
        super().__init__(decode.in_features, decode.out_features, bias=False, device="meta")
        del self.weight             # the phases' layers hold the weights
        self.decode, self.prompt, self.decode_rows = decode, prompt, decode_rows
        # A phase's layer that wants its input as a buffer of its own gets it (the int8 decode
        # step's down projection); the other phase pays a copy of its input.
        self.materialize_input = any(getattr(layer, "materialize_input", False)
                                     for layer in (decode, prompt))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.decode if rows_of(x) <= self.decode_rows else self.prompt)(x)

    def phase_layer(self, rows: int) -> nn.Linear:
        """The layer that multiplies inputs of ``rows`` rows."""
        return self.decode if rows <= self.decode_rows else self.prompt


def linear_layers(model: nn.Module, rows: int | None = None) -> Iterator[tuple[str, nn.Linear]]:
    """(name, layer) of every linear layer as it runs for inputs of ``rows`` rows: a
    :class:`PhaseLinear` as the phase's own layer (its other phase's left out), every other
    ``nn.Linear`` as it is; ``rows=None``: every layer each PhaseLinear holds."""
    def walk(module: nn.Module, prefix: str) -> Iterator[tuple[str, nn.Linear]]:
        for name, child in module.named_children():
            path = f"{prefix}{name}"
            if isinstance(child, PhaseLinear):
                chosen = (child.decode, child.prompt) if rows is None else \
                    (child.phase_layer(rows),)
                for layer in dict.fromkeys(chosen):
                    yield path, layer
            elif isinstance(child, nn.Linear):
                yield path, child
            else:
                yield from walk(child, path + ".")
    yield from walk(model, "")
