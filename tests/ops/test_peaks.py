"""Measured peaks (issue 35): the probe on the CPU, MFU and MBU against both denominators, the
warning when a device measures far below its datasheet, the JSON block against the schema, the
CSV beside older headers, older results in the report, and the datasheet rows it relies on."""
import csv
import itertools
import json
import re

import pytest
import torch

from conftest import TINY, requires_gpu, run_main, stored_result
from microbench.measure import flops, timing
from microbench.ops import peaks
from microbench.ops import catalog
from microbench.ops.report import OpResult
from microbench.store import entry
from microbench.output import files
from microbench.platform import writing
from microbench.store.schema import validate_result
from microbench.measure.timing import Measurement

TINY_LM = ["--network", "llama_tiny", "--seq-len", "16", "--vocab-size", "128",
           "--batch-size", "2", "--mode", "generate", "--prompt-len", "5", "--gen-len", "6"]
SMALL = peaks.ProbeSize(gemm_n=64, copy_elements=1024, warmup=1, iterations=3)


@pytest.fixture(autouse=True)
def fresh_probe(monkeypatch):
    """Every test probes afresh (the probe is cached once per process)."""
    monkeypatch.setattr(peaks, "_MEASURED", {})
    monkeypatch.setattr(peaks, "CPU_SIZE", SMALL)


@pytest.fixture
def millisecond_clock(monkeypatch):
    """Each mark of a timed call is 1 ms after the previous one."""
    ticks = itertools.count()
    monkeypatch.setattr(timing, "HOST_CLOCK", lambda: next(ticks) * 0.001)


def _row(op: str, dtype: str, rate: float) -> OpResult:
    shapes = "268435456" if op == "copy" else "8192-8192,8192-8192"
    row = OpResult.for_case(op, "compute", shapes, dtype, "compute", 2**31, 2 * 8192**3)
    measured = Measurement([1.0, 1.0])
    if op == "copy":
        return row.measured(measured, rate, 0.0, "BW", None, None)
    return row.measured(measured, 0.0, rate, dtype, None, None)


def fake_probe(tflops: float, gbs: float, clocks: peaks.ProbeClocks | None = None):
    def measure(device, compute, peak_key, source=None):
        return peaks.MeasuredPeaks(
            device_name="cpu", dtype="fp32", peak_key=peak_key,
            gemm=_row("matmul", "fp32", tflops), copy=_row("copy", "fp32", gbs),
            clocks=clocks or peaks.ProbeClocks(source="fake", sm_clock_mhz=1100.0,
                                               max_sm_clock_mhz=1980.0, power_limit_w=400.0,
                                               default_power_limit_w=700.0,
                                               throttle_reasons=("sw_power_cap",), samples=3),
            seconds=0.5)
    return measure


# ---------------------------------------------------------------- the probe

def test_the_cpu_probe_gives_gflops_and_gbs_from_the_op_benchs_timing(millisecond_clock):
    measured = peaks.measure(torch.device("cpu"), torch.float32, "fp32_matrix", size=SMALL)
    # Every timed call lasts 1 ms on the fake clock: 2 * 64^3 FLOPs and 2 x 4 KiB per call.
    assert measured.tflops == pytest.approx(2 * 64**3 / 1e-3 / 1e12)
    assert measured.gbs == pytest.approx(2 * 1024 * 4 / 1e-3 / 1e9)
    assert measured.gemm_label == "fp32 GEMM 64^3"
    assert "read + written" in measured.copy_label
    assert measured.clocks.samples == 0 and "not read" in measured.clocks.describe()
    block = measured.to_dict()
    assert block["bandwidth"]["basis"] == "bytes read + bytes written"
    assert len(block["gemm"]["samples_ms"]) == SMALL.iterations


