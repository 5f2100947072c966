"""Telemetry on the CPU: fake pynvml / amdsmi modules, scripted samples, a fake clock; no sleeps.

The fakes follow the documented APIs (pynvml.py of nvidia-ml-py; amdsmi's Python README) closely
enough to drive the real code paths; the real libraries are never imported here.
"""
from __future__ import annotations

import enum
import json
import sys
import threading
import types

import pytest
import torch

from microbench import telemetry
from microbench.errors import MissingEnvironment, UsageError
from microbench.telemetry import (
    ENERGY_COUNTER, ENERGY_TRAPEZOID, SM_CLOCK_DROP_WARN, AmdSmiSource, DeviceIdentity,
    NvmlSource, Sample, Sampler, TelemetryReport, decode_amd_throttle_bits, decode_nvml_reasons,
    energy_counter_vs_power, open_source, summarize,
)

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
                "temp": 61, "util": 99, "reasons": 0, "energy_mj": 1_000_000, "pci": "0000:1b:00.0"}


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
        "nvmlDeviceGetTemperature": lambda h, sensor: gpu(h)["temp"],
        "nvmlDeviceGetUtilizationRates":
            lambda h: types.SimpleNamespace(gpu=gpu(h)["util"], memory=40),
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: gpu(h)["reasons"],
        "nvmlDeviceGetCurrentClocksThrottleReasons": lambda h: gpu(h)["reasons"],
        "nvmlDeviceGetTotalEnergyConsumption": lambda h: gpu(h)["energy_mj"],
    }
    for name, function in functions.items():
        if name in missing:
            continue
        if name in unsupported:
            function = _raiser(NVMLError_NotSupported)
        elif name in not_found:
            function = _raiser(NVMLError_FunctionNotFound)
        setattr(m, name, function)
    m.gpus = gpus
    return m


def _raiser(error_type):
    def call(*args):
        raise error_type()
    return call


UNKNOWN_UUID = "99999999-0000-0000-0000-000000000000"
UUIDS = ["GPU-11111111-1111-1111-1111-111111111111", "GPU-22222222-2222-2222-2222-222222222222",
         "GPU-33333333-3333-3333-3333-333333333333"]


def test_nvml_finds_the_torch_device_by_uuid():
    nvml = fake_pynvml(UUIDS)
    nvml.gpus[2]["sm"] = 1500
    # torch spells the UUID without NVML's "GPU-" prefix; the index says 0 but the UUID wins.
    source = NvmlSource(DeviceIdentity(index=0, uuid=UUIDS[2][4:].upper()), nvml, environ={})
    assert "matched by UUID" in source.device_label and UUIDS[2] in source.device_label
    assert source.read().sm_clock_mhz == 1500.0
    assert source.name == "NVML 12.575.51"
    assert source.max_sm_clock_mhz == 1980.0


def test_nvml_index_fallback_follows_cuda_visible_devices():
    nvml = fake_pynvml(UUIDS)
    nvml.gpus[2]["sm"] = 1400
    source = NvmlSource(0, nvml, environ={"CUDA_VISIBLE_DEVICES": "2,0"})
    assert source.read().sm_clock_mhz == 1400.0 and "matched by index" in source.device_label
    # CUDA also accepts UUID prefixes in the list.
    source = NvmlSource(1, nvml, environ={"CUDA_VISIBLE_DEVICES": "0,GPU-333"})
    assert source.read().sm_clock_mhz == 1400.0


def test_nvml_unmatched_uuid_does_not_guess_by_index():
    nvml = fake_pynvml(UUIDS)
    with pytest.raises(MissingEnvironment, match="no NVML device"):
        NvmlSource(DeviceIdentity(index=0, uuid=UNKNOWN_UUID), nvml, environ={})
    assert nvml.calls == ["shutdown"]        # a failed open still shuts NVML down


def test_nvml_falls_back_to_pci_then_to_index_when_uuids_unreadable():
    nvml = fake_pynvml(UUIDS)
    nvml.gpus[1]["sm"] = 1300
    identity = DeviceIdentity(index=0, uuid=UNKNOWN_UUID, pci_bus_id="0000:1b:00")
    nvml.gpus[0]["pci"], nvml.gpus[1]["pci"] = "0000:0a:00.0", "0000:1b:00.0"
    assert NvmlSource(identity, nvml, environ={}).read().sm_clock_mhz == 1300.0
    blind = fake_pynvml(UUIDS, unsupported={"nvmlDeviceGetUUID", "nvmlDeviceGetHandleByPciBusId"})
    source = NvmlSource(DeviceIdentity(index=1, uuid=UUIDS[1][4:]), blind, environ={})
    assert "matched by index" in source.device_label


