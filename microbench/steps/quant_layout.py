"""Which kernels a ``--quantize`` format may run on this device, and what ran.

The formats, their layouts and the device rules are one table,
:mod:`microbench.settings.quantization`; this module applies it to a device. :func:`plan`
resolves ``--quantize`` and ``--quant-layout`` once, before the model is built (a layout the
device cannot run is refused in one line, exit 2), into the layouts the run may take: the one
named, or for ``auto`` every candidate this device and the installed libraries run, among which
:mod:`microbench.steps.quant_choice` measures. :func:`build` makes one layer in a layout; after
the model is built, what ran is read back from its layers (their weights' tensor subclass and its
attributes, or the tool's own layer types), never assumed.

The layouts (torchao 0.18, ``torchao/quantization/quant_api.py``):

* int4wo: ``tinygemm`` (torch's own ``_weight_int4pack_mm``, 8-wide tiles on NVIDIA and 16 on
  ROCm: torchao's ``Int4TilePackedTo4dTensor`` values, held as plain tensors of an
  :class:`~microbench.steps.quant_layers.Int4TinygemmLinear`, since unwrapping 161 tensor
  subclasses in Python on every call of the compiled decode step kept the GPU waiting: llama3_8b
  on an H100 host, 5.2 ms of host time a step against 2.3 plain, for 3.1 ms of kernels; the
  outputs are the same bits), ``preshuffled`` (``Int4PreshuffledTensor``: mslk's
  ``bf16i4bf16_shuffled``, the former FBGEMM GenAI kernels, built for sm_90; needs the ``mslk``
  package and a fake kernel for torch.compile, which :func:`mslk_traceable` registers where mslk
  1.1.x lacks it), ``plain`` (``Int4Tensor``: mslk's ``bf16i4bf16_rowwise``); both held, like
  tinygemm's, as plain tensors of an :class:`~microbench.steps.quant_layers.Int4MslkLinear`,
  and ``inductor``
  (:class:`~microbench.steps.quant_layers.Int4InductorLinear`: tinygemm's values as plain
  tensors, the product written for inductor). torchao 0.18 has no Marlin int4 layout.
* int8wo: ``unwrapped`` on GPUs (torchao's per-row values as plain tensors of an
  :class:`~microbench.steps.quant_layers.Int8WeightOnlyLinear`, gpt-fast's form), ``rowwise``
  (torchao's ``Int8Tensor``, a scale per output row) elsewhere, or ``tensorwise``.
* float8wo: ``unwrapped`` (a
  :class:`~microbench.steps.quant_layers.Float8WeightOnlyLinear`), ``rowwise`` or
  ``tensorwise``; the weight cast to BF16 inside the product, which inductor fuses when it
  writes a one-row product as a reduction (coordinate-descent tuning).
* int8wo and float8wo: ``gemlite`` on GPUs where the gemlite package imports (the unwrapped
  layer's values and scales repacked for gemlite's Triton kernels, a
  :class:`~microbench.steps.quant_layers.GemliteLinear`); :func:`gemlite_loads` imports it
  once, before anything is built, and sets the layout aside with a note where it fails.
* float8dq: ``rowwise`` (``torch._scaled_mm`` with a scale per row of each side: sm_90 and newer
  on NVIDIA, MI300 on ROCm) or ``tensorwise`` (sm_89 too).

Example::

    facts = QuantDevice.of(device)
    chosen = plan("int4wo", "auto", facts)    # QuantPlan('int4wo', 'auto', ('tinygemm', ...))
    layer = build(linear, "int4wo", "tinygemm", facts)      # a quantized copy of one layer
    kernels(model, rows=1)   # [Kernel('Int4TinygemmLinear', 'tile_packed_to_4d', ..., 161)]
"""
from __future__ import annotations

from typing import Any, Sequence

import dataclasses
import importlib
import importlib.util
import logging
import sys
from collections import Counter
from dataclasses import dataclass

import torch
from torch import nn

