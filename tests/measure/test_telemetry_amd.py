"""amdsmi through a fake module: matching by PCI address or visible index, every field, the
layouts of older releases, unsupported markers, and throttle reasons from both APIs."""
from __future__ import annotations

import pytest

from microbench.platform.devices import GpuIdentity
from microbench.platform.errors import MissingEnvironment
from microbench.measure.telemetry import AmdSmiSource, decode_amd_throttle_bits
from support.telemetry_fakes import AMD_DEFAULTS, BDFS, fake_amdsmi


def test_amdsmi_matches_by_pci_address_and_reads_every_field():
    amd = fake_amdsmi(BDFS)
    amd.gpus[1]["gfx"] = 1700
    source = AmdSmiSource(GpuIdentity(index=0, pci_bus_id="0000:c1:00"), amd, environ={})
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
        AmdSmiSource(GpuIdentity(index=0, pci_bus_id="0000:99:00"), amd, environ={})



def test_amdsmi_does_not_guess_through_two_visible_variables_or_a_uuid():
    amd = fake_amdsmi(BDFS)
    with pytest.raises(MissingEnvironment, match="through HIP_VISIBLE_DEVICES and "
                                                 "ROCR_VISIBLE_DEVICES"):
        AmdSmiSource(0, amd, environ={"HIP_VISIBLE_DEVICES": "1", "ROCR_VISIBLE_DEVICES": "0"})
    with pytest.raises(MissingEnvironment, match="cannot map HIP_VISIBLE_DEVICES entry 'GPU-1a'"):
        AmdSmiSource(0, amd, environ={"HIP_VISIBLE_DEVICES": "GPU-1a"})
    assert amd.calls == ["shut_down", "shut_down"]        # each failed open shut amdsmi down
