"""Numbers as a reader wants them: scaled to a unit where they have three or four significant
digits (``3.79 s``, not ``3787750.96 us``; ``2.04 GFLOP/s``, not ``0.00 TFLOP/s``).

Only the console uses these; JSON and CSV keep fixed units (milliseconds, MB, img/s), which
scripts rely on.

Example::

    duration_ms(0.0123) == "12.3 us";  duration_ms(3787.75) == "3.79 s"
    flops(2.04e9) == "2.04 GFLOP";  rate(5163.72) == "5,164"
"""
from __future__ import annotations

from typing import Callable

import math

_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))
# The widest a number is written out in full: the largest figure a result may hold (1e15,
# store/ranges.py) with its separators is 21 characters; a figure near the float range's floor
# (3e-308) or its ceiling written out would be a cell of 300 characters.
MAX_FIXED_CHARS = 24


def _bounded(fixed: str, value: float, digits: int) -> str:
    """``fixed`` where it fits :data:`MAX_FIXED_CHARS`, else ``value`` in exponent notation
    with ``digits`` significant digits (``2.30e-308``)."""
    return fixed if len(fixed) <= MAX_FIXED_CHARS else f"{value:.{max(digits, 1) - 1}e}"


def formatted(value: float, spec: str, digits: int = 3) -> str:
    """``format(value, spec)`` where that fits :data:`MAX_FIXED_CHARS`, else exponent notation
    (a figure of its own format, e.g. the node check's ``,.0f``, near the float range's ends)."""
    return _bounded(format(value, spec), value, digits)


def significant(value: float, digits: int = 3) -> str:
    """``value`` with about ``digits`` significant digits, in exponent notation only where
    written out it would pass :data:`MAX_FIXED_CHARS` (no measurement does)."""
    magnitude = abs(value)
    if magnitude == 0 or not math.isfinite(magnitude):
        return f"{value:.0f}" if magnitude == 0 else str(value)
    decimals = max(0, digits - 1 - math.floor(math.log10(magnitude)))
    return _bounded(f"{value:.{decimals}f}", value, digits)


def duration_ms(ms: float) -> str:
    """A time given in milliseconds, in us, ms or s."""
    if ms >= 1000:
        return f"{significant(ms / 1e3)} s"
    if ms >= 1:
        return f"{significant(ms)} ms"
    return f"{significant(ms * 1e3)} us"


def flops(value: float, per_second: bool = False) -> str:
    """FLOP counts and rates with an SI prefix: ``3.49 GFLOP``, ``412 TFLOP/s``."""
    suffix = "FLOP/s" if per_second else "FLOP"
    for scale, prefix in _SI:
        if abs(value) >= scale:
            return f"{significant(value / scale)} {prefix}{suffix}"
    return f"{significant(value)} {suffix}"


def megabytes(mb: float) -> str:
    """Memory given in MB (10^6 bytes, as the JSON stores it), in MB or GB."""
    if mb >= 1000:
        return f"{significant(mb / 1e3)} GB"
    return f"{significant(mb)} MB"


def rate(value: float) -> str:
    """A throughput: thousands separated, a decimal only where the number is small."""
    if abs(value) >= 1000 and math.isfinite(value):
        return _bounded(f"{value:,.0f}", value, 4)
    return significant(value, 4)


def percent(fraction: float) -> str:
    if not math.isfinite(fraction):
        return f"{fraction}%"
    fixed = f"{fraction:.1%}" if abs(fraction) >= 0.001 or fraction == 0 else f"{fraction:.2%}"
    return _bounded(fixed, fraction * 100, 3) + ("%" if len(fixed) > MAX_FIXED_CHARS else "")


def tflops_rate(tflops: float) -> str:
    """A peak in TFLOP/s as the datasheets print it (``989.5 TFLOP/s``), or with an SI prefix
    below one TFLOP/s (a CPU's ``41.3 GFLOP/s``)."""
    return (f"{float(f'{tflops:.4g}'):g} TFLOP/s" if tflops >= 1
            else flops(tflops * 1e12, per_second=True))


def bandwidth(gbs: float) -> str:
    """A bandwidth given in GB/s (10^9 bytes a second, as the JSON stores it), in MB/s, GB/s or
    TB/s by its size: ``412 MB/s``, ``41.3 GB/s``, ``3.35 TB/s`` (never ``0.0 GB/s``). Every
    bandwidth on the console goes through here, a peak's too."""
    for scale, unit in ((1e3, "TB/s"), (1.0, "GB/s"), (1e-3, "MB/s")):
        if abs(gbs) >= scale:
            return f"{float(significant(gbs / scale)):g} {unit}"
    return f"{float(significant(gbs * 1e3)):g} MB/s" if gbs else "0 MB/s"


# A peak bandwidth is a bandwidth, printed alike (MBU's denominators, the peak probe).
gbs_rate = bandwidth


def two_denominators(share: float | None, peak: float | None, source: str,
                     measured_share: float | None, measured: float | None,
                     measured_source: str, rate: Callable[[float], str]) -> str:
    """A utilisation against both peaks, each labelled: ``29.9% of 989.5 TFLOP/s (datasheet
    ...); 37.5% of 790 TFLOP/s (measured: bf16 GEMM 8192^3, this run)``. ``rate`` formats a
    peak (:func:`tflops_rate`, :func:`gbs_rate`). Without a datasheet peak the measured share
    leads and the missing one says why; without a probe the datasheet's stands alone."""
    datasheet = (f"{percent(share)} of {rate(peak)} ({source})"
                 if share is not None and peak is not None else f"unknown ({source})")
    if measured_share is None or measured is None:      # a share has its peak
        return datasheet
    probe = f"{percent(measured_share)} of {rate(measured)} ({measured_source})"
    if share is None:
        return f"{probe}; datasheet: {datasheet}"
    return f"{datasheet}; {probe}"