from microbench.platform import devices
from microbench.platform.errors import UsageError
from microbench.settings import quantization
from microbench.settings.compile_options import with_inductor_settings
from microbench.settings.quantization import FORMATS, LAYOUTS, RULES
from microbench.steps import quant_layers
from microbench.steps.quant_layers import (MSLK_OPS, Float8WeightOnlyLinear, GemliteLinear,
                                           Int4InductorLinear, Int4MslkLinear,
                                           Int4TinygemmLinear, Int8WeightOnlyLinear,
                                           linear_layers, unwrapped)

# torchao's recommended inductor settings for quantized models
# (torchao.quantization.utils.recommended_inductor_config_setter), applied to a quantized run's
# compiled decode step only, as torch.compile options, instead of by quantize_ to the whole
# process (every config here is built with set_inductor_config=False). Coordinate-descent tuning
# is what makes a one-row product a tuned reduction that reads the weight once, cast inside
# (inductor's mm decomposition for one row asks for it); a prompt's products have many rows and
# gain nothing from it, so the prefill is compiled without it, as BF16's is (issue 61: int8's
# compile did not finish in 230 s where BF16's took 94). Left out everywhere:
# coordinate_descent_check_all_directions, which doubles the search of every kernel; a user who
# wants it gives it in --compileContext's options, which win.
DECODE_QUANTIZED_INDUCTOR = {"coordinate_descent_tuning": True, "force_fuse_int_mm_with_mul": True}
PREFILL_QUANTIZED_INDUCTOR = {"force_fuse_int_mm_with_mul": True}
# The exhaustive searches that trade compile time for speed, named in the summary when asked for.
EXHAUSTIVE_SEARCHES = ("max_autotune", "max_autotune_gemm", "coordinate_descent_check_all_directions")


@dataclass(frozen=True)
class QuantDevice:
    """What the layout choice reads of the device and of the installed libraries."""

    vendor: devices.Vendor
    capability: tuple[int, int] | None      # NVIDIA's compute capability; None elsewhere
    fp8: bool                               # FP8 matrix units
    mslk: bool                              # the mslk package can be imported
    fp8_missing: str = ""                   # why there are no FP8 units, in words
    gemlite: bool = False                   # the gemlite package can be found

    @classmethod
    def of(cls, device: torch.device) -> "QuantDevice":
        return cls(vendor=devices.vendor(device),
                   capability=devices.compute_capability(device),
                   fp8=bool(devices.fp8_formats(device)), mslk=mslk_installed(),
                   fp8_missing=devices.no_fp8_reason(device) or "",
                   gemlite=gemlite_installed())

    @property
    def gpu(self) -> bool:
        return self.vendor in (devices.Vendor.NVIDIA, devices.Vendor.AMD)

    def at_least(self, capability: tuple[int, int]) -> bool:
        return self.capability is not None and self.capability >= capability


def mslk_installed() -> bool:
    return _found("mslk")


def gemlite_installed() -> bool:
    """Whether gemlite can be found, without importing it (its import reads the GPU)."""
    return _found("gemlite")


