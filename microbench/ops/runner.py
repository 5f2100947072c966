"""Run op cases: check shapes and memory, build inputs, warm up, time each call, derive rates.

One case is measured as follows (docs/architecture.md, "Measurement rules"):

1. shapes are checked and the op's cost (bytes, FLOPs, bytes it allocates) computed from them;
2. if the allocation would not fit in free memory the case is skipped with a line saying so;
3. inputs are allocated, the op is called ``num_warmup_iters`` times and the device drained;
4. ``num_iters`` calls are timed one by one with device events (``microbench.measure.timing.time_calls``),
   one call per interval. Before each call, outside its interval, a :class:`TimingPlan` queues
   work on the GPU: the cache flush (on by default on GPUs), or without it a calibrated spin.
   Either keeps the GPU busy while the host dispatches the call, so the start event fires after
   the call is queued and a microsecond op is not timed with its microseconds of host dispatch;
5. median time -> achieved GB/s and TFLOP/s -> share of the device's dense peak for the op's roof;
   a row whose working set fits in the device's last-level cache while the flush is off is marked
   cache-resident, and any share above 100% is marked too;
6. with ``--enable-profiling`` a few more calls run under torch.profiler, after the timed calls;
   its table travels with the row and prints after it.

Why one call per interval with queued work in front, and not K calls between one pair of events:
K back-to-back calls find their inputs in the cache the previous call left (a flush between them
would be inside the interval), and when the host dispatches slower than the GPU runs them, the K
calls are still timed at the host's pace. Measured with this tool on an H100 (PyTorch 2.11,
add of 1024 fp32 elements, median of 200 calls): 10.3 us per call with nothing queued in front,
4.0 us behind the spin and 4.3 us behind the flush; host dispatch is 7-9 us per call there.

Errors are data in a list run: a bad shape, a dtype the op does not support on the device, or an
out-of-memory becomes a failed row and the run goes on.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch

from microbench.platform import devices
from microbench.measure import flops, profilers
from microbench.platform.devices import CacheInfo, last_level_cache
from microbench.settings.precision import tf32_allowed
from microbench.platform.errors import BenchmarkError, OutOfMemory, UsageError
from microbench.measure.timing import Measurement, time_calls
from microbench.ops import catalog
from microbench.ops.report import OpResult
# The flush floor and the queued delay are named in choices.py (the flags' help reads them).
from microbench.ops.choices import DEFAULT_QUEUED_DELAY_MS, FLUSH_FLOOR_BYTES, MIB  # noqa: F401

# Headroom kept free beyond an op's own tensors: library workspaces (cuBLAS, cuDNN/MIOpen,
# attention kernels) and allocator rounding.
MEMORY_HEADROOM_FRACTION = 0.05
MEMORY_HEADROOM_BYTES = 256 * MIB
# Cycles of torch.cuda._sleep timed once to convert the delay into cycles: the counter runs at
# the shader clock on NVIDIA (1e6 cycles = 0.51 ms on an H100) and may run at a fixed clock on
# AMD, so it is measured rather than assumed.
SPIN_PROBE_CYCLES = 1_000_000
PROFILED_CALLS = 5


@dataclass(frozen=True)
class CaseRequest:
    """One op to run, as the user (or a list) named it; resolved and checked when it runs."""

    op: str
    op_type: str | None
    input1: str | None
    input2: str | None
    inplace: bool = False


@dataclass(frozen=True)
class OpCase:
    spec: catalog.OpSpec
    shapes: catalog.Shapes
    inplace: bool
    label: str
    shapes_text: str


@dataclass(frozen=True)
class RunConfig:
    device: torch.device
    dtype_name: str
    num_iters: int
    num_warmup_iters: int
    flush_l2: bool = False            # the cache is flushed before each timed call
    cache_bytes: int | None = None    # the device's last-level cache; None: unknown (CPU)
    enable_profiling: bool = False
    append_dtype: bool = False
    peak_tflops: float | None = None
    peak_gbs: float | None = None

    @property
    def dtype(self) -> torch.dtype:
        return catalog.dtype_of(self.dtype_name)


# ---------------------------------------------------------------------------------------------
# Lists of requests
# ---------------------------------------------------------------------------------------------

def predefined_requests(input1: str | None, input2: str | None, inplace: bool,
                        op_type: str | None) -> list[CaseRequest]:
    """The old predefined set (binary, unary, reductions) at the shapes given by the flags."""
    requests = []
    for name in catalog.PREDEFINED_OPS:
        spec, _ = catalog.resolve_op(name)
        if op_type in (None, spec.op_type):
            requests.append(CaseRequest(name, spec.op_type, input1, input2,
                                        inplace and spec.supports_inplace))
    return requests


def model_requests(op_type: str | None) -> list[CaseRequest]:
    return [CaseRequest(name, kind, input1, input2)
            for name, kind, input1, input2 in catalog.MODEL_OPS if op_type in (None, kind)]


def compute_requests() -> list[CaseRequest]:
    """matmul, bmm, conv2d, sdpa, layer_norm and softmax, each at its own default shapes."""
    return [CaseRequest(name, "compute", None, None) for name in catalog.COMPUTE_OPS]


# ---------------------------------------------------------------------------------------------
# Resolving a request into a case
# ---------------------------------------------------------------------------------------------

def make_case(request: CaseRequest, dtype_name: str, append_dtype: bool) -> OpCase:
    """Resolve the op and parse and check the shapes; UsageError when they do not fit."""
    spec, named_inplace = catalog.resolve_op(request.op, request.op_type)
    inplace = named_inplace or request.inplace
    if inplace and not spec.supports_inplace:
        raise UsageError(f"{spec.name} has no in-place form; drop --inplace or the trailing '_'")
    input1 = catalog.parse_shape(request.input1 or spec.default_input1, "--input1-dim")
    input2 = None
    if spec.takes_input2:
        text = request.input2 or spec.default_input2 or catalog.format_shape(input1)
        input2 = catalog.parse_shape(text, "--input2-dim")
    shapes = catalog.Shapes(input1, input2)
    spec.check(shapes, inplace)
    return OpCase(spec, shapes, inplace, _label(spec, inplace, dtype_name, append_dtype),
                  _shapes_text(spec, shapes))


def _label(spec: catalog.OpSpec, inplace: bool, dtype_name: str, append_dtype: bool) -> str:
    """The old tool's op name: add_, add_(sparse), add(fp16) with --append-dtype."""
    label = spec.name + ("_" if inplace else "")
    if spec.op_type == "sparse":
        label += "(sparse)"
    if append_dtype:
        label += f"({dtype_name})"
    return label


