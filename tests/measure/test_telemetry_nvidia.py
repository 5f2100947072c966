"""NVML through a fake pynvml: finding torch's GPU, units, unsupported fields, throttle reasons,
older drivers; and the fake checked against the real nvidia-ml-py where it is installed."""
from __future__ import annotations

import inspect

import pytest

from microbench.platform.devices import GpuIdentity
from microbench.platform.errors import MissingEnvironment
from microbench.measure.telemetry import NvmlSource, decode_nvml_reasons
from support.telemetry_fakes import UNKNOWN_UUID, UUIDS, fake_pynvml


def test_nvml_finds_the_torch_device_by_uuid():
    nvml = fake_pynvml(UUIDS)
    nvml.gpus[2]["sm"] = 1500
    # torch spells the UUID without NVML's "GPU-" prefix; the index says 0 but the UUID wins.
    source = NvmlSource(GpuIdentity(index=0, uuid=UUIDS[2][4:].upper()), nvml, environ={})
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
        NvmlSource(GpuIdentity(index=0, uuid=UNKNOWN_UUID), nvml, environ={})
    assert nvml.calls == ["shutdown"]        # a failed open still shuts NVML down


def test_nvml_falls_back_to_pci_then_to_index_when_uuids_unreadable():
    nvml = fake_pynvml(UUIDS)
    nvml.gpus[1]["sm"] = 1300
    identity = GpuIdentity(index=0, uuid=UNKNOWN_UUID, pci_bus_id="0000:1b:00")
    nvml.gpus[0]["pci"], nvml.gpus[1]["pci"] = "0000:0a:00.0", "0000:1b:00.0"
    assert NvmlSource(identity, nvml, environ={}).read().sm_clock_mhz == 1300.0
    blind = fake_pynvml(UUIDS, unsupported={"nvmlDeviceGetUUID", "nvmlDeviceGetHandleByPciBusId"})
    source = NvmlSource(GpuIdentity(index=1, uuid=UUIDS[1][4:]), blind, environ={})
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


def test_nvml_refuses_an_index_the_visible_list_does_not_have():
    nvml = fake_pynvml(UUIDS)
    with pytest.raises(MissingEnvironment, match="CUDA_VISIBLE_DEVICES='0,1' has no entry for "
                                                 "GPU 2"):
        NvmlSource(2, nvml, environ={"CUDA_VISIBLE_DEVICES": "0,1"})
    with pytest.raises(MissingEnvironment, match="no NVML device matches CUDA_VISIBLE_DEVICES"):
        NvmlSource(0, nvml, environ={"CUDA_VISIBLE_DEVICES": "GPU-999"})


class Recording:
    """Passes every attribute of ``module`` through, noting its name and, for a function, the
    numbers of arguments it was called with."""

    def __init__(self, module):
        self._module, self.names, self.arities = module, set(), {}

    def __getattr__(self, name):
        value = getattr(self._module, name)
        self.names.add(name)
        if not callable(value) or isinstance(value, type):
            return value

        def call(*args):
            self.arities.setdefault(name, set()).add(len(args))
            return value(*args)
        return call


def test_the_fake_pynvml_follows_the_real_module():
    """Every name NvmlSource takes from pynvml exists in nvidia-ml-py (a dependency), accepts
    the arguments it is given, and every constant has the real value."""
    real = pytest.importorskip("pynvml", reason="nvidia-ml-py not installed "
                                                "(pip install -r requirements.txt)")
    fake = fake_pynvml(UUIDS)
    recording = Recording(fake)
    fake.gpus[0]["pci"] = "0000:0a:00.0"
    for device in (GpuIdentity(0, UUIDS[0][4:]), GpuIdentity(0, UNKNOWN_UUID, "0000:0a:00"), 1):
        source = NvmlSource(device, recording, environ={})   # by UUID, by PCI address, by index
        source.read()
        source.health()
        source.close()
    assert {"nvmlInit", "nvmlDeviceGetHandleByPciBusId", "nvmlDeviceGetTemperatureV",
            "nvmlDeviceGetCurrentClocksEventReasons"} <= recording.names
    assert sorted(recording.names - set(dir(real))) == []
    for name, arities in recording.arities.items():
        signature = inspect.signature(getattr(real, name))
        for arity in arities:
            signature.bind(*range(arity))             # raises TypeError where it would not fit
    constants = [name for name in recording.names if name.startswith("NVML_")]
    assert constants and {n: getattr(fake, n) for n in constants} == {
        n: getattr(real, n) for n in constants}
    assert issubclass(real.NVMLError_NotSupported, real.NVMLError)
