"""GPU telemetry over the timed region: clocks, power, temperature, utilization, throttling, energy.

A :class:`Source` reads one :class:`Sample` from the vendor's management library: NVML
(``pynvml``, from the PyPI package nvidia-ml-py) on NVIDIA, amdsmi (ROCm's Python library) on AMD
Instinct. A :class:`Sampler` thread reads the source every ``interval_s`` while the benchmark times
its loop, and :func:`summarize` turns the samples into a :class:`TelemetryReport`: min / median /
max of each quantity, the energy over the region (the device's energy counter where it has one,
else power integrated over time and labelled as an estimate), joules per item, and one-line
warnings when the SM clock fell more than :data:`SM_CLOCK_DROP_WARN` below its maximum or when a
throttle reason was active.

Telemetry never stops a run: a missing library or a failing init gives a one-line note and no
source; the CPU is "unavailable", never guessed. Any field the device does not expose is ``None``.

Example::

    source, note = open_source(device)
    print(note)
    sampler = Sampler(source) if source else None
    if sampler:
        sampler.start()                 # just before the first timed step
    run_timed_loop()                    # ends with a device synchronisation
    if sampler:
        report = summarize(sampler.stop(), source, items=images, timed_s=seconds)
        source.close()
    else:
        report = TelemetryReport.unavailable(note)
    for line in report.warnings():
        print(line)
    result["telemetry"] = report.to_dict()
"""
from __future__ import annotations

import importlib
import math
import os
import re
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from types import ModuleType
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence, runtime_checkable

import torch

from . import device as device_layer
from .errors import MissingEnvironment, UsageError

DEFAULT_INTERVAL_S = 0.1
# More than this fractional drop of the SM clock below its maximum during timing is reported.
SM_CLOCK_DROP_WARN = 0.10
QUANTITIES = ("sm_clock_mhz", "memory_clock_mhz", "power_w", "temperature_c", "utilization_pct")
ENERGY_COUNTER = "counter"
ENERGY_TRAPEZOID = "power x time (trapezoid over samples), estimated"

NVML_MISSING = ("telemetry: nvidia-ml-py not installed (pip install nvidia-ml-py); "
                "clocks, power and energy not recorded")
# ROCm installs the package's sources there (amdsmi docs, install/install.rst).
AMDSMI_MISSING = ("telemetry: amdsmi not installed (ROCm's Python library: "
                  "pip install /opt/rocm/share/amd_smi); clocks, power and energy not recorded")

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

# amdsmi_get_violation_status (MI300 and newer; AMD SMI docs, "GPU violations"): these "active_*"
# flags say a power or thermal limit is holding the clock down now. active_gfx_clk_below_host_limit
# is left out: it is also set when the GPU is merely under-used.
AMD_VIOLATION_REASONS = {
    "active_ppt_pwr": "ppt_power_limit",
    "active_socket_thrm": "socket_thermal",
    "active_prochot_thrm": "prochot_thermal",
    "active_vr_thrm": "vr_thermal",
    "active_hbm_thrm": "hbm_thermal",
}
# gpu_metrics indep_throttle_status (older Instinct and Radeon): the kernel's ASIC-independent bits
# (drivers/gpu/drm/amd/pm/.../amdgpu_smu.h, SMU_THROTTLER_*_BIT) come in 16-bit groups.
AMD_THROTTLE_BIT_GROUPS = ((0, "power"), (16, "current"), (32, "temperature"), (48, "other"))
# amdsmi marks an unsupported field with the all-ones value of its C type, or "N/A" (amdsmi Python
# API reference; amdsmi_interface.py _validate_if_max_uint).
_AMD_UNSUPPORTED = frozenset({0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF})
_AMD_VISIBLE_VARIABLES = ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


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


@dataclass(frozen=True)
class DeviceIdentity:
    """What torch says about a GPU, for finding the same GPU in a vendor library."""

    index: int | None = None            # torch's index, after *_VISIBLE_DEVICES renumbering
    uuid: str | None = None             # torch spells it without NVML's "GPU-" prefix
    pci_bus_id: str | None = None       # "dddd:bb:dd", hexadecimal


def torch_identity(index: int) -> DeviceIdentity:
    """UUID and PCI address of torch's GPU ``index`` (attributes present on recent torch)."""
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    uuid_text = str(uuid) if uuid is not None else None
    if uuid_text is not None and not uuid_text.replace("-", "").strip("0"):
        uuid_text = None                # all zeros: the runtime has no UUID for it
    pci = None
    if all(hasattr(props, a) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
        pci = f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}"
    return DeviceIdentity(index, uuid_text, pci)