def _shapes_text(spec: catalog.OpSpec, shapes: catalog.Shapes) -> str:
    first = catalog.format_shape(shapes.input1)
    if shapes.input2 is None:
        return first
    if spec.op_type == "sparse":  # the old tool printed the values' shape: rows-dim
        return f"{first},{shapes.input2[0]}-{shapes.input1[-1]}"
    return f"{first},{catalog.format_shape(shapes.input2)}"


def preview_labels(requests: Iterable[CaseRequest], config: RunConfig) -> list[tuple[str, str]]:
    """(op, shapes) as the table will print them, so its columns can be sized up front."""
    labels = []
    for request in requests:
        try:
            case = make_case(request, config.dtype_name, config.append_dtype)
        except UsageError:
            labels.append((request_label(request), ""))
        else:
            labels.append((case.label, case.shapes_text))
    return labels


def request_label(request: CaseRequest) -> str:
    """A name for a request that could not be resolved (for its error line)."""
    shapes = ",".join(text for text in (request.input1, request.input2) if text)
    return f"{request.op}({shapes})" if shapes else request.op


# ---------------------------------------------------------------------------------------------
# Peaks
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Peaks:
    """The device's dense peaks, with the user's overrides taking precedence."""

    device_peak: flops.DevicePeak | None
    tflops_override: float | None = None
    gbs_override: float | None = None

    def gbs(self) -> float | None:
        return flops.overridden(self.gbs_override,
                                self.device_peak.memory_gbs if self.device_peak else None)

    def tflops(self, precision: str) -> float | None:
        return flops.overridden(self.tflops_override,
                                flops.peak_tflops(self.device_peak, precision))

    def describe(self, device_name: str) -> str:
        overrides = [f"{flag} {value:g}" for flag, value in
                     (("--peak-tflops", self.tflops_override), ("--peak-gbs", self.gbs_override))
                     if value is not None]
        if self.device_peak is None:
            if overrides:
                return f"{' and '.join(overrides)} ({device_name} is not in the datasheet table)"
            return f"unknown for {device_name}; give --peak-gbs and --peak-tflops for a % of peak"
        text = f"{self.device_peak.name} ({self.device_peak.source})"
        return text + (f", overridden by {' and '.join(overrides)}" if overrides else "")