def test_nvml_unsupported_fields_become_none_and_units_convert():
    nvml = fake_pynvml(UUIDS[:1], unsupported={"nvmlDeviceGetTotalEnergyConsumption",
                                               "nvmlDeviceGetUtilizationRates",
                                               "nvmlDeviceGetMaxClockInfo"})
    source = NvmlSource(UUIDS[0], nvml, environ={})
    sample = source.read()
    assert sample.energy_j is None and sample.utilization_pct is None
    assert source.max_sm_clock_mhz is None
    assert sample.power_w == 350.0                     # milliwatts -> watts
    assert sample.sm_clock_mhz == 1980.0 and sample.memory_clock_mhz == 2619.0
    assert sample.temperature_c == 61.0
    assert sample.throttle_reasons == ()
    source.close()
    source.close()                                     # idempotent
    assert nvml.calls == ["shutdown"]
    energy = NvmlSource(UUIDS[0], fake_pynvml(UUIDS[:1], energy_mj=1_234_500), environ={}).read()
    assert energy.energy_j == 1234.5                   # millijoules -> joules


def test_nvml_throttle_bits_decode_without_idle_or_clock_settings():
    assert decode_nvml_reasons(0x0) == ()
    assert decode_nvml_reasons(0x1) == ()              # GPU idle: not throttling
    assert decode_nvml_reasons(0x2 | 0x100) == ()      # applications / display clock settings
    assert decode_nvml_reasons(0x1 | 0x4 | 0x40) == ("sw_power_cap", "hw_thermal_slowdown")
    assert decode_nvml_reasons(0x8 | 0x10 | 0x20 | 0x80) == (
        "hw_slowdown", "sync_boost", "sw_thermal_slowdown", "hw_power_brake_slowdown")
    assert decode_nvml_reasons(0x800) == ("nvml_reason_0x800",)   # future bits stay visible


def test_nvml_uses_the_older_throttle_call_where_the_newer_is_missing():
    newer = {"nvmlDeviceGetCurrentClocksEventReasons"}
    old_module = fake_pynvml(UUIDS[:1], missing=newer, reasons=0x5)
    assert NvmlSource(UUIDS[0], old_module, environ={}).read().throttle_reasons == ("sw_power_cap",)
    old_driver = fake_pynvml(UUIDS[:1], not_found=newer, reasons=0x20)
    source = NvmlSource(UUIDS[0], old_driver, environ={})
    assert source.read().throttle_reasons == ("sw_thermal_slowdown",)
    assert source.read().throttle_reasons == ("sw_thermal_slowdown",)
    neither = fake_pynvml(UUIDS[:1], unsupported=newer)
    assert NvmlSource(UUIDS[0], neither, environ={}).read().throttle_reasons is None


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
                "metrics": {"throttle_status": "N/A", "indep_throttle_status": "N/A"}}


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
    }
    for name, function in functions.items():
        if name in missing:
            continue
        setattr(m, name, _amd_raiser if name in failing else function)
    m.gpus = gpus
    return m


def _amd_raiser(*args):
    raise AmdSmiLibraryException(2)


BDFS = ["0000:05:00.0", "0000:c1:00.0"]


def test_amdsmi_matches_by_pci_address_and_reads_every_field():
    amd = fake_amdsmi(BDFS)
    amd.gpus[1]["gfx"] = 1700
    source = AmdSmiSource(DeviceIdentity(index=0, pci_bus_id="0000:c1:00"), amd, environ={})
    assert source.device_label == "Fake MI300X (0000:c1:00.0, matched by PCI bus id)"
    assert source.name == "amdsmi 26.1.0" and source.max_sm_clock_mhz == 2100.0
    sample = source.read()
    assert (sample.sm_clock_mhz, sample.memory_clock_mhz) == (1700.0, 1300.0)
    assert sample.power_w == 700.0                     # current_socket_power; average is N/A
    assert sample.temperature_c == 70.0                # hotspot first
    assert sample.utilization_pct == 100.0
    assert sample.energy_j == pytest.approx(65_359_477 * 15.3 / 1e6)   # microjoules -> joules
    assert sample.throttle_reasons == ()
    source.close()
    assert amd.calls == ["shut_down"]


