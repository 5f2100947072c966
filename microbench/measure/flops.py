"""Device peak rates (dense TFLOP/s and memory GB/s), and FLOP counting and MFU.

A percentage of peak is only as true as the peak it divides by, so every number in the table
below cites the vendor datasheet or product page it comes from, and the table holds **dense**
rates only: NVIDIA datasheets print tensor-core rates with 2:4 structured sparsity and mark them
with an asterisk ("Specifications 1/2 lower without sparsity"); we store half of those. AMD
Instinct datasheets print dense "matrix" rates beside the sparse ones; we store the dense ones.

Conventions:

* ``fp32`` is the vector (non-matrix) FP32 rate: what elementwise kernels and, on NVIDIA, an FP32
  GEMM with TF32 disabled can reach.
* ``fp32_matrix`` is the FP32 rate of AMD's matrix cores (MFMA), which hipBLASLt uses for FP32
  GEMMs; NVIDIA has no FP32 matrix path (None).
* ``tf32``, ``fp16``, ``bf16`` are tensor-core / matrix-core rates; None where the chip has no such
  path (V100 has neither TF32 nor BF16 tensor cores; MI100..MI250X have no TF32 (XF32) path;
  MI355X (CDNA 4) dropped it).
* ``fp8`` is the dense FP8 (E4M3/E5M2) matrix rate; None where the chip has none (V100, A100,
  MI100..MI250X) or where we have not checked a datasheet for it.
* ``memory_gbs`` is peak memory bandwidth in GB/s (10^9 bytes per second).
* One row describes what one ``torch.cuda`` device sees. An MI250X is two GCDs, and each GCD is
  a separate device with half the module's CUs and half its bandwidth, so its rows are per GCD.

Unknown devices get no peak (``lookup_peak`` returns None, never a guess: docs/architecture.md). A device
whose compute-unit count differs from the row's (an MI300X in CPX partition mode, an H100 MIG
slice) is unknown too.

Example::

    peak = peak_for_device(torch.device("cuda"))
    tflops = peak_tflops(peak, "bf16")      # None on an unknown device
"""
from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Callable, ContextManager, Sequence

import torch
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from microbench.platform.devices import is_gpu

PRECISIONS = ("fp32", "fp32_matrix", "tf32", "fp16", "bf16", "fp8", "fp64")


@dataclass(frozen=True)
class DevicePeak:
    """Dense peak rates of one device: TFLOP/s per precision, memory bandwidth in GB/s."""

    name: str
    fp32: float
    tf32: float | None
    fp16: float | None
    bf16: float | None
    memory_gbs: float
    source: str
    fp64: float | None = None
    fp32_matrix: float | None = None
    compute_units: int | None = None  # SMs (NVIDIA) or CUs (AMD) that torch reports
    fp8: float | None = None          # dense FP8 matrix rate


@dataclass(frozen=True)
class _Entry:
    pattern: re.Pattern
    peak: DevicePeak


def _entry(pattern: str, peak: DevicePeak) -> _Entry:
    # fullmatch, case-insensitive: "NVIDIA H200" must not match "NVIDIA H200 NVL" (a 600 W part
    # with lower clocks), nor "NVIDIA H100 80GB HBM3" a MIG slice "... MIG 1g.10gb".
    return _Entry(re.compile(pattern, re.IGNORECASE), peak)


# ----------------------------------------------------------------------------------------------
# AMD Instinct. AMD computes its peaks as CUs x FLOPs/clock/CU x peak engine clock; the products
# below reproduce the datasheet figures, which is how a reader can check them.
# ----------------------------------------------------------------------------------------------

# AMD Instinct MI100 datasheet / product page: 120 CUs at 1502 MHz. FP64 vector 11.5,
# FP32 vector 23.1, FP32 matrix 46.1, FP16 matrix 184.6, BF16 matrix 92.3 TFLOPs;
# HBM2 1.2288 TB/s. No TF32.
MI100 = DevicePeak(
    name="AMD Instinct MI100", fp32=23.1, tf32=None, fp16=184.6, bf16=92.3,
    memory_gbs=1228.8, fp64=11.5, fp32_matrix=46.1, compute_units=120,
    source="AMD Instinct MI100 accelerator datasheet")

