"""The quantized layers this tool defines (microbench.steps.quant_layers, issue 61): the inductor
int4 layout holds tinygemm's own values (torchao's tinygemm quantization) and multiplies them
the same way in both of its forms, a PhaseLinear runs its decode layer for a decode step's rows
and its prompt layer above, and the layers of a phase are what that phase runs."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from microbench.steps import low_precision, quant_layout
from microbench.steps.quant_layers import (INT4_REDUCE_ROWS, Int4InductorLinear, PhaseLinear,
                                           linear_layers)


def _linear(inputs=256, outputs=48, seed=0) -> nn.Linear:
    torch.manual_seed(seed)
    layer = nn.Linear(inputs, outputs, bias=False).to(torch.bfloat16)
    with torch.no_grad():
        layer.weight.normal_(0, 0.02)
    return layer


def test_the_inductor_int4_layout_holds_tinygemms_own_values():
    pytest.importorskip("torchao")
    from torchao.quantization.quant_primitives import (MappingType,
                                                       _choose_qparams_affine_tinygemm,
                                                       _dequantize_affine_tinygemm,
                                                       _quantize_affine_tinygemm)
    layer = _linear()
    weight = layer.weight.detach()
    scale, zero = _choose_qparams_affine_tinygemm(weight, MappingType.ASYMMETRIC, (1, 128),
                                                  torch.int32, 0, 15, scale_dtype=weight.dtype,
                                                  zero_point_dtype=weight.dtype)
    values = _quantize_affine_tinygemm(weight, (1, 128), scale, zero, torch.int32, 0, 15)
    expected = _dequantize_affine_tinygemm(values, (1, 128), scale, zero, torch.int32, 0, 15,
                                           output_dtype=torch.bfloat16)
    mine = Int4InductorLinear.from_linear(layer)
    assert torch.equal(mine.dequantize(), expected)
    # Stored as 4 bits a value, with a BF16 scale and zero point per group of 128.
    assert low_precision.weight_bytes(mine) == 48 * 256 // 2 + 2 * 48 * 2 * 2
    assert 0.05 < low_precision.weight_error(weight, mine) < 0.15


@pytest.mark.parametrize("rows", [1, INT4_REDUCE_ROWS, INT4_REDUCE_ROWS + 1, 32])
def test_both_forms_of_the_int4_product_compute_the_dequantized_product(rows):
    pytest.importorskip("torchao")
    mine = Int4InductorLinear.from_linear(_linear())
    x = torch.randn(rows, 256, dtype=torch.bfloat16)
    expected = F.linear(x.float(), mine.dequantize().float())
    got = mine(x)
    assert got.shape == (rows, 48) and got.dtype == torch.bfloat16
    assert float((got.float() - expected).norm() / expected.norm()) < 0.01
    batched = mine(x.reshape(1, rows, 256))
    assert batched.shape == (1, rows, 48)


def test_a_width_not_divisible_by_the_groups_is_refused():
    with pytest.raises(ValueError, match="divisible"):
        Int4InductorLinear(torch.zeros(8, 50, dtype=torch.uint8), torch.ones(8, 1),
                           torch.zeros(8, 1))


def test_a_phase_layer_runs_its_decode_layer_for_a_decode_steps_rows():
    decode, prompt = _linear(seed=1), _linear(seed=2)
    layer = PhaseLinear(decode, prompt, decode_rows=2)
    model = nn.Sequential(layer, nn.ReLU(), _linear(48, 256))
    for rows, expected in ((1, decode), (2, decode), (3, prompt)):
        x = torch.randn(rows, 256, dtype=torch.bfloat16)
        assert torch.equal(layer(x), expected(x))
        assert layer.phase_layer(rows) is expected
    assert [layer for _, layer in linear_layers(model, rows=2)] == [decode, model[2]]
    assert [name for name, _ in linear_layers(model)] == ["0", "0", "2"]
    assert low_precision.linear_count(model) == 2
    kernels = quant_layout.kernels(model, rows=1)
    assert [(k.tensor, k.layers) for k in kernels] == [("Tensor", 2)]


def test_what_the_inductor_layout_runs_depends_on_the_rows():
    pytest.importorskip("torchao")
    mine = Int4InductorLinear.from_linear(_linear())
    assert "reduction over the packed bytes" in quant_layout.describe_layer(mine, 1)[2]
    assert "dequantized to BF16" in quant_layout.describe_layer(mine, 128)[2]
    assert quant_layout.layout_of(mine) == "inductor"


def _tinygemm_layer(monkeypatch, inputs=1000, outputs=48, bias=False):
    """An Int4TinygemmLinear over a stand-in for torchao's tile-packed weight: the 'packed'
    tensor is a BF16 matrix padded as torchao pads (inputs to a multiple of 1024, a few spare
    output rows), and the kernel a product with it (tinygemm runs on CUDA and ROCm only)."""
    from types import SimpleNamespace

    from microbench.steps import quant_layers
    torch.manual_seed(1)
    padded = torch.randn(outputs + 8, 1024, dtype=torch.bfloat16)
    monkeypatch.setattr(quant_layers, "int4pack_mm",
                        lambda rows, packed, group, scale_and_zero: rows @ packed.t())
    weight = SimpleNamespace(qdata=padded, scale_and_zero=torch.ones(1), block_size=(1, 128),
                             shape=torch.Size((outputs, inputs)))
    offset = nn.Parameter(torch.randn(outputs, dtype=torch.bfloat16), requires_grad=False) \
        if bias else None
    layer = quant_layers.Int4TinygemmLinear.of(SimpleNamespace(weight=weight, bias=offset))
    return layer, padded[:outputs, :inputs], offset


@pytest.mark.parametrize("bias", [False, True])
def test_the_plain_tinygemm_layer_pads_the_input_and_trims_the_output_as_torchao_does(
        monkeypatch, bias):
    layer, dense, offset = _tinygemm_layer(monkeypatch, bias=bias)
    x = torch.randn(2, 3, 1000, dtype=torch.bfloat16)
    expected = x.reshape(6, 1000) @ dense.t()
    if bias:
        expected = expected + offset
    out = layer(x)
    assert out.shape == (2, 3, 48) and out.dtype == torch.bfloat16
    assert torch.allclose(out.reshape(6, 48).float(), expected.float(), rtol=1e-2, atol=1e-2)
    assert layer.packed_in == 1024 and layer.group == 128


def test_the_plain_tinygemm_layer_dequantizes_through_its_kernel_without_its_bias(monkeypatch):
    layer, dense, _ = _tinygemm_layer(monkeypatch, bias=True)
    assert torch.equal(layer.dequantize(), dense)
    assert quant_layout.layout_of(layer) == "tinygemm"
    assert quant_layout.describe_layer(layer)[:2] == ("Int4TinygemmLinear", "tile_packed_to_4d")
    assert low_precision.weight_error(dense, layer) == 0.0


class Int4Tensor:                       # torchao's names: the layer reads the class name
    """A stand-in for torchao's mslk int4 tensors (mslk runs on NVIDIA sm_90 only): BF16
    'values' whose product the fake operator below takes as a plain matrix product."""

    def __init__(self, values, scale, zero, **attributes):
        self.qdata, self.shape = values, values.shape
        self.scale = self.group_scale = scale
        self.zero_point = self.group_zero = zero
        self.__dict__.update(attributes)


class Int4PreshuffledTensor(Int4Tensor):
    pass


def _mslk_layer(monkeypatch, tensor=Int4Tensor, bias=False, **attributes):
    from types import SimpleNamespace

    from microbench.steps import quant_layers
    calls = []
    monkeypatch.setattr(quant_layers, "mslk_int4_mm", lambda layout, rows, values, scale, zero:
                        calls.append((layout, rows.shape)) or rows @ (values * scale + zero).t())
    torch.manual_seed(2)
    values = torch.randn(24, 64, dtype=torch.bfloat16)
    weight = tensor(values, torch.tensor(2.0, dtype=torch.bfloat16),
                    torch.tensor(0.5, dtype=torch.bfloat16), **attributes)
    offset = nn.Parameter(torch.randn(24, dtype=torch.bfloat16), requires_grad=False) \
        if bias else None
    holder = SimpleNamespace(weight=weight, bias=offset)
    return holder, values * 2 + 0.5, offset, calls


@pytest.mark.parametrize("tensor, layout", [(Int4Tensor, "plain"),
                                            (Int4PreshuffledTensor, "preshuffled")])
def test_an_mslk_int4_weight_becomes_plain_parameters_of_a_layer_calling_its_operator(
        monkeypatch, tensor, layout):
    """Issue 61: mslk's prompt layouts were torchao's subclasses, unwrapped in Python on every
    call of a compiled graph; the plain layer calls the same operator with the same values."""
    from microbench.steps.quant_layers import Int4MslkLinear
    holder, dense, offset, calls = _mslk_layer(monkeypatch, tensor, bias=True)
    assert Int4MslkLinear.takes(holder.weight)
    layer = Int4MslkLinear.of(holder)
    assert all(type(p) is nn.Parameter for p in layer.parameters())
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    out = layer(x)
    assert calls == [(layout, (6, 64))] and out.shape == (2, 3, 24)
    expected = (x.reshape(6, 64).float() @ dense.float().t() + offset.float()).reshape(2, 3, 24)
    assert torch.allclose(out.float(), expected, rtol=2e-2, atol=2e-1)
    assert torch.allclose(layer.dequantize().float(), dense.float(), rtol=1e-2, atol=1e-2)
    assert quant_layout.layout_of(layer) == layout
    assert quant_layout.describe_layer(layer)[:2] == ("Int4MslkLinear", layout)
    assert quant_layout.describe_layer(layer)[2].startswith("mslk bf16i4bf16_")


def test_an_mslk_weight_with_fp8_activations_stays_torchaos_tensor(monkeypatch):
    from microbench.steps.quant_layers import Int4MslkLinear
    fp8 = getattr(torch, "float8_e4m3fn", None)
    holder, *_ = _mslk_layer(monkeypatch, activation_dtype=fp8)
    assert not Int4MslkLinear.takes(holder.weight)
    holder, *_ = _mslk_layer(monkeypatch, act_pre_scale=torch.ones(64))
    assert not Int4MslkLinear.takes(holder.weight)
    holder, *_ = _mslk_layer(monkeypatch, Int4PreshuffledTensor)
    holder.weight.group_zero = None                 # FP8 activations' preshuffled form
    assert not Int4MslkLinear.takes(holder.weight)


def _int8_layer(bias=False):
    """An Int8WeightOnlyLinear over symmetric int8 values and BF16 row scales (gpt-fast's)."""
    from microbench.steps.quant_layers import Int8WeightOnlyLinear
    torch.manual_seed(3)
    values = torch.randint(-127, 128, (48, 64), dtype=torch.int8)
    scale = torch.rand(48, dtype=torch.float32) / 100
    offset = nn.Parameter(torch.randn(48, dtype=torch.bfloat16), requires_grad=False) \
        if bias else None
    return Int8WeightOnlyLinear(values, scale, torch.bfloat16, offset)


def test_the_gemlite_layer_keeps_gemlites_tensors_as_plain_parameters_and_adds_the_bias(
        monkeypatch):
    """gemlite's packed weight is the int8 values' transposed view: no copy of the weight."""
    from support import gemlite_fake

    from microbench.steps import quant_layers
    gemlite_fake.install(monkeypatch, quant_layout, quant_layers)
    unwrapped = _int8_layer(bias=True)
    layer = quant_layers.GemliteLinear.repack(unwrapped, torch.bfloat16)
    assert all(type(p) is nn.Parameter and not p.requires_grad for p in layer.parameters())
    assert layer.weight.data_ptr() == unwrapped.weight.data_ptr()
    assert layer.bias is unwrapped.bias
    x = torch.randint(-3, 4, (5, 64)).to(torch.bfloat16)
    assert torch.equal(layer(x), unwrapped(x))
    # as stored: the int8 weight, the BF16 scales, the bias and gemlite's meta scale
    assert low_precision.weight_bytes(layer) == 48 * 64 + 48 * 2 + 48 * 2 + 4


def test_a_gemlite_packing_that_changes_the_values_is_refused(monkeypatch):
    """Another gemlite that reorders or requantizes the weight cannot promise the unwrapped
    layer's numbers: its build fails, and auto leaves gemlite out in one line."""
    from support import gemlite_fake

    from microbench.steps import quant_layers
    gemlite_fake.install(monkeypatch, quant_layout, quant_layers)
    original = gemlite_fake.Packed.__init__

    def swapped(self, weight, scales, dtype, post_scale):
        original(self, weight, scales, dtype, post_scale)
        self.W_q = weight.flip(0).t()                       # rows in another order
    monkeypatch.setattr(gemlite_fake.Packed, "__init__", swapped)
    with pytest.raises(ValueError, match="did not keep the values and row scales as given"):
        quant_layers.GemliteLinear.repack(_int8_layer(), torch.bfloat16)
    with pytest.raises(TypeError, match="repacks the unwrapped layout's layers"):
        quant_layers.GemliteLinear.repack(_linear(), torch.bfloat16)


def test_a_phase_layer_gives_a_phases_layer_the_buffered_input_it_asks_for():
    """int8's decode step reads the SwiGLU product as a buffer of its own (llama's
    materialized): where the prompt's layer is another layout, the phase layer still asks."""
    assert PhaseLinear(_int8_layer(), _linear(64, 48), decode_rows=1).materialize_input
    assert not PhaseLinear(_linear(64, 48), _linear(64, 48), decode_rows=1).materialize_input
