"""Finding torch's GPU among a management library's GPUs: the spelling of the keys.

torch numbers only the GPUs it can see (after ``*_VISIBLE_DEVICES``); NVML and amdsmi number
every GPU of the machine. So the sources match by what does not depend on numbering, the UUID or
the PCI address, and by index only through the visible-devices list. What torch knows about its
GPU comes from the device layer (:func:`microbench.platform.device.gpu_identity`); this module compares
it with what a library reports.

Example::

    normalize_uuid("GPU-ABCD-12")                       # "abcd-12"
    parse_bdf("0000:c1:00.0") == parse_bdf("c1:00")     # True: (0, 0xc1, 0)
    visible_entry(1, "2,0", "CUDA_VISIBLE_DEVICES")     # "0"
    as_identity("0000:c1:00.0", text_is="pci_bus_id")   # GpuIdentity(pci_bus_id=...)
"""
from __future__ import annotations

import re

from microbench.platform.device import GpuIdentity
from microbench.platform.errors import MissingEnvironment


def as_identity(device: GpuIdentity | str | int, text_is: str) -> GpuIdentity:
    """What a source was asked to open: an identity as is, an int as torch's index, a string as
    the field ``text_is`` names ("uuid" for NVML, "pci_bus_id" for amdsmi)."""
    if isinstance(device, GpuIdentity):
        return device
    if isinstance(device, int):
        return GpuIdentity(index=device)
    return GpuIdentity(**{text_is: device})


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