# AMD Instinct MI210 datasheet / product page: 104 CUs at 1700 MHz. FP64 vector 22.6,
# FP32 vector 22.6, FP32 matrix 45.3, FP16 and BF16 matrix 181.0 TFLOPs; HBM2e 1.6384 TB/s.
MI210 = DevicePeak(
    name="AMD Instinct MI210", fp32=22.6, tf32=None, fp16=181.0, bf16=181.0,
    memory_gbs=1638.4, fp64=22.6, fp32_matrix=45.3, compute_units=104,
    source="AMD Instinct MI210 accelerator datasheet")

# AMD Instinct MI250X datasheet (whole OAM module, 2 GCDs, 220 CUs at 1700 MHz): FP64 vector
# 47.9, FP32 vector 47.9, FP32 matrix 95.7, FP16 and BF16 matrix 383.0 TFLOPs; HBM2e
# 3.2768 TB/s. torch sees each GCD as one device (110 CUs, 4 of the 8 HBM stacks): half of each.
MI250X_GCD = DevicePeak(
    name="AMD Instinct MI250X (one GCD)", fp32=23.95, tf32=None, fp16=191.5, bf16=191.5,
    memory_gbs=1638.4, fp64=23.95, fp32_matrix=47.85, compute_units=110,
    source="AMD Instinct MI250X accelerator datasheet, halved per GCD")

# AMD Instinct MI250 datasheet (2 GCDs, 208 CUs at 1700 MHz): FP32 vector 45.3, FP32 matrix
# 90.5, FP16 and BF16 matrix 362.1 TFLOPs; HBM2e 3.2768 TB/s. Halved per GCD (104 CUs).
# ROCm names both parts "AMD Instinct MI250X / MI250"; the CU count tells them apart.
MI250_GCD = DevicePeak(
    name="AMD Instinct MI250 (one GCD)", fp32=22.65, tf32=None, fp16=181.05, bf16=181.05,
    memory_gbs=1638.4, fp64=22.65, fp32_matrix=45.25, compute_units=104,
    source="AMD Instinct MI250 accelerator datasheet, halved per GCD")

# AMD Instinct MI300A APU datasheet: 228 CUs at 2100 MHz. FP64 vector 61.3, FP32 vector 122.6,
# FP32 matrix 122.6, TF32 matrix 490.3, FP16 and BF16 matrix 980.6 TFLOPs (dense; 1961.2 with
# sparsity), FP8 1961.2 (228 x 4096 x 2.1 GHz; 3922.3 with sparsity); HBM3 5.3 TB/s.
MI300A = DevicePeak(
    name="AMD Instinct MI300A", fp32=122.6, tf32=490.3, fp16=980.6, bf16=980.6,
    memory_gbs=5300.0, fp64=61.3, fp32_matrix=122.6, compute_units=228, fp8=1961.2,
    source="AMD Instinct MI300A APU datasheet")

# AMD Instinct MI300X accelerator datasheet: 304 CUs at 2100 MHz. FP64 vector 81.7, FP32 vector
# 163.4, FP32 matrix 163.4, TF32 matrix 653.7, FP16 and BF16 matrix 1307.4 TFLOPs (dense; 2614.9
# with sparsity), FP8 2614.9 (304 x 4096 x 2.1 GHz; 5229.8 with sparsity); HBM3 5.3 TB/s.
MI300X = DevicePeak(
    name="AMD Instinct MI300X", fp32=163.4, tf32=653.7, fp16=1307.4, bf16=1307.4,
    memory_gbs=5300.0, fp64=81.7, fp32_matrix=163.4, compute_units=304, fp8=2614.9,
    source="AMD Instinct MI300X accelerator datasheet")

# AMD Instinct MI325X accelerator datasheet: same CDNA 3 compute as MI300X (304 CUs, 2100 MHz):
# FP32 vector 163.4, TF32 653.7, FP16 and BF16 1307.4, FP8 2614.9 TFLOPs dense (5229.8 with
# sparsity); HBM3E 6 TB/s.
MI325X = DevicePeak(
    name="AMD Instinct MI325X", fp32=163.4, tf32=653.7, fp16=1307.4, bf16=1307.4,
    memory_gbs=6000.0, fp64=81.7, fp32_matrix=163.4, compute_units=304, fp8=2614.9,
    source="AMD Instinct MI325X accelerator datasheet")

