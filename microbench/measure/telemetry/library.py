"""What the NVML and amdsmi sources share: importing the library (a missing one is a one-line
:class:`~microbench.platform.errors.MissingEnvironment`), a query of one field of this GPU that gives None
when the library raises its own error, and turning the library's values into floats and text.

Example::

    nvml = import_library("pynvml", "telemetry: nvidia-ml-py not installed ...")

    class NvmlSource(LibrarySource):
        def __init__(self, nvml):
            self._error, self._handle = nvml.NVMLError, nvml.nvmlDeviceGetHandleByIndex(0)
            self.power_mw = self._query(nvml.nvmlDeviceGetPowerUsage)   # None if unsupported

And finding torch's GPU among the library's GPUs (the keys' spelling: UUID, PCI address,
``*_VISIBLE_DEVICES``): torch numbers only the GPUs it can see, NVML and amdsmi every GPU of the
machine, so the sources match by UUID or PCI address, and by index only through the
visible-devices list (:func:`as_identity`, :func:`normalize_uuid`, :func:`parse_bdf`,
:func:`visible_entry`).
"""
from __future__ import annotations

import importlib
import re
from types import ModuleType
from typing import Any, Callable, Literal

from microbench.platform.devices import GpuIdentity
from microbench.platform.errors import MissingEnvironment


# ---------------------------------------------------------------- library

def import_library(name: str, missing: str) -> ModuleType:
    """The module ``name``; MissingEnvironment(``missing``) when it is not installed."""
    try:
        return importlib.import_module(name)
    except Exception as error:          # noqa: BLE001 - not installed, or broken inside its
        raise MissingEnvironment(missing) from error         # import: unavailable either way


class LibrarySource:
    """A query of one field of this device that gives None when the library raises its own
    error (NVMLError NotSupported, AmdSmiException), never a crash. Subclasses set ``_error``
    (the library's exception type) and ``_handle`` (the library's handle of the GPU)."""

    _error: type[BaseException]
    _handle: Any

    def _try(self, function: Callable, *args: Any) -> Any:
        try:
            return function(*args)
        except self._error:
            return None

    def _query(self, function: Callable | None, *args: Any) -> Any:
        return None if function is None else self._try(function, self._handle, *args)


def as_float(value: Any) -> float | None:
    """A number as a float; None for anything else (a missing field, "N/A", a flag)."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def as_text(value: Any) -> str:
    """Old pynvml releases return bytes where new ones return str."""
    return value.decode() if isinstance(value, bytes) else str(value)


# ---------------------------------------------------------------- matching

def as_identity(device: GpuIdentity | str | int,
                text_is: Literal["uuid", "pci_bus_id"]) -> GpuIdentity:
    """What a source was asked to open: an identity as is, an int as torch's index, a string as
    the field ``text_is`` names ("uuid" for NVML, "pci_bus_id" for amdsmi)."""
    if isinstance(device, GpuIdentity):
        return device
    if isinstance(device, int):
        return GpuIdentity(index=device)
    return GpuIdentity(uuid=device) if text_is == "uuid" else GpuIdentity(pci_bus_id=device)


def normalize_uuid(text: str) -> str:
    """Lower case without NVML's "GPU-" / "MIG-" prefix, as torch spells it."""
    text = text.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text


def parse_bdf(text: str) -> tuple[int, int, int] | None:
    """(domain, bus, device) from "dddd:bb:dd[.f]" or "bb:dd[.f]"; the function is ignored."""
    match = re.fullmatch(r"(?:([0-9a-f]+):)?([0-9a-f]+):([0-9a-f]+)(?:\.[0-7])?",
                         text.strip().lower())
    if match is None:
        return None
    domain, bus, dev = match.groups()
    return int(domain or "0", 16), int(bus, 16), int(dev, 16)


def visible_entry(index: int, value: str | None, variable: str) -> str:
    """The physical device a ``*_VISIBLE_DEVICES`` list maps torch's ``index`` to (the index
    itself when the variable is unset): a number, or a UUID (prefix) where CUDA allows one."""
    if value is None:
        return str(index)
    entries = [entry.strip() for entry in value.split(",") if entry.strip()]
    if index >= len(entries):
        raise MissingEnvironment(f"telemetry: {variable}={value!r} has no entry for GPU {index}")
    return entries[index]
