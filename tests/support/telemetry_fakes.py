"""Fakes for the telemetry tests: pynvml and amdsmi modules, and a source of scripted samples.

The fakes follow the documented APIs (pynvml.py of nvidia-ml-py; amdsmi's Python README) closely
enough to drive the real code paths; the real libraries are never called. test_telemetry_nvidia
checks the pynvml fake against the real module's names and constants.
"""
from __future__ import annotations

import enum
import types

from microbench.measure.telemetry import Sample

# ---------------------------------------------------------------------------------------------
# A fake pynvml: constants, functions, and NVMLError with per-code subclasses as pynvml.py has.


class NVMLError(Exception):
    def __init__(self, value: int):
        super().__init__(value)
        self.value = value


class NVMLError_NotSupported(NVMLError):
    def __init__(self):
        super().__init__(3)


class NVMLError_FunctionNotFound(NVMLError):
    def __init__(self):
        super().__init__(13)


GPU_DEFAULTS = {"name": "Fake H100", "sm": 1980, "mem": 2619, "max_sm": 1980, "power_mw": 350_000,
                "temp": 61, "util": 99, "reasons": 0, "energy_mj": 1_000_000, "pci": "0000:1b:00.0",
                "ecc": (0, 0), "retired": ([], []), "pending": 0, "pcie": (5, 5, 16, 16)}


class FakeHandle:
    def __init__(self, index: int):
        self.index = index


def fake_pynvml(uuids, *, unsupported=(), missing=(), not_found=(), **overrides):
    """One fake GPU per UUID; calls named in ``unsupported`` raise NotSupported, in ``not_found``
    raise FunctionNotFound (driver too old), and names in ``missing`` are absent."""
    gpus = [{**GPU_DEFAULTS, "uuid": u, **overrides} for u in uuids]
    m = types.ModuleType("pynvml")
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM, m.NVML_TEMPERATURE_GPU = 1, 2, 0
    m.NVML_ERROR_FUNCTION_NOT_FOUND = 13
    m.NVML_MEMORY_ERROR_TYPE_CORRECTED, m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    m.NVML_VOLATILE_ECC = 0
    m.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
    m.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
    m.NVMLError, m.NVMLError_NotSupported = NVMLError, NVMLError_NotSupported
    m.calls = []

    def gpu(handle):
        return gpus[handle.index]

    def handle_by_pci(bus):
        # NVML accepts "domain:bus:device" with or without ".function" (NVML API reference).
        for index, g in enumerate(gpus):
            if g["pci"].split(".")[0] == bus.split(".")[0]:
                return FakeHandle(index)
        raise NVMLError(6)                              # NVML_ERROR_NOT_FOUND

    functions = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: m.calls.append("shutdown"),
        "nvmlSystemGetNVMLVersion": lambda: "12.575.51",
        "nvmlDeviceGetCount": lambda: len(gpus),
        "nvmlDeviceGetHandleByIndex": lambda i: FakeHandle(i),
        "nvmlDeviceGetHandleByPciBusId": lambda bus: handle_by_pci(bus),
        "nvmlDeviceGetUUID": lambda h: gpu(h)["uuid"],
        "nvmlDeviceGetName": lambda h: gpu(h)["name"],
        "nvmlDeviceGetClockInfo": lambda h, kind: gpu(h)["sm" if kind == 1 else "mem"],
        "nvmlDeviceGetMaxClockInfo": lambda h, kind: gpu(h)["max_sm"],
        "nvmlDeviceGetPowerUsage": lambda h: gpu(h)["power_mw"],
        "nvmlDeviceGetTemperatureV": lambda h, sensor: gpu(h)["temp"],
        "nvmlDeviceGetTemperature": lambda h, sensor: gpu(h)["temp"],
        "nvmlDeviceGetUtilizationRates":
            lambda h: types.SimpleNamespace(gpu=gpu(h)["util"], memory=40),
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: gpu(h)["reasons"],
        "nvmlDeviceGetCurrentClocksThrottleReasons": lambda h: gpu(h)["reasons"],
        "nvmlDeviceGetTotalEnergyConsumption": lambda h: gpu(h)["energy_mj"],
        # "ecc": (corrected, uncorrected); "retired": pages per cause; "pcie": (generation,
        # max generation, width, max width)
        "nvmlDeviceGetTotalEccErrors": lambda h, kind, counter: gpu(h)["ecc"][kind],
        "nvmlDeviceGetRetiredPages": lambda h, cause: gpu(h)["retired"][cause],
        "nvmlDeviceGetRetiredPagesPendingStatus": lambda h: gpu(h)["pending"],
        "nvmlDeviceGetCurrPcieLinkGeneration": lambda h: gpu(h)["pcie"][0],
        "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: gpu(h)["pcie"][1],
        "nvmlDeviceGetCurrPcieLinkWidth": lambda h: gpu(h)["pcie"][2],
        "nvmlDeviceGetMaxPcieLinkWidth": lambda h: gpu(h)["pcie"][3],
    }
    for name, function in functions.items():
        if name in missing:
            continue
        if name in unsupported:
            function = raiser(NVMLError_NotSupported)
        elif name in not_found:
            function = raiser(NVMLError_FunctionNotFound)
        setattr(m, name, function)
    m.gpus = gpus
    return m


def raiser(error_type):
    def call(*args):
        raise error_type()
    return call


