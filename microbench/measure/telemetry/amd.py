"""An AMD GPU through amdsmi, ROCm's management library: :class:`AmdSmiSource` and the reading
of amdsmi's fields, whose layout changed across ROCm releases and GPU generations.

Calls, keys and units follow the AMD SMI Python API reference and amdsmi_interface.py. A field
the GPU does not support reads None, whether amdsmi raises, answers "N/A", or fills the all-ones
value of its C type.

Example::

    source = AmdSmiSource(gpu_identity(torch.device("cuda", 0)))   # a ROCm build
    print(source.name, source.device_label)     # amdsmi 26.1.0, AMD Instinct MI300X (0000:...)
    sample = source.read()                       # hotspot temperature, socket power, energy
    source.close()
"""
from __future__ import annotations

import os
import time
from types import ModuleType
from typing import Any, Mapping

from microbench.platform.devices import GpuIdentity
from microbench.platform.errors import MissingEnvironment
from microbench.measure.telemetry.health import DeviceHealth, pcie_generation_of
from microbench.measure.telemetry.library import LibrarySource, as_float, import_library
from microbench.measure.telemetry.library import as_identity, parse_bdf, visible_entry
from microbench.measure.telemetry.sampler import Sample

# ROCm installs the package's sources there (amdsmi docs, install/install.rst).
AMDSMI_MISSING = ("telemetry: amdsmi not installed (ROCm's Python library: "
                  "pip install /opt/rocm/share/amd_smi); clocks, power and energy not recorded")

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
_UNSUPPORTED = frozenset({0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF})
_VISIBLE_VARIABLES = ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


class AmdSmiSource(LibrarySource):
    """An AMD GPU through amdsmi (AMD SMI Python API reference; amdsmi_interface.py).

    ``device`` is a :class:`~microbench.platform.devices.GpuIdentity` (what ``open_source`` passes), a PCI
    address ("0000:c1:00.0"), or torch's device index. The GPU is found by PCI address
    (amdsmi_get_gpu_device_bdf), else by index through HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES /
    ROCR_VISIBLE_DEVICES; amdsmi's order is not promised to be HIP's, so the label says so.
    """

    def __init__(self, device: GpuIdentity | str | int, amdsmi_module: ModuleType | None = None,
                 *, environ: Mapping[str, str] | None = None):
        self._smi = (amdsmi_module if amdsmi_module is not None
                     else import_library("amdsmi", AMDSMI_MISSING))
        self._error = self._smi.AmdSmiException
        self._closed = False
        self._smi.amdsmi_init()               # default flag: AMD GPUs only
        try:
            self._open(as_identity(device, text_is="pci_bus_id"),
                       os.environ if environ is None else environ)
        except BaseException:
            self.close()
            raise

    def _open(self, identity: GpuIdentity, environ: Mapping[str, str]) -> None:
        smi = self._smi
        self._handle, matched_by = self._resolve(identity, environ)
        self.name = f"amdsmi {self._library_version()}"
        self.device_label = self._label(matched_by)
        gfx = self._query(smi.amdsmi_get_clock_info, smi.AmdSmiClkType.GFX)
        self.max_sm_clock_mhz = _number(gfx.get("max_clk")) if isinstance(gfx, dict) else None
        self._ask_violations = hasattr(smi, "amdsmi_get_violation_status")

    # ---------------------------------------------------------------- which GPU

    def _resolve(self, identity: GpuIdentity, environ: Mapping[str, str]) -> tuple[Any, str]:
        handles = list(self._smi.amdsmi_get_processor_handles())
        wanted = parse_bdf(identity.pci_bus_id) if identity.pci_bus_id else None
        if wanted is not None:
            addresses = [self._try(self._smi.amdsmi_get_gpu_device_bdf, h) for h in handles]
            for handle, address in zip(handles, addresses):
                if address is not None and parse_bdf(str(address)) == wanted:
                    return handle, "PCI bus id"
            if any(address is not None for address in addresses):
                raise MissingEnvironment(
                    f"telemetry: no amdsmi GPU has PCI address {identity.pci_bus_id}")
        if identity.index is not None:
            position = _visible_position(identity.index, environ)
            if position < len(handles):
                return handles[position], "index"
        raise MissingEnvironment(f"telemetry: no amdsmi GPU matches {identity}")

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

    # ---------------------------------------------------------------- reading

    def read(self) -> Sample:
        smi = self._smi
        return Sample(
            t_s=time.monotonic(),
            sm_clock_mhz=_clock(self._query(smi.amdsmi_get_clock_info, smi.AmdSmiClkType.GFX)),
            memory_clock_mhz=_clock(
                self._query(smi.amdsmi_get_clock_info, smi.AmdSmiClkType.MEM)),
            power_w=_power(self._query(smi.amdsmi_get_power_info)),
            temperature_c=self._temperature(),
            utilization_pct=_field(self._query(smi.amdsmi_get_gpu_activity), "gfx_activity"),
            throttle_reasons=self._throttle_reasons(),
            energy_j=_energy(self._query(smi.amdsmi_get_energy_count)),
        )

    def _temperature(self) -> float | None:
        """Hotspot (junction), the sensor the firmware throttles on; edge where it is absent."""
        kinds, metric = self._smi.AmdSmiTemperatureType, self._smi.AmdSmiTemperatureMetric.CURRENT
        for sensor in ("HOTSPOT", "EDGE"):
            kind = getattr(kinds, sensor, None)
            if kind is None:
                continue
            value = _number(self._query(self._smi.amdsmi_get_temp_metric, kind, metric))
            if value is not None:
                return value
        return None

    def _throttle_reasons(self) -> tuple[str, ...] | None:
        """MI300 and newer report throttling through the violation API, where gpu_metrics'
        throttle_status reads N/A; older GPUs only through gpu_metrics (AMD SMI docs, "GPU
        violations")."""
        if self._ask_violations:
            reasons = _violation_reasons(self._query(self._smi.amdsmi_get_violation_status))
            if reasons is not None:
                return reasons
            self._ask_violations = False          # not on this GPU: stop asking
        return _metrics_reasons(self._query(self._smi.amdsmi_get_gpu_metrics_info))

    def power_limits_w(self) -> tuple[float | None, float | None]:
        """(current, default) power cap in watts: amdsmi_get_power_cap_info's power_cap and
        default_power_cap, in microwatts (amdsmi Python README); None where it does not say."""
        info = self._query(getattr(self._smi, "amdsmi_get_power_cap_info", None))
        cap, default = _field(info, "power_cap"), _field(info, "default_power_cap")
        return (None if not cap else cap / 1e6, None if not default else default / 1e6)

    def health(self) -> DeviceHealth:
        """ECC counts (amdsmi_get_gpu_total_ecc_count: correctable_count, uncorrectable_count),
        bad pages (amdsmi_get_gpu_bad_page_info: a list), and the PCIe link
        (amdsmi_get_pcie_info: pcie_metric's pcie_width and pcie_speed in MT/s now,
        pcie_static's max_pcie_width and pcie_interface_version); AMD SMI Python API reference."""
        smi = self._smi
        ecc = self._query(getattr(smi, "amdsmi_get_gpu_total_ecc_count", None))
        pages = self._query(getattr(smi, "amdsmi_get_gpu_bad_page_info", None))
        pcie = self._query(getattr(smi, "amdsmi_get_pcie_info", None))
        metric = pcie.get("pcie_metric", {}) if isinstance(pcie, dict) else {}
        static = pcie.get("pcie_static", {}) if isinstance(pcie, dict) else {}

        def count(info: Any, key: str) -> int | None:
            value = _field(info, key)
            return None if value is None else int(value)

        return DeviceHealth(
            ecc_corrected=count(ecc, "correctable_count"),
            ecc_uncorrected=count(ecc, "uncorrectable_count"),
            retired_pages=len(pages) if isinstance(pages, list) else None,
            pcie_generation=pcie_generation_of(_field(metric, "pcie_speed")),
            pcie_max_generation=count(static, "pcie_interface_version"),
            pcie_width=count(metric, "pcie_width"),
            pcie_max_width=count(static, "max_pcie_width"))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._try(self._smi.amdsmi_shut_down)