def _found(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _broken(rule: str, facts: QuantDevice) -> bool:
    """Whether ``facts``' device fails ``rule`` (a key of quantization.RULES)."""
    if rule == "gpu":
        return not facts.gpu
    if rule == "fp8":
        return not facts.fp8
    if rule == "nvidia":
        return facts.vendor is not devices.Vendor.NVIDIA
    if rule == "hopper":
        return not (facts.capability and facts.capability[0] == 9)
    if rule == "mslk":
        return not facts.mslk
    if rule == "gemlite":
        return not facts.gemlite
    if rule == "rowwise_scaled_mm":
        return facts.vendor is devices.Vendor.NVIDIA and not facts.at_least((9, 0))
    raise ValueError(f"unknown device rule {rule!r}")


def why_not(quantize: str, layout: str, facts: QuantDevice) -> str | None:
    """Why ``facts``' device cannot run ``quantize`` in ``layout``, in words; None when it can
    (the table's rules, the format's first)."""
    for rule in quantization.rules_of(quantize, layout):
        if _broken(rule, facts):
            kernel = (f"--quantize {quantize}" if rule in FORMATS[quantize].rules
                      else LAYOUTS[layout].kernel)
            return RULES[rule].format(kernel=kernel)
    return None


def format_refusal(quantize: str, facts: QuantDevice) -> str | None:
    """The line that refuses ``quantize`` on this device whatever its layout (int4 on the CPU,
    FP8 without FP8 units); None where the format itself can run here."""
    for rule in FORMATS[quantize].rules:
        if _broken(rule, facts):
            why = f", and {facts.fp8_missing}" if rule == "fp8" and facts.fp8_missing else ""
            return (f"{RULES[rule].format(kernel=f'--quantize {quantize}')}{why}: "
                    f"{FORMATS[quantize].instead}")
    return None


@dataclass(frozen=True)
class QuantPlan:
    """``--quantize`` and ``--quant-layout`` resolved for this device, once (the run's spec
    carries it): the layouts the run may take, and why any other was set aside."""

    quantize: str
    requested: str                      # "auto" or the layout named
    layouts: tuple[str, ...]            # the one named, or auto's candidates this device runs
    notes: tuple[str, ...] = ()         # a layout set aside, and why
    facts: QuantDevice = dataclasses.field(kw_only=True)     # the device it was planned for

    @property
    def measured(self) -> bool:
        """auto with more than one candidate: the layouts are measured at the model's shapes."""
        return len(self.layouts) > 1


def plan(quantize: str, requested: str, facts: QuantDevice) -> QuantPlan:
    """The layouts ``quantize`` may run here: ``requested``, or for "auto" every candidate of
    the format this device and the installed libraries run (a layout whose library cannot
    serve it, :func:`cannot_load`, is set aside with a note), else the first of its layouts
    that runs. A layout the format does not have, or the device cannot run, is refused in one
    line (exit 2); a named layout whose library cannot serve it falls back to auto's choice,
    with a note. What gemlite said as it was imported is a note where gemlite may run."""
    form = FORMATS[quantize]
    refusal = format_refusal(quantize, facts)
    if refusal is not None:
        raise UsageError(refusal)
    if requested != "auto":
        if requested not in form.layouts:
            known = "" if requested in LAYOUTS else " (unknown layout)"
            raise UsageError(f"--quant-layout {requested}{known} is not a layout of --quantize "
                             f"{quantize}: choose from auto, {', '.join(form.layouts)}")
        reason = why_not(quantize, requested, facts)
        if reason is not None:
            raise UsageError(f"--quant-layout {requested} for --quantize {quantize}: {reason}; "
                             f"--quant-layout auto picks one this device runs")
        untraceable = cannot_load(requested)
        if untraceable is None:
            return QuantPlan(quantize, requested, (requested,), gemlite_notes((requested,)),
                             facts=facts)
        fallback = plan(quantize, "auto", facts)
        return dataclasses.replace(fallback, requested=requested, notes=(
            f"--quant-layout {requested} cannot run: {untraceable}; auto's layouts instead",
            *fallback.notes))
    runnable, notes = [], []
    for layout in form.candidates:
        if why_not(quantize, layout, facts) is not None:
            continue
        untraceable = cannot_load(layout)
        if untraceable is not None:
            notes.append(f"--quantize {quantize} leaves out layout {layout}: {untraceable}")
            continue
        runnable.append(layout)
    if not runnable:
        runnable = [layout for layout in form.layouts
                    if why_not(quantize, layout, facts) is None
                    and cannot_load(layout) is None][:1]
    if not runnable:
        reasons = [why_not(quantize, layout, facts) or cannot_load(layout)
                   for layout in form.layouts]
        raise UsageError(f"--quantize {quantize} cannot run on this device: {reasons[-1]}")
    return QuantPlan(quantize, "auto", tuple(runnable), (*notes, *gemlite_notes(runnable)),
                     facts=facts)


def cannot_load(layout: str) -> str | None:
    """Why the library ``layout`` runs cannot serve it in this process, in words (mslk's
    operator cannot be traced, gemlite fails to import); None where it can, or where the
    layout needs no library."""
    return gemlite_loads() if layout == "gemlite" else mslk_traceable(layout)


# ---------------------------------------------------------------- gemlite

# gemlite's custom op (gemlite/core.py, gemlite 0.6), registered with its fake kernel when
# gemlite is imported.
GEMLITE_NAMESPACE = "gemlite"
GEMLITE_OP = "forward_functional"
# What gemlite logged at its import, as 'logger LEVEL: message' (gemlite/core.py loads its
# tuned kernel settings for GPUs it knows by name, and says so: on an H100, configs/h100.json).
_GEMLITE_SAID: list[str] = []


class _Said(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        line = f"{record.name} {record.levelname}: {' '.join(record.getMessage().split())}"
        if line[:300] not in _GEMLITE_SAID:
            _GEMLITE_SAID.append(line[:300])


def gemlite_loads() -> str | None:
    """Import gemlite (its Triton kernels and the custom op it multiplies through, with that
    op's fake kernel, which torch.compile traces): None where it serves, else why not, in
    words. What it logs as it is imported is kept (:func:`gemlite_notes`), not printed before
    the run's header. ``import gemlite`` reads the GPU's name: call it on a GPU only."""
    logger = logging.getLogger("gemlite")
    said, propagate = _Said(logging.INFO), logger.propagate
    logger.addHandler(said)
    logger.propagate = False
    try:
        gemlite = importlib.import_module("gemlite")
    except Exception as error:           # noqa: BLE001 (a broken install: leave it out, say why)
        return f"gemlite fails to import ({error_text(error)})"
    finally:
        logger.removeHandler(said)
        logger.propagate = propagate
    version = getattr(gemlite, "__version__", "of unknown version")
    if not hasattr(getattr(gemlite, "helper", None), "A16W8"):
        return f"the installed gemlite ({version}) has no helper.A16W8"
    qualname = f"{GEMLITE_NAMESPACE}::{GEMLITE_OP}"
    try:
        op = getattr(getattr(torch.ops, GEMLITE_NAMESPACE), GEMLITE_OP).default
    except (AttributeError, RuntimeError):
        return f"the installed gemlite ({version}) has no operator {qualname}"
    if not _has_fake(qualname, op):
        return (f"the installed gemlite ({version}) has no fake kernel for {qualname}, "
                f"through which torch.compile traces it")
    return None


def gemlite_notes(layouts: Sequence[str]) -> tuple[str, ...]:
    """What gemlite said at its import, a line each, where ``layouts`` run it."""
    if "gemlite" not in layouts:
        return ()
    return tuple(f"gemlite at its import: {line}" for line in _GEMLITE_SAID)


def gemlite_kernel(rows: int | None) -> str:
    """The kernel gemlite runs for inputs of ``rows`` rows, as gemlite itself chooses it
    (gemlite.core.get_matmul_type; 0.6: a split-K GEMV up to 2 rows, a split-K GEMM below 64,
    a GEMM from 64); its rule in words where the rows or gemlite are unknown."""
    choose = getattr(sys.modules.get("gemlite.core"), "get_matmul_type", None)
    if rows is not None and choose is not None:
        try:
            return f"{choose(rows, 8)} kernel"
        except Exception:                # noqa: BLE001 (another gemlite's signature: the rule)
            pass
    return "kernels (a GEMV for a few rows, a GEMM for many, as gemlite chooses)"


# ---------------------------------------------------------------- mslk's fake kernels

# torch.compile traces an operator through its fake (meta) kernel, which says what the output
# looks like without running it: each mslk layout's operator (quant_layers.MSLK_OPS) needs one.
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


def _has_fake(qualname: str, op: object) -> bool:
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
        return f"mslk fails to import ({error_text(error)})"
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
                f"registering one failed ({error_text(error)})")
    _REGISTERED.append(qualname)
    return None


def error_text(error: Exception) -> str:
    """``Type: message`` on one line, the message bounded (mslk logs its load failures over
    several lines)."""
    message = " ".join(str(error).split())[:200]
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


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


def torchao_config(quantize: str, layout: str, facts: QuantDevice):
    """torchao's configuration for ``quantize`` in ``layout`` (torchao imported by the caller;
    ``unwrapped`` is torchao's rowwise, unwrapped after). None of them changes inductor's
    settings (set_inductor_config=False): the compile step applies
    :data:`DECODE_QUANTIZED_INDUCTOR` to the quantized run's own graphs."""
    from torchao.quantization import (Float8DynamicActivationFloat8WeightConfig,
                                      Float8WeightOnlyConfig, Int4WeightOnlyConfig,
                                      Int8WeightOnlyConfig, PerRow, PerTensor)
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


def build(layer: nn.Linear, quantize: str, layout: str, facts: QuantDevice) -> nn.Linear:
    """``layer`` quantized with ``quantize`` in ``layout``: a new module (torchao's quantize_
    runs on a copy), ``layer`` itself left as it was, BF16. The caller imports torchao."""
    if layout == "inductor":
        return Int4InductorLinear.from_linear(layer)
    if layout == "gemlite":         # the unwrapped layer's values, repacked: the same numbers
        return GemliteLinear.repack(build(layer, quantize, "unwrapped", facts),
                                    layer.weight.dtype)
    from torchao.quantization import quantize_
    copy = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None,
                     device="meta")
    copy.weight = nn.Parameter(layer.weight.detach().clone(), requires_grad=False)
    if layer.bias is not None:
        copy.bias = nn.Parameter(layer.bias.detach().clone(), requires_grad=False)
    quantize_(copy, torchao_config(quantize, layout, facts))
    if layout == "tinygemm":
        return Int4TinygemmLinear.of(copy)
    if Int4MslkLinear.takes(copy.weight):
        return Int4MslkLinear.of(copy)
    return unwrapped(copy) if layout == "unwrapped" else copy