# AMD Instinct MI355X product page / datasheet: 256 CUs at 2400 MHz. FP64 vector 78.6, FP32
# vector 157.3, FP16 and BF16 matrix 2.5 PFLOPs dense (2516.6 = 256 x 4096 x 2.4 GHz; 5.0 with
# sparsity), FP8 5.0 PFLOPs dense (5033.2 = 256 x 8192 x 2.4 GHz; 10.1 with sparsity); HBM3E
# 8 TB/s. CDNA 4 has no TF32 matrix path (AMD CDNA 4 whitepaper).
MI355X = DevicePeak(
    name="AMD Instinct MI355X", fp32=157.3, tf32=None, fp16=2516.6, bf16=2516.6,
    memory_gbs=8000.0, fp64=78.6, fp32_matrix=157.3, compute_units=256, fp8=5033.2,
    source="AMD Instinct MI355X datasheet")

# AMD Instinct MI350X product page / datasheet: the air-cooled CDNA 4 part, the same 256 CUs at
# a lower peak engine clock, 2200 MHz. FP64 vector 72.1, FP32 vector 144.2, FP16 and BF16
# matrix 2.3 PFLOPs dense (2306.9 = 256 x 4096 x 2.2 GHz; 4.6 with sparsity), FP8 4.6 PFLOPs
# dense (4613.7 = 256 x 8192 x 2.2 GHz; 9.2 with sparsity); HBM3E 8 TB/s. No TF32 path. Its own
# row: an MI350X once fell back to another GPU's peak and printed an MFU of 563%.
MI350X = DevicePeak(
    name="AMD Instinct MI350X", fp32=144.2, tf32=None, fp16=2306.9, bf16=2306.9,
    memory_gbs=8000.0, fp64=72.1, fp32_matrix=144.2, compute_units=256, fp8=4613.7,
    source="AMD Instinct MI350X datasheet")

# ----------------------------------------------------------------------------------------------
# NVIDIA. Tensor-core figures marked "*" (with sparsity) in the datasheets are halved here.
# ----------------------------------------------------------------------------------------------

# NVIDIA Tesla V100 datasheet (SXM2): FP64 7.8, FP32 15.7, Tensor (FP16) 125 TFLOPS (dense; V100
# has no sparsity); HBM2 900 GB/s. No TF32 or BF16 tensor cores.
V100_SXM2 = DevicePeak(
    name="NVIDIA V100 SXM2", fp32=15.7, tf32=None, fp16=125.0, bf16=None,
    memory_gbs=900.0, fp64=7.8, compute_units=80,
    source="NVIDIA Tesla V100 datasheet (SXM2)")

# NVIDIA A100 datasheet (80GB SXM): FP64 9.7, FP32 19.5, TF32 156 (312*), BF16 312 (624*),
# FP16 312 (624*) TFLOPS; HBM2e 2039 GB/s.
A100_SXM_80GB = DevicePeak(
    name="NVIDIA A100 SXM 80GB", fp32=19.5, tf32=156.0, fp16=312.0, bf16=312.0,
    memory_gbs=2039.0, fp64=9.7, compute_units=108,
    source="NVIDIA A100 Tensor Core GPU datasheet (80GB SXM)")

# NVIDIA H100 datasheet (H100 SXM): FP64 34, FP32 67, TF32 989*, BF16 1979*, FP16 1979*,
# FP8 3958* TFLOPS (dense: half); HBM3 3.35 TB/s.
H100_SXM = DevicePeak(
    name="NVIDIA H100 SXM", fp32=67.0, tf32=494.5, fp16=989.5, bf16=989.5,
    memory_gbs=3350.0, fp64=34.0, compute_units=132, fp8=1979.0,
    source="NVIDIA H100 Tensor Core GPU datasheet (H100 SXM)")

# NVIDIA H100 datasheet (H100 PCIe): FP64 26, FP32 51, TF32 756*, BF16 1513*, FP16 1513*,
# FP8 3026* TFLOPS (dense: half); HBM2e 2 TB/s.
H100_PCIE = DevicePeak(
    name="NVIDIA H100 PCIe", fp32=51.0, tf32=378.0, fp16=756.5, bf16=756.5,
    memory_gbs=2000.0, fp64=26.0, compute_units=114, fp8=1513.0,
    source="NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe)")