def _normalize_uuid(text: str) -> str:
    text = text.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text


def _parse_bdf(text: str) -> tuple[int, int, int] | None:
    """(domain, bus, device) from "dddd:bb:dd[.f]" or "bb:dd[.f]"; the function is ignored."""
    match = re.fullmatch(r"(?:([0-9a-f]+):)?([0-9a-f]+):([0-9a-f]+)(?:\.[0-7])?",
                         text.strip().lower())
    if match is None:
        return None
    domain, bus, dev = match.groups()
    return int(domain or "0", 16), int(bus, 16), int(dev, 16)


def _visible_entry(index: int, value: str | None, variable: str) -> str:
    """The physical device a *_VISIBLE_DEVICES list maps torch's ``index`` to."""
    if value is None:
        return str(index)
    entries = [entry.strip() for entry in value.split(",") if entry.strip()]
    if index >= len(entries):
        raise MissingEnvironment(f"telemetry: {variable}={value!r} has no entry for GPU {index}")
    return entries[index]


def _text(value: Any) -> str:
    """Old pynvml releases return bytes where new ones return str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _import(name: str, missing: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise MissingEnvironment(missing) from error


def decode_nvml_reasons(mask: int) -> tuple[str, ...]:
    """The throttling reasons in an NVML clock-event bitmask (idle and clock settings dropped)."""
    reasons = []
    for bit in (1 << n for n in range(64)):
        if not mask & bit or bit in NVML_NOT_THROTTLING:
            continue
        reasons.append(NVML_THROTTLE_REASONS.get(bit, f"nvml_reason_0x{bit:x}"))
    return tuple(reasons)


class _FirstAvailable:
    """Calls the first NVML entry point the driver has: pynvml may define a newer name (e.g.
    nvmlDeviceGetCurrentClocksEventReasons) that an older driver lacks, which NVML reports as
    NVML_ERROR_FUNCTION_NOT_FOUND (pynvml.py); then the older name is used from then on."""

    def __init__(self, functions: Sequence[Callable | None], error: type, not_found: int):
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


class _LibrarySource:
    """What NVML and amdsmi sources share: a query of one field of this device that gives None
    when the library raises its own error (NVMLError NotSupported, AmdSmiException), never a
    crash. Subclasses set ``_error`` and ``_handle``."""

    _error: type[BaseException]
    _handle: Any

    def _try(self, function: Callable, *args: Any) -> Any:
        try:
            return function(*args)
        except self._error:
            return None

    def _query(self, function: Callable | None, *args: Any) -> Any:
        return None if function is None else self._try(function, self._handle, *args)


class NvmlSource(_LibrarySource):
    """An NVIDIA GPU through NVML (pynvml.py of nvidia-ml-py; units from the NVML API reference).

    ``device`` is a :class:`DeviceIdentity` (what :func:`open_source` passes), a UUID string, or
    torch's device index. The GPU is found by UUID; where torch gave one but NVML has none that
    matches (a MIG instance, say), by PCI address, which names the same board; by index only when
    no UUID is known or NVML cannot read UUIDs, through CUDA_VISIBLE_DEVICES, since CUDA renumbers
    the visible devices and NVML does not (the order also matches only with
    CUDA_DEVICE_ORDER=PCI_BUS_ID, so the label says when the index was used).
    """

    def __init__(self, device: DeviceIdentity | str | int, pynvml_module: ModuleType | None = None,
                 *, environ: Mapping[str, str] | None = None):
        self._nvml = pynvml_module if pynvml_module is not None else _import("pynvml", NVML_MISSING)
        self._error = self._nvml.NVMLError
        self._closed = False
        self._nvml.nvmlInit()
        try:
            self._open(_nvml_identity(device), os.environ if environ is None else environ)
        except BaseException:
            self.close()
            raise

    def _open(self, identity: DeviceIdentity, environ: Mapping[str, str]) -> None:
        nvml = self._nvml
        self._handle, matched_by = self._resolve(identity, environ)
        self.name = f"NVML {self._library_version()}"
        self.device_label = self._label(matched_by)
        self.max_sm_clock_mhz = _float(
            self._query(nvml.nvmlDeviceGetMaxClockInfo, nvml.NVML_CLOCK_SM))
        not_found = getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13)
        # The "event" name replaced the deprecated "throttle" one; same bits (pynvml.py).
        self._reasons = _FirstAvailable(
            [getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None),
             getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)],
            self._error, not_found)
        # nvmlDeviceGetTemperature is deprecated in favour of nvmlDeviceGetTemperatureV (pynvml.py).
        self._temperature = _FirstAvailable(
            [getattr(nvml, "nvmlDeviceGetTemperatureV", None),
             getattr(nvml, "nvmlDeviceGetTemperature", None)], self._error, not_found)

    def _resolve(self, identity: DeviceIdentity, environ: Mapping[str, str]) -> tuple[Any, str]:
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
        wanted, readable = _normalize_uuid(wanted), True
        for index in range(self._nvml.nvmlDeviceGetCount()):
            handle = self._try(self._nvml.nvmlDeviceGetHandleByIndex, index)
            uuid = None if handle is None else self._try(self._nvml.nvmlDeviceGetUUID, handle)
            if uuid is None:
                readable = False
                continue
            uuid = _normalize_uuid(_text(uuid))
            if uuid == wanted or (prefix and uuid.startswith(wanted)):
                return handle, readable
        return None, readable

    def _by_visible_index(self, index: int, environ: Mapping[str, str]) -> Any:
        variable = "CUDA_VISIBLE_DEVICES"
        entry = _visible_entry(index, environ.get(variable), variable)
        if entry.isdigit():
            return self._nvml.nvmlDeviceGetHandleByIndex(int(entry))
        handle, _ = self._find_by_uuid(entry, prefix=True)   # CUDA accepts UUID prefixes there
        if handle is None:
            raise MissingEnvironment(
                f"telemetry: no NVML device matches {variable} entry {entry!r}")
        return handle

    def _library_version(self) -> str:
        version = self._try(self._nvml.nvmlSystemGetNVMLVersion)
        return _text(version) if version is not None else "(version unknown)"

    def _label(self, matched_by: str) -> str:
        name = self._query(self._nvml.nvmlDeviceGetName)
        uuid = self._query(self._nvml.nvmlDeviceGetUUID)
        name = _text(name) if name is not None else "NVIDIA GPU"
        uuid = _text(uuid) if uuid is not None else "no UUID"
        return f"{name} ({uuid}, matched by {matched_by})"

    def read(self) -> Sample:
        nvml = self._nvml
        power_mw = self._query(nvml.nvmlDeviceGetPowerUsage)              # milliwatts
        energy_mj = self._query(nvml.nvmlDeviceGetTotalEnergyConsumption)  # mJ since driver load
        utilization = self._query(nvml.nvmlDeviceGetUtilizationRates)
        reasons = self._query(self._reasons)
        return Sample(
            t_s=time.monotonic(),
            sm_clock_mhz=_float(self._query(nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_SM)),
            memory_clock_mhz=_float(self._query(nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_MEM)),
            power_w=None if power_mw is None else power_mw / 1000.0,
            temperature_c=_float(self._query(self._temperature, nvml.NVML_TEMPERATURE_GPU)),
            utilization_pct=None if utilization is None else _float(utilization.gpu),
            throttle_reasons=None if reasons is None else decode_nvml_reasons(int(reasons)),
            energy_j=None if energy_mj is None else energy_mj / 1000.0,
        )

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._try(self._nvml.nvmlShutdown)


def _nvml_identity(device: DeviceIdentity | str | int) -> DeviceIdentity:
    if isinstance(device, DeviceIdentity):
        return device
    if isinstance(device, int):
        return DeviceIdentity(index=device)
    return DeviceIdentity(uuid=device)


def _float(value: Any) -> float | None:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _amd_number(value: Any, unsupported: frozenset[int] = _AMD_UNSUPPORTED) -> float | None:
    """A reading, or None for amdsmi's "N/A" and all-ones "unsupported" markers."""
    number = _float(value)
    return None if number is None or value in unsupported else number