def peak_precision(spec: catalog.OpSpec, dtype_name: str) -> str:
    """The datasheet rate an op's FLOPs run at.

    FP32 products run on TF32 tensor cores when torch allows it (matmul: off by default;
    convolutions through cuDNN: on by default), on AMD's FP32 matrix cores otherwise
    (``fp32_matrix`` is the vector rate on NVIDIA, which has no FP32 matrix path).
    """
    if dtype_name in catalog.FP8_DTYPES:
        return "fp8"                     # the datasheet's dense FP8 rate, either encoding
    if dtype_name != "fp32" or spec.compute_path == "vector":
        return dtype_name
    if spec.compute_path == "matmul" and tf32_allowed("matmul"):
        return "tf32"
    if (spec.compute_path == "conv" and tf32_allowed("conv")
            and devices.tf32_convolutions_exist()):
        return "tf32"
    return "fp32_matrix"


# ---------------------------------------------------------------------------------------------
# Device memory and the L2 flush
# ---------------------------------------------------------------------------------------------

def memory_needed_bytes(cost: catalog.OpCost) -> int:
    return int(cost.bytes_allocated * (1 + MEMORY_HEADROOM_FRACTION)) + MEMORY_HEADROOM_BYTES


def flush_buffer_bytes(cache: CacheInfo) -> int:
    """Twice the last-level cache (so no line of the op's data survives), at least the floor."""
    return max(2 * (cache.size_bytes or 0), FLUSH_FLOOR_BYTES)


def cache_resident(working_set_bytes: int, cache_bytes: int | None,
                   flushed: bool) -> bool | None:
    """Whether a call can find all its data in the cache: its working set fits and nothing
    evicted it since the previous call. None when the cache size is unknown."""
    if flushed:
        return False
    if cache_bytes is None:
        return None
    return working_set_bytes <= cache_bytes


class CacheFlusher:
    """Zeroes a buffer larger than the GPU's last-level cache; called before each timed call."""

    def __init__(self, device: torch.device, size_bytes: int):
        self.bytes = size_bytes
        self._buffer = torch.empty(size_bytes, dtype=torch.uint8, device=device)

    def __call__(self) -> None:
        self._buffer.zero_()


class QueuedDelay:
    """A spin on the GPU (``torch.cuda._sleep``, CUDA and HIP builds) queued before a timed call
    so that its start event fires on a busy GPU, after the call itself has been queued."""

    method = "torch.cuda._sleep"

    def __init__(self, sleep: Callable[[int], object], cycles: int, target_ms: float):
        self._sleep, self.cycles, self.target_ms = sleep, cycles, target_ms

    @classmethod
    def calibrate(cls, device: torch.device, target_ms: float,
                  sleep: Callable[[int], object] | None = None,
                  measure_ms: Callable[[Callable[[], object]], float] | None = None
                  ) -> "QueuedDelay | None":
        """Convert ``target_ms`` into spin cycles by timing a probe spin; None where no spin is
        available (a torch without ``torch.cuda._sleep``) or the probe cannot be timed."""
        if sleep is None:
            sleep = getattr(torch.cuda, "_sleep", None)
        if sleep is None or target_ms <= 0:
            return None
        if measure_ms is None:
            def measure_ms(call: Callable[[], object]) -> float:
                return time_calls(call, 3, device).median

        sleep(SPIN_PROBE_CYCLES)                 # the first launch loads the kernel
        probe_ms = measure_ms(lambda: sleep(SPIN_PROBE_CYCLES))
        if not (probe_ms > 0 and math.isfinite(probe_ms)):
            return None
        return cls(sleep, max(1, math.ceil(SPIN_PROBE_CYCLES * target_ms / probe_ms)), target_ms)

    def __call__(self) -> None:
        self._sleep(self.cycles)


