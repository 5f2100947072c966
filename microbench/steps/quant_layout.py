"""Which kernel a ``--quantize`` format runs on this device: the layout (torchao's packing or
scale granularity) chosen by ``--quant-layout`` or, by default, the fastest this device and the
installed libraries can run; then, after ``quantize_``, what actually ran, read from the model's
weights (their tensor subclass and its attributes), never assumed.

The layouts (torchao 0.18, ``torchao/quantization/quant_api.py``):

* int4wo: ``preshuffled`` (``Int4PreshuffledTensor``: mslk's ``bf16i4bf16_shuffled``, the
  former FBGEMM GenAI kernels, built for sm_90 and newer; needs the ``mslk`` package, as
  torchao's ``_is_mslk_available`` finds it, and a fake kernel for torch.compile, which
  :func:`mslk_traceable` registers where mslk 1.1.x lacks it), ``tinygemm`` (``Int4TilePackedTo4dTensor``:
  torch's own ``_weight_int4pack_mm``, 8-wide tiles on NVIDIA and 16 on ROCm), ``plain``
  (``Int4Tensor``: mslk's ``bf16i4bf16_rowwise`` on plain packing). torchao 0.18 has no Marlin int4 layout.
* int8wo: as float8wo (auto: ``rowwise``), or, asked for by name on GPUs, ``unwrapped``
  (torchao's per-row int8 values and scales as plain tensors of an
  :class:`~microbench.steps.int8_linear.Int8WeightOnlyLinear`, gpt-fast's form without
  torchao's tensor subclass: see that module for why; opt-in until its speed is measured).
* int8wo, float8wo: ``rowwise`` (one scale per output row, torchao's default) or
  ``tensorwise``; the weight is cast to BF16 inside the product, which inductor fuses when it
  writes the product as a reduction (one token's decode step: coordinate-descent tuning,
  :data:`QUANTIZED_INDUCTOR`).
* float8dq: ``rowwise`` (``torch._scaled_mm`` with a scale per row of each side: sm_90 and newer
  on NVIDIA, MI300 on ROCm) or ``tensorwise`` (sm_89 too).

Example::

    facts = QuantDevice.of(device)
    layout = choose_layout("int4wo", "auto", facts)          # 'preshuffled' on an H100 with mslk
    layout, note = runnable_layout("int4wo", "auto", facts)  # its mslk operator traceable, or
                                                             # the next layout and why
    config = torchao_config("int4wo", layout, facts)
    quantize_(model, config)
    kernels(model)        # [Kernel('Int4PreshuffledTensor', 'preshuffled', 'mslk ...', 113)]
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from collections import Counter
from dataclasses import dataclass

import torch
from torch import nn

from microbench.platform import devices
from microbench.platform.errors import UsageError
from microbench.settings.compile_options import with_inductor_settings
from microbench.settings.precision import LAYOUTS_OF, QUANT_LAYOUT_CHOICES
from microbench.steps.int8_linear import Int8WeightOnlyLinear

# torchao's recommended inductor settings for quantized models
# (torchao.quantization.utils.recommended_inductor_config_setter), applied to the compiled
# prefill and decode steps of a quantized run only, as torch.compile options, instead of by
# quantize_ to the whole process (every config here is built with set_inductor_config=False).
# Left out: coordinate_descent_check_all_directions, which doubles the coordinate-descent
# search of every kernel (minutes of compile on llama_1b's int8 products) for little speed;
# a user who wants it gives it in --compileContext's options, which win.
QUANTIZED_INDUCTOR = {"coordinate_descent_tuning": True, "force_fuse_int_mm_with_mul": True}
# The exhaustive searches that trade compile time for speed, named in the summary when asked for.
EXHAUSTIVE_SEARCHES = ("max_autotune", "max_autotune_gemm", "coordinate_descent_check_all_directions")

MSLK_INSTALL = "pip install mslk-cuda (FBGEMM GenAI's kernels, which torchao 0.18 calls mslk)"


@dataclass(frozen=True)
class QuantDevice:
    """What the layout choice reads of the device and of the installed libraries."""

    vendor: devices.Vendor
    capability: tuple[int, int] | None      # NVIDIA's compute capability; None elsewhere
    fp8: bool                               # FP8 matrix units
    mslk: bool                              # the mslk package can be imported

    @classmethod
    def of(cls, device: torch.device) -> "QuantDevice":
        return cls(vendor=devices.vendor(device),
                   capability=devices.compute_capability(device),
                   fp8=bool(devices.fp8_formats(device)), mslk=mslk_installed())

    @property
    def gpu(self) -> bool:
        return self.vendor in (devices.Vendor.NVIDIA, devices.Vendor.AMD)

    def at_least(self, capability: tuple[int, int]) -> bool:
        return self.capability is not None and self.capability >= capability


def mslk_installed() -> bool:
    try:
        return importlib.util.find_spec("mslk") is not None
    except (ImportError, ValueError):
        return False


def why_not(quantize: str, layout: str, facts: QuantDevice) -> str | None:
    """Why ``facts``' device cannot run ``quantize`` in ``layout``; None when it can."""
    if quantize == "int4wo":
        if not facts.gpu:
            return "int4 weight-only kernels need a GPU"
        if layout in MSLK_OPS:
            # mslk's int4 products (preshuffled and plain alike) are CUTLASS kernels built
            # for Hopper's WGMMA (``cutlass::arch::Sm90`` in csrc/gemm/cutlass/bf16i4bf16*.cu,
            # mslk 1.1.0), which neither Ampere/Ada nor Blackwell runs.
            if facts.vendor is not devices.Vendor.NVIDIA:
                return f"mslk's {layout} int4 kernel is built for NVIDIA GPUs"
            if not (facts.capability and facts.capability[0] == 9):
                return (f"mslk's {layout} int4 kernel is built for sm_90 (Hopper: H100, "
                        f"H200) only")
            if not facts.mslk:
                return f"the {layout} int4 layout runs mslk's kernels: {MSLK_INSTALL}"
    if quantize == "int8wo" and layout == "unwrapped" and not facts.gpu:
        return ("plain int8 tensors are for GPUs (on the CPU inductor turns torchao's Int8Tensor "
                "product into its own int8 kernel)")
    if quantize == "float8dq" and layout == "rowwise":
        if facts.vendor is devices.Vendor.NVIDIA and not facts.at_least((9, 0)):
            return "torch._scaled_mm with rowwise scales needs sm_90 (H100) or newer"
    return None