UNKNOWN_UUID = "99999999-0000-0000-0000-000000000000"
UUIDS = ["GPU-11111111-1111-1111-1111-111111111111", "GPU-22222222-2222-2222-2222-222222222222",
         "GPU-33333333-3333-3333-3333-333333333333"]


# ---------------------------------------------------------------------------------------------
# A fake amdsmi: enums, AmdSmiException, dict-returning calls with "N/A" where unsupported.


class AmdSmiException(Exception):
    pass


class AmdSmiLibraryException(AmdSmiException):
    pass


class AmdSmiClkType(enum.IntEnum):
    GFX = 0
    MEM = 5


class AmdSmiTemperatureType(enum.IntEnum):
    EDGE = 0
    HOTSPOT = 1


class AmdSmiTemperatureMetric(enum.IntEnum):
    CURRENT = 0


AMD_DEFAULTS = {"gfx": 2100, "gfx_max": 2100, "mem": 1300, "power": {"current_socket_power": 700,
                "average_socket_power": "N/A"}, "temp": {"HOTSPOT": 70, "EDGE": 50},
                "activity": 100,
                "energy": {"energy_accumulator": 65_359_477, "counter_resolution": 15.3},
                "violation": {"active_ppt_pwr": False, "active_socket_thrm": False,
                              "active_prochot_thrm": False, "active_vr_thrm": False,
                              "active_hbm_thrm": False},
                "metrics": {"throttle_status": "N/A", "indep_throttle_status": "N/A"},
                "ecc": {"correctable_count": 0, "uncorrectable_count": 0, "deferred_count": 0},
                "bad_pages": [],
                "pcie": {"pcie_static": {"max_pcie_width": 16, "pcie_interface_version": 5},
                         "pcie_metric": {"pcie_width": 16, "pcie_speed": 32000}}}


def fake_amdsmi(bdfs, *, failing=(), missing=(), **overrides):
    gpus = [{**AMD_DEFAULTS, "bdf": b, **overrides} for b in bdfs]
    m = types.ModuleType("amdsmi")
    m.AmdSmiException, m.AmdSmiLibraryException = AmdSmiException, AmdSmiLibraryException
    m.AmdSmiClkType, m.AmdSmiTemperatureType = AmdSmiClkType, AmdSmiTemperatureType
    m.AmdSmiTemperatureMetric = AmdSmiTemperatureMetric
    m.calls = []
    handles = [FakeHandle(i) for i in range(len(gpus))]

    def gpu(handle):
        return gpus[handle.index]

    def clock(h, kind):
        key = "gfx" if kind == AmdSmiClkType.GFX else "mem"
        return {"clk": gpu(h)[key], "min_clk": 100, "max_clk": gpu(h).get(key + "_max", 1300),
                "clk_locked": False, "clk_deep_sleep": False}

    def temperature(h, sensor, metric):
        value = gpu(h)["temp"].get(sensor.name)
        if value is None:
            raise AmdSmiLibraryException(2)       # AMDSMI_STATUS_NOT_SUPPORTED
        return value

    functions = {
        "amdsmi_init": lambda: None,
        "amdsmi_shut_down": lambda: m.calls.append("shut_down"),
        "amdsmi_get_processor_handles": lambda: handles,
        "amdsmi_get_gpu_device_bdf": lambda h: gpu(h)["bdf"],
        "amdsmi_get_lib_version": lambda: {"major": 26, "minor": 1, "release": 0, "build": "x"},
        "amdsmi_get_gpu_asic_info": lambda h: {"market_name": "Fake MI300X"},
        "amdsmi_get_clock_info": clock,
        "amdsmi_get_power_info": lambda h: gpu(h)["power"],
        "amdsmi_get_temp_metric": temperature,
        "amdsmi_get_gpu_activity": lambda h: {"gfx_activity": gpu(h)["activity"], "umc_activity": 3,
                                              "mm_activity": "N/A"},
        "amdsmi_get_energy_count": lambda h: gpu(h)["energy"],
        "amdsmi_get_violation_status": lambda h: gpu(h)["violation"],
        "amdsmi_get_gpu_metrics_info": lambda h: gpu(h)["metrics"],
        "amdsmi_get_gpu_total_ecc_count": lambda h: gpu(h)["ecc"],
        "amdsmi_get_gpu_bad_page_info": lambda h: gpu(h)["bad_pages"],
        "amdsmi_get_pcie_info": lambda h: gpu(h)["pcie"],
    }
    for name, function in functions.items():
        if name in missing:
            continue
        setattr(m, name, amd_raiser if name in failing else function)
    m.gpus = gpus
    return m


def amd_raiser(*args):
    raise AmdSmiLibraryException(2)


BDFS = ["0000:05:00.0", "0000:c1:00.0"]


# ---------------------------------------------------------------------------------------------
# A source that returns scripted samples (for the sampler and the report).


class ScriptedSource:
    """Returns the given samples in order (their t_s is kept when summarised directly)."""

    def __init__(self, samples=(), max_sm_clock_mhz=2000.0):
        self.name, self.device_label = "scripted 1.0", "test GPU"
        self.max_sm_clock_mhz = max_sm_clock_mhz
        self._samples = list(samples)
        self.reads = 0

    def read(self) -> Sample:
        self.reads += 1
        return self._samples.pop(0) if self._samples else Sample(t_s=-1.0, sm_clock_mhz=2000.0)

    def close(self) -> None:
        pass