class AmdSmiSource(_LibrarySource):
    """An AMD GPU through amdsmi (AMD SMI Python API reference; amdsmi_interface.py).

    ``device`` is a :class:`DeviceIdentity` (what :func:`open_source` passes), a PCI address
    ("0000:c1:00.0"), or torch's device index. The GPU is found by PCI address
    (amdsmi_get_gpu_device_bdf), else by index through HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES /
    ROCR_VISIBLE_DEVICES; amdsmi's order is not promised to be HIP's, so the label says so.
    """

    def __init__(self, device: DeviceIdentity | str | int, amdsmi_module: ModuleType | None = None,
                 *, environ: Mapping[str, str] | None = None):
        self._smi = (amdsmi_module if amdsmi_module is not None
                     else _import("amdsmi", AMDSMI_MISSING))
        self._error = self._smi.AmdSmiException
        self._closed = False
        self._smi.amdsmi_init()               # default flag: AMD GPUs only
        try:
            self._open(_amd_identity(device), os.environ if environ is None else environ)
        except BaseException:
            self.close()
            raise

    def _open(self, identity: DeviceIdentity, environ: Mapping[str, str]) -> None:
        smi = self._smi
        self._handle, matched_by = self._resolve(identity, environ)
        self.name = f"amdsmi {self._library_version()}"
        self.device_label = self._label(matched_by)
        gfx = self._query(smi.amdsmi_get_clock_info, smi.AmdSmiClkType.GFX)
        self.max_sm_clock_mhz = _amd_number(gfx.get("max_clk")) if isinstance(gfx, dict) else None
        self._ask_violations = hasattr(smi, "amdsmi_get_violation_status")

    def _resolve(self, identity: DeviceIdentity, environ: Mapping[str, str]) -> tuple[Any, str]:
        handles = list(self._smi.amdsmi_get_processor_handles())
        wanted = _parse_bdf(identity.pci_bus_id) if identity.pci_bus_id else None
        if wanted is not None:
            addresses = [self._try(self._smi.amdsmi_get_gpu_device_bdf, h) for h in handles]
            for handle, address in zip(handles, addresses):
                if address is not None and _parse_bdf(str(address)) == wanted:
                    return handle, "PCI bus id"
            if any(address is not None for address in addresses):
                raise MissingEnvironment(
                    f"telemetry: no amdsmi GPU has PCI address {identity.pci_bus_id}")
        if identity.index is not None:
            position = self._visible_position(identity.index, environ)
            if position < len(handles):
                return handles[position], "index"
        raise MissingEnvironment(f"telemetry: no amdsmi GPU matches {identity}")

    @staticmethod
    def _visible_position(index: int, environ: Mapping[str, str]) -> int:
        present = [v for v in _AMD_VISIBLE_VARIABLES if environ.get(v) is not None]
        if len(present) > 1:       # the runtime composes them; too many ways to guess wrong
            raise MissingEnvironment(
                f"telemetry: cannot map GPU {index} through {' and '.join(present)}")
        variable = present[0] if present else _AMD_VISIBLE_VARIABLES[0]
        entry = _visible_entry(index, environ.get(variable), variable)
        if not entry.isdigit():
            raise MissingEnvironment(f"telemetry: cannot map {variable} entry {entry!r} to amdsmi")
        return int(entry)

    def _library_version(self) -> str:
        version = self._try(self._smi.amdsmi_get_lib_version)
        if not isinstance(version, dict):
            return "(version unknown)"
        parts = [str(version[k]) for k in ("major", "minor", "release") if k in version]
        return ".".join(parts) or "(version unknown)"

    def _label(self, matched_by: str) -> str:
        asic = self._query(getattr(self._smi, "amdsmi_get_gpu_asic_info", None))
        name = asic.get("market_name") if isinstance(asic, dict) else None
        address = self._query(self._smi.amdsmi_get_gpu_device_bdf)
        return f"{name or 'AMD GPU'} ({address or 'no PCI address'}, matched by {matched_by})"

    def read(self) -> Sample:
        smi = self._smi
        return Sample(
            t_s=time.monotonic(),
            sm_clock_mhz=_amd_clock(self._query(smi.amdsmi_get_clock_info, smi.AmdSmiClkType.GFX)),
            memory_clock_mhz=_amd_clock(
                self._query(smi.amdsmi_get_clock_info, smi.AmdSmiClkType.MEM)),
            power_w=_amd_power(self._query(smi.amdsmi_get_power_info)),
            temperature_c=self._temperature(),
            utilization_pct=_amd_field(self._query(smi.amdsmi_get_gpu_activity), "gfx_activity"),
            throttle_reasons=self._throttle_reasons(),
            energy_j=_amd_energy(self._query(smi.amdsmi_get_energy_count)),
        )

    def _temperature(self) -> float | None:
        """Hotspot (junction), the sensor the firmware throttles on; edge where it is absent."""
        kinds, metric = self._smi.AmdSmiTemperatureType, self._smi.AmdSmiTemperatureMetric.CURRENT
        for sensor in ("HOTSPOT", "EDGE"):
            kind = getattr(kinds, sensor, None)
            if kind is None:
                continue
            value = _amd_number(self._query(self._smi.amdsmi_get_temp_metric, kind, metric))
            if value is not None:
                return value
        return None

    def _throttle_reasons(self) -> tuple[str, ...] | None:
        """MI300 and newer report throttling through the violation API, where gpu_metrics'
        throttle_status reads N/A; older GPUs only through gpu_metrics (AMD SMI docs, "GPU
        violations")."""
        if self._ask_violations:
            reasons = _amd_violation_reasons(self._query(self._smi.amdsmi_get_violation_status))
            if reasons is not None:
                return reasons
            self._ask_violations = False          # not on this GPU: stop asking
        return _amd_metrics_reasons(self._query(self._smi.amdsmi_get_gpu_metrics_info))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._try(self._smi.amdsmi_shut_down)