@dataclass
class TimingPlan:
    """What runs before each timed call, outside its interval: the flush, or else the spin.

    The flush is queued work too (0.17 ms for 512 MiB on an H100, against 7-9 us of host
    dispatch per call), so with it no spin is added. Called as ``time_calls``'s ``between``.
    """

    device: torch.device
    cache: CacheInfo
    flusher: CacheFlusher | None = None
    delay: QueuedDelay | None = None
    no_delay_reason: str = ""          # why nothing is queued without the flush
    calls_per_interval: int = 1

    @classmethod
    def build(cls, device: torch.device, flush: bool,
              queued_delay_ms: float = DEFAULT_QUEUED_DELAY_MS,
              cache: CacheInfo | None = None) -> "TimingPlan":
        cache = cache or last_level_cache(device)
        if not devices.is_gpu(device):
            return cls(device, cache)
        if flush:
            return cls(device, cache, flusher=CacheFlusher(device, flush_buffer_bytes(cache)))
        if queued_delay_ms <= 0:
            return cls(device, cache, no_delay_reason="--queued-delay-ms 0")
        if not hasattr(torch.cuda, "_sleep"):
            return cls(device, cache,
                       no_delay_reason="torch.cuda._sleep is missing in this PyTorch")
        delay = QueuedDelay.calibrate(device, queued_delay_ms)
        return cls(device, cache, delay=delay,
                   no_delay_reason="" if delay else "the spin could not be timed")

    @property
    def flushes(self) -> bool:
        return self.flusher is not None

    @property
    def dispatch_hidden(self) -> bool | None:
        """Whether work is queued ahead of each start event; None on the CPU, where a call runs
        synchronously and its dispatch is part of its time."""
        if not devices.is_gpu(self.device):
            return None
        return self.flusher is not None or self.delay is not None

    def __call__(self) -> None:
        if self.flusher is not None:
            self.flusher()
        if self.delay is not None:
            self.delay()

    def describe(self) -> list[str]:
        """Lines for the console header: what precedes each call, and the cache."""
        if not devices.is_gpu(self.device):
            return ["before each call: nothing (on the CPU a call runs synchronously; its "
                    "dispatch is part of its time)",
                    f"cache: {self.cache.describe()}; no flush on the CPU, rows not marked"]
        cache = f"cache: {self.cache.describe()}"
        if self.flusher is not None:
            return [f"before each call: L2 flush of {self.flusher.bytes / MIB:.0f} MiB (2x the "
                    f"cache, at least {FLUSH_FLOOR_BYTES / MIB:.0f} MiB), outside the interval; "
                    f"it keeps the GPU busy while the call is dispatched, so dispatch is not "
                    f"timed", cache]
        if self.delay is not None:
            first = (f"before each call: no flush (--no-flush-l2); a {self.delay.target_ms:g} ms "
                     f"spin ({self.delay.method}, {self.delay.cycles} cycles) keeps the GPU "
                     f"busy while the call is dispatched, so dispatch is not timed")
        else:
            first = (f"before each call: no flush (--no-flush-l2) and nothing queued "
                     f"({self.no_delay_reason}): a call shorter than its host dispatch is "
                     f"timed with it")
        return [first, f"{cache}; rows whose working set fits are marked cache-resident"]

    def info(self) -> dict:
        """Keys of the JSON run block."""
        return {
            "flush_l2": self.flushes,
            "l2_flush_bytes": self.flusher.bytes if self.flusher else None,
            "cache_bytes": self.cache.size_bytes, "cache_source": self.cache.source,
            "calls_per_interval": self.calls_per_interval,
            "queued_delay_ms": self.delay.target_ms if self.delay else None,
            "queued_delay_cycles": self.delay.cycles if self.delay else None,
            "queued_delay_method": self.delay.method if self.delay else None,
            "dispatch_outside_interval": self.dispatch_hidden,
        }


# ---------------------------------------------------------------------------------------------
# Measuring one case
# ---------------------------------------------------------------------------------------------

def _gigabytes(count: int) -> str:
    return f"{count / 1e9:.1f} GB"


def _torch_error_as_benchmark_error(error: BaseException, case: OpCase, dtype_name: str,
                                    device: torch.device) -> BenchmarkError | None:
    """Map torch's errors for expected situations onto ours; None for anything else (a bug)."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if devices.is_out_of_memory(error):
        return OutOfMemory(f"out of memory on {device}: {message}; use smaller shapes")
    # torch's dispatcher says e.g. '"addmm_impl_cpu_" not implemented for 'Half''.
    if "not implemented for" in message:
        return UsageError(f"{case.spec.name} does not support {dtype_name} on {device}: "
                          f"{message}")
    return None


def _call_and_measure(call: Callable[[], object], config: RunConfig,
                      between: Callable[[], object] | None) -> Measurement:
    for _ in range(config.num_warmup_iters):
        call()
    devices.synchronize(config.device)
    return time_calls(call, config.num_iters, config.device, between=between)


def _profile(call: Callable[[], object], device: torch.device) -> str:
    """Profile a few calls after the timed ones (the timed region never sees the profiler);
    returns the package's operator table by device time (CPU time on the CPU)."""
    return profilers.operator_table(call, device, PROFILED_CALLS, row_limit=12)