def _visible_position(index: int, environ: Mapping[str, str]) -> int:
    """amdsmi's position of torch's GPU ``index``, through the one visible-devices variable set."""
    present = [v for v in _VISIBLE_VARIABLES if environ.get(v) is not None]
    if len(present) > 1:       # the runtime composes them; too many ways to guess wrong
        raise MissingEnvironment(
            f"telemetry: cannot map GPU {index} through {' and '.join(present)}")
    variable = present[0] if present else _VISIBLE_VARIABLES[0]
    entry = visible_entry(index, environ.get(variable), variable)
    if not entry.isdigit():
        raise MissingEnvironment(f"telemetry: cannot map {variable} entry {entry!r} to amdsmi")
    return int(entry)


# ---------------------------------------------------------------- amdsmi's fields

def _number(value: Any, unsupported: frozenset[int] = _UNSUPPORTED) -> float | None:
    """A reading, or None for amdsmi's "N/A" and all-ones "unsupported" markers."""
    number = as_float(value)
    return None if number is None or value in unsupported else number


def _field(info: Any, key: str) -> float | None:
    return _number(info.get(key)) if isinstance(info, dict) else None


def _clock(info: Any) -> float | None:
    """amdsmi_get_clock_info, MHz: the current clock is "clk" (amdsmi Python README); ROCm 5.7's
    amdsmi_clk_info_t called it cur_clk."""
    if not isinstance(info, dict):
        return None
    return _number(info.get("clk", info.get("cur_clk")))


def _power(info: Any) -> float | None:
    """amdsmi_get_power_info, watts (amdsmi Python README): socket_power in newer releases
    ("matches current or average socket power"), else current_socket_power (MI300 and newer),
    else average_socket_power (MI200 and older). A zero means "not this field": a powered GPU
    never draws 0 W."""
    for key in ("socket_power", "current_socket_power", "average_socket_power"):
        value = _field(info, key)
        if value:
            return value
    return None


def _energy(info: Any) -> float | None:
    """amdsmi_get_energy_count: energy_accumulator x counter_resolution is microjoules (amdsmi
    Python README); older releases return the accumulator only as "power" (deprecated in 6.4)."""
    if not isinstance(info, dict):
        return None
    ticks = _number(info.get("energy_accumulator", info.get("power")),
                    frozenset({0xFFFFFFFFFFFFFFFF}))
    resolution = as_float(info.get("counter_resolution"))
    return None if ticks is None or resolution is None else ticks * resolution / 1e6


# ---------------------------------------------------------------- throttling

def _violation_reasons(status: Any) -> tuple[str, ...] | None:
    """Active violations, or None when the GPU reports none of the flags ("N/A")."""
    if not isinstance(status, dict):
        return None
    flags = {key: status.get(key) for key in AMD_VIOLATION_REASONS}
    known = {key: value for key, value in flags.items() if isinstance(value, (bool, int))}
    if not known:
        return None
    return tuple(AMD_VIOLATION_REASONS[key] for key, value in known.items() if value)


def _metrics_reasons(metrics: Any) -> tuple[str, ...] | None:
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