def _amd_identity(device: DeviceIdentity | str | int) -> DeviceIdentity:
    if isinstance(device, DeviceIdentity):
        return device
    if isinstance(device, int):
        return DeviceIdentity(index=device)
    return DeviceIdentity(pci_bus_id=device)


def _amd_field(info: Any, key: str) -> float | None:
    return _amd_number(info.get(key)) if isinstance(info, dict) else None


def _amd_clock(info: Any) -> float | None:
    """amdsmi_get_clock_info, MHz: the current clock is "clk" (amdsmi Python README); ROCm 5.7's
    amdsmi_clk_info_t called it cur_clk."""
    if not isinstance(info, dict):
        return None
    return _amd_number(info.get("clk", info.get("cur_clk")))


def _amd_power(info: Any) -> float | None:
    """amdsmi_get_power_info, watts (amdsmi Python README): socket_power in newer releases
    ("matches current or average socket power"), else current_socket_power (MI300 and newer),
    else average_socket_power (MI200 and older). A zero means "not this field": a powered GPU
    never draws 0 W."""
    for key in ("socket_power", "current_socket_power", "average_socket_power"):
        value = _amd_field(info, key)
        if value:
            return value
    return None


def _amd_energy(info: Any) -> float | None:
    """amdsmi_get_energy_count: energy_accumulator x counter_resolution is microjoules (amdsmi
    Python README); older releases return the accumulator only as "power" (deprecated in 6.4)."""
    if not isinstance(info, dict):
        return None
    ticks = _amd_number(info.get("energy_accumulator", info.get("power")),
                        frozenset({0xFFFFFFFFFFFFFFFF}))
    resolution = _float(info.get("counter_resolution"))
    return None if ticks is None or resolution is None else ticks * resolution / 1e6