# NVIDIA H200 product page / datasheet (H200 SXM): FP64 34, FP32 67, TF32 989*, BF16 1979*,
# FP16 1979*, FP8 3958* TFLOPS (dense: half); HBM3e 4.8 TB/s.
H200_SXM = DevicePeak(
    name="NVIDIA H200 SXM", fp32=67.0, tf32=494.5, fp16=989.5, bf16=989.5,
    memory_gbs=4800.0, fp64=34.0, compute_units=132, fp8=1979.0,
    source="NVIDIA H200 Tensor Core GPU datasheet (H200 SXM)")

# NVIDIA L40S datasheet: FP32 91.6, TF32 183 (366*), BF16 362.05 (733*), FP16 362.05 (733*),
# FP8 733 (1466*) TFLOPS; GDDR6 864 GB/s. The datasheet gives no FP64 figure.
L40S = DevicePeak(
    name="NVIDIA L40S", fp32=91.6, tf32=183.0, fp16=362.05, bf16=362.05,
    memory_gbs=864.0, compute_units=142, fp8=733.0,
    source="NVIDIA L40S datasheet")

# NVIDIA HGX platform page, HGX B200 per-GPU column: FP64 37, FP32 75, TF32 2.2 PFLOPS*,
# FP16/BF16 4.5 PFLOPS*, FP8 9 PFLOPS* (dense: half); HBM3E 7.7 TB/s (an earlier DGX B200
# datasheet printed 8 TB/s; we keep the lower, current figure).
B200 = DevicePeak(
    name="NVIDIA B200", fp32=75.0, tf32=1100.0, fp16=2250.0, bf16=2250.0,
    memory_gbs=7700.0, fp64=37.0, compute_units=148, fp8=4500.0,
    source="NVIDIA HGX B200 specifications (per GPU)")

# Names as torch.cuda.get_device_name() reports them. Patterns are full matches, so their order
# only matters where two could match the same name; the more specific one comes first anyway.
_TABLE: tuple[_Entry, ...] = (
    _entry(r"AMD Instinct MI100", MI100),
    _entry(r"AMD Instinct MI210", MI210),
    _entry(r"AMD Instinct MI250X( / MI250)?", MI250X_GCD),
    _entry(r"AMD Instinct MI250", MI250_GCD),
    _entry(r"AMD Instinct MI300A", MI300A),
    _entry(r"AMD Instinct MI300X( VF)?", MI300X),   # "VF": a virtual function of one in a cloud VM
    _entry(r"AMD Instinct MI325X( VF)?", MI325X),
    _entry(r"AMD Instinct MI355X( VF)?", MI355X),
    _entry(r"AMD Instinct MI350X( VF)?", MI350X),
    _entry(r"Tesla V100-SXM2-(16|32)GB", V100_SXM2),
    _entry(r"NVIDIA A100-SXM4-80GB", A100_SXM_80GB),
    _entry(r"NVIDIA H100 PCIe", H100_PCIE),
    _entry(r"NVIDIA H100 80GB HBM3", H100_SXM),      # the SXM5 board's name
    _entry(r"NVIDIA H200", H200_SXM),
    _entry(r"NVIDIA L40S", L40S),
    _entry(r"NVIDIA B200", B200),
)

# "AMD Instinct MI250X / MI250" is either part; a GCD of each has a distinct CU count.
_SAME_NAME_BY_COMPUTE_UNITS = {
    (MI250X_GCD.name, MI250_GCD.compute_units): MI250_GCD,
}


def lookup_peak(device_name: str, compute_units: int | None = None) -> DevicePeak | None:
    """The dense peak of the device torch calls ``device_name``; None when it is not known.

    ``compute_units`` (``torch.cuda.get_device_properties(d).multi_processor_count``), when
    given, must match the row's: a partitioned device (MI300X CPX mode, a MIG slice) has a
    fraction of the peak, which we do not guess. It also tells an MI250 GCD from an MI250X GCD.
    """
    normalized = " ".join(device_name.split())
    for entry in _TABLE:
        if entry.pattern.fullmatch(normalized) is None:
            continue
        peak = entry.peak
        if compute_units is None or compute_units == peak.compute_units:
            return peak
        return _SAME_NAME_BY_COMPUTE_UNITS.get((peak.name, compute_units))
    return None


