"""An NVIDIA GPU through NVML: :class:`NvmlSource` (``pynvml``, from the PyPI package
nvidia-ml-py, a dependency of this tool) and the decoding of NVML's throttle reasons.

Units and calls follow pynvml.py and the NVML API reference. Any field NVML does not support on
this GPU reads None; an entry point a driver lacks falls back to its older name.

Example::

    source = NvmlSource(gpu_identity(torch.device("cuda", 0)))
    print(source.name, source.device_label)     # NVML 12.575.51, NVIDIA H100 (GPU-..., ...)
    sample = source.read()                       # power in W, energy in J, clocks in MHz
    source.close()
"""
from __future__ import annotations

import os
import time
from types import ModuleType
from typing import Any, Callable, Mapping, Sequence

from microbench.platform.devices import GpuIdentity
from microbench.platform.errors import MissingEnvironment
from microbench.measure.telemetry.health import DeviceHealth
from microbench.measure.telemetry.library import LibrarySource, as_float, as_text, import_library
from microbench.measure.telemetry.library import as_identity, normalize_uuid, visible_entry
from microbench.measure.telemetry.sampler import Sample

NVML_MISSING = ("telemetry: nvidia-ml-py not installed (pip install nvidia-ml-py); "
                "clocks, power and energy not recorded")

# NVML clock-event ("throttle") reason bits: nvml.h / pynvml.py nvmlClocksEventReason* and the
# deprecated nvmlClocksThrottleReason* aliases with the same values; meanings from the NVML API
# reference, group nvmlClocksEventReasons. These count as throttling: the clock was held below
# what the GPU would otherwise run because of a power, thermal, board or reliability limit, or to
# match the slowest GPU of a sync-boost group.
NVML_THROTTLE_REASONS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x200: "board_limit",
    0x400: "reliability",
}
# Not throttling: GpuIdle means nothing was running (the clock drops by design);
# ApplicationsClocksSetting and DisplayClockSetting mean the clock sits at a target an administrator
# configured, which NVML reports even at full speed. Bits in neither table (reasons added after
# this was written) are reported as nvml_reason_0x... and count as throttling, so they are seen.
NVML_NOT_THROTTLING = {0x1: "gpu_idle", 0x2: "applications_clocks_setting",
                       0x100: "display_clock_setting"}


def decode_nvml_reasons(mask: int) -> tuple[str, ...]:
    """The throttling reasons in an NVML clock-event bitmask (idle and clock settings dropped)."""
    reasons = []
    for bit in (1 << n for n in range(64)):
        if not mask & bit or bit in NVML_NOT_THROTTLING:
            continue
        reasons.append(NVML_THROTTLE_REASONS.get(bit, f"nvml_reason_0x{bit:x}"))
    return tuple(reasons)


class FirstAvailable:
    """Calls the first NVML entry point the driver has: pynvml may define a newer name (e.g.
    nvmlDeviceGetCurrentClocksEventReasons) that an older driver lacks, which NVML reports as
    NVML_ERROR_FUNCTION_NOT_FOUND (pynvml.py); then the older name is used from then on."""

    def __init__(self, functions: Sequence[Callable[..., Any] | None],
                 error: type[BaseException], not_found: int):
        self._functions = [f for f in functions if f is not None]
        self._error = error
        self._not_found = not_found

    def __call__(self, *args: Any) -> Any:
        while self._functions:
            try:
                return self._functions[0](*args)
            except self._error as exc:
                if getattr(exc, "value", None) != self._not_found or len(self._functions) == 1:
                    raise
                self._functions.pop(0)
        return None