def _amd_violation_reasons(status: Any) -> tuple[str, ...] | None:
    """Active violations, or None when the GPU reports none of the flags ("N/A")."""
    if not isinstance(status, dict):
        return None
    flags = {key: status.get(key) for key in AMD_VIOLATION_REASONS}
    known = {key: value for key, value in flags.items() if isinstance(value, (bool, int))}
    if not known:
        return None
    return tuple(AMD_VIOLATION_REASONS[key] for key, value in known.items() if value)


def _amd_metrics_reasons(metrics: Any) -> tuple[str, ...] | None:
    """gpu_metrics: indep_throttle_status as a bitmask where the library passes it through,
    else either field as a plain yes/no (amdsmi's Python layer turns both into bools)."""
    if not isinstance(metrics, dict):
        return None
    for key in ("indep_throttle_status", "throttle_status"):
        value = metrics.get(key)
        if isinstance(value, bool) or (isinstance(value, int) and key == "throttle_status"):
            return ("amd_throttle_status",) if value else ()
        if isinstance(value, int):
            return decode_amd_throttle_bits(value)
    return None


def decode_amd_throttle_bits(mask: int) -> tuple[str, ...]:
    """Names for the set bits of indep_throttle_status, by the kernel's 16-bit groups."""
    reasons = []
    for bit in range(64):
        if mask >> bit & 1:
            group = [name for start, name in AMD_THROTTLE_BIT_GROUPS if bit >= start][-1]
            reasons.append(f"amd_{group}_limit_bit{bit}")
    return tuple(reasons)


