"""What a GPU's management library reports as errors and link state: ECC counts, retired (or
bad) memory pages, and the PCIe link's generation and width, now and at most.

A source (``NvmlSource``, ``AmdSmiSource``) answers ``health()`` with one :class:`DeviceHealth`;
every field is None where the library does not say (a consumer GPU without ECC, a driver
without the query). The node check (``microbench.node``) flags a GPU whose uncorrectable
errors or retired pages are above zero, and a link narrower or slower than its peers'.
"""
from __future__ import annotations

from typing import Any

from dataclasses import asdict, dataclass

# amdsmi reports a link's speed in MT/s per lane (pcie_metric.pcie_speed; AMD SMI docs); the
# generation that runs at it (PCI-SIG: 2.5, 5, 8, 16, 32, 64 GT/s for generations 1 to 6).
PCIE_GENERATION_OF_MTS = {2500: 1, 5000: 2, 8000: 3, 16000: 4, 32000: 5, 64000: 6}


@dataclass(frozen=True)
class DeviceHealth:
    """Error counters since the driver loaded (volatile) and the PCIe link as trained now."""

    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    retired_pages: int | None = None          # retired (NVIDIA) or bad (AMD) pages
    retirement_pending: bool | None = None    # a page waits for the next driver reload
    pcie_generation: int | None = None
    pcie_max_generation: int | None = None
    pcie_width: int | None = None
    pcie_max_width: int | None = None

    def errors(self) -> list[str]:
        """Each reported error in words; [] where none (or none known)."""
        found = []
        if self.ecc_uncorrected:
            found.append(f"{self.ecc_uncorrected} uncorrectable ECC errors")
        if self.retired_pages:
            found.append(f"{self.retired_pages} retired memory pages")
        if self.retirement_pending:
            found.append("a page retirement pending (reload the driver)")
        return found

    def to_dict(self) -> dict:
        return asdict(self)


def pcie_generation_of(speed_mts: Any) -> int | None:      # amdsmi's field, whatever it holds
    """The PCIe generation of an amdsmi link speed in MT/s; None where unknown."""
    try:
        return PCIE_GENERATION_OF_MTS.get(int(speed_mts))
    except (TypeError, ValueError):
        return None
