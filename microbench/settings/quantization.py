"""Weight quantization (``--quantize``) and the layouts its weights can take (``--quant-layout``):
one table, one row per format and one per layout (issue 61).

Everything that names a format or a layout reads these rows: the command line's choices and help,
the result schema's enums (microbench/store/schema.py), the device rules that refuse what a device
cannot run and the candidates ``--quant-layout auto`` measures
(:mod:`microbench.steps.quant_layout`), and the builders that make the quantized layers
(:mod:`microbench.steps.low_precision`, ``BUILDERS`` by layout). No torch import here: the command
line answers ``--help`` and refusals before torch is imported.

A format's *candidates* are the layouts ``auto`` chooses among by measurement, per phase of the
run (a decode step's few rows, a prompt's many) and per linear shape: they hold the same
quantized values, so the choice changes the kernel, not the numbers. Its other layouts (another
scale granularity) are taken only by name, or where no candidate runs on the device. int8wo's
and float8wo's candidates on a GPU are ``unwrapped`` and, where gemlite imports, ``gemlite``
(the same values and row scales repacked for gemlite's Triton kernels). ``unwrapped`` stands
for torchao's ``rowwise`` too: its product is the same inductor kernel as torchao's tensor's (so
measuring products could not tell them apart); what differs is the host's work on every call of
a compiled step, where torchao's tensor subclass is flattened in Python per weight (llama3_8b's
int8 decode step on an H100: 5.45 ms of host time against 3.89, issue 61). Off a GPU they fall
back to ``rowwise``.

Example::

    tuple(FORMATS)                    # --quantize's choices, the schema's enum
    FORMATS["int4wo"].candidates      # ('tinygemm', 'preshuffled', 'plain', 'inductor')
    FORMATS["int8wo"].candidates      # ('unwrapped', 'gemlite')
    LAYOUTS["preshuffled"].rules      # ('nvidia', 'hopper', 'mslk')
    RULES["hopper"].format(kernel="mslk's preshuffled int4 kernel")
"""
from __future__ import annotations

from dataclasses import dataclass

MSLK_INSTALL = "pip install mslk-cuda (FBGEMM GenAI's kernels, which torchao 0.18 calls mslk)"
GEMLITE_INSTALL = ("pip install gemlite (Dropbox's Triton kernels for int8 and FP8 weights with "
                   "BF16 activations, which torchao 0.18's UIntxWeightOnlyConfig wraps)")

# What a format or a layout may need of the device and the installed libraries, in words that
# take the kernel's name (microbench.steps.quant_layout.why_not evaluates them).
RULES = {
    "gpu": "{kernel} needs a GPU",
    "fp8": "{kernel} needs FP8 matrix units",
    "nvidia": "{kernel} is built for NVIDIA GPUs",
    # mslk's int4 products are CUTLASS kernels built for Hopper's WGMMA (cutlass::arch::Sm90 in
    # csrc/gemm/cutlass/bf16i4bf16*.cu, mslk 1.1.0), which neither Ampere/Ada nor Blackwell runs.
    "hopper": "{kernel} is built for sm_90 (Hopper: H100, H200) only",
    "mslk": "{kernel} runs mslk's kernels: " + MSLK_INSTALL,
    "gemlite": "{kernel} needs the gemlite package: " + GEMLITE_INSTALL,
    "rowwise_scaled_mm": "torch._scaled_mm with rowwise scales needs sm_90 (H100) or newer",
}


@dataclass(frozen=True)
class Layout:
    """How a format's weights are stored, which decides the kernel that multiplies them."""

    name: str
    help: str                       # --quant-layout's help for it
    kernel: str                     # what multiplies it, as a refusal names it
    rules: tuple[str, ...] = ()     # RULES this layout needs beyond its format's


@dataclass(frozen=True)
class Format:
    """A ``--quantize`` choice: what it is, its layouts, and what auto measures."""

    name: str
    description: str                # what it runs, as torchao's and gpt-fast's benchmarks say
    layouts: tuple[str, ...] = ()   # every layout it takes; the first that runs is the fallback
    candidates: tuple[str, ...] = ()    # what auto chooses among (the same values in each)
    rules: tuple[str, ...] = ()     # RULES the format needs on any layout
    instead: str = ""               # what to run where the format cannot run