def measure_case(case: OpCase, config: RunConfig, peaks: Peaks,
                 between: Callable[[], object] | None = None) -> OpResult:
    """Measure one resolved case; expected failures come back as rows, bugs propagate."""
    cost = case.spec.cost(case.shapes, torch.empty((), dtype=config.dtype).element_size(),
                          case.inplace)
    row = OpResult.for_case(case.label, case.spec.op_type, case.shapes_text, config.dtype_name,
                            case.spec.roof, cost.bytes_moved, cost.flops)
    working_set = catalog.working_set_bytes(cost, case.inplace)
    row = row.with_cache(working_set, cache_resident(working_set, config.cache_bytes,
                                                     config.flush_l2))
    needed, available = memory_needed_bytes(cost), devices.free_memory_bytes(config.device)
    if available is not None and needed > available:
        return row.skipped(f"needs {_gigabytes(needed)}, {_gigabytes(available)} free "
                           f"on {config.device}")
    call: Callable[[], object] | None = None
    try:
        call = case.spec.build(case.shapes, config.dtype, config.device, case.inplace)
        measurement = _call_and_measure(call, config, between)
        profile = _profile(call, config.device) if config.enable_profiling else ""
    except (RuntimeError, NotImplementedError) as error:
        mapped = _torch_error_as_benchmark_error(error, case, config.dtype_name, config.device)
        if mapped is None:
            raise
        return row.failed(mapped)
    finally:
        call = None  # drop the inputs before the next case checks free memory
        devices.empty_cache(config.device)
    return _with_rates(row, measurement, case.spec, config.dtype_name, peaks).with_profile(profile)


def _has_fp32_matrix(peak: flops.DevicePeak | None) -> bool:
    return peak is not None and peak.fp32_matrix is not None


def _with_rates(row: OpResult, measurement: Measurement, spec: catalog.OpSpec, dtype_name: str,
                peaks: Peaks) -> OpResult:
    moved, counted = row.bytes_moved, row.flops
    if moved is None or counted is None:
        raise ValueError(f"{row.op}: a measured case's row carries its cost (OpResult.for_case)")
    seconds = measurement.median / 1e3
    gbs = moved / seconds / 1e9 if seconds > 0 else math.nan
    tflops = counted / seconds / 1e12 if seconds > 0 else math.nan
    if spec.roof == catalog.MEMORY_BOUND:
        peak_label, peak_value = "BW", peaks.gbs()
        achieved = gbs
    else:
        peak_label = peak_precision(spec, dtype_name)
        if peak_label == "fp32_matrix" and not _has_fp32_matrix(peaks.device_peak):
            peak_label = "fp32"  # NVIDIA: FP32 GEMMs run on the vector units
        peak_value, achieved = peaks.tflops(peak_label), tflops
    percent = 100.0 * achieved / peak_value if peak_value else None
    return row.measured(measurement, gbs, tflops, peak_label, peak_value, percent)


# ---------------------------------------------------------------------------------------------
# Running a list
# ---------------------------------------------------------------------------------------------

@dataclass
class RunOutcome:
    results: list[OpResult] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """2 when any op had bad input, else 3 when any ran out of memory, else 0.

        An op skipped by the memory check is not a failure in a list; alone, it is exit 3.
        """
        failed = [row for row in self.results if row.status == "failed"]
        if any(row.exit_code == UsageError.exit_code for row in failed):
            return UsageError.exit_code
        if failed:
            return max(row.exit_code for row in failed)
        if len(self.results) == 1 and self.results[0].status == "skipped":
            return OutOfMemory.exit_code
        return 0


def run_requests(requests: Iterable[CaseRequest], config: RunConfig, peaks: Peaks,
                 on_result: Callable[[OpResult], None],
                 between: Callable[[], object] | None = None,
                 on_start: Callable[[str], None] = lambda label: None) -> RunOutcome:
    """Run each request in turn; a failure becomes its row and the list goes on."""
    outcome = RunOutcome()
    for request in requests:
        on_start(request_label(request))
        try:
            case = make_case(request, config.dtype_name, config.append_dtype)
        except UsageError as error:
            result = OpResult.for_request_error(request_label(request), request.op_type or "",
                                                config.dtype_name, error)
        else:
            result = measure_case(case, config, peaks, between)
        outcome.results.append(result)
        on_result(result)
    return outcome