def test_the_probe_reuses_the_op_benchs_kernels():
    assert catalog.resolve_op("copy")[0].roof == catalog.MEMORY_BOUND
    cost = catalog.resolve_op("copy")[0].cost(catalog.Shapes((10,)), 4, False)
    assert (cost.bytes_read, cost.bytes_written, cost.flops) == (40, 40, 0)


def test_a_dtype_without_a_gemm_yet_says_so_and_still_measures_bandwidth(millisecond_clock):
    measured = peaks.measure(torch.device("cpu"), torch.float64, "fp64", size=SMALL)
    assert measured.gemm is None and measured.tflops is None and measured.gbs
    assert "no GEMM probe" in measured.note


def test_once_per_process():
    calls = []

    def measure(*args):
        calls.append(args)
        return "probe"
    for _ in range(3):
        assert peaks.once(torch.device("cpu"), torch.float32, "fp32", measure_fn=measure) == \
            "probe"
    assert len(calls) == 1


def test_the_clocks_read_during_the_probe():
    from microbench.measure.telemetry import Sample

    class Source:
        name, max_sm_clock_mhz = "fake NVML", 1980.0

        def power_limits_w(self):
            return 500.0, 700.0
    samples = [Sample(0.0, sm_clock_mhz=c, power_w=p, throttle_reasons=r)
               for c, p, r in ((1400.0, 480.0, ()), (1500.0, 499.0, ("sw_power_cap",)),
                               (1600.0, 300.0, ()))]
    clocks = peaks.clocks_of(samples, Source())
    assert clocks.sm_clock_mhz == 1500.0 and clocks.power_w == 499.0
    assert clocks.power_capped and clocks.throttle_reasons == ("sw_power_cap",)
    text = clocks.describe()
    assert "SM clock 1500 MHz of 1980 max" in text and "power limit 500 W (default 700 W)" in text


def test_warnings_only_below_the_thresholds():
    low = fake_probe(600.0, 3000.0)(None, None, "bf16")
    assert peaks.warnings(low, 989.5, 3350.0)            # 61% of the GEMM peak
    fine = fake_probe(790.0, 3000.0)(None, None, "bf16")
    assert peaks.warnings(fine, 989.5, 3350.0) == []      # 80% and 90%
    slow_memory = fake_probe(790.0, 2400.0)(None, None, "bf16")
    assert "copy bandwidth 72%" in peaks.warnings(slow_memory, 989.5, 3350.0)[0]
    assert peaks.warnings(low, None, None) == []          # nothing to compare with


def test_representative_takes_the_median_probe():
    probes = [fake_probe(rate, 1.0)(None, None, "bf16") for rate in (700.0, 790.0, 750.0)]
    assert peaks.representative(probes + [None]).tflops == 750.0
    assert peaks.representative([None]) is None


# ---------------------------------------------------------------- the model benchmark

def test_measure_peaks_1_on_the_cpu_prints_mfu_against_the_measured_peak(
        capfd, tmp_path, steady_clock, millisecond_clock):
    ran = run_main(capfd, "--network", "resnet18", *TINY, "--device", "cpu",
                   "--measure-peaks", "1", "--output-dir", str(tmp_path))
    assert ran.returncode == 0, ran.stderr
    mfu = next(line for line in ran.stdout.splitlines() if line.strip().startswith("MFU"))
    assert "measured: fp32 GEMM 64^3, this run" in mfu and "FLOP/s" in mfu
    assert "datasheet: unknown (no peak known for the CPU" in mfu
    assert "Measured peaks" in ran.stdout
    assert re.search(r"\d (MB|GB|TB)/s", ran.stdout)      # a bandwidth, in its scaled unit
    assert "outside the timed region" in ran.stdout
    document = json.loads(next(tmp_path.glob("*.json")).read_text())
    validate_result(document, "probe result")
    measured = document["peaks"]["measured"]
    assert measured["tflops"] == pytest.approx(2 * 64**3 / 1e-3 / 1e12)
    assert measured["gemm"]["dtype"] == "fp32" and measured["bandwidth"]["unit"] == "GB/s"
    assert document["flops"]["mfu_measured"] == pytest.approx(
        document["flops"]["achieved_tflops"] / measured["tflops"])
    with open(tmp_path / "benchmark_summary.csv", newline="") as stream:
        row = next(csv.DictReader(stream))
    assert float(row["measured_peak_tflops"]) > 0 and row["mfu_measured"]


