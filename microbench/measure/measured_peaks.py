"""What the peak probe measured (``microbench.ops.peaks`` measures it): its GEMM and copy rows,
the clocks read meanwhile, and what it cost. A value type below its producer (the op bench, in
ops/) and its readers (``ProcessResult.peaks`` in :mod:`.results`, the summary and writers in
output/), so that each can name it.

A row is the op bench's ``OpResult``; :class:`ProbeRow` names what is read of it here.

Example::

    measured = ops.peaks.measure(torch.device("cuda"), torch.bfloat16, "bf16")
    measured.tflops, measured.gbs, measured.gemm_label, measured.clocks.describe()
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from microbench.measure.timing import Measurement


class ProbeRow(Protocol):
    """What the peaks read of a probe's row (``microbench.ops.report.OpResult``)."""

    @property
    def op(self) -> str: ...

    @property
    def shapes(self) -> str: ...

    @property
    def dtype(self) -> str: ...

    @property
    def status(self) -> str: ...          # ok, skipped or failed

    @property
    def message(self) -> str: ...

    @property
    def bytes_moved(self) -> int | None: ...

    @property
    def flops(self) -> int | None: ...

    @property
    def gbs(self) -> float | None: ...

    @property
    def tflops(self) -> float | None: ...

    @property
    def measurement(self) -> Measurement | None: ...


@dataclass(frozen=True)
class ProbeClocks:
    """What the device said while the probe ran; None where it does not say (the CPU)."""

    source: str                          # the library, or why there is none
    sm_clock_mhz: float | None = None    # median of the readings
    max_sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    power_w: float | None = None         # highest reading
    power_limit_w: float | None = None   # enforced now
    default_power_limit_w: float | None = None
    throttle_reasons: tuple[str, ...] | None = None   # every reason seen; () none
    samples: int = 0

    @property
    def power_capped(self) -> bool | None:
        if self.power_limit_w is None or self.default_power_limit_w is None:
            return None
        return self.power_limit_w < self.default_power_limit_w

    def describe(self) -> str:
        if not self.samples:
            return f"clocks not read ({self.source})"
        parts = []
        if self.sm_clock_mhz is not None:
            top = f" of {self.max_sm_clock_mhz:.0f} max" if self.max_sm_clock_mhz else ""
            parts.append(f"SM clock {self.sm_clock_mhz:.0f} MHz{top}")
        if self.memory_clock_mhz is not None:
            parts.append(f"memory clock {self.memory_clock_mhz:.0f} MHz")
        if self.power_w is not None:
            parts.append(f"power up to {self.power_w:.0f} W")
        if self.power_limit_w is not None:
            default = (f" (default {self.default_power_limit_w:.0f} W)"
                       if self.default_power_limit_w else "")
            parts.append(f"power limit {self.power_limit_w:.0f} W{default}")
        reasons = self.throttle_reasons
        parts.append("throttle reasons not reported" if reasons is None
                     else f"throttled: {', '.join(reasons)}" if reasons else "not throttled")
        return ", ".join(parts)

    def to_dict(self) -> dict:
        return {"source": self.source, "samples": self.samples,
                "sm_clock_mhz": self.sm_clock_mhz, "max_sm_clock_mhz": self.max_sm_clock_mhz,
                "memory_clock_mhz": self.memory_clock_mhz, "power_w_max": self.power_w,
                "power_limit_w": self.power_limit_w,
                "default_power_limit_w": self.default_power_limit_w,
                "power_capped": self.power_capped,
                "throttle_reasons": (None if self.throttle_reasons is None
                                     else list(self.throttle_reasons))}


@dataclass(frozen=True)
class MeasuredPeaks:
    """The probe's two rows (the op benchmark's ``OpResult``), the clocks, and its cost."""

    device_name: str
    dtype: str                           # the GEMM's, e.g. "bf16"
    peak_key: str                        # the datasheet column it compares with, e.g. "tf32"
    gemm: ProbeRow | None                # None: no GEMM of this dtype yet (FP8)
    copy: ProbeRow
    clocks: ProbeClocks
    seconds: float                       # the whole probe, inputs and warm-up included
    note: str = ""                       # why a row is missing or failed

    @property
    def tflops(self) -> float | None:
        return _rate(self.gemm, "tflops")

    @property
    def gbs(self) -> float | None:
        return _rate(self.copy, "gbs")

    @property
    def gemm_label(self) -> str:
        """'bf16 GEMM 8192^3' (the measured MFU's basis)."""
        shapes = self.gemm.shapes.split(",")[0].split("-") if self.gemm else ["?"]
        return f"{self.dtype} GEMM {shapes[0]}^3"

    @property
    def copy_label(self) -> str:
        """'device copy 1 GiB (2 GiB read + written)' (the measured MBU's basis)."""
        moved = self.copy.bytes_moved or 0
        return f"device copy {_binary_bytes(moved // 2)} ({_binary_bytes(moved)} read + written)"

    def to_dict(self) -> dict:
        return {
            "method": ("microbench.ops: torch.matmul N x N x N (FP8: torch._scaled_mm, "
                       "tensorwise scales, into BF16) and a device-to-device copy, "
                       "each call timed alone with device events after warm-up calls, L2 "
                       "flushed before each on a GPU; rate = work / median call"),
            "device_name": self.device_name, "dtype": self.dtype,
            "datasheet_column": self.peak_key,
            "gemm": None if self.gemm is None else _row_dict(self.gemm, "tflops"),
            "bandwidth": {**_row_dict(self.copy, "gbs"),
                          "basis": "bytes read + bytes written"},
            "tflops": self.tflops, "gb_per_s": self.gbs,
            "clocks": self.clocks.to_dict(), "seconds": self.seconds, "note": self.note or None,
        }


def _binary_bytes(count: int) -> str:
    return f"{count / 2**30:g} GiB" if count >= 2**30 else f"{count / 2**20:g} MiB"


def _rate(row: ProbeRow | None, key: str) -> float | None:
    if row is None or row.status != "ok":
        return None
    value = row.tflops if key == "tflops" else row.gbs
    return value if value and value > 0 else None


def _row_dict(row: ProbeRow, key: str) -> dict:
    stats = row.measurement.stats() if row.measurement else {}
    return {"op": row.op, "shape": row.shapes, "dtype": row.dtype, "status": row.status,
            "message": row.message or None, "rate": _rate(row, key),
            "unit": "TFLOP/s" if key == "tflops" else "GB/s",
            "work_per_call": row.flops if key == "tflops" else row.bytes_moved,
            "median_ms": stats.get("median_ms"),
            "samples_ms": list(row.measurement.samples_ms) if row.measurement else []}