def choose_layout(quantize: str, requested: str, facts: QuantDevice) -> str:
    """The layout ``quantize`` runs: ``requested``, or for "auto" the first of the format's
    layouts (fastest first) this device runs. A layout the format does not have, or the device
    cannot run, is refused in one line (exit 2)."""
    layouts = LAYOUTS_OF[quantize]
    if requested == "auto":
        reasons = [why_not(quantize, layout, facts) for layout in layouts]
        for layout, reason in zip(layouts, reasons):
            if reason is None:
                return layout
        raise UsageError(f"--quantize {quantize} cannot run on this device: {reasons[-1]}")
    if requested not in layouts:
        known = "" if requested in QUANT_LAYOUT_CHOICES else " (unknown layout)"
        raise UsageError(f"--quant-layout {requested}{known} is not a layout of --quantize "
                         f"{quantize}: choose from auto, {', '.join(layouts)}")
    reason = why_not(quantize, requested, facts)
    if reason is not None:
        raise UsageError(f"--quant-layout {requested} for --quantize {quantize}: {reason}; "
                         f"--quant-layout auto picks one this device runs")
    return requested


# ---------------------------------------------------------------- mslk's fake kernels

# The mslk operator each mslk layout's linear layers call with BF16 activations (torchao 0.18:
# Int4PreshuffledTensor's and Int4Tensor's F.linear). torch.compile traces an operator through
# its fake (meta) kernel, which says what the output looks like without running it.
MSLK_OPS = {"preshuffled": "bf16i4bf16_shuffled", "plain": "bf16i4bf16_rowwise"}
MSLK_NAMESPACE = "mslk"
# Libraries this process registered fake kernels through, kept alive (a Library that is
# garbage-collected takes its registrations with it): namespace -> torch.library.Library.
_FAKE_LIBRARIES: dict = {}
# Operators this process gave a fake kernel, as "namespace::name".
_REGISTERED: list[str] = []