# ---------------------------------------------------------------- what ran, read from the model

@dataclass(frozen=True)
class Kernel:
    """The kernel behind a group of linear layers, read from their weights."""

    tensor: str             # the weight's or the tool's layer's class: 'Int8Tensor', 'Tensor'
    packing: str            # the layout the weight is in: 'tile_packed_to_4d', 'rowwise'...
    kernel: str             # what multiplies it, in words
    layers: int

    def text(self) -> str:
        return f"{self.tensor} ({self.packing}: {self.kernel}) on {self.layers} layers"

    def to_dict(self) -> dict:
        return {"tensor": self.tensor, "packing": self.packing, "kernel": self.kernel,
                "layers": self.layers}


def _scales(weight: Any) -> str:
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


def describe_layer(module: nn.Linear, rows: int | None = None) -> tuple[str, str, str]:
    """(class, packing, kernel) of one linear layer: its weight's, or the layer's own where
    the layer, not a tensor subclass, holds the quantized weight; ``rows``: the rows it
    multiplies, where the kernel depends on them."""
    if isinstance(module, Int8WeightOnlyLinear):
        return ("Int8WeightOnlyLinear", "unwrapped rowwise",
                "int8 weight cast to BF16 inside the product, row scales after (gpt-fast's "
                "form, inductor)")
    if isinstance(module, Float8WeightOnlyLinear):
        return ("Float8WeightOnlyLinear", "unwrapped rowwise",
                "FP8 weight dequantized to BF16 inside the product (torchao's form, inductor)")
    if isinstance(module, GemliteLinear):
        kind = "FP8" if module.fp8 else "int8"
        how = ("FP8 weight times its FP32 row scale, cast to BF16, inside the product"
               if module.fp8 else "int8 weight cast to BF16 inside the product, row scales "
               "after it")
        return ("GemliteLinear", f"gemlite A16W8 {kind}",
                f"gemlite's Triton {gemlite_kernel(rows)} ({how})")
    if isinstance(module, Int4InductorLinear):
        few = rows is not None and rows <= quant_layers.INT4_REDUCE_ROWS
        many = rows is not None and not few
        kernel = ("int4 reduction over the packed bytes (inductor)" if few else
                  "int4 dequantized to BF16 (inductor), then a BF16 GEMM" if many else
                  "inductor: a reduction over the packed bytes up to "
                  f"{quant_layers.INT4_REDUCE_ROWS} rows, dequantize and a BF16 GEMM above")
        return "Int4InductorLinear", "inductor", kernel
    if isinstance(module, Int4TinygemmLinear):
        return ("Int4TinygemmLinear", "tile_packed_to_4d",
                "torch's tinygemm _weight_int4pack_mm (plain tensors)")
    if isinstance(module, Int4MslkLinear):
        return ("Int4MslkLinear", module.layout,
                f"mslk {MSLK_OPS[module.layout]} (plain tensors)")
    return describe(module.weight)


