"""What a telemetry source gives: one :class:`Sample` per reading, and the :class:`Source` protocol.

Value types only: every other module of the package imports this one, and it imports none of
them. A field is ``None`` where the device does not expose it; it is never guessed.

Example::

    sample = source.read()
    sample.power_w                          # watts, or None
    sample.to_dict(origin_s=first.t_s)      # plain JSON types, time from the first sample
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable

# The numeric fields of a Sample that the report gives min / median / max for.
QUANTITIES = ("sm_clock_mhz", "memory_clock_mhz", "power_w", "temperature_c", "utilization_pct")


@dataclass(frozen=True)
class Sample:
    """One reading; any field is None where the device does not expose it."""

    t_s: float                                   # monotonic seconds
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    utilization_pct: float | None = None
    throttle_reasons: tuple[str, ...] | None = None   # active throttling reasons; () = none
    energy_j: float | None = None                # cumulative counter, joules

    def to_dict(self, origin_s: float = 0.0) -> dict:
        """Plain JSON types; t_s counts from origin_s."""
        values = asdict(self)
        values["t_s"] = self.t_s - origin_s
        if self.throttle_reasons is not None:
            values["throttle_reasons"] = list(self.throttle_reasons)
        return values


@runtime_checkable
class Source(Protocol):
    """One GPU seen through a vendor library."""

    name: str                           # library and version, e.g. "NVML 12.575.51"
    device_label: str                   # which GPU, and how it was matched to the torch device
    max_sm_clock_mhz: float | None

    def read(self) -> Sample: ...

    def close(self) -> None: ...
