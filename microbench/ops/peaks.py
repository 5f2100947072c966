"""Peaks measured on this device in this run: dense GEMM throughput and device-memory bandwidth.

A datasheet peak says what a part can do at its rated clocks and power; the GPU in front of the
user may be another SKU under the same name (an H100 with HBM2e instead of HBM3), capped in
power, or held at low clocks. So every utilisation the tool prints has a second denominator,
measured here by a short probe before the timed region and outside it, once per process:

* **GEMM**: ``torch.matmul`` of two N x N matrices (8192 on a GPU) in the run's compute dtype
  (the precision table's: bf16 for bf16 and amp-bf16, fp32 for fp32 and tf32, with TF32 as the
  run set it), 2*N^3 FLOPs per call; for ``--precision fp8`` on a device with FP8 matrix units,
  ``torch._scaled_mm`` of two E4M3 matrices with tensorwise scales into BF16 (e4m3fnuz on
  MI300, as the device layer says), so that the measured MFU of an FP8 run is against an FP8
  product, as its datasheet MFU is;
* **bandwidth**: a device-to-device copy of 1 GiB (64 MiB on the CPU), counting the bytes read
  and the bytes written (2 GiB per call), the basis of every GB/s the tool prints.

Both are the operator benchmark's own kernels and measurement (``microbench.ops``: the catalog's
``matmul`` and ``copy``, ``runner.measure_case``: warm-up calls apart, then each call timed alone
with device events, the L2 flushed before each outside its interval; the rate is work over the
median call). While it runs, the telemetry source (NVML, amdsmi) is read for the clocks, power,
the power limit and any throttle reason, which say why a measured peak is low.

The probe takes the dtype as a name of the catalog's ``DTYPES`` or ``FP8_DTYPES``; a compute
dtype the catalog has no GEMM of gets no GEMM probe and says so.

Example::

    measured = measure(torch.device("cuda"), "bf16", "bf16")
    measured.tflops, measured.gbs, measured.clocks.sm_clock_mhz
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Sequence

import torch

from microbench.measure import flops
from microbench.measure.measured_peaks import MeasuredPeaks, ProbeClocks
from microbench.measure.telemetry import Sampler
from microbench.measure.telemetry.sampler import Sample
from microbench.ops import catalog, runner
from microbench.ops.report import OpResult
from microbench.platform import devices
from microbench.settings.precision import tf32_allowed

if TYPE_CHECKING:
    from microbench.settings.precision import Precision
    from microbench.measure.telemetry.sampler import Source

# Below these shares of the datasheet the summary warns: a GEMM that reaches under 75% of the
# dense peak, or a copy under 80% of the memory bandwidth, is not the part the datasheet
# describes as it runs today (power cap, low clocks, or another SKU). Well-tuned GEMMs reach
# 78-81% on an H100 SXM (769-798 of 989.5 TFLOP/s measured here) and copies 90% (3.0 of 3.35
# TB/s), so the thresholds leave room for a healthy part.
GEMM_WARN_SHARE = 0.75
BANDWIDTH_WARN_SHARE = 0.80
# How often telemetry is read during the probe (it lasts tens of milliseconds on a GPU).
SAMPLE_INTERVAL_S = 0.01
COPY_DTYPE = "fp32"


@dataclass(frozen=True)
class ProbeSize:
    """How large the probe is: the GEMM's M = N = K, the copy's elements (fp32), the calls."""

    gemm_n: int
    copy_elements: int
    warmup: int
    iterations: int

    @property
    def copy_bytes(self) -> int:
        return self.copy_elements * 4


# A GPU: 8192^3 is large enough for every vendor library to reach its best tile shapes and
# small enough (3 x 128 MiB in bf16) to fit beside anything; 1 GiB copied is far beyond any
# last-level cache (MI300X's 256 MB Infinity Cache included). 10 + 20 calls of each take tens
# of milliseconds on an H100.
GPU_SIZE = ProbeSize(gemm_n=8192, copy_elements=1 << 28, warmup=10, iterations=20)
# The CPU: 512^3 (0.27 GFLOP a call) and 64 MiB (beyond most L3 caches), about a second on
# two busy cores.
CPU_SIZE = ProbeSize(gemm_n=512, copy_elements=1 << 24, warmup=1, iterations=5)


def default_size(device: torch.device) -> ProbeSize:
    return GPU_SIZE if devices.is_gpu(device) else CPU_SIZE


# ---------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------

def gemm_dtype(compute: torch.dtype) -> str | None:
    """The catalog's name of a run's compute dtype; None where the catalog has no GEMM of it."""
    for name, dtype in {**catalog.DTYPES, **catalog.FP8_DTYPES}.items():
        if dtype == compute:
            return name
    return None


def probe_dtype(precision: Precision, device: torch.device) -> torch.dtype:
    """The dtype the GEMM probe multiplies in for a run of ``precision`` (a precision-table
    row): --precision fp8 on a device with FP8 matrix units probes an FP8 GEMM in the E4M3
    encoding those units take (so both of MFU's denominators are FP8); every other run its
    compute dtype (the autocast dtype, else the model's)."""
    if precision.fp8:
        fp8 = devices.fp8_e4m3_dtype(device)
        if fp8 is not None:
            return fp8
    return precision.autocast_dtype or precision.model_dtype


def gemm_op(dtype_name: str) -> str:
    """The catalog's GEMM for a dtype: torch._scaled_mm (tensorwise scales) for FP8,
    torch.matmul otherwise."""
    return "scaled_mm" if dtype_name in catalog.FP8_DTYPES else "matmul"


class _Prober:
    """Measures probe rows as the op bench measures an op (``runner.measure_case``), with the
    flush (or spin) of its timing plan and an optional extra step before each timed call."""

    def __init__(self, device: torch.device, peaks: runner.Peaks, size: ProbeSize,
                 between: Callable[[], object] | None = None,
                 timing: runner.TimingPlan | None = None):
        self.device, self.peaks, self.size, self._between = device, peaks, size, between
        self.timing = timing or _timing_plan(device)

    def _before_call(self) -> None:
        self.timing()
        if self._between is not None:
            self._between()

    def row(self, op: str, dtype_name: str, shape: str, shape2: str | None) -> OpResult:
        config = runner.RunConfig(device=self.device, dtype_name=dtype_name,
                                  num_iters=self.size.iterations,
                                  num_warmup_iters=self.size.warmup,
                                  flush_l2=self.timing.flushes,
                                  cache_bytes=self.timing.cache.size_bytes)
        case = runner.make_case(runner.CaseRequest(op, None, shape, shape2), dtype_name, False)
        return runner.measure_case(case, config, self.peaks, self._before_call)

    def gemm(self, dtype_name: str) -> OpResult:
        n = f"{self.size.gemm_n}-{self.size.gemm_n}"
        return self.row(gemm_op(dtype_name), dtype_name, n, n)

    def copy(self) -> OpResult:
        return self.row("copy", COPY_DTYPE, str(self.size.copy_elements), None)


def _timing_plan(device: torch.device) -> runner.TimingPlan:
    """The op bench's default: the L2 flush on a GPU. Where its buffer does not fit (a GPU that
    another process fills), the spin instead: the probe's rows then say whether they fit."""
    try:
        return runner.TimingPlan.build(device, flush=devices.is_gpu(device))
    except (RuntimeError, MemoryError) as error:
        if not devices.is_out_of_memory(error):
            raise
        devices.empty_cache(device)
        return runner.TimingPlan.build(device, flush=False)


def probe_rows(device: torch.device, dtype: str | None, peaks: runner.Peaks,
               size: ProbeSize, between: Callable[[], object] | None = None,
               timing: runner.TimingPlan | None = None
               ) -> tuple[OpResult | None, OpResult]:
    """The GEMM row (None without a dtype) and the copy row, measured as the op bench does."""
    prober = _Prober(device, peaks, size, between, timing)
    return (prober.gemm(dtype) if dtype is not None else None), prober.copy()


def gemm_row(device: torch.device, dtype: str, size: ProbeSize) -> OpResult:
    """The probe's GEMM alone (the node check times each part under its own telemetry)."""
    return _Prober(device, runner.Peaks(flops.peak_for_device(device)), size).gemm(dtype)


def copy_row(device: torch.device, size: ProbeSize) -> OpResult:
    """The probe's device copy alone."""
    return _Prober(device, runner.Peaks(flops.peak_for_device(device)), size).copy()


def probe_table(device: torch.device, dtypes: Sequence[str], source: Source | None = None,
                size: ProbeSize | None = None,
                clock: Callable[[], float] = time.perf_counter
                ) -> tuple[list[OpResult], ProbeClocks, float]:
    """``microbench-ops --peaks``: a GEMM row per dtype and the copy row, against the datasheet
    (each row's peak and share, as the op bench prints them), the clocks read meanwhile, and
    the seconds it took."""
    started, size = clock(), size or default_size(device)
    sampler = Sampler(source, SAMPLE_INTERVAL_S) if source is not None else None
    if sampler is not None:
        sampler.start()
    try:
        prober = _Prober(device, runner.Peaks(flops.peak_for_device(device)), size)
        rows = [prober.gemm(dtype) for dtype in dtypes] + [prober.copy()]
    finally:
        samples = sampler.stop() if sampler is not None else []
    devices.empty_cache(device)
    return rows, clocks_of(samples, source), clock() - started


def measure(device: torch.device, compute: torch.dtype, peak_key: str,
            source: Source | None = None, size: ProbeSize | None = None,
            clock: Callable[[], float] = time.perf_counter,
            timing: runner.TimingPlan | None = None) -> MeasuredPeaks:
    """Probe ``device``'s GEMM at ``compute`` and its copy bandwidth; ``source`` is the
    telemetry source read meanwhile (None: clocks not read); ``peak_key`` the datasheet column
    of the run's precision, which the rows' share of peak divides by."""
    started = clock()
    size = size or default_size(device)
    dtype = gemm_dtype(compute)
    datasheet = flops.peak_for_device(device)
    sampler = Sampler(source, SAMPLE_INTERVAL_S) if source is not None else None
    # One reading while the GPU is busy for sure: before the last timed GEMM call, with the
    # earlier ones queued ahead of it (``between`` runs before each timed call only).
    calls = {"n": 0}

    def mid_probe_sample() -> None:
        calls["n"] += 1
        if sampler is not None and calls["n"] == size.iterations:
            sampler.sample_now()

    if sampler is not None:
        sampler.start()
    try:
        gemm, copy = probe_rows(device, dtype, runner.Peaks(datasheet), size,
                                between=mid_probe_sample, timing=timing)
    finally:
        samples = sampler.stop() if sampler is not None else []
    devices.empty_cache(device)
    if gemm is not None and peak_key != gemm.peak_label and gemm.status == "ok":
        gemm = _against(gemm, peak_key, datasheet)
    note = "" if dtype is not None else f"no GEMM probe for {compute} yet"
    return MeasuredPeaks(device_name=_device_name(device), dtype=dtype or str(compute),
                         peak_key=peak_key, gemm=gemm, copy=copy,
                         clocks=clocks_of(samples, source), seconds=clock() - started,
                         note=note)


def _against(gemm: OpResult, peak_key: str, datasheet: flops.DevicePeak | None) -> OpResult:
    """The GEMM row's share of the run's own datasheet column (the op bench picks fp32_matrix
    or tf32 from torch's TF32 switch; the run's precision names its column itself)."""
    value = flops.peak_tflops(datasheet, peak_key)
    share = 100.0 * gemm.tflops / value if value and gemm.tflops else None
    return replace(gemm, peak_label=peak_key, peak_value=value, pct_of_peak=share)


def _device_name(device: torch.device) -> str:
    return devices.device_name(device) if devices.is_gpu(device) else "cpu"


def clocks_of(samples: Sequence[Sample], source: Source | None) -> ProbeClocks:
    """The readings taken during the probe, in one :class:`ProbeClocks`."""
    if source is None:
        return ProbeClocks(source="no telemetry source (the CPU, or none could be opened)")
    limits = getattr(source, "power_limits_w", None)
    limit, default = limits() if limits is not None else (None, None)

    def median(name: str) -> float | None:
        values = [getattr(s, name) for s in samples if getattr(s, name) is not None]
        return statistics.median(values) if values else None

    powers = [s.power_w for s in samples if s.power_w is not None]
    reported = [s.throttle_reasons for s in samples if s.throttle_reasons is not None]
    reasons = (tuple(sorted({r for rs in reported for r in rs})) if reported else None)
    return ProbeClocks(source=source.name, sm_clock_mhz=median("sm_clock_mhz"),
                       max_sm_clock_mhz=source.max_sm_clock_mhz,
                       memory_clock_mhz=median("memory_clock_mhz"),
                       power_w=max(powers) if powers else None, power_limit_w=limit,
                       default_power_limit_w=default, throttle_reasons=reasons,
                       samples=len(samples))


# Once per process: a trial, a sweep row or a batch-size try that runs the same device and dtype
# again reuses the first probe (its time is charged once).
_MEASURED: dict[tuple, MeasuredPeaks] = {}


def once(device: torch.device, compute: torch.dtype, peak_key: str, source: Source | None = None,
         measure_fn: Callable[..., MeasuredPeaks] | None = None) -> MeasuredPeaks:
    key = (str(device), compute, peak_key, tf32_allowed("matmul"))
    if key not in _MEASURED:
        _MEASURED[key] = (measure_fn or measure)(device, compute, peak_key, source)
    return _MEASURED[key]


def representative(probes: Sequence[MeasuredPeaks | None]) -> MeasuredPeaks | None:
    """The probe a run reports when several processes (trials) measured one: the one with the
    median GEMM rate (a real probe, not a blend of several), else the first."""
    measured = [p for p in probes if p is not None]
    if len(measured) <= 1:
        return measured[0] if measured else None
    ranked = sorted(measured, key=lambda p: p.tflops or p.gbs or 0.0)
    return ranked[(len(ranked) - 1) // 2]


# ---------------------------------------------------------------------------------------------
# Against the datasheet
# ---------------------------------------------------------------------------------------------

def warnings(measured: MeasuredPeaks, datasheet_tflops: float | None,
             datasheet_gbs: float | None) -> list[str]:
    """A line when the probe is far below the datasheet: before anyone compares this run's
    numbers with another machine's, they learn that this part is not running as rated."""
    lows = []
    if measured.tflops and datasheet_tflops and \
            measured.tflops < GEMM_WARN_SHARE * datasheet_tflops:
        lows.append(f"{measured.gemm_label} {measured.tflops / datasheet_tflops:.0%} of the "
                    f"datasheet's {datasheet_tflops:g} TFLOP/s (below "
                    f"{GEMM_WARN_SHARE:.0%})")
    if measured.gbs and datasheet_gbs and measured.gbs < BANDWIDTH_WARN_SHARE * datasheet_gbs:
        lows.append(f"copy bandwidth {measured.gbs / datasheet_gbs:.0%} of the datasheet's "
                    f"{datasheet_gbs:,.0f} GB/s (below {BANDWIDTH_WARN_SHARE:.0%})")
    if not lows:
        return []
    return [f"WARNING: measured peaks far below the datasheet: {'; '.join(lows)}. "
            f"{measured.clocks.describe()}. This GPU is power-capped, held at low clocks, or "
            f"another SKU than the datasheet row: compare its numbers with other machines' "
            f"against the measured peak"]
