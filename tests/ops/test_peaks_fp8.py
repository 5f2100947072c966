"""The FP8 GEMM probe (issue 48): --precision fp8 measures torch._scaled_mm in the E4M3 encoding
the device's matrix units take, so both of MFU's denominators are FP8; every other run probes
its compute dtype as before; the catalog's scaled_mm takes FP8 operands only."""
import itertools

import pytest
import torch

from microbench.measure import timing
from microbench.ops import catalog, peaks, runner
from microbench.platform import devices
from microbench.platform.errors import UsageError
from microbench.settings import precision

SMALL = peaks.ProbeSize(gemm_n=64, copy_elements=1024, warmup=1, iterations=3)


@pytest.fixture
def millisecond_clock(monkeypatch):
    ticks = itertools.count()
    monkeypatch.setattr(timing, "HOST_CLOCK", lambda: next(ticks) * 0.001)


@pytest.mark.parametrize("fp8, expected", [(torch.float8_e4m3fn, torch.float8_e4m3fn),
                                           (torch.float8_e4m3fnuz, torch.float8_e4m3fnuz),
                                           (None, torch.bfloat16)])
def test_an_fp8_run_probes_the_devices_fp8_encoding(monkeypatch, fp8, expected):
    monkeypatch.setattr(devices, "fp8_e4m3_dtype", lambda device: fp8)
    device = torch.device("cpu")
    assert peaks.probe_dtype(precision.lookup("fp8"), device) == expected
    # Other precisions are untouched by the device's FP8 units.
    assert peaks.probe_dtype(precision.lookup("amp-bf16"), device) == torch.bfloat16
    assert peaks.probe_dtype(precision.lookup("fp32"), device) == torch.float32


def test_the_device_layer_names_e4m3_from_the_formats(monkeypatch):
    monkeypatch.setattr(devices, "fp8_formats", lambda device: ("e4m3fnuz", "e5m2fnuz"))
    assert devices.fp8_e4m3_dtype(torch.device("cpu")) == torch.float8_e4m3fnuz
    monkeypatch.setattr(devices, "fp8_formats", lambda device: ())
    assert devices.fp8_e4m3_dtype(torch.device("cpu")) is None
    assert devices.compute_capability(torch.device("cpu")) is None


def test_the_fp8_probe_is_a_scaled_mm_against_the_fp8_datasheet_rate(millisecond_clock):
    measured = peaks.measure(torch.device("cpu"), torch.float8_e4m3fn, "fp8", size=SMALL)
    assert measured.dtype == "fp8_e4m3fn" and measured.gemm.op == "scaled_mm"
    assert measured.gemm.peak_label == "fp8"
    # 2 * 64^3 FLOPs a call, each 1 ms on the fake clock.
    assert measured.tflops == pytest.approx(2 * 64**3 / 1e-3 / 1e12)
    assert measured.gemm_label == "fp8_e4m3fn GEMM 64^3"
    assert "_scaled_mm" in measured.to_dict()["method"]


def test_scaled_mm_costs_one_byte_an_operand_and_a_bf16_product():
    spec, _ = catalog.resolve_op("scaled_mm")
    cost = spec.cost(catalog.Shapes((32, 64), (64, 48)), 1, False)
    assert (cost.bytes_read, cost.bytes_written, cost.flops) == \
        (32 * 64 + 64 * 48, 32 * 48 * 2, 2 * 32 * 48 * 64)
    assert runner.peak_precision(spec, "fp8_e4m3fnuz") == "fp8"


def test_scaled_mm_refuses_other_dtypes_and_misaligned_shapes():
    spec, _ = catalog.resolve_op("scaled_mm")
    with pytest.raises(UsageError, match="FP8"):
        spec.build(catalog.Shapes((16, 16), (16, 16)), torch.bfloat16, torch.device("cpu"),
                   False)
    with pytest.raises(UsageError, match="multiples of 16"):
        spec.check(catalog.Shapes((16, 24), (24, 16)), False)
    product = spec.build(catalog.Shapes((16, 32), (32, 16)), torch.float8_e4m3fn,
                         torch.device("cpu"), False)()
    assert product.shape == (16, 16) and product.dtype == torch.bfloat16