def test_amdsmi_older_layouts_and_unsupported_fields():
    amd = fake_amdsmi(BDFS[:1], power={"current_socket_power": 0xFFFF, "average_socket_power": 310},
                      temp={"EDGE": 44}, energy={"power": 1000, "counter_resolution": 1_000_000.0},
                      activity="N/A", failing={"amdsmi_get_gpu_metrics_info"},
                      missing={"amdsmi_get_violation_status"})
    sample = AmdSmiSource("0000:05:00.0", amd, environ={}).read()
    assert sample.power_w == 310.0                     # 0xFFFF marks "unsupported"
    assert sample.temperature_c == 44.0                # edge when hotspot is not supported
    assert sample.energy_j == 1000.0                   # the older "power" key: 1000 ticks x 1 J
    assert sample.utilization_pct is None and sample.throttle_reasons is None
    dead = fake_amdsmi(BDFS[:1], failing={"amdsmi_get_clock_info", "amdsmi_get_power_info",
                                          "amdsmi_get_energy_count"})
    source = AmdSmiSource(0, dead, environ={})
    sample = source.read()
    assert source.max_sm_clock_mhz is None
    assert (sample.sm_clock_mhz, sample.power_w, sample.energy_j) == (None, None, None)


def test_amdsmi_throttle_reasons_from_violations_then_gpu_metrics():
    amd = fake_amdsmi(BDFS[:1])
    amd.gpus[0]["violation"] = {**AMD_DEFAULTS["violation"], "active_ppt_pwr": True,
                                "active_hbm_thrm": True}
    reasons = AmdSmiSource(0, amd, environ={}).read().throttle_reasons
    assert reasons == ("ppt_power_limit", "hbm_thermal")
    older = fake_amdsmi(BDFS[:1], failing={"amdsmi_get_violation_status"},
                        metrics={"throttle_status": True, "indep_throttle_status": True})
    assert AmdSmiSource(0, older, environ={}).read().throttle_reasons == ("amd_throttle_status",)
    bits = fake_amdsmi(BDFS[:1], violation={k: "N/A" for k in AMD_DEFAULTS["violation"]},
                       metrics={"throttle_status": 5, "indep_throttle_status": 1 << 0 | 1 << 36})
    assert AmdSmiSource(0, bits, environ={}).read().throttle_reasons == (
        "amd_power_limit_bit0", "amd_temperature_limit_bit36")
    assert decode_amd_throttle_bits(1 << 16 | 1 << 56) == (
        "amd_current_limit_bit16", "amd_other_limit_bit56")


def test_amdsmi_index_fallback_respects_hip_visible_devices():
    amd = fake_amdsmi(BDFS)
    amd.gpus[1]["gfx"] = 1600
    source = AmdSmiSource(0, amd, environ={"HIP_VISIBLE_DEVICES": "1"})
    assert source.read().sm_clock_mhz == 1600.0 and "matched by index" in source.device_label
    with pytest.raises(MissingEnvironment):
        AmdSmiSource(DeviceIdentity(index=0, pci_bus_id="0000:99:00"), amd, environ={})


# ---------------------------------------------------------------------------------------------
# Summaries from scripted samples.


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


def _series(clocks=(), powers=(), energies=(), reasons=(), step=1.0):
    n = max(len(clocks), len(powers), len(energies), len(reasons))
    pick = lambda values, i: values[i] if i < len(values) else None   # noqa: E731
    return [Sample(t_s=i * step, sm_clock_mhz=pick(clocks, i), power_w=pick(powers, i),
                   energy_j=pick(energies, i), throttle_reasons=pick(reasons, i)) for i in range(n)]


def test_a_15_percent_clock_drop_gives_exactly_one_warning_and_exact_median():
    samples = _series(clocks=[2000.0, 2000.0, 1700.0, 1900.0, 1800.0], reasons=[()] * 5)
    report = summarize(samples, ScriptedSource(), items=100, timed_s=4.0)
    clock = report.stat("sm_clock_mhz")
    assert (clock.min, clock.median, clock.max) == (1700.0, 1900.0, 2000.0)
    assert report.sm_clock_drop == pytest.approx(0.15)
    warnings = report.warnings()
    assert len(warnings) == 1 and "SM clock fell 15.0%" in warnings[0]
    assert "1700 of 2000 MHz" in warnings[0] and report.throttled is False


def test_a_small_drop_is_quiet_and_the_threshold_is_named():
    assert SM_CLOCK_DROP_WARN == 0.10
    report = summarize(_series(clocks=[2000.0, 1820.0]), ScriptedSource(), items=1, timed_s=1.0)
    assert report.sm_clock_drop == pytest.approx(0.09) and report.warnings() == []
    # Without a device maximum, the highest sample is the reference, and the report says so.
    unknown_max = ScriptedSource(max_sm_clock_mhz=None)
    report = summarize(_series(clocks=[1000.0, 800.0]), unknown_max, items=1, timed_s=1.0)
    assert report.sm_clock_reference == "highest sample"
    assert report.sm_clock_drop == pytest.approx(0.2)