class NvmlSource(LibrarySource):
    """An NVIDIA GPU through NVML (pynvml.py of nvidia-ml-py; units from the NVML API reference).

    ``device`` is a :class:`~microbench.platform.devices.GpuIdentity` (what ``open_source`` passes), a UUID
    string, or torch's device index. The GPU is found by UUID; where torch gave one but NVML has
    none that matches (a MIG instance, say), by PCI address, which names the same board; by index
    only when no UUID is known or NVML cannot read UUIDs, through CUDA_VISIBLE_DEVICES, since CUDA
    renumbers the visible devices and NVML does not (the order also matches only with
    CUDA_DEVICE_ORDER=PCI_BUS_ID, so the label says when the index was used).
    """

    def __init__(self, device: GpuIdentity | str | int, pynvml_module: ModuleType | None = None,
                 *, environ: Mapping[str, str] | None = None):
        self._nvml = (pynvml_module if pynvml_module is not None
                      else import_library("pynvml", NVML_MISSING))
        self._error = self._nvml.NVMLError
        self._closed = False
        self._nvml.nvmlInit()
        try:
            self._open(as_identity(device, text_is="uuid"),
                       os.environ if environ is None else environ)
        except BaseException:
            self.close()
            raise

    def _open(self, identity: GpuIdentity, environ: Mapping[str, str]) -> None:
        nvml = self._nvml
        self._handle, matched_by = self._resolve(identity, environ)
        self.name = f"NVML {self._library_version()}"
        self.device_label = self._label(matched_by)
        self.max_sm_clock_mhz = as_float(
            self._query(nvml.nvmlDeviceGetMaxClockInfo, nvml.NVML_CLOCK_SM))
        not_found = getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13)
        # The "event" name replaced the deprecated "throttle" one; same bits (pynvml.py).
        self._reasons = FirstAvailable(
            [getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None),
             getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)],
            self._error, not_found)
        # nvmlDeviceGetTemperature is deprecated in favour of nvmlDeviceGetTemperatureV (pynvml.py).
        self._temperature = FirstAvailable(
            [getattr(nvml, "nvmlDeviceGetTemperatureV", None),
             getattr(nvml, "nvmlDeviceGetTemperature", None)], self._error, not_found)

    # ---------------------------------------------------------------- which GPU

    def _resolve(self, identity: GpuIdentity, environ: Mapping[str, str]) -> tuple[Any, str]:
        uuids_readable = True
        if identity.uuid:
            handle, uuids_readable = self._find_by_uuid(identity.uuid)
            if handle is not None:
                return handle, "UUID"
        if identity.pci_bus_id:
            handle = self._try(self._nvml.nvmlDeviceGetHandleByPciBusId, identity.pci_bus_id)
            if handle is not None:
                return handle, "PCI bus id"
        if identity.index is not None and (not identity.uuid or not uuids_readable):
            return self._by_visible_index(identity.index, environ), "index"
        raise MissingEnvironment(f"telemetry: no NVML device matches {identity}")

    def _find_by_uuid(self, wanted: str, prefix: bool = False) -> tuple[Any, bool]:
        """(handle or None, whether NVML could read every UUID)."""
        wanted, readable = normalize_uuid(wanted), True
        for index in range(self._nvml.nvmlDeviceGetCount()):
            handle = self._try(self._nvml.nvmlDeviceGetHandleByIndex, index)
            uuid = None if handle is None else self._try(self._nvml.nvmlDeviceGetUUID, handle)
            if uuid is None:
                readable = False
                continue
            uuid = normalize_uuid(as_text(uuid))
            if uuid == wanted or (prefix and uuid.startswith(wanted)):
                return handle, readable
        return None, readable

    def _by_visible_index(self, index: int, environ: Mapping[str, str]) -> Any:
        variable = "CUDA_VISIBLE_DEVICES"
        entry = visible_entry(index, environ.get(variable), variable)
        if entry.isdigit():
            return self._nvml.nvmlDeviceGetHandleByIndex(int(entry))
        handle, _ = self._find_by_uuid(entry, prefix=True)   # CUDA accepts UUID prefixes there
        if handle is None:
            raise MissingEnvironment(
                f"telemetry: no NVML device matches {variable} entry {entry!r}")
        return handle

    def _library_version(self) -> str:
        version = self._try(self._nvml.nvmlSystemGetNVMLVersion)
        return as_text(version) if version is not None else "(version unknown)"

    def _label(self, matched_by: str) -> str:
        name = self._query(self._nvml.nvmlDeviceGetName)
        uuid = self._query(self._nvml.nvmlDeviceGetUUID)
        name = as_text(name) if name is not None else "NVIDIA GPU"
        uuid = as_text(uuid) if uuid is not None else "no UUID"
        return f"{name} ({uuid}, matched by {matched_by})"

    # ---------------------------------------------------------------- reading

    def read(self) -> Sample:
        nvml = self._nvml
        power_mw = self._query(nvml.nvmlDeviceGetPowerUsage)              # milliwatts
        energy_mj = self._query(nvml.nvmlDeviceGetTotalEnergyConsumption)  # mJ since driver load
        utilization = self._query(nvml.nvmlDeviceGetUtilizationRates)
        reasons = self._query(self._reasons)
        return Sample(
            t_s=time.monotonic(),
            sm_clock_mhz=as_float(self._query(nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_SM)),
            memory_clock_mhz=as_float(
                self._query(nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_MEM)),
            power_w=None if power_mw is None else power_mw / 1000.0,
            temperature_c=as_float(self._query(self._temperature, nvml.NVML_TEMPERATURE_GPU)),
            utilization_pct=None if utilization is None else as_float(utilization.gpu),
            throttle_reasons=None if reasons is None else decode_nvml_reasons(int(reasons)),
            energy_j=None if energy_mj is None else energy_mj / 1000.0,
        )

    def power_limits_w(self) -> tuple[float | None, float | None]:
        """(enforced, default) board power limit in watts (NVML: milliwatts); None where NVML
        does not say. Enforced below default means someone capped the board."""
        nvml = self._nvml
        enforced = as_float(self._query(getattr(nvml, "nvmlDeviceGetEnforcedPowerLimit", None)))
        default = as_float(self._query(
            getattr(nvml, "nvmlDeviceGetPowerManagementDefaultLimit", None)))
        return (None if enforced is None else enforced / 1000.0,
                None if default is None else default / 1000.0)

    def health(self) -> DeviceHealth:
        """ECC counts since the driver loaded (volatile), retired pages of both causes, and the
        PCIe link now and at most (NVML API reference: nvmlDeviceGetTotalEccErrors,
        nvmlDeviceGetRetiredPages, nvmlDeviceGetCurrPcieLink*). A link trains down when idle,
        so read it while the GPU copies."""
        nvml = self._nvml

        def ecc(kind_name: str) -> int | None:
            kind = getattr(nvml, kind_name, None)
            counter = getattr(nvml, "NVML_VOLATILE_ECC", None)
            if kind is None or counter is None:
                return None
            value = self._query(getattr(nvml, "nvmlDeviceGetTotalEccErrors", None), kind, counter)
            return None if value is None else int(value)

        retired = None
        for cause_name in ("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS",
                           "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"):
            cause = getattr(nvml, cause_name, None)
            pages = None if cause is None else self._query(
                getattr(nvml, "nvmlDeviceGetRetiredPages", None), cause)
            if pages is not None:
                retired = (retired or 0) + len(pages)
        pending = self._query(getattr(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", None))

        def link(name: str) -> int | None:
            value = self._query(getattr(nvml, name, None))
            return None if value is None else int(value)

        return DeviceHealth(
            ecc_corrected=ecc("NVML_MEMORY_ERROR_TYPE_CORRECTED"),
            ecc_uncorrected=ecc("NVML_MEMORY_ERROR_TYPE_UNCORRECTED"),
            retired_pages=retired, retirement_pending=None if pending is None else bool(pending),
            pcie_generation=link("nvmlDeviceGetCurrPcieLinkGeneration"),
            pcie_max_generation=link("nvmlDeviceGetMaxPcieLinkGeneration"),
            pcie_width=link("nvmlDeviceGetCurrPcieLinkWidth"),
            pcie_max_width=link("nvmlDeviceGetMaxPcieLinkWidth"))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._try(self._nvml.nvmlShutdown)
