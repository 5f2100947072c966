"""open_source: the CPU, a missing library, a failing init, the library per vendor; and what
the device layer tells telemetry (the vendor, the GPU's identity)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from microbench.platform import devices
from microbench.measure import telemetry
from microbench.platform.devices import GpuIdentity
from microbench.measure.telemetry import AmdSmiSource, NvmlSource, TelemetryReport, open_source
from conftest import ROOT
from support.telemetry_fakes import BDFS, UUIDS, NVMLError, fake_amdsmi, fake_pynvml, raiser


def test_the_cpu_gives_an_unavailable_report():
    source, note = open_source(torch.device("cpu"))
    assert source is None and note == "telemetry: unavailable on the CPU"
    report = TelemetryReport.unavailable(note)
    assert report.to_dict() == {"available": False, "reason": "telemetry: unavailable on the CPU"}
    assert report.warnings() == [] and report.energy_j is None


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
    broken.nvmlInit = raiser(lambda: NVMLError(9))          # NVML_ERROR_DRIVER_NOT_LOADED
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    monkeypatch.setattr(devices, "gpu_identity",
                        lambda d: GpuIdentity(d.index, UUIDS[0][4:]))
    source, note = open_source(torch.device("cuda", 0))
    assert source is None and note.startswith("telemetry: NVML could not open GPU 0 (NVMLError")


def test_open_source_picks_nvml_on_cuda_and_amdsmi_on_rocm(monkeypatch, cuda_build):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(UUIDS))
    monkeypatch.setattr(devices, "gpu_identity",
                        lambda d: GpuIdentity(d.index, UUIDS[1][4:]))
    source, note = open_source(torch.device("cuda", 1))
    assert isinstance(source, NvmlSource) and UUIDS[1] in note
    assert note.startswith("telemetry: NVML 12.575")
    monkeypatch.setattr(torch.version, "hip", "7.0.0")
    monkeypatch.setitem(sys.modules, "amdsmi", fake_amdsmi(BDFS))
    monkeypatch.setattr(devices, "gpu_identity",
                        lambda d: GpuIdentity(d.index, pci_bus_id="0000:05:00"))
    source, note = open_source(torch.device("cuda", 0))
    assert isinstance(source, AmdSmiSource) and "0000:05:00.0" in note



def test_a_gpu_under_neither_runtime_gets_a_note(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None, raising=False)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    assert devices.vendor(torch.device("cuda", 0)) is devices.Vendor.UNKNOWN
    source, note = open_source(torch.device("cuda", 0))
    assert source is None and "neither CUDA nor ROCm" in note


def test_a_failing_identity_read_gives_a_note(monkeypatch, cuda_build):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(UUIDS))

    def no_properties(device):
        raise RuntimeError("no CUDA GPUs are available")

    monkeypatch.setattr(devices, "gpu_identity", no_properties)
    source, note = open_source(torch.device("cuda", 3))
    assert source is None
    assert note == ("telemetry: NVML could not open GPU 3 (RuntimeError: no CUDA GPUs are "
                    "available); clocks, power and energy not recorded")


# ---------------------------------------------------------------------------------------------
# What the device layer tells telemetry.


def test_the_vendor_follows_the_build_and_the_cpu_has_none(monkeypatch):
    Vendor = devices.Vendor
    assert devices.vendor(torch.device("cpu")) is Vendor.CPU
    monkeypatch.setattr(torch.version, "hip", "7.0.0", raising=False)
    assert devices.vendor(torch.device("cuda", 0)) is Vendor.AMD     # ROCm GPUs are "cuda"
    assert devices.vendor(torch.device("cpu")) is Vendor.CPU
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.setattr(torch.version, "cuda", "12.8", raising=False)
    assert devices.vendor(torch.device("cuda")) is Vendor.NVIDIA


class FakeProperties:
    def __init__(self, uuid, pci=True):
        self.uuid = uuid
        if pci:
            self.pci_domain_id, self.pci_bus_id, self.pci_device_id = 0, 0x1B, 0


def test_gpu_identity_reads_uuid_and_pci_address_of_the_current_gpu(monkeypatch):
    properties = {2: FakeProperties("1111-ab"), 0: FakeProperties("0000-0000", pci=False)}
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: properties[index])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 2)
    assert devices.gpu_identity(torch.device("cuda")) == GpuIdentity(
        2, "1111-ab", "0000:1b:00")
    # All zeros: the runtime has no UUID for it; no PCI attributes: no address.
    assert devices.gpu_identity(torch.device("cuda", 0)) == GpuIdentity(0, None, None)
    assert devices.gpu_identity(torch.device("cpu")) == GpuIdentity()


def test_the_telemetry_package_asks_the_device_layer_about_devices():
    package = Path(telemetry.__file__).parent
    for path in package.glob("*.py"):
        text = path.read_text()
        for device_knowledge in ("torch.version", "torch.cuda", "is_gpu(", ".type =="):
            assert device_knowledge not in text, f"{path.name} reads {device_knowledge}"


# ---------------------------------------------------------------------------------------------
# Telemetry by default: the README's install line brings NVML's bindings (issue 26).


def test_nvidia_ml_py_is_installed_with_the_tool_not_by_an_extra():
    tomllib = pytest.importorskip("tomllib")                  # Python 3.11 and newer
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "nvidia-ml-py" in project["dependencies"]
    assert project["optional-dependencies"]["telemetry"] == []   # kept for scripts that name it
    requirements = (ROOT / "requirements.txt").read_text().splitlines()
    assert "nvidia-ml-py" in [line.split("#")[0].strip() for line in requirements]