def layout_of(module: nn.Linear) -> str:
    """The --quant-layout name of a quantized layer (what quantization.LAYOUTS calls it)."""
    if isinstance(module, (Int8WeightOnlyLinear, Float8WeightOnlyLinear)):
        return "unwrapped"
    if isinstance(module, GemliteLinear):
        return "gemlite"
    if isinstance(module, Int4InductorLinear):
        return "inductor"
    if isinstance(module, Int4TinygemmLinear):
        return "tinygemm"
    if isinstance(module, Int4MslkLinear):
        return module.layout
    _, packing, _ = describe(module.weight)
    return {"tile_packed_to_4d": "tinygemm"}.get(packing, packing)


def kernels(model: nn.Module, rows: int | None = None) -> tuple[Kernel, ...]:
    """Every linear layer's kernel for inputs of ``rows`` rows (a phase of the run; None: every
    layer each phase holds), grouped: the quantized groups first, largest first."""
    seen = Counter(describe_layer(module, rows) for _, module in linear_layers(model, rows))
    ordered = sorted(seen.items(), key=lambda item: (item[0][2] == "not quantized", -item[1]))
    return tuple(Kernel(*key, layers) for key, layers in ordered)


# Dynamo guards a tensor subclass's metadata with a Python call per weight per call of the
# compiled step (``x.__tensor_flatten__()[1] == saved``, torch/_dynamo/guards.py): 100-odd
# quantized weights cost a millisecond or more of host time on every decode step, more than
# a CUDA-graph replay of a 1B model's step takes on the GPU, so the step waits on the host.
# The weights do not change during a run, so a quantized run's graphs leave that guard out.
WEIGHT_METADATA_GUARD = "TENSOR_SUBCLASS_METADATA_MATCH"