LAYOUT_TABLE = (
    Layout("auto", "the fastest layout this device and the installed libraries run, measured "
                   "at the model's own shapes for each phase (a prompt's rows, a decode "
                   "step's) before timing", "auto"),
    Layout("tinygemm", "int4wo: torch's tinygemm kernel (_weight_int4pack_mm), "
                       "tile_packed_to_4d packing", "torch's tinygemm int4 kernel"),
    Layout("preshuffled", "int4wo: mslk's (FBGEMM GenAI's) bf16i4bf16 kernel on preshuffled "
                          "weights; NVIDIA Hopper (sm_90), needs the mslk package",
           "mslk's preshuffled int4 kernel", ("nvidia", "hopper", "mslk")),
    Layout("plain", "int4wo: mslk's bf16i4bf16 kernel on plainly packed weights; Hopper, "
                    "needs mslk", "mslk's plain int4 kernel", ("nvidia", "hopper", "mslk")),
    Layout("inductor", "int4wo: tinygemm's int4 values two to a byte as plain tensors, the "
                       "product written for inductor (a reduction over the packed bytes for a "
                       "few rows; dequantize and a BF16 GEMM for many); GPUs",
           "the inductor int4 product"),
    Layout("unwrapped", "int8wo, float8wo: torchao's values and row scales as plain tensors "
                        "of the layer (no tensor subclass to unwrap on every call), multiplied "
                        "as torchao multiplies them (int8: gpt-fast's form); GPUs",
           "the unwrapped layout (plain tensors; on the CPU inductor turns torchao's "
           "Int8Tensor product into its own int8 kernel)", ("gpu",)),
    # A prompt's rows otherwise reach cuBLAS through a BF16 copy of the whole weight (issue 61:
    # int8's and FP8's time to first token 2.2x BF16's), and inductor's one-row reductions read
    # the weight at a third of the memory bandwidth: gemlite multiplies the 8-bit weight as it
    # is stored, whatever the rows.
    Layout("gemlite", "int8wo, float8wo: the unwrapped layout's values and row scales repacked "
                      "for gemlite's A16W8 Triton kernels (a GEMV for a few rows, a GEMM for "
                      "many, the 8-bit weight read as stored); GPUs, needs the gemlite package",
           "the gemlite layout (gemlite's A16W8 Triton kernels)", ("gpu", "gemlite")),
    Layout("rowwise", "int8wo, float8wo, float8dq: one scale per output row; the weight cast "
                      "to BF16 inside the product (weight-only), or torch._scaled_mm rowwise "
                      "(float8dq)", "one scale per row"),
    Layout("tensorwise", "int8wo, float8wo, float8dq: one scale per tensor",
           "one scale per tensor"),
)
LAYOUTS = {row.name: row for row in LAYOUT_TABLE}

FORMAT_TABLE = (
    Format("none", "no quantization"),
    Format("int8wo", "int8 weight-only, per output channel (Int8WeightOnlyConfig)",
           ("rowwise", "tensorwise", "unwrapped", "gemlite"), ("unwrapped", "gemlite")),
    Format("int4wo", "int4 weight-only, groups of 128 (Int4WeightOnlyConfig)",
           ("tinygemm", "preshuffled", "plain", "inductor"),
           ("tinygemm", "preshuffled", "plain", "inductor"), ("gpu",),
           "use --quantize int8wo on the CPU"),
    Format("float8wo", "float8 weight-only, per output channel (Float8WeightOnlyConfig)",
           ("rowwise", "tensorwise", "unwrapped", "gemlite"), ("unwrapped", "gemlite"), ("fp8",),
           "use --quantize int8wo here"),
    Format("float8dq", "float8 dynamic activations and weights, rowwise scales "
                       "(Float8DynamicActivationFloat8WeightConfig)",
           ("rowwise", "tensorwise"), ("rowwise",), ("fp8",), "use --quantize int8wo here"),
)
FORMATS = {row.name: row for row in FORMAT_TABLE}

# A layout's own rules beyond its format's, where they depend on the format (torch._scaled_mm
# takes row scales from sm_90 only; weight-only rowwise casts the weight and runs anywhere).
FORMAT_LAYOUT_RULES = {("float8dq", "rowwise"): ("rowwise_scaled_mm",)}


def rules_of(quantize: str, layout: str) -> tuple[str, ...]:
    """Every rule ``quantize`` in ``layout`` needs, the format's first."""
    return (*FORMATS[quantize].rules, *LAYOUTS[layout].rules,
            *FORMAT_LAYOUT_RULES.get((quantize, layout), ()))


def quantize_help() -> str:
    return "; ".join(f"{row.name} ({row.description})" for row in FORMATS.values())


def layout_help() -> str:
    return "; ".join(f"{row.name} ({row.help})" for row in LAYOUTS.values())
