"""The telemetry source for a torch device: NVML on NVIDIA, amdsmi on AMD, none on the CPU.

:func:`open_source` asks the device layer whose GPU it is and what names it, opens the vendor's
library on that GPU, and returns the source with a one-line note for the console. It never raises
for a missing library or a failing init: telemetry must not stop a benchmark.

Example::

    source, note = open_source(torch.device("cuda", 0))
    print(note)     # "telemetry: NVML 12.575.51, NVIDIA H100 (GPU-..., matched by UUID)"
    if source is None:
        ...         # note says why: the CPU, no library, the library could not open the GPU
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from microbench.platform import devices
from microbench.platform.devices import Vendor
from microbench.platform.errors import MissingEnvironment
from microbench.measure.telemetry.amd import AMDSMI_MISSING, AmdSmiSource
from microbench.measure.telemetry.library import import_library
from microbench.measure.telemetry.nvidia import NVML_MISSING, NvmlSource
from microbench.measure.telemetry.sampler import Source

CPU_NOTE = "telemetry: unavailable on the CPU"
NO_RUNTIME_NOTE = "telemetry: unavailable (this PyTorch has neither CUDA nor ROCm)"


@dataclass(frozen=True)
class _Library:
    source: type                 # the Source class that reads through it
    module: str                  # the Python module to import
    label: str                   # how a note names it
    missing: str                 # the note when the module is not installed


_LIBRARIES = {
    Vendor.NVIDIA: _Library(NvmlSource, "pynvml", "NVML", NVML_MISSING),
    Vendor.AMD: _Library(AmdSmiSource, "amdsmi", "amdsmi", AMDSMI_MISSING),
}


def open_source(device: torch.device) -> tuple[Source | None, str]:
    """The telemetry source for ``device`` and a one-line note; never raises for a missing
    library or a failing init, since telemetry must not stop a benchmark."""
    vendor = devices.vendor(device)
    if vendor is Vendor.CPU:
        return None, CPU_NOTE
    library = _LIBRARIES.get(vendor)
    if library is None:
        return None, NO_RUNTIME_NOTE
    return _open(library, device)


def _open(library: _Library, device: torch.device) -> tuple[Source | None, str]:
    try:
        module = import_library(library.module, library.missing)   # first: the usual failure
    except MissingEnvironment as error:
        return None, str(error)
    identity = None
    try:
        identity = devices.gpu_identity(device)
        source = library.source(identity, module)
    except Exception as error:  # any init failure: note it, run on without telemetry
        detail = (str(error).removeprefix("telemetry: ") if isinstance(error, MissingEnvironment)
                  else f"{type(error).__name__}: {error}")
        index = identity.index if identity is not None else device.index
        return None, (f"telemetry: {library.label} could not open GPU {index} ({detail}); "
                      "clocks, power and energy not recorded")
    return source, f"telemetry: {source.name}, {source.device_label}"