def skip_weight_metadata_guards(entries: Sequence[Any]) -> list[bool]:
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


def compile_extras(phase: str) -> dict:
    """What a quantized run adds to the torch.compile options of its ``phase``'s graph
    ("decode": the one-row step; "prefill" or "forward": many rows)."""
    guards = ({"guard_filter_fn": skip_weight_metadata_guards} if guard_filter_supported()
              else {})
    settings = DECODE_QUANTIZED_INDUCTOR if phase == "decode" else PREFILL_QUANTIZED_INDUCTOR
    return {**settings, **guards}


def compile_settings(phases: dict[str, dict], int8_lowering: str | None = None) -> dict:
    """The settings a compiled quantized run applied, as the result file records them:
    ``phases``: each compiled phase's inductor settings (the user's under them)."""
    settings = {"phases": {phase: {**options, **{key: value for key, value in
                                                   compile_extras(phase).items()
                                                   if key != "guard_filter_fn"}}
                           for phase, options in phases.items()},
                "weight_metadata_guards": ("skipped" if guard_filter_supported() else
                                           "kept (this torch.compile takes no guard_filter_fn)")}
    if int8_lowering is not None:
        settings["int8pack_mm_lowering"] = int8_lowering
    return settings


def quantized_compile_options(options: dict, phase: str = "forward") -> dict:
    """torch.compile's arguments for a quantized model's ``phase``: :func:`compile_extras` under
    the user's own options (inductor's backend only)."""
    if options.get("backend", "inductor") != "inductor":
        return options
    return with_inductor_settings(options, compile_extras(phase))


def product_compile_options(options: dict | None, phase: str,
                            settings: dict | None = None) -> dict | None:
    """torch.compile's arguments to time one quantized product as ``phase``'s graph compiles
    it (the user's options, the tool's ``settings`` and :func:`compile_extras`), without CUDA
    graphs (the measurement captures its own); None where the run does not compile with
    inductor."""
    if options is None or options.get("backend", "inductor") != "inductor":
        return None
    merged = with_inductor_settings(options, {**(settings or {}), **compile_extras(phase)})
    inductor = {key: value for key, value in merged["options"].items()
                if key != "triton.cudagraphs"}
    return {**merged, "options": inductor, "fullgraph": True, "dynamic": False}


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