def test_a_throttle_reason_during_timing_gives_the_throttle_warning():
    reasons = [(), ("sw_power_cap",), ("sw_power_cap", "hw_slowdown")]
    samples = _series(clocks=[2000.0] * 3, reasons=reasons)
    report = summarize(samples, ScriptedSource(), items=10, timed_s=2.0)
    assert report.throttle_reasons_seen == ("hw_slowdown", "sw_power_cap")
    assert report.warnings() == ["telemetry: throttling during timing: hw_slowdown, sw_power_cap"]
    assert report.csv_cells()["throttled"] is True


def test_energy_per_item_from_the_counter_is_exact():
    samples = _series(powers=[400.0, 600.0, 500.0], energies=[1000.0, 1250.0, 1500.0])
    report = summarize(samples, ScriptedSource(), items=100, timed_s=2.0)
    assert report.energy_basis == ENERGY_COUNTER and not report.energy_estimated
    assert report.energy_j == 500.0
    assert report.joules_per_item == 5.0 and report.items_per_joule == 0.2
    # The counter against power x time: (400+600)/2 + (600+500)/2 = 1050 J over the same span.
    assert report.power_energy_j == 1050.0
    assert energy_counter_vs_power(report) == 500.0 / 1050.0


def test_without_a_counter_the_trapezoid_is_exact_and_labelled_estimated():
    # Power rising linearly 100 -> 200 W over 2 s, sampled every 0.5 s: exactly 300 J.
    samples = _series(powers=[100.0, 125.0, 150.0, 175.0, 200.0], step=0.5)
    report = summarize(samples, ScriptedSource(), items=60, timed_s=2.0)
    assert report.energy_j == 300.0 and report.energy_basis == ENERGY_TRAPEZOID
    assert report.energy_estimated and "estimated" in report.energy_basis
    assert report.joules_per_item == 5.0 and report.items_per_joule == 0.2
    assert energy_counter_vs_power(report) is None
    # A counter that stood still or went back (reset) is not trusted.
    stuck = summarize(_series(powers=[100.0, 100.0], energies=[5.0, 5.0]), ScriptedSource(), 1, 1.0)
    assert stuck.energy_basis == ENERGY_TRAPEZOID and stuck.counter_energy_j is None


def test_missing_quantities_stay_none():
    empty = [Sample(t_s=0.0), Sample(t_s=1.0)]
    report = summarize(empty, ScriptedSource(max_sm_clock_mhz=None), items=5, timed_s=1.0)
    assert report.stat("power_w") is None
    assert report.energy_j is None and report.energy_basis is None
    assert report.joules_per_item is None and report.sm_clock_drop is None
    assert report.csv_cells() == {"sm_clock_mhz_median": None, "power_w_median": None,
                                  "energy_j": None, "j_per_item": None, "throttled": None}


def test_report_dict_is_plain_json_with_samples():
    samples = [Sample(t_s=10.0 + i, sm_clock_mhz=1980.0, memory_clock_mhz=2619.0, power_w=300.0 + i,
                      temperature_c=60.0, utilization_pct=99.0, throttle_reasons=("sw_power_cap",),
                      energy_j=100.0 + 300.0 * i) for i in range(3)]
    report = summarize(samples, ScriptedSource(), items=6, timed_s=2.0)
    data = report.to_dict()
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert data["available"] is True and data["energy_basis"] == "counter"
    assert data["samples"][0]["t_s"] == 0.0 and data["samples"][2]["t_s"] == 2.0
    assert data["samples"][1]["throttle_reasons"] == ["sw_power_cap"]
    assert data["stats"]["power_w"] == {"min": 300.0, "median": 301.0, "max": 302.0}
    assert data["warnings"] == report.warnings() and data["joules_per_item"] == 100.0
    assert report.csv_cells() == {"sm_clock_mhz_median": 1980.0, "power_w_median": 301.0,
                                  "energy_j": 600.0, "j_per_item": 100.0, "throttled": True}


# ---------------------------------------------------------------------------------------------
# open_source: the CPU, a missing library, a failing init, a working fake.


def test_the_cpu_gives_an_unavailable_report():
    source, note = open_source(torch.device("cpu"))
    assert source is None and note == "telemetry: unavailable on the CPU"
    report = TelemetryReport.unavailable(note)
    assert report.to_dict() == {"available": False, "reason": "telemetry: unavailable on the CPU"}
    assert report.warnings() == [] and report.csv_cells()["energy_j"] is None