def test_measure_peaks_0_prints_no_measured_line(cli, steady_clock):
    ran, out_dir = cli("--network", "resnet18", *TINY, "--device", "cpu", "--measure-peaks", "0")
    assert ran.returncode == 0, ran.stderr
    assert "Measured peaks" not in ran.stdout and "measured:" not in ran.stdout
    document = json.loads(next(out_dir.glob("*.json")).read_text())
    assert document["peaks"]["measured"] is None
    validate_result(document, "no probe")


def test_the_cpu_probes_only_when_asked(cli, steady_clock, monkeypatch):
    monkeypatch.setattr(peaks, "measure", lambda *a, **k: pytest.fail("probed on the CPU"))
    ran, _ = cli("--network", "resnet18", *TINY, "--device", "cpu", "--no-files")
    assert ran.returncode == 0 and "Measured peaks" not in ran.stdout


def test_a_device_measuring_far_below_its_datasheet_says_so_beside_its_clocks(
        cli, steady_clock, monkeypatch):
    monkeypatch.setattr(peaks, "measure", fake_probe(tflops=50.0, gbs=500.0))
    ran, _ = cli("--network", "resnet18", *TINY, "--device", "cpu", "--measure-peaks", "1",
                 "--peak-tflops", "100", "--peak-bandwidth", "1000", "--no-files")
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    during = next(i for i, line in enumerate(lines) if "During the probe" in line)
    assert "power limit 400 W (default 700 W)" in lines[during]
    assert "throttled: sw_power_cap" in lines[during]
    warning = lines[during + 1]
    assert "WARNING: measured peaks far below the datasheet" in warning
    assert "50% of the datasheet's 100 TFLOP/s" in warning and "power-capped" in warning
    mfu = next(line for line in lines if line.strip().startswith("MFU"))
    assert "(--peak-tflops); " in mfu and "of 50 TFLOP/s (measured: fp32 GEMM" in mfu


def test_generation_prints_mbu_against_both_peaks(cli, steady_clock, monkeypatch):
    monkeypatch.setattr(peaks, "measure", fake_probe(tflops=1.0, gbs=10.0))
    ran, out_dir = cli(*TINY_LM, "--iterations", "2", "--warmup", "1", "--device", "cpu",
                       "--measure-peaks", "1", "--peak-bandwidth", "20")
    assert ran.returncode == 0, ran.stderr
    mbu = next(line for line in ran.stdout.splitlines() if "MBU (decode)" in line)
    assert "of 20 GB/s (--peak-bandwidth); " in mbu
    assert "of 10 GB/s (measured: device copy 1 GiB (2 GiB read + written), this run)" in mbu
    document = json.loads(next(out_dir.glob("*.json")).read_text())
    validate_result(document, "generation")
    generation = document["generation"]
    assert generation["mbu_measured"] == pytest.approx(2 * generation["mbu"])


# ---------------------------------------------------------------- files and the report

def test_a_result_without_peaks_still_loads_in_the_report(tmp_path, capsys):
    from microbench.report import command
    document = stored_result()
    document.pop("peaks", None)
    validate_result(document, "older")
    path = tmp_path / "old.json"
    path.write_text(json.dumps(document))
    ran = run_main(capsys, str(path), main=command.main)
    assert ran.returncode == 0, ran.stderr
    assert entry.measured_peak(document) is None


