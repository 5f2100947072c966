"""Errors and link state from the management libraries (fakes of pynvml and amdsmi): ECC
counts, retired or bad pages, the PCIe link now and at most; None where a library does not
say, and each error put in words for the node check."""
from __future__ import annotations

from microbench.measure.telemetry import AmdSmiSource, NvmlSource
from microbench.measure.telemetry.health import DeviceHealth, pcie_generation_of
from microbench.platform.devices import GpuIdentity
from support.telemetry_fakes import BDFS, UUIDS, fake_amdsmi, fake_pynvml


def _nvml(**overrides):
    return NvmlSource(GpuIdentity(0, UUIDS[0][4:]), fake_pynvml(UUIDS[:1], **overrides),
                      environ={})


def test_nvml_health_of_a_healthy_gpu():
    health = _nvml().health()
    assert health == DeviceHealth(ecc_corrected=0, ecc_uncorrected=0, retired_pages=0,
                                  retirement_pending=False, pcie_generation=5,
                                  pcie_max_generation=5, pcie_width=16, pcie_max_width=16)
    assert health.errors() == []


def test_nvml_health_counts_errors_and_a_narrow_link():
    health = _nvml(ecc=(12, 3), retired=([1, 2], [3]), pending=1, pcie=(4, 5, 8, 16)).health()
    assert (health.ecc_corrected, health.ecc_uncorrected, health.retired_pages) == (12, 3, 3)
    assert (health.pcie_generation, health.pcie_width) == (4, 8)
    assert health.errors() == ["3 uncorrectable ECC errors", "3 retired memory pages",
                               "a page retirement pending (reload the driver)"]


def test_nvml_health_unsupported_is_unknown_not_zero():
    unsupported = {"nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRetiredPages",
                   "nvmlDeviceGetRetiredPagesPendingStatus"}
    health = _nvml(unsupported=unsupported, missing={"nvmlDeviceGetCurrPcieLinkWidth"}).health()
    assert (health.ecc_uncorrected, health.retired_pages, health.retirement_pending) == \
        (None, None, None)
    assert health.pcie_width is None and health.pcie_generation == 5
    assert health.errors() == []


def test_amdsmi_health_reads_ecc_bad_pages_and_the_link_speed():
    amd = fake_amdsmi(BDFS[:1], ecc={"correctable_count": 5, "uncorrectable_count": 1},
                      bad_pages=[{"page": 1}],
                      pcie={"pcie_static": {"max_pcie_width": 16, "pcie_interface_version": 5},
                            "pcie_metric": {"pcie_width": 16, "pcie_speed": 16000}})
    health = AmdSmiSource(GpuIdentity(index=0, pci_bus_id=BDFS[0]), amd, environ={}).health()
    assert (health.ecc_corrected, health.ecc_uncorrected, health.retired_pages) == (5, 1, 1)
    assert (health.pcie_generation, health.pcie_max_generation) == (4, 5)
    assert health.errors() == ["1 uncorrectable ECC errors", "1 retired memory pages"]


def test_amdsmi_health_without_the_queries_is_unknown():
    amd = fake_amdsmi(BDFS[:1], failing={"amdsmi_get_gpu_total_ecc_count",
                                         "amdsmi_get_pcie_info"},
                      missing={"amdsmi_get_gpu_bad_page_info"})
    health = AmdSmiSource(GpuIdentity(index=0, pci_bus_id=BDFS[0]), amd, environ={}).health()
    assert health == DeviceHealth()


def test_pcie_generation_of_a_speed():
    assert [pcie_generation_of(s) for s in (2500, 32000, 64000, 12345, "N/A", None)] == \
        [1, 5, 6, None, None, None]