def open_source(device: torch.device) -> tuple[Source | None, str]:
    """The telemetry source for ``device`` and a one-line note; never raises for a missing
    library or a failing init, since telemetry must not stop a benchmark."""
    if not device_layer.is_gpu(device):
        return None, "telemetry: unavailable on the CPU"
    if torch.version.hip:                 # ROCm builds also report device.type "cuda"
        return _open(AmdSmiSource, "amdsmi", AMDSMI_MISSING, device)
    if torch.version.cuda:
        return _open(NvmlSource, "pynvml", NVML_MISSING, device)
    return None, "telemetry: unavailable (this PyTorch has neither CUDA nor ROCm)"


def _open(kind: type, module_name: str, missing: str,
          device: torch.device) -> tuple[Source | None, str]:
    try:
        module = _import(module_name, missing)       # first: a missing library is the usual case
    except MissingEnvironment as error:
        return None, str(error)
    index = device.index
    try:
        index = torch.cuda.current_device() if index is None else index
        source = kind(torch_identity(index), module)
    except Exception as error:  # any init failure: note it, run on without telemetry
        detail = (str(error).removeprefix("telemetry: ") if isinstance(error, MissingEnvironment)
                  else f"{type(error).__name__}: {error}")
        library = "NVML" if kind is NvmlSource else module_name
        return None, (f"telemetry: {library} could not open GPU {index} ({detail}); "
                      "clocks, power and energy not recorded")
    return source, f"telemetry: {source.name}, {source.device_label}"