def peak_for_device(device: torch.device) -> DevicePeak | None:
    """The table's peak for a torch device; None for the CPU and for unknown GPUs."""
    if not is_gpu(device):
        return None
    properties = torch.cuda.get_device_properties(device)
    return lookup_peak(properties.name, properties.multi_processor_count)


def peak_tflops(peak: DevicePeak | None, precision: str) -> float | None:
    """Dense TFLOP/s of ``peak`` at ``precision`` ('fp32', 'tf32', 'fp16', 'bf16', ...).

    None when the device is unknown or has no such path. 'fp32_matrix' falls back to the vector
    rate where the device has no FP32 matrix path (NVIDIA): that is what its FP32 GEMMs run on.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; expected one of {PRECISIONS}")
    if peak is None:
        return None
    if precision == "fp32_matrix":
        return peak.fp32_matrix if peak.fp32_matrix is not None else peak.fp32
    return getattr(peak, precision)


# ----------------------------------------------------------------------------------------------
# FLOP counting and MFU
# ----------------------------------------------------------------------------------------------

def _as_query_heads(query_shape: Sequence[int], shape: Sequence[int]) -> tuple:
    """A key or value shape with the query's head count. Grouped-query attention (fewer key/value
    heads than query heads) does the multiply-adds of each kv head repeated for its query heads;
    torch's formula takes that shape on every release (older ones, 2.11 among them, assert equal
    head counts: an ``hf:`` Llama's SDPA with ``enable_gqa`` stopped the run)."""
    batch, _, length, width = shape
    return (batch, query_shape[1], length, width)


def _attention_forward(query_shape: Sequence[int], key_shape: Sequence[int],
                       value_shape: Sequence[int], *args: object,
                       out_shape: Sequence[int] | None = None, **kwargs: object) -> int:
    return flop_counter.sdpa_flop_count(query_shape, _as_query_heads(query_shape, key_shape),
                                        _as_query_heads(query_shape, value_shape))


def _attention_backward(grad_out_shape: Sequence[int], query_shape: Sequence[int],
                        key_shape: Sequence[int], value_shape: Sequence[int], *args: object,
                        out_shape: Sequence[int] | None = None, **kwargs: object) -> int:
    return flop_counter.sdpa_backward_flop_count(
        grad_out_shape, query_shape, _as_query_heads(query_shape, key_shape),
        _as_query_heads(query_shape, value_shape))


# The fused attention kernels SDPA dispatches to (the CPU's among them: torch's counter had no
# formula for it, so on the CPU a language model's attention counted nothing).
_FUSED_ATTENTION = ("_scaled_dot_product_efficient_attention",
                    "_scaled_dot_product_flash_attention",
                    "_scaled_dot_product_cudnn_attention",
                    "_scaled_dot_product_flash_attention_for_cpu")


def _attention_formulas() -> dict:
    formulas = {}
    for name in _FUSED_ATTENTION:
        for suffix, formula in (("", _attention_forward), ("_backward", _attention_backward)):
            op = getattr(torch.ops.aten, name + suffix, None)
            if op is not None:                       # this build has the kernel
                formulas[op] = formula
    return formulas


ATTENTION_FORMULAS = _attention_formulas()


def counting() -> FlopCounterMode:
    """torch's FlopCounterMode with one formula for every fused attention kernel, on every
    device and for grouped-query shapes, so FLOPs per iteration are on one basis everywhere."""
    return FlopCounterMode(display=False, custom_mapping=ATTENTION_FORMULAS)


def count_iteration_flops(model: torch.nn.Module, inputs: torch.Tensor, target: torch.Tensor,
                          loss: Callable, autocast: ContextManager[object], training: bool) -> int:
    """FLOPs of one iteration, counted once by torch's FlopCounterMode on the eager model:
    forward for inference, forward + loss + backward for training (the optimizer's elementwise
    update is not counted, as in the usual MFU convention). Gradients it leaves are cleared.
    ``loss(output, target)`` is the model family's loss."""
    grad_mode = contextlib.nullcontext() if training else torch.inference_mode()
    with counting() as counter:
        with grad_mode, autocast:
            output = model(inputs)
            value = loss(output, target) if training else None
        if value is not None:
            value.backward()
    if training:
        model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def count_step_flops(step: Callable[[], object]) -> int:
    """FLOPs of one call of ``step`` (a whole generation: prefill and every decode step)."""
    with counting() as counter:
        step()
    return counter.get_total_flops()