def test_the_report_shows_the_measured_peak_as_a_setting():
    document = stored_result(peaks={"datasheet": {"tflops": 989.5, "gb_per_s": 3350.0},
                                    "measured": {"tflops": 788.2, "gb_per_s": 3012.0,
                                                 "dtype": "bf16"}})
    assert entry.measured_peak(document) == "790 TFLOP/s bf16, 3 TB/s"


def test_an_older_csv_keeps_its_header_and_takes_rows_in_its_columns(tmp_path):
    path = tmp_path / "summary.csv"
    old = files.CSV_COLUMNS_BEFORE_PEAKS
    path.write_text(writing.csv_lines([old], "\r\n"))
    files.check_csv(str(path))                              # not refused
    files.append_csv({column: "x" for column in files.CSV_COLUMNS}, str(path))
    with open(path, newline="") as stream:
        rows = list(csv.reader(stream))
    assert rows[0] == list(old) and rows[1] == ["x"] * len(old)
    fresh = tmp_path / "new.csv"
    files.append_csv({column: "y" for column in files.CSV_COLUMNS}, str(fresh))
    with open(fresh, newline="") as stream:
        assert next(csv.reader(stream)) == list(files.CSV_COLUMNS)


# ---------------------------------------------------------------- the datasheet rows

@pytest.mark.parametrize("name, units, bf16, fp8, gbs", [
    ("AMD Instinct MI300X", 304, 1307.4, 2614.9, 5300.0),
    ("AMD Instinct MI325X", 304, 1307.4, 2614.9, 6000.0),
    ("AMD Instinct MI350X", 256, 2306.9, 4613.7, 8000.0),
    ("AMD Instinct MI355X", 256, 2516.6, 5033.2, 8000.0),
    ("NVIDIA H100 80GB HBM3", 132, 989.5, 1979.0, 3350.0),
])
def test_each_gpu_has_its_own_row_with_fp8(name, units, bf16, fp8, gbs):
    peak = flops.lookup_peak(name, units)
    assert (peak.bf16, peak.fp8, peak.memory_gbs) == (bf16, fp8, gbs)
    assert flops.peak_tflops(peak, "fp8") == fp8


def test_a_gpu_without_a_row_gets_none_never_another_gpus():
    for name in ("AMD Instinct MI350", "AMD Instinct MI400X", "AMD Radeon Graphics",
                 "NVIDIA H100 NVL"):
        assert flops.lookup_peak(name) is None


# ---------------------------------------------------------------- the op bench

def test_the_op_bench_prints_the_probe_alone(capsys, millisecond_clock, tmp_path):
    from microbench.ops import cli as ops_cli
    path = tmp_path / "peaks.json"
    ran = run_main(capsys, "--peaks", "--device", "cpu", "--output-json", str(path),
                   main=ops_cli.main)
    document = json.loads(path.read_text())
    validate_result(document, "op bench peaks")
    assert document["peaks_probe"] and len(document["results"]) == 4
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert [line.split()[1] for line in lines if line.startswith("GEMM ")] == \
        ["fp32", "fp16", "bf16"]
    assert any(line.startswith("bandwidth (copy)") for line in lines)
    assert "no datasheet row" in ran.stdout and "bytes read + bytes written" in ran.stdout


def test_the_op_bench_refuses_peaks_with_an_op(capsys):
    from microbench.ops import cli as ops_cli
    ran = run_main(capsys, "--peaks", "--op", "add", "--device", "cpu", main=ops_cli.main)
    assert ran.returncode == 2 and "--peaks runs its own" in ran.stderr


@requires_gpu
@pytest.mark.gpu
def test_on_a_gpu_the_probe_reads_the_clocks_and_takes_seconds_at_most():
    from microbench.measure import telemetry
    device = torch.device("cuda")
    source, _ = telemetry.open_source(device)
    try:
        measured = peaks.measure(device, torch.bfloat16, "bf16", source)
    finally:
        if source is not None:
            source.close()
    assert measured.tflops > 1 and measured.gbs > 100 and measured.seconds < 5
    assert source is None or measured.clocks.samples >= 2