class Sampler:
    """Reads a source every ``interval_s`` on a daemon thread, from start() to stop().

    ``clock`` stamps samples; ``wait(timeout)`` sleeps between samples and returns True to end the
    loop (default: the stop event's wait, so stop() ends it at once). Tests pass a fake clock and
    wait, or call sample_now() themselves, and never sleep.
    """

    def __init__(self, source: Source, interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic,
                 wait: Callable[[float], bool] | None = None):
        if not interval_s > 0:
            raise UsageError(f"telemetry interval must be positive, got {interval_s}")
        self.interval_s = interval_s
        self.error: str | None = None          # the first failure that ended sampling early
        self._source = source
        self._clock = clock
        self._stop = threading.Event()
        self._wait = wait if wait is not None else self._stop.wait
        self._samples: list[Sample] = []
        self._thread: threading.Thread | None = None

    def sample_now(self) -> Sample:
        stamp = self._clock()
        sample = replace(self._source.read(), t_s=stamp)
        self._samples.append(sample)
        return sample

    def start(self) -> None:
        if self._thread is not None:
            raise UsageError("telemetry sampler already started")
        self._stop.clear()
        self._samples, self.error = [], None
        self._safe_sample()
        self._thread = threading.Thread(target=self._run, name="microbench-telemetry", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._wait(self.interval_s) and self.error is None:
            self._safe_sample()

    def _safe_sample(self) -> None:
        if self.error is not None:
            return
        try:
            self.sample_now()
        except Exception as error:  # a failing sensor ends sampling, never the benchmark
            self.error = f"{type(error).__name__}: {error}"

    def stop(self) -> list[Sample]:
        """Ends the thread, takes a final sample and returns every sample in order."""
        if self._thread is None:
            raise UsageError("telemetry sampler was not started")
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._safe_sample()
        return list(self._samples)

    @property
    def samples(self) -> list[Sample]:
        return list(self._samples)


@dataclass(frozen=True)
class Stat:
    min: float
    median: float
    max: float


def _stat(values: Iterable[float | None]) -> Stat | None:
    present = sorted(v for v in values if v is not None)
    if not present:
        return None
    return Stat(present[0], statistics.median(present), present[-1])


def counter_energy_j(samples: Sequence[Sample]) -> float | None:
    """Energy counter advance from the first to the last sample that has one; None when the
    counter is missing, stood still, or went back (reset or wrap)."""
    readings = [s.energy_j for s in samples if s.energy_j is not None]
    if len(readings) < 2 or readings[-1] <= readings[0]:
        return None
    return readings[-1] - readings[0]


def power_energy_j(samples: Sequence[Sample]) -> float | None:
    """Trapezoid of power over time, over the intervals with a power reading at both ends."""
    total, intervals = 0.0, 0
    for a, b in zip(samples, samples[1:]):
        if a.power_w is not None and b.power_w is not None:
            total += (a.power_w + b.power_w) / 2.0 * (b.t_s - a.t_s)
            intervals += 1
    return total if intervals else None


@dataclass(frozen=True)
class TelemetryReport:
    """What the timed region looked like from the GPU's management library."""

    available: bool
    reason: str | None = None                  # why not, when not available
    source_name: str | None = None
    device_label: str | None = None
    items: float | None = None
    timed_s: float | None = None
    samples: tuple[Sample, ...] = ()
    stats: Mapping[str, Stat | None] = field(default_factory=dict)
    max_sm_clock_mhz: float | None = None      # the reference the drop is measured against
    sm_clock_reference: str | None = None      # "device maximum" or "highest sample"
    sm_clock_drop: float | None = None         # 1 - min / max_sm_clock_mhz
    counter_energy_j: float | None = None
    power_energy_j: float | None = None
    energy_j: float | None = None
    energy_basis: str | None = None            # ENERGY_COUNTER, ENERGY_TRAPEZOID or None
    joules_per_item: float | None = None
    items_per_joule: float | None = None
    throttle_reasons_seen: tuple[str, ...] = ()
    throttle_reported: bool = False            # whether any sample could read the reasons

    @classmethod
    def unavailable(cls, note: str) -> TelemetryReport:
        return cls(available=False, reason=note)

    def stat(self, quantity: str) -> Stat | None:
        return self.stats.get(quantity)

    @property
    def energy_estimated(self) -> bool:
        return self.energy_basis == ENERGY_TRAPEZOID

    @property
    def throttled(self) -> bool | None:
        return bool(self.throttle_reasons_seen) if self.throttle_reported else None

    def warnings(self) -> list[str]:
        lines = []
        if self.sm_clock_drop is not None and self.sm_clock_drop > SM_CLOCK_DROP_WARN:
            low = self.stats["sm_clock_mhz"].min
            lines.append(f"telemetry: SM clock fell {self.sm_clock_drop:.1%} below its "
                         f"{self.sm_clock_reference} "
                         f"({low:.0f} of {self.max_sm_clock_mhz:.0f} MHz) during timing")
        if self.throttle_reasons_seen:
            reasons = ", ".join(self.throttle_reasons_seen)
            lines.append(f"telemetry: throttling during timing: {reasons}")
        return lines

    def to_dict(self) -> dict:
        """Plain JSON types; sample times count from the first sample."""
        if not self.available:
            return {"available": False, "reason": self.reason}
        origin = self.samples[0].t_s if self.samples else 0.0
        return {
            "available": True, "source": self.source_name, "device": self.device_label,
            "items": self.items, "timed_s": self.timed_s, "sample_count": len(self.samples),
            "stats": {q: None if s is None else asdict(s) for q, s in self.stats.items()},
            "max_sm_clock_mhz": self.max_sm_clock_mhz,
            "sm_clock_reference": self.sm_clock_reference,
            "sm_clock_drop": self.sm_clock_drop,
            "energy_j": self.energy_j, "energy_basis": self.energy_basis,
            "energy_estimated": self.energy_estimated,
            "counter_energy_j": self.counter_energy_j, "power_energy_j": self.power_energy_j,
            "joules_per_item": self.joules_per_item, "items_per_joule": self.items_per_joule,
            "throttle_reasons_seen": list(self.throttle_reasons_seen), "throttled": self.throttled,
            "warnings": self.warnings(),
            "samples": [s.to_dict(origin) for s in self.samples],
        }

    def csv_cells(self) -> dict:
        """A few flat columns for the CSV row; empty (None) where unknown."""
        clock, power = self.stat("sm_clock_mhz"), self.stat("power_w")
        return {
            "sm_clock_mhz_median": None if clock is None else clock.median,
            "power_w_median": None if power is None else power.median,
            "energy_j": self.energy_j,
            "j_per_item": self.joules_per_item,
            "throttled": self.throttled,
        }


def summarize(samples: Sequence[Sample], source: Source, items: float | None,
              timed_s: float | None) -> TelemetryReport:
    """The report over ``samples``; ``items`` (images, tokens) processed in ``timed_s``."""
    samples = tuple(samples)
    stats = {q: _stat(getattr(s, q) for s in samples) for q in QUANTITIES}
    reference, reference_kind = _clock_reference(source.max_sm_clock_mhz, stats["sm_clock_mhz"])
    counter, trapezoid = counter_energy_j(samples), power_energy_j(samples)
    energy, basis = _energy_choice(counter, trapezoid)
    return TelemetryReport(
        available=True, source_name=source.name, device_label=source.device_label,
        items=items, timed_s=timed_s, samples=samples, stats=stats,
        max_sm_clock_mhz=reference, sm_clock_reference=reference_kind,
        sm_clock_drop=_drop(stats["sm_clock_mhz"], reference),
        counter_energy_j=counter, power_energy_j=trapezoid, energy_j=energy, energy_basis=basis,
        joules_per_item=energy / items if energy and items else None,
        items_per_joule=items / energy if energy and items else None,
        throttle_reasons_seen=tuple(sorted({r for s in samples for r in s.throttle_reasons or ()})),
        throttle_reported=any(s.throttle_reasons is not None for s in samples),
    )


def _clock_reference(device_max: float | None,
                     observed: Stat | None) -> tuple[float | None, str | None]:
    """The device's maximum SM clock; the highest sample when the library does not say."""
    if device_max:
        return device_max, "device maximum"
    if observed is not None and observed.max > 0:
        return observed.max, "highest sample"
    return None, None


def _drop(observed: Stat | None, reference: float | None) -> float | None:
    if observed is None or not reference:
        return None
    return max(0.0, 1.0 - observed.min / reference)


def _energy_choice(counter: float | None,
                   trapezoid: float | None) -> tuple[float | None, str | None]:
    if counter is not None:
        return counter, ENERGY_COUNTER
    if trapezoid is not None and trapezoid > 0:
        return trapezoid, ENERGY_TRAPEZOID
    return None, None


def energy_counter_vs_power(report: TelemetryReport) -> float | None:
    """Counter energy / trapezoid of power over time, for checking the counter on a GPU.

    Expect about 1 on a long steady run, not exactly: the samples see power only every interval,
    and NVML's power reading is itself a 1 s average on Ampere (but GA100) and newer (NVML API
    reference, nvmlDeviceGetPowerUsage), so it lags on short runs.
    """
    if report.counter_energy_j is None or not report.power_energy_j:
        return None
    if not math.isfinite(report.power_energy_j):
        return None
    return report.counter_energy_j / report.power_energy_j


def combine(reports: Sequence[TelemetryReport]) -> TelemetryReport:
    """Several GPUs' (or trials') reports as one: samples pooled for the statistics, energy and
    items summed, the clock drop against the highest reference, throttle reasons united."""
    available = [report for report in reports if report.available]
    if not available:
        return reports[0]
    if len(available) == 1:
        return available[0]
    samples = tuple(s for report in available for s in report.samples)
    stats = {q: _stat(getattr(s, q) for s in samples) for q in QUANTITIES}
    references = [r.max_sm_clock_mhz for r in available if r.max_sm_clock_mhz]
    reference = max(references) if references else None
    energies = [r.energy_j for r in available]
    energy = math.fsum(energies) if all(e is not None for e in energies) else None
    basis = None
    if energy is not None:
        estimated = any(r.energy_basis == ENERGY_TRAPEZOID for r in available)
        basis = ENERGY_TRAPEZOID if estimated else ENERGY_COUNTER
    items = math.fsum(r.items or 0.0 for r in available) or None
    return TelemetryReport(
        available=True, source_name=available[0].source_name,
        device_label=f"{len(available)} measurements ({available[0].device_label}, ...)",
        items=items, timed_s=math.fsum(r.timed_s or 0.0 for r in available), samples=samples,
        stats=stats, max_sm_clock_mhz=reference,
        sm_clock_reference=available[0].sm_clock_reference,
        sm_clock_drop=_drop(stats["sm_clock_mhz"], reference),
        counter_energy_j=_sum_known(r.counter_energy_j for r in available),
        power_energy_j=_sum_known(r.power_energy_j for r in available),
        energy_j=energy, energy_basis=basis,
        joules_per_item=energy / items if energy and items else None,
        items_per_joule=items / energy if energy and items else None,
        throttle_reasons_seen=tuple(sorted({x for r in available
                                            for x in r.throttle_reasons_seen})),
        throttle_reported=any(r.throttle_reported for r in available))


def _sum_known(values: Iterable[float | None]) -> float | None:
    values = list(values)
    return math.fsum(values) if values and all(v is not None for v in values) else None