@dataclass(frozen=True)
class PeakChoice:
    tflops: float | None
    source: str                 # where the number comes from, or why there is none


def overridden(override: float | None, datasheet: float | None) -> float | None:
    """The one rule for every peak: the user's override, else the datasheet's value, else
    unknown (None), never a guess."""
    return override if override is not None else datasheet


def choose_peak(device: torch.device, peak_key: str, override: float | None) -> PeakChoice:
    """The dense peak MFU divides by: ``--peak-tflops``, else the table's ``peak_key`` column
    (a precision row's ``peak_key``) for this device, else unknown with the reason."""
    if override is not None:
        return PeakChoice(override, "--peak-tflops")
    peak = peak_for_device(device)
    value = overridden(override, peak_tflops(peak, peak_key))
    if value is None or peak is None:
        what = "this device" if is_gpu(device) else "the CPU"
        return PeakChoice(None, f"no peak known for {what}; pass --peak-tflops")
    return PeakChoice(value, f"{peak.name} dense {peak_key.replace('_matrix', '')}, "
                             f"{peak.source}")


@dataclass(frozen=True)
class BandwidthPeak:
    gbs: float | None           # peak memory bandwidth, GB/s (10^9 bytes per second)
    source: str                 # where the number comes from, or why there is none


def choose_bandwidth(device: torch.device, override: float | None) -> BandwidthPeak:
    """The memory bandwidth MBU divides by, by the rule of :func:`overridden`:
    ``--peak-bandwidth``, else the table's ``memory_gbs`` for this device, else unknown."""
    if override is not None:
        return BandwidthPeak(override, "--peak-bandwidth")
    peak = peak_for_device(device)
    if peak is None:
        what = "this device" if is_gpu(device) else "the CPU"
        return BandwidthPeak(None, f"no memory bandwidth known for {what}; pass "
                                   f"--peak-bandwidth")
    return BandwidthPeak(peak.memory_gbs, f"{peak.name} memory bandwidth, {peak.source}")


@dataclass(frozen=True)
class BandwidthUtilization:
    """Achieved memory bandwidth and MBU (model bandwidth utilization): the bytes a workload
    must read from device memory over the time it took, and that rate over the peak. The bytes
    are what the work needs (each weight once, the KV cache up to each step's position), not
    what a kernel happens to read, so MBU says how close the run comes to the memory bound."""

    bytes_read: int
    seconds: float
    peak: BandwidthPeak

    @property
    def achieved_gbs(self) -> float | None:
        return self.bytes_read / self.seconds / 1e9 if self.seconds > 0 else None

    @property
    def mbu(self) -> float | None:
        achieved = self.achieved_gbs
        return achieved / self.peak.gbs if achieved is not None and self.peak.gbs else None

    def to_dict(self) -> dict:
        return {"bytes_read": self.bytes_read, "seconds": self.seconds,
                "achieved_gb_per_s": self.achieved_gbs, "peak_gb_per_s": self.peak.gbs,
                "peak_source": self.peak.source, "mbu": self.mbu}


@dataclass(frozen=True)
class Utilization:
    """Achieved TFLOP/s of one device at the run's headline rate of iterations per second, and
    MFU where the peak is known: FLOPs per iteration x iterations per second / peak."""

    flops_per_iteration: int
    iterations_per_s: float
    peak: PeakChoice

    @property
    def achieved_tflops(self) -> float:
        return self.flops_per_iteration * self.iterations_per_s / 1e12

    @property
    def mfu(self) -> float | None:
        return self.achieved_tflops / self.peak.tflops if self.peak.tflops else None

    def to_dict(self) -> dict:
        return {"flops_per_iteration": self.flops_per_iteration,
                "achieved_tflops": self.achieved_tflops, "peak_tflops": self.peak.tflops,
                "peak_source": self.peak.source, "mfu": self.mfu,
                "basis": "FLOPs per iteration x iterations per second of the headline "
                         "throughput (per device)"}