def int4_product_fake(X: torch.Tensor, W: torch.Tensor, w_scale_group: torch.Tensor,
                      w_zero_group: torch.Tensor) -> torch.Tensor:
    """The output of mslk's ``bf16i4bf16_shuffled`` and ``bf16i4bf16_rowwise`` without running
    them: BF16, X's leading dimensions flattened (M, or B times M) by W's rows (N: the packed weight is
    (N, K/2) int8). The contract is mslk's own meta kernel for ``bf16i4bf16_rowwise``
    (csrc/gemm/gemm_ops.cpp, v1.1.0), which mslk 1.1.x meant for the shuffled one too: it
    registered it as ``bf116i4bf16_shuffled``, a name no operator has, and mslk 1.2.0-rc1 moved
    both to Python (mslk/gemm/_meta.py) with this shape."""
    if X.dim() not in (2, 3) or W.dim() != 2:
        raise RuntimeError(f"mslk's int4 product takes a 2- or 3-dimensional X and a "
                           f"2-dimensional W, not {X.dim()} and {W.dim()}")
    # The kernel flattens X's leading dimensions (torchao reshapes its output back): a 3-D
    # fake here failed inductor's size assertion on an H200 (2026-11-27).
    return X.new_empty((X.numel() // X.shape[-1], W.shape[0]), dtype=torch.bfloat16)


def _has_fake(qualname: str, op) -> bool:
    """Whether torch.compile can trace ``op``: a fake or meta kernel, however registered
    (torch._library.utils.has_fake_kernel where this torch has it)."""
    check = getattr(importlib.import_module("torch._library.utils"), "has_fake_kernel", None)
    if check is not None:
        return bool(check(op))
    if torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "Meta"):
        return True
    registry = importlib.import_module("torch._library.simple_registry")
    return registry.singleton.find(qualname).fake_impl.kernel is not None


def mslk_traceable(layout: str) -> str | None:
    """Make the mslk operator ``layout`` calls traceable by torch.compile; None when it is,
    else why it cannot be (in words). A fake kernel is registered here only where the installed
    mslk has none: mslk 1.1.x has none for ``bf16i4bf16_shuffled`` (the preshuffled layout),
    and torch.compile then stops with "attempted to run this operator with Meta tensors, but
    there was no fake impl" (issue 53). A layout without an mslk operator needs nothing."""
    name = MSLK_OPS.get(layout)
    if name is None:
        return None
    try:
        mslk = importlib.import_module("mslk")       # loads mslk's operators
    except Exception as error:           # noqa: BLE001 (a broken install: fall back, say why)
        return f"mslk fails to import ({type(error).__name__}: {_one_line(error)})"
    version = getattr(mslk, "__version__", "of unknown version")
    namespace = getattr(torch.ops, MSLK_NAMESPACE)
    qualname = f"{MSLK_NAMESPACE}::{name}"
    try:
        op = getattr(namespace, name).default
    except (AttributeError, RuntimeError):
        return f"the installed mslk ({version}) has no operator {qualname}"
    if _has_fake(qualname, op):
        return None
    try:
        library = _FAKE_LIBRARIES.get(MSLK_NAMESPACE)
        if library is None:
            library = _FAKE_LIBRARIES[MSLK_NAMESPACE] = torch.library.Library(MSLK_NAMESPACE,
                                                                             "FRAGMENT")
        torch.library.register_fake(qualname, int4_product_fake, lib=library)
    except Exception as error:           # noqa: BLE001 (any refusal: fall back, say why)
        return (f"the installed mslk ({version}) has no fake kernel for {qualname} and "
                f"registering one failed ({type(error).__name__}: {_one_line(error)})")
    _REGISTERED.append(qualname)
    return None


def _one_line(error: Exception) -> str:
    """An exception's text on one line, bounded (mslk logs its load failures over several)."""
    return " ".join(str(error).split())[:200] or type(error).__name__


def registered_fakes() -> tuple[str, ...]:
    """The mslk operators this process gave a fake kernel (none where mslk has its own)."""
    return tuple(_REGISTERED)


def fake_note(layout: str) -> str | None:
    """A line for the summary where this process gave ``layout``'s mslk operator the fake
    kernel the installed mslk lacks; None otherwise."""
    name = MSLK_OPS.get(layout)
    qualname = f"{MSLK_NAMESPACE}::{name}"
    if name is None or qualname not in _REGISTERED:
        return None
    version = str(getattr(sys.modules.get("mslk"), "__version__", "of unknown version"))
    why = (" (mslk 1.1.x registers it under a misspelled name)"
           if version.startswith("1.1.") else "")
    return (f"the installed mslk ({version}) has no fake kernel for {qualname}{why}; this run "
            f"registered one (BF16, X's rows by W's rows) so that torch.compile can trace it")


def runnable_layout(quantize: str, requested: str, facts: QuantDevice) -> tuple[str, str | None]:
    """The layout ``quantize`` runs and, where it is not the one :func:`choose_layout` picked,
    one line saying why: an mslk layout whose operator torch.compile cannot trace (no fake
    kernel, and none could be registered) falls back to the next of the format's layouts this
    device runs (tinygemm, then plain), asked for by name or by auto alike."""
    chosen = choose_layout(quantize, requested, facts)
    reason = mslk_traceable(chosen)
    if reason is None:
        return chosen, None
    for layout in LAYOUTS_OF[quantize]:
        if layout != chosen and why_not(quantize, layout, facts) is None \
                and mslk_traceable(layout) is None:
            return layout, (f"--quantize {quantize} runs layout {layout}, not {chosen}: "
                            f"{reason}")
    raise UsageError(f"--quantize {quantize} cannot run on this device: {reason}")


def torchao_config(quantize: str, layout: str, facts: QuantDevice):
    """torchao's configuration for ``quantize`` in ``layout`` (torchao imported by the caller).
    None of them changes inductor's settings (set_inductor_config=False): the compile step
    applies :data:`QUANTIZED_INDUCTOR` to the quantized run's own graphs."""
    from torchao.quantization import (Float8DynamicActivationFloat8WeightConfig,
                                      Float8WeightOnlyConfig, Int4WeightOnlyConfig,
                                      Int8WeightOnlyConfig, PerRow, PerTensor)
    # unwrapped: torchao's per-row quantization, then int8_linear.unwrap (quantize_measured).
    granularity = PerTensor() if layout == "tensorwise" else PerRow()
    if quantize == "int4wo":
        packing = {"preshuffled": "preshuffled", "tinygemm": "tile_packed_to_4d",
                   "plain": "plain"}[layout]
        # tinygemm's tiles: 8 wide on NVIDIA, 16 on ROCm (torchao's int4_tile_packed_ntile).
        ntile = 16 if facts.vendor is devices.Vendor.AMD else 8
        return Int4WeightOnlyConfig(group_size=128, int4_packing_format=packing,
                                    int4_tile_packed_ntile=ntile, set_inductor_config=False)
    if quantize == "int8wo":
        return Int8WeightOnlyConfig(granularity=granularity, set_inductor_config=False)
    if quantize == "float8wo":
        return Float8WeightOnlyConfig(granularity=granularity, set_inductor_config=False)
    if quantize == "float8dq":
        return Float8DynamicActivationFloat8WeightConfig(granularity=granularity,
                                                         set_inductor_config=False)
    raise UsageError(f"unknown --quantize {quantize!r}")


# ---------------------------------------------------------------- what ran, read from the model

@dataclass(frozen=True)
class Kernel:
    """The kernel behind a group of linear layers, read from their weights."""

    tensor: str             # the weight's class: 'Int4TilePackedTo4dTensor', 'Tensor'
    packing: str            # the layout the weight is in: 'tile_packed_to_4d', 'rowwise'...
    kernel: str             # what multiplies it, in words
    layers: int

    def text(self) -> str:
        return f"{self.tensor} ({self.packing}: {self.kernel}) on {self.layers} layers"

    def to_dict(self) -> dict:
        return {"tensor": self.tensor, "packing": self.packing, "kernel": self.kernel,
                "layers": self.layers}


def _scales(weight) -> str:
    """rowwise or tensorwise, from the weight's block size (a row of the weight per scale, or
    the whole weight)."""
    block = list(getattr(weight, "block_size", []) or [])
    if block and block[0] == 1:
        return "rowwise"
    return "tensorwise" if block else "unknown scales"


def describe(weight: torch.Tensor) -> tuple[str, str, str]:
    """(class, packing, kernel) of one linear layer's weight."""
    name = type(weight).__name__
    if name == "Int4TilePackedTo4dTensor":
        return name, "tile_packed_to_4d", "torch's tinygemm _weight_int4pack_mm"
    if name == "Int4PreshuffledTensor":
        fp8 = getattr(weight, "activation_dtype", None) == getattr(torch, "float8_e4m3fn", None)
        return name, "preshuffled", ("mslk f8i4bf16_shuffled" if fp8 else
                                     "mslk bf16i4bf16_shuffled")
    if name == "Int4Tensor":
        return name, "plain", "mslk bf16i4bf16_rowwise"
    if name in ("Int8Tensor", "Float8Tensor"):
        dynamic = getattr(weight, "act_quant_kwargs", None) is not None
        if not dynamic:
            return name, _scales(weight), "weight cast to BF16 inside the product (inductor)"
        preference = getattr(weight, "kernel_preference", None)
        preference = getattr(preference, "value", preference)
        what = "torch._int_mm" if name == "Int8Tensor" else \
            f"FP8 product (torch._scaled_mm or mslk, kernel preference {preference})"
        return name, _scales(weight), what
    if name in ("Parameter", "Tensor"):
        return "Tensor", str(weight.dtype).replace("torch.", ""), "not quantized"
    return name, "unknown", "unknown to this tool"


def describe_layer(module: nn.Linear) -> tuple[str, str, str]:
    """(class, packing, kernel) of one linear layer: its weight's, or the layer's own where
    the layer, not a tensor subclass, holds the quantized weight."""
    if isinstance(module, Int8WeightOnlyLinear):
        return ("Int8WeightOnlyLinear", "unwrapped rowwise",
                "int8 weight cast to BF16 inside the product, row scales after (gpt-fast's "
                "form, inductor)")
    return describe(module.weight)


def kernels(model: nn.Module) -> tuple[Kernel, ...]:
    """Every linear layer's kernel, grouped: the quantized groups first, largest first."""
    seen = Counter(describe_layer(module) for module in model.modules()
                   if isinstance(module, nn.Linear))
    ordered = sorted(seen.items(), key=lambda item: (item[0][2] == "not quantized", -item[1]))
    return tuple(Kernel(*key, layers) for key, layers in ordered)


# Dynamo guards a tensor subclass's metadata with a Python call per weight per call of the
# compiled step (``x.__tensor_flatten__()[1] == saved``, torch/_dynamo/guards.py): 100-odd
# quantized weights cost a millisecond or more of host time on every decode step, more than
# a CUDA-graph replay of a 1B model's step takes on the GPU, so the step waits on the host.
# The weights do not change during a run, so a quantized run's graphs leave that guard out.
WEIGHT_METADATA_GUARD = "TENSOR_SUBCLASS_METADATA_MATCH"


def skip_weight_metadata_guards(entries) -> list[bool]:
    """torch.compile's ``guard_filter_fn``: keep every guard but the subclass-metadata ones."""
    return [entry.guard_type != WEIGHT_METADATA_GUARD for entry in entries]


def guard_filter_supported() -> bool:
    """torch.compile takes ``options={'guard_filter_fn': ...}`` (PyTorch 2.7 and newer, which
    also brought torch.compiler's ready-made filters)."""
    return hasattr(torch.compiler, "skip_guard_on_all_nn_modules_unsafe")


def keep_out_cpu_int8_lowering(gpu: bool) -> str | None:
    """Keep inductor from rewriting int8 weight-only products into ``aten._weight_int8pack_mm``
    in a process that compiles for a GPU (``gpu``); what happened, in words (None where it does
    not apply: the CPU, whose kernel it is). Called before every compile of a GPU run, int8 or
    not: a sweep's BF16 row compiles first in the process that then runs its int8 row.

    Inductor registers, with its oneDNN (mkldnn) fusions, a lowering meant for the CPU
    (torch/_inductor/fx_passes/quantization.py, ``_register_woq_mm_int8_pattern4``) whose
    check also admits CUDA tensors: ``mm(x, int8_weight.t().to(bf16)) * scale``, exactly
    torchao's Int8Tensor weight-only product, becomes ``_weight_int8pack_mm``, whose CUDA kernel
    is written for a few rows. A decode step's one-row products escape it (coordinate-descent
    tuning decomposes them first), a 128-token prefill's do not, which explains the 282 ms time to
    first token of issue 48 (BF16: 1.6 ms). The patterns are registered once per process, at
    the first compile, only while oneDNN is enabled: registering them once with oneDNN off
    leaves them out for the process (oneDNN's fusions are for CPU tensors; a GPU run has none).
    The product is then the cast and the BF16 GEMM inductor writes by itself."""
    if not gpu:
        return None
    if not torch._C._has_mkldnn:
        return "in use (this build registers it without oneDNN)"
    from torch._inductor.fx_passes import mkldnn_fusion
    register = getattr(mkldnn_fusion, "_mkldnn_fusion_init", None)
    if register is None or not hasattr(register, "cache_info"):
        return "not found in this torch"
    if register.cache_info().currsize:
        return ("kept out" if _KEPT_OUT else
                "in use (a graph compiled earlier in this process registered it)")
    enabled = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        register()
    finally:
        torch._C._set_mkldnn_enabled(enabled)
    _KEPT_OUT.append(True)
    return "kept out"


_KEPT_OUT: list[bool] = []          # this process registered inductor's patterns without it


def compile_extras() -> dict:
    """What a quantized run adds to its graphs' torch.compile options."""
    guards = ({"guard_filter_fn": skip_weight_metadata_guards} if guard_filter_supported()
              else {})
    return {**QUANTIZED_INDUCTOR, **guards}


# The prompt's products (a prefill of many rows: 128 in issue 53) of the layouts that cast the
# weight to BF16 inside the product. Inductor fuses that cast into a one-row product (the decode
# step's reduction) but not into cuBLAS's GEMM: for many rows it writes the whole weight in BF16
# and cuBLAS reads it back, about three times the bytes of BF16's prefill (issue 53: int8wo and
# float8wo at twice BF16's time to first token on llama3_8b). With inductor's GEMM templates
# (max_autotune_gemm) it can load the int8/FP8 weight in a Triton GEMM and cast it there
# (prologue fusion, on by default since PyTorch 2.7): the prefill reads the stored bytes.
# Above this many rows the prefill is compiled so; a decode step (one row a sequence) never is.
PREFILL_TEMPLATE_ROWS = 16
# Only the opt-in unwrapped int8 layout, so far: GEMM templates autotune every product shape, and
# on llama3_8b (4 H200s, 2026-11-27) that compile outran 400 s; rowwise, auto's int8 choice,
# keeps the compile that was measured, until the templates' gain is measured against that cost.
CAST_LAYOUTS = {"int8wo": ("unwrapped",)}


def prefill_extras(quantize: str, layout: str, rows: int, gpu: bool = True) -> dict:
    """What a quantized prefill of ``rows`` rows adds to its torch.compile options (on a GPU:
    the CPU's int8 products are inductor's own int8 kernel, which needs nothing)."""
    if gpu and layout in CAST_LAYOUTS.get(quantize, ()) and rows > PREFILL_TEMPLATE_ROWS:
        return {"max_autotune_gemm": True}
    return {}


def prefill_product(quantize: str, layout: str, rows: int, gpu: bool = True) -> str:
    """Which product a quantized prefill of ``rows`` rows runs, in words (the summary's)."""
    if prefill_extras(quantize, layout, rows, gpu):
        return (f"{rows} rows > {PREFILL_TEMPLATE_ROWS}: inductor's Triton GEMM templates "
                f"(max_autotune_gemm), the weight's cast fused into the GEMM's loads where "
                f"inductor finds it faster")
    if layout == "tinygemm":
        return (f"tinygemm's _weight_int4pack_mm on {rows} rows (a kernel for few rows; "
                f"this stack has no faster int4 GEMM without mslk)")
    if layout in MSLK_OPS:
        return f"mslk's {MSLK_OPS[layout]} on {rows} rows"
    return f"the decode step's product, on {rows} rows"


def compile_settings(decode_settings: dict, int8_lowering: str | None = None,
                     prefill: str | None = None) -> dict:
    """The settings a compiled quantized run applied, as the result file records them;
    ``prefill``: which product its prefill ran (:func:`prefill_product`)."""
    settings = {**decode_settings, **QUANTIZED_INDUCTOR,
                "weight_metadata_guards": ("skipped" if guard_filter_supported() else
                                           "kept (this torch.compile takes no guard_filter_fn)")}
    if int8_lowering is not None:
        settings["int8pack_mm_lowering"] = int8_lowering
    if prefill is not None:
        settings["prefill_product"] = prefill
    return settings


def quantized_compile_options(options: dict) -> dict:
    """torch.compile's arguments for a quantized model: :func:`compile_extras` under the
    user's own options (inductor's backend only)."""
    if options.get("backend", "inductor") != "inductor":
        return options
    return with_inductor_settings(options, compile_extras())


def compile_note(options: dict | None) -> str | None:
    """A line naming the exhaustive searches a quantized run's compile options ask for (they
    trade compile time for speed); None when there are none."""
    if not options:
        return None
    inductor = dict(options.get("options") or {})
    asked = [name for name in EXHAUSTIVE_SEARCHES if inductor.get(name)]
    if options.get("mode") in ("max-autotune", "max-autotune-no-cudagraphs"):
        asked.insert(0, f"mode {options['mode']}")
    if not asked:
        return None
    return (f"{', '.join(asked)} asked for: inductor searches every product's kernels, which "
            f"trades minutes of compile time for speed")
