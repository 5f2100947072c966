"""A stand-in for gemlite on the CPU (gemlite needs CUDA and Triton): modules named ``gemlite``,
``gemlite.helper`` (``A16W8``, packing as gemlite 0.6's pre-quantized path packs) and
``gemlite.core`` (``get_matmul_type``, gemlite 0.6's rule), and a custom op with a fake kernel
in a namespace of the test's own (operators cannot be removed from a process, so each test
names a fresh one) whose CPU kernel does gemlite's arithmetic in plain torch: the weight
pre-scaled in the scales' dtype where gemlite pre-scales (``W_group_mode`` 2), the product, the
product scaled in the scales' dtype where gemlite post-scales (``channel_scale_mode`` 1)
(gemlite 0.6: triton_kernels/utils.py ``dequantize``, gemv_splitK_kernels.py)."""
from __future__ import annotations

import importlib.machinery
import sys
import types
import uuid

import torch
from torch.nn import functional as F

# gemlite's DType values of the dtypes used here (gemlite/dtypes.py, DTYPE_TO_TORCH)
DTYPES = {0: torch.float32, 1: torch.float16, 2: torch.bfloat16, 3: torch.float8_e4m3fn,
          4: torch.int8}
CODES = {dtype: code for code, dtype in DTYPES.items()}


def product(x, bias, tensor_args, meta_args, matmul_type=-1):
    """gemlite's forward_functional, its arithmetic in plain torch."""
    weight, scales = tensor_args[0], tensor_args[1]            # (in, out), (1, out)
    meta_dtype = DTYPES[meta_args[8]]
    channel_scale_mode, w_group_mode = meta_args[9], meta_args[10]
    w = weight.to(meta_dtype) * scales if w_group_mode == 2 else weight
    rows = x.reshape(-1, x.shape[-1])
    out = F.linear(rows, w.to(x.dtype).t())
    if channel_scale_mode == 1:
        out = out.to(meta_dtype) * scales
    out = out.to(x.dtype).reshape(*x.shape[:-1], weight.shape[1])
    return out if bias is None else out + bias


class Packed:
    """What A16W8.from_weights gives: get_tensor_args, get_meta_args."""

    def __init__(self, weight, scales, dtype, post_scale):
        out_features, in_features = weight.shape
        self.W_q = weight.t()                                   # gemlite keeps the values' view
        self.scales = scales.view(out_features, -1).t().contiguous()
        self.zeros = torch.tensor([[]], dtype=torch.int32)
        self.meta_scale = torch.tensor(0.0)
        self.W_group_mode, self.channel_scale_mode = (0, 1) if post_scale else (2, 0)
        self.meta = [0, 8, in_features, 255, 1, CODES[dtype], CODES[dtype], 0,
                     CODES[self.scales.dtype], self.channel_scale_mode, self.W_group_mode, 0]

    def get_tensor_args(self):
        return [self.W_q, self.scales, self.zeros, self.meta_scale]

    def get_meta_args(self):
        return list(self.meta)


def install(monkeypatch, quant_layout, quant_layers, fake_kernel=True, fails=None,
            said=()):
    """Put the fake gemlite in place: modules, the op (``fake_kernel``: with its fake kernel,
    as gemlite registers one), the layer's product through the op. ``fails``: an exception
    A16W8.from_weights raises; ``said``: what gemlite logs at its import. Returns the calls
    to A16W8 (its keyword arguments) and the op's namespace."""
    namespace = f"mbgemlite{uuid.uuid4().hex[:10]}"
    library = torch.library.Library(namespace, "DEF")
    library.define("forward_functional(Tensor x, Tensor? bias, Tensor[] tensor_args, "
                   "int[] meta_args, int matmul_type=-1) -> Tensor")
    library.impl("forward_functional", product, "CPU")
    if fake_kernel:
        def fake(x, bias, tensor_args, meta_args, matmul_type=-1):
            return x.new_empty((*x.shape[:-1], tensor_args[0].shape[1]))
        torch.library.register_fake(f"{namespace}::forward_functional", fake, lib=library)
    calls = []

    class A16W8:
        def __init__(self, device="cuda:0", dtype=None, fp8=None, fp32_scale=True,
                     post_scale=False):
            calls.append(dict(device=device, dtype=dtype, fp8=fp8, post_scale=post_scale))
            self.dtype, self.post_scale = dtype, post_scale

        def from_weights(self, weight, bias=None, scales=None):
            if fails is not None:
                raise fails
            return Packed(weight, scales, self.dtype, self.post_scale)

    def get_matmul_type(batch_size, W_nbits, mx_dtype=False):    # gemlite 0.6's rule, 8 bits
        return "GEMM" if batch_size >= 64 else "GEMM_SPLITK" if batch_size > 2 else \
            "GEMV_SPLITK"

    gemlite = _module("gemlite", __version__="0.6.0.fake", library=library)
    gemlite.helper = _module("gemlite.helper", A16W8=A16W8)
    gemlite.core = _module("gemlite.core", get_matmul_type=get_matmul_type)
    for name in ("gemlite", "gemlite.helper", "gemlite.core"):
        monkeypatch.setitem(sys.modules, name, getattr(gemlite, name.partition(".")[2])
                            if "." in name else gemlite)
    monkeypatch.setattr(quant_layout, "GEMLITE_NAMESPACE", namespace)
    monkeypatch.setattr(quant_layout, "_GEMLITE_SAID", list(said))
    op = getattr(torch.ops, namespace).forward_functional
    monkeypatch.setattr(quant_layers, "gemlite_product",
                        lambda x, tensor_args, meta_args: op(x, None, tensor_args, meta_args))
    return calls, namespace


def _module(name, **attributes):
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    for key, value in attributes.items():
        setattr(module, key, value)
    return module
