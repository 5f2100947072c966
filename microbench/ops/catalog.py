"""The operator registry: what each op is, how its inputs are made, and what it costs.

Every op knows, from its shapes and dtype alone (before anything is allocated):

* the **bytes it moves**: each input read once plus the output written once. A kernel cannot
  move less (caches aside), so achieved GB/s = these bytes / median time is a lower bound on
  the traffic the hardware served. Broadcast inputs count at their own size, not the output's.
* the **FLOPs** it performs: 1 per output element for elementwise ops (a compare, an exp or a
  sqrt count as one, although the hardware spends more on a transcendental), 2*M*N*K for a
  matrix product (a multiply and an add per term), per-element counts for reductions and
  normalisations stated beside each formula;
* its **roof**: whether memory bandwidth or arithmetic bounds it, which decides the peak its
  "% of peak" divides by;
* the **bytes it allocates**, so a shape that does not fit in free memory is skipped before it is
  allocated.

Ops are looked up by name and type (``add`` is both a binary op and, with ``--op-type sparse``,
the embedding-style sparse update). A trailing underscore (``add_``, ``relu_``) means in place.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from microbench.ops.choices import GENERIC_SHAPE, OP_TYPES  # noqa: F401 (named there)
from microbench.platform.errors import UsageError

Shape = tuple[int, ...]

MEMORY_BOUND = "memory"
COMPUTE_BOUND = "compute"

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# FP8 operands, which only the scaled_mm GEMM takes (no other op has FP8 kernels): E4M3 in the
# OCP encoding (NVIDIA from sm_89, AMD gfx950) and in MI300's fnuz encoding. The device layer
# says which one a GPU's matrix units take (platform.devices.fp8_e4m3_dtype).
FP8_DTYPES = {"fp8_e4m3fn": torch.float8_e4m3fn, "fp8_e4m3fnuz": torch.float8_e4m3fnuz}


def dtype_of(name: str) -> torch.dtype:
    """The torch dtype of a catalog dtype name, FP8 ones included."""
    return DTYPES[name] if name in DTYPES else FP8_DTYPES[name]

INDEX_BYTES = 8  # torch indices are int64


@dataclass(frozen=True)
class Shapes:
    input1: Shape
    input2: Shape | None = None

    @property
    def second(self) -> Shape:
        """input2, for an op of two inputs (the runner gives it its default where none is
        given)."""
        if self.input2 is None:
            raise UsageError("this op takes two inputs: pass --input2-dim")
        return self.input2


@dataclass(frozen=True)
class OpCost:
    """What one call of an op costs, from its shapes and dtype."""

    bytes_read: int
    bytes_written: int
    flops: int
    bytes_allocated: int  # inputs the benchmark creates plus the output one call returns

    @property
    def bytes_moved(self) -> int:
        return self.bytes_read + self.bytes_written


def working_set_bytes(cost: OpCost, inplace: bool) -> int:
    """The distinct bytes one call touches: its inputs and its output. In place the output is
    one of the inputs (binary and unary ops write input1; the sparse update writes the rows it
    read), so only what is read counts; out of place, what is read plus what is written."""
    return cost.bytes_read if inplace else cost.bytes_moved


@dataclass(frozen=True)
class OpSpec:
    """One operator: name, type, default shapes and three functions of its shapes.

    ``check(shapes, inplace)`` raises UsageError for shapes the op cannot take;
    ``cost(shapes, element_size, inplace)`` gives an :class:`OpCost`;
    ``build(shapes, dtype, device, inplace)`` allocates the inputs and returns the zero-argument
    call to time.
    """

    name: str
    op_type: str
    roof: str
    takes_input2: bool
    supports_inplace: bool
    default_input1: str
    default_input2: str | None
    check: Callable[[Shapes, bool], None]
    cost: Callable[[Shapes, int, bool], OpCost]
    build: Callable[[Shapes, torch.dtype, torch.device, bool], Callable[[], object]]
    # Which datasheet rate bounds it on matrix hardware: "vector", "matmul" or "conv".
    compute_path: str = "vector"


# ---------------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------------

# Far above any op's real shape; beyond them a shape is a typo that would reach torch as an
# integer overflow or a tensor of more dimensions than its kernels take.
MAX_DIMS = 8
MAX_DIM_SIZE = 2**31 - 1


def parse_shape(text: str, flag: str) -> Shape:
    """'64-1024-1024' -> (64, 1024, 1024); anything else is a usage error."""
    parts = text.strip().split("-")
    if not text.strip() or not all(part.isascii() and part.isdigit() and int(part) > 0
                                   for part in parts):
        raise UsageError(f"malformed shape {text!r} for {flag}: expected positive integers "
                         f"separated by '-', e.g. {GENERIC_SHAPE}")
    if len(parts) > MAX_DIMS:
        raise UsageError(f"shape {text!r} for {flag} has {len(parts)} dimensions; at most "
                         f"{MAX_DIMS}")
    shape = tuple(int(part) for part in parts)
    if max(shape) > MAX_DIM_SIZE:
        raise UsageError(f"shape {text!r} for {flag}: a dimension above {MAX_DIM_SIZE:,} is "
                         f"more than any device holds")
    return shape


def format_shape(shape: Shape) -> str:
    return "-".join(str(dim) for dim in shape)


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


def broadcast_shape(first: Shape, second: Shape) -> Shape:
    try:
        return tuple(torch.broadcast_shapes(first, second))
    except RuntimeError:
        raise UsageError(f"shapes {format_shape(first)} and {format_shape(second)} do not "
                         f"broadcast: trailing dimensions must be equal or 1") from None


def _random_input(shape: Shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    # Values in [0.5, 1.5): no input is negative (sqrt) or near zero (div). Repeated in-place
    # mul_/div_ scale each element by at most 2 per call, so fp32 and bf16 stay clear of
    # subnormals (slow on CPUs) for over 100 calls; exp_ reaches inf after a few, at full speed.
    return torch.rand(shape, dtype=dtype, device=device).add_(0.5)


def _require_rank(shape: Shape, rank: int, what: str) -> None:
    if len(shape) != rank:
        raise UsageError(f"{what} needs a {rank}-d shape, got {format_shape(shape)}")


# ---------------------------------------------------------------------------------------------
# Elementwise: binary and unary
# ---------------------------------------------------------------------------------------------

def _binary_check(shapes: Shapes, inplace: bool) -> None:
    out = broadcast_shape(shapes.input1, shapes.second)
    if inplace and out != shapes.input1:
        raise UsageError(f"in place, the result {format_shape(out)} must have input1's shape "
                         f"{format_shape(shapes.input1)}; swap the shapes or drop --inplace")


def _binary_cost(output_element_size: int | None) -> Callable[[Shapes, int, bool], OpCost]:
    """Read both inputs, write the broadcast output; 1 FLOP per output element.

    ``output_element_size`` is fixed for ops whose output dtype is not the input's (eq: bool).
    """
    def cost(shapes: Shapes, element_size: int, inplace: bool) -> OpCost:
        out_elements = numel(broadcast_shape(shapes.input1, shapes.second))
        out_size = element_size if inplace or output_element_size is None else output_element_size
        inputs = (numel(shapes.input1) + numel(shapes.second)) * element_size
        written = out_elements * out_size
        return OpCost(bytes_read=inputs, bytes_written=written, flops=out_elements,
                      bytes_allocated=inputs + (0 if inplace else written))
    return cost


def _binary_build(method: str):
    def build(shapes: Shapes, dtype: torch.dtype, device: torch.device, inplace: bool):
        first = _random_input(shapes.input1, dtype, device)
        second = _random_input(shapes.second, dtype, device)
        call = getattr(first, method + "_" if inplace else method)
        return lambda: call(second)
    return build


def _unary_cost(shapes: Shapes, element_size: int, inplace: bool) -> OpCost:
    """Read the input, write an output of the same size; 1 FLOP per element."""
    size = numel(shapes.input1) * element_size
    return OpCost(bytes_read=size, bytes_written=size, flops=numel(shapes.input1),
                  bytes_allocated=size if inplace else 2 * size)


def _unary_build(method: str):
    def build(shapes: Shapes, dtype: torch.dtype, device: torch.device, inplace: bool):
        tensor = _random_input(shapes.input1, dtype, device)
        return getattr(tensor, method + "_" if inplace else method)
    return build


def _no_check(shapes: Shapes, inplace: bool) -> None:
    return None


def _copy_cost(shapes: Shapes, element_size: int, inplace: bool) -> OpCost:
    """A device-to-device copy: the source read once, the destination written once, no FLOPs.
    Its GB/s counts both (read + written), the basis of every GB/s this tool prints; a copy's
    bytes read alone would be half of it."""
    size = numel(shapes.input1) * element_size
    return OpCost(bytes_read=size, bytes_written=size, flops=0, bytes_allocated=2 * size)


def _copy_build(shapes: Shapes, dtype: torch.dtype, device: torch.device, inplace: bool):
    source = _random_input(shapes.input1, dtype, device)
    destination = torch.empty_like(source)
    return lambda: destination.copy_(source)


# ---------------------------------------------------------------------------------------------
# Reductions over all elements (the old tool called e.g. ``input.sum()``)
# ---------------------------------------------------------------------------------------------

def _reduction_cost(flops_per_element: int, result_size: int | None):
    """Read the input once, write one scalar (an int64 index for argmax/argmin).

    torch computes var/std in one (Welford) pass, so one read is what it needs.
    """
    def cost(shapes: Shapes, element_size: int, inplace: bool) -> OpCost:
        elements = numel(shapes.input1)
        written = element_size if result_size is None else result_size
        read = elements * element_size
        return OpCost(bytes_read=read, bytes_written=written,
                      flops=flops_per_element * elements, bytes_allocated=read + written)
    return cost


def _reduction_build(method: str):
    def build(shapes: Shapes, dtype: torch.dtype, device: torch.device, inplace: bool):
        return getattr(_random_input(shapes.input1, dtype, device), method)
    return build


# FLOPs per input element. sum/prod/mean/max/argmax/argmin: one add, multiply or compare
# (mean's single divide is O(1)). norm (2-norm): square and accumulate, 2. var/std: subtract the
# mean, square, accumulate, 3 (std's final sqrt is O(1)).
_REDUCTIONS = {
    "sum": (1, None), "prod": (1, None), "norm": (2, None), "max": (1, None),
    "mean": (1, None), "std": (3, None), "var": (3, None),
    "argmax": (1, INDEX_BYTES), "argmin": (1, INDEX_BYTES),
}


# ---------------------------------------------------------------------------------------------
# Sparse embedding-style update: table[rows] += values (DLRM's sparse gradient step)
# ---------------------------------------------------------------------------------------------

def _sparse_check(shapes: Shapes, inplace: bool) -> None:
    _require_rank(shapes.input1, 2, "the sparse update's table (input1, rows-dim)")
    if len(shapes.second) != 1:
        raise UsageError(f"the sparse update's input2 is the number of rows updated, one "
                         f"integer such as 851968, got {format_shape(shapes.second)}")
    rows, updated = shapes.input1[0], shapes.second[0]
    if updated > rows:
        raise UsageError(f"the sparse update touches {updated} distinct rows but the table has "
                         f"only {rows}")


def _sparse_cost(shapes: Shapes, element_size: int, inplace: bool) -> OpCost:
    """Indices and values read once, the touched table rows read and written once.

    In place (``add_``) only the ``updated`` rows of the table move: reading them, adding the
    values, writing them back. Out of place (``add``) the whole table is read and a new one
    written. One add per updated element. Rows are distinct (see the build), so this is exact.
    """
    rows, dim = shapes.input1
    updated = shapes.second[0]
    table = rows * dim * element_size
    values = updated * dim * element_size
    indices = updated * INDEX_BYTES
    touched = values  # the updated rows have the values' shape
    if inplace:
        read, written = indices + values + touched, touched
    else:
        read, written = indices + values + table, table
    # randperm over all rows needs rows * 8 bytes while the indices are made.
    allocated = table + values + indices + rows * INDEX_BYTES + (0 if inplace else table)
    return OpCost(bytes_read=read, bytes_written=written, flops=updated * dim,
                  bytes_allocated=allocated)


def _sparse_build(shapes: Shapes, dtype: torch.dtype, device: torch.device, inplace: bool):
    rows, dim = shapes.input1
    updated = shapes.second[0]
    table = _random_input(shapes.input1, dtype, device)
    # Distinct rows, coalesced once here, so the timed call is the update itself and not a sort
    # merging duplicate rows, and the byte count above is exact.
    indices = torch.randperm(rows, device=device)[:updated].sort().values.unsqueeze(0)
    values = _random_input((updated, dim), dtype, device)
    update = torch.sparse_coo_tensor(indices, values, size=(rows, dim),
                                     check_invariants=False).coalesce()
    call = table.add_ if inplace else table.add
    return lambda: call(update)


# ---------------------------------------------------------------------------------------------
# Compute-bound and normalisation ops
# ---------------------------------------------------------------------------------------------

def _matmul_dims(shapes: Shapes) -> tuple[Shape, int, int, int]:
    """(broadcast batch, M, N, K) of ``input1 @ input2`` with shapes (..., M, K) and (..., K, N)."""
    first, second = shapes.input1, shapes.second
    if len(first) < 2 or len(second) < 2:
        raise UsageError(f"matmul needs shapes of at least 2 dims (..., M, K) and (..., K, N), "
                         f"got {format_shape(first)} and {format_shape(second)}")
    (m, k), (k2, n) = first[-2:], second[-2:]
    if k != k2:
        raise UsageError(f"matmul inner dimensions differ: {format_shape(first)} has K={k}, "
                         f"{format_shape(second)} has K={k2}")
    batch = broadcast_shape(first[:-2], second[:-2])
    return batch, m, n, k


def _matmul_check(shapes: Shapes, inplace: bool) -> None:
    _matmul_dims(shapes)


def _matmul_cost(shapes: Shapes, element_size: int, inplace: bool) -> OpCost:
    """2*M*N*K FLOPs per matrix (multiply and add per term), times the broadcast batch."""
    batch, m, n, k = _matmul_dims(shapes)
    read = (numel(shapes.input1) + numel(shapes.second)) * element_size
    written = numel(batch) * m * n * element_size
    return OpCost(bytes_read=read, bytes_written=written, flops=2 * numel(batch) * m * n * k,
                  bytes_allocated=read + written)


def _two_input_build(function: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):
    def build(shapes: Shapes, dtype: torch.dtype, device: torch.device, inplace: bool):
        first = _random_input(shapes.input1, dtype, device)
        second = _random_input(shapes.second, dtype, device)
        return lambda: function(first, second)
    return build


# torch._scaled_mm's operands: 2-D, K and N multiples of 16 (its FP8 GEMMs' alignment).
SCALED_MM_ALIGNMENT = 16


def _scaled_mm_check(shapes: Shapes, inplace: bool) -> None:
    batch, _, n, k = _matmul_dims(shapes)
    if batch or len(shapes.input1) != 2 or len(shapes.second) != 2:
        raise UsageError("scaled_mm multiplies two 2-d matrices (M-K and K-N)")
    if k % SCALED_MM_ALIGNMENT or n % SCALED_MM_ALIGNMENT:
        raise UsageError(f"scaled_mm needs K and N multiples of {SCALED_MM_ALIGNMENT} "
                         f"(torch._scaled_mm's alignment), got K={k}, N={n}")


def _scaled_mm_cost(shapes: Shapes, element_size: int, inplace: bool) -> OpCost:
    """FP8 operands read (``element_size`` 1), a BF16 product written."""
    _, m, n, k = _matmul_dims(shapes)
    read = (m * k + k * n) * element_size
    written = m * n * torch.bfloat16.itemsize
    return OpCost(bytes_read=read, bytes_written=written, flops=2 * m * n * k,
                  bytes_allocated=read + written)


def _scaled_mm_build(shapes: Shapes, dtype: torch.dtype, device: torch.device, inplace: bool):
    """torch._scaled_mm of two FP8 matrices with one scale each (tensorwise, FP32 scalars),
    into BF16: the GEMM of torchao's tensorwise FP8 training recipe. The second operand is
    column-major, as the FP8 GEMMs (cuBLASLt, hipBLASLt) take it."""
    if dtype not in FP8_DTYPES.values():
        raise UsageError(f"scaled_mm multiplies FP8 matrices ({', '.join(FP8_DTYPES)}), "
                         f"not {dtype}")
    (m, k), (_, n) = shapes.input1, shapes.second
    first = _random_input((m, k), torch.bfloat16, device).to(dtype)
    second = _random_input((n, k), torch.bfloat16, device).to(dtype).t()
    scale = torch.ones((), dtype=torch.float32, device=device)
    return lambda: torch._scaled_mm(first, second, scale_a=scale, scale_b=scale,
                                    out_dtype=torch.bfloat16)


def _bmm_check(shapes: Shapes, inplace: bool) -> None:
    _require_rank(shapes.input1, 3, "bmm's input1 (B-M-K)")
    _require_rank(shapes.second, 3, "bmm's input2 (B-K-N)")
    if shapes.input1[0] != shapes.second[0]:
        raise UsageError(f"bmm batch sizes differ: {shapes.input1[0]} and {shapes.second[0]}")
    _matmul_dims(shapes)


def _conv_output_hw(shapes: Shapes) -> tuple[int, int]:
    # Stride 1, padding k//2 on each side: 'same' size for the odd kernels networks use.
    (_, _, height, width), (_, _, kernel_h, kernel_w) = shapes.input1, shapes.second
    return height + 2 * (kernel_h // 2) - kernel_h + 1, width + 2 * (kernel_w // 2) - kernel_w + 1


def _conv2d_check(shapes: Shapes, inplace: bool) -> None:
    _require_rank(shapes.input1, 4, "conv2d's input1 (N-C-H-W)")
    _require_rank(shapes.second, 4, "conv2d's weight, input2 (Cout-C-kH-kW)")
    if shapes.input1[1] != shapes.second[1]:
        raise UsageError(f"conv2d channels differ: input has C={shapes.input1[1]}, weight "
                         f"expects C={shapes.second[1]}")
    (height, width), (kernel_h, kernel_w) = shapes.input1[2:], shapes.second[2:]
    if kernel_h > height or kernel_w > width:
        raise UsageError(f"conv2d's kernel {kernel_h}x{kernel_w} is larger than its "
                         f"{height}x{width} input: most taps would read padding, not the input; "
                         f"use a kernel at most the input's size")


def _conv2d_cost(shapes: Shapes, element_size: int, inplace: bool) -> OpCost:
    """2*N*Cout*Ho*Wo*C*kH*kW FLOPs: a multiply-add per weight tap per output element."""
    batch, channels = shapes.input1[:2]
    out_channels, _, kernel_h, kernel_w = shapes.second
    out_h, out_w = _conv_output_hw(shapes)
    output = batch * out_channels * out_h * out_w
    read = (numel(shapes.input1) + numel(shapes.second)) * element_size
    written = output * element_size
    return OpCost(bytes_read=read, bytes_written=written,
                  flops=2 * output * channels * kernel_h * kernel_w,
                  bytes_allocated=read + written)


def _conv2d(input_: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.conv2d(input_, weight, padding=(weight.shape[2] // 2, weight.shape[3] // 2))


def _sdpa_check(shapes: Shapes, inplace: bool) -> None:
    _require_rank(shapes.input1, 4, "sdpa's query, input1 (B-H-S-D)")
    _require_rank(shapes.second, 4, "sdpa's key and value, input2 (B-H-Skv-D)")
    query, key = shapes.input1, shapes.second
    if query[:2] != key[:2] or query[3] != key[3]:
        raise UsageError(f"sdpa query {format_shape(query)} and key/value {format_shape(key)} "
                         f"must agree on batch, heads and head dim (B-H-S-D)")


def _sdpa_cost(shapes: Shapes, element_size: int, inplace: bool) -> OpCost:
    """Q@K^T and P@V: 2 * (2*Sq*Skv*D) FLOPs per head, non-causal; the softmax is not counted
    (FlashAttention's convention). Reads Q, K, V once and writes the output (shape of Q)."""
    batch, heads, query_len, head_dim = shapes.input1
    key_len = shapes.second[2]
    query = numel(shapes.input1) * element_size
    key_value = 2 * numel(shapes.second) * element_size
    return OpCost(bytes_read=query + key_value, bytes_written=query,
                  flops=4 * batch * heads * query_len * key_len * head_dim,
                  bytes_allocated=2 * query + key_value)


def _sdpa_build(shapes: Shapes, dtype: torch.dtype, device: torch.device, inplace: bool):
    query = _random_input(shapes.input1, dtype, device)
    key = _random_input(shapes.second, dtype, device)
    value = _random_input(shapes.second, dtype, device)
    return lambda: F.scaled_dot_product_attention(query, key, value)


def _last_dim_cost(flops_per_element: int, parameters_per_channel: int):
    """Read the input (and per-channel parameters), write an output of the input's size."""
    def cost(shapes: Shapes, element_size: int, inplace: bool) -> OpCost:
        size = numel(shapes.input1) * element_size
        parameters = parameters_per_channel * shapes.input1[-1] * element_size
        return OpCost(bytes_read=size + parameters, bytes_written=size,
                      flops=flops_per_element * numel(shapes.input1),
                      bytes_allocated=2 * size + parameters)
    return cost


def _layer_norm_build(shapes: Shapes, dtype: torch.dtype, device: torch.device, inplace: bool):
    tensor = _random_input(shapes.input1, dtype, device)
    channels = shapes.input1[-1:]
    weight = _random_input(channels, dtype, device)
    bias = _random_input(channels, dtype, device)
    return lambda: F.layer_norm(tensor, channels, weight, bias)


def _softmax_build(shapes: Shapes, dtype: torch.dtype, device: torch.device, inplace: bool):
    tensor = _random_input(shapes.input1, dtype, device)
    return lambda: torch.softmax(tensor, dim=-1)


# ---------------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------------

def _binary(name: str, output_element_size: int | None = None) -> OpSpec:
    return OpSpec(name, "binary", MEMORY_BOUND, takes_input2=True, supports_inplace=True,
                  default_input1=GENERIC_SHAPE, default_input2=None, check=_binary_check,
                  cost=_binary_cost(output_element_size), build=_binary_build(name))


def _unary(name: str) -> OpSpec:
    return OpSpec(name, "unary", MEMORY_BOUND, takes_input2=False, supports_inplace=True,
                  default_input1=GENERIC_SHAPE, default_input2=None, check=_no_check,
                  cost=_unary_cost, build=_unary_build(name))


def _reduction(name: str) -> OpSpec:
    flops_per_element, result_size = _REDUCTIONS[name]
    return OpSpec(name, "reduction", MEMORY_BOUND, takes_input2=False, supports_inplace=False,
                  default_input1=GENERIC_SHAPE, default_input2=None, check=_no_check,
                  cost=_reduction_cost(flops_per_element, result_size),
                  build=_reduction_build(name))


BINARY_OPS = ("add", "mul", "div", "sub", "eq")
UNARY_OPS = ("exp", "relu", "tanh", "sqrt")
REDUCTION_OPS = ("sum", "prod", "norm", "max", "mean", "std", "var", "argmax", "argmin")

_SPECS: tuple[OpSpec, ...] = (
    *(_binary(name) for name in ("add", "mul", "div", "sub")),
    _binary("eq", output_element_size=1),  # writes torch.bool
    *(_unary(name) for name in UNARY_OPS),
    *(_reduction(name) for name in REDUCTION_OPS),
    # The device-memory bandwidth probe's kernel (microbench.ops.peaks), 1 GiB of fp32 by default:
    # far beyond any last-level cache, so the copy runs at the memory's rate.
    OpSpec("copy", "unary", MEMORY_BOUND, takes_input2=False, supports_inplace=False,
           default_input1="268435456", default_input2=None, check=_no_check,
           cost=_copy_cost, build=_copy_build),
    # The DLRM embedding table of the old model-ops list: 32709138 rows of 128, 851968 updated.
    OpSpec("add", "sparse", MEMORY_BOUND, takes_input2=True, supports_inplace=True,
           default_input1="32709138-128", default_input2="851968", check=_sparse_check,
           cost=_sparse_cost, build=_sparse_build),
    OpSpec("matmul", "compute", COMPUTE_BOUND, takes_input2=True, supports_inplace=False,
           default_input1="8192-8192", default_input2="8192-8192", check=_matmul_check,
           cost=_matmul_cost, build=_two_input_build(torch.matmul), compute_path="matmul"),
    # The FP8 GEMM (tensorwise scales), the measured peak of --precision fp8 runs; FP8 dtypes only.
    OpSpec("scaled_mm", "compute", COMPUTE_BOUND, takes_input2=True, supports_inplace=False,
           default_input1="8192-8192", default_input2="8192-8192", check=_scaled_mm_check,
           cost=_scaled_mm_cost, build=_scaled_mm_build, compute_path="matmul"),
    # Attention-score sized batched products.
    OpSpec("bmm", "compute", COMPUTE_BOUND, takes_input2=True, supports_inplace=False,
           default_input1="64-2048-2048", default_input2="64-2048-2048", check=_bmm_check,
           cost=_matmul_cost, build=_two_input_build(torch.bmm), compute_path="matmul"),
    # A ResNet-50 stage-2 3x3 convolution at batch 128.
    OpSpec("conv2d", "compute", COMPUTE_BOUND, takes_input2=True, supports_inplace=False,
           default_input1="128-256-56-56", default_input2="256-256-3-3", check=_conv2d_check,
           cost=_conv2d_cost, build=_two_input_build(_conv2d), compute_path="conv"),
    # Llama-like attention: batch 8, 32 heads, 4096 tokens, head dim 128.
    OpSpec("sdpa", "compute", COMPUTE_BOUND, takes_input2=True, supports_inplace=False,
           default_input1="8-32-4096-128", default_input2=None, check=_sdpa_check,
           cost=_sdpa_cost, build=_sdpa_build, compute_path="matmul"),
    # layer_norm per element: mean 1, variance 3 (subtract, square, add), normalise 2, affine 2.
    OpSpec("layer_norm", "compute", MEMORY_BOUND, takes_input2=False, supports_inplace=False,
           default_input1="16384-8192", default_input2=None, check=_no_check,
           cost=_last_dim_cost(8, parameters_per_channel=2), build=_layer_norm_build),
    # softmax per element: max 1, subtract 1, exp 1, sum 1, divide 1.
    OpSpec("softmax", "compute", MEMORY_BOUND, takes_input2=False, supports_inplace=False,
           default_input1="16384-8192", default_input2=None, check=_no_check,
           cost=_last_dim_cost(5, parameters_per_channel=0), build=_softmax_build),
)

ALIASES = {"scaled_dot_product_attention": "sdpa", "layernorm": "layer_norm"}

PREDEFINED_OPS = BINARY_OPS + UNARY_OPS + REDUCTION_OPS
COMPUTE_OPS = ("matmul", "bmm", "conv2d", "sdpa", "layer_norm", "softmax")

# The old tool's model-ops list, verbatim: transformer (BERT) and recommender (DLRM) shapes.
# (op, type, input1, input2); a trailing underscore means in place.
MODEL_OPS: tuple[tuple[str, str, str, str | None], ...] = (
    ("add", "binary", "32-128-1024", "32-128-1024"),
    ("add", "binary", "32-16-128-128", "32-1-1-128"),
    ("add", "binary", "64-128-1024", "64-128-1024"),
    ("add", "binary", "64-16-128-128", "64-1-1-128"),
    ("add", "binary", "4-512-1024", "4-512-1024"),
    ("add", "binary", "4-16-512-512", "4-1-1-512"),
    ("add", "binary", "8-512-1024", "8-512-1024"),
    ("add", "binary", "8-16-512-512", "8-1-1-512"),
    ("add_", "binary", "32-128-1024", "1024"),
    ("add_", "binary", "64-128-1024", "1024"),
    ("add_", "binary", "4-512-1024", "1024"),
    ("add_", "binary", "8-512-1024", "1024"),
    ("add_", "binary", "512-13", "512-13"),
    ("add_", "binary", "512-512", "512-512"),
    ("add_", "binary", "256-512", "256-512"),
    ("add_", "binary", "256-256", "256-256"),
    ("add_", "binary", "128-256", "128-256"),
    ("add_", "binary", "128-128", "128-128"),
    ("add_", "binary", "1024-480", "1024-480"),
    ("add_", "binary", "1024-1024", "1024-1024"),
    ("add_", "binary", "512-1024", "512-1024"),
    ("add_", "binary", "1-256", "1-256"),
    ("add_", "binary", "1", "1"),
    ("div", "binary", "32-16-128-128", "1"),
    ("div", "binary", "64-16-128-128", "1"),
    ("div", "binary", "4-16-512-512", "1"),
    ("div", "binary", "8-16-512-512", "1"),
    ("sum", "reduction", "32-128-1024", None),
    ("sum", "reduction", "64-128-1024", None),
    ("sum", "reduction", "4-512-1024", None),
    ("sum", "reduction", "8-512-1024", None),
    ("add_", "sparse", "32709138-128", "851968"),
    ("relu_", "unary", "32768-512", None),
    ("relu_", "unary", "32768-256", None),
    ("relu_", "unary", "32768-128", None),
    ("relu_", "unary", "32768-1024", None),
)


def known_op_names() -> list[str]:
    return sorted({spec.name for spec in _SPECS})


def resolve_op(name: str, op_type: str | None = None) -> tuple[OpSpec, bool]:
    """The spec for ``name`` (and ``op_type``), and whether the name asked for in place.

    ``add_`` is ``add`` in place. Without a type, the dense variant of a name wins (``add`` is
    binary unless ``--op-type sparse``).
    """
    inplace = name.endswith("_") and len(name) > 1
    base = ALIASES.get(name.rstrip("_"), name.rstrip("_"))
    candidates = [spec for spec in _SPECS if spec.name == base]
    if not candidates:
        raise UsageError(f"unknown op {name!r}; known ops: {', '.join(known_op_names())}")
    if op_type is not None:
        for spec in candidates:
            if spec.op_type == op_type:
                return spec, inplace
        types = ", ".join(spec.op_type for spec in candidates)
        raise UsageError(f"op {base!r} is not a {op_type} op (it is {types}); "
                         f"drop --op-type or pick another op")
    dense = [spec for spec in candidates if spec.op_type != "sparse"]
    return (dense or candidates)[0], inplace