@pytest.fixture
def cuda_build(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "12.8", raising=False)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)


@pytest.fixture
def rocm_build(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None, raising=False)
    monkeypatch.setattr(torch.version, "hip", "7.0.0", raising=False)


def test_a_missing_library_gives_a_note_and_no_exception(monkeypatch, cuda_build):
    monkeypatch.setitem(sys.modules, "pynvml", None)        # import pynvml now fails
    source, note = open_source(torch.device("cuda", 0))
    assert source is None and note == telemetry.NVML_MISSING
    assert "pip install nvidia-ml-py" in note


def test_a_missing_amdsmi_gives_a_note(monkeypatch, rocm_build):
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    source, note = open_source(torch.device("cuda", 0))
    assert source is None and note == telemetry.AMDSMI_MISSING


def test_a_failing_init_gives_a_note(monkeypatch, cuda_build):
    broken = fake_pynvml(UUIDS)
    broken.nvmlInit = _raiser(lambda: NVMLError(9))          # NVML_ERROR_DRIVER_NOT_LOADED
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    monkeypatch.setattr(telemetry, "torch_identity", lambda i: DeviceIdentity(i, UUIDS[0][4:]))
    source, note = open_source(torch.device("cuda", 0))
    assert source is None and note.startswith("telemetry: NVML could not open GPU 0 (NVMLError")


def test_open_source_picks_nvml_on_cuda_and_amdsmi_on_rocm(monkeypatch, cuda_build):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(UUIDS))
    monkeypatch.setattr(telemetry, "torch_identity", lambda i: DeviceIdentity(i, UUIDS[1][4:]))
    source, note = open_source(torch.device("cuda", 1))
    assert isinstance(source, NvmlSource) and UUIDS[1] in note
    assert note.startswith("telemetry: NVML 12.575")
    monkeypatch.setattr(torch.version, "hip", "7.0.0")
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amdsmi(BDFS))
    monkeypatch.setattr(telemetry, "torch_identity",
                        lambda i: DeviceIdentity(i, pci_bus_id="0000:05:00"))
    source, note = open_source(torch.device("cuda", 0))
    assert isinstance(source, AmdSmiSource) and "0000:05:00.0" in note


# ---------------------------------------------------------------------------------------------
# The sampler, driven by a fake clock and a fake wait.


class FakeTime:
    """A clock that moves only when wait() is called; wait() ends the loop after ``ticks``."""

    def __init__(self, ticks: int):
        self.now = 100.0
        self.ticks_left = ticks
        self.exhausted = threading.Event()
        self.timeouts = []

    def clock(self) -> float:
        return self.now

    def wait(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        self.now += timeout
        if self.ticks_left == 0:
            self.exhausted.set()
            return True
        self.ticks_left -= 1
        return False


def test_sampler_collects_the_expected_samples_deterministically():
    fake = FakeTime(ticks=5)
    source = ScriptedSource()
    sampler = Sampler(source, interval_s=0.25, clock=fake.clock, wait=fake.wait)
    sampler.start()
    assert fake.exhausted.wait(timeout=10)      # the thread has run its five ticks (no sleep)
    samples = sampler.stop()
    # One at start, one per tick, one final: times from the fake clock, not the source.
    assert len(samples) == 7 and source.reads == 7
    assert [s.t_s for s in samples] == [100.0, 100.25, 100.5, 100.75, 101.0, 101.25, 101.5]
    assert fake.timeouts == [0.25] * 6 and sampler.error is None


def test_sampler_default_wait_stops_at_once_and_rejects_misuse():
    source = ScriptedSource()
    sampler = Sampler(source, interval_s=3600.0)   # the stop event ends the hour-long wait
    sampler.start()
    assert len(sampler.stop()) == 2
    with pytest.raises(UsageError):
        sampler.stop()
    with pytest.raises(UsageError):
        Sampler(source, interval_s=0)


def test_sampler_survives_a_failing_source():
    class Failing(ScriptedSource):
        def read(self):
            raise RuntimeError("sensor gone")

    fake = FakeTime(ticks=3)
    sampler = Sampler(Failing(), clock=fake.clock, wait=fake.wait)
    sampler.start()
    assert sampler.stop() == [] and sampler.error == "RuntimeError: sensor gone"


def test_sample_now_drives_the_sampler_by_hand():
    fake = FakeTime(ticks=0)
    sampler = Sampler(ScriptedSource(), clock=fake.clock, wait=fake.wait)
    fake.now = 5.0
    sampler.sample_now()
    fake.now = 6.0
    sampler.sample_now()
    assert [s.t_s for s in sampler.samples] == [5.0, 6.0]
