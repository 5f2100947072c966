"""TorchTensorOpsBench on the CPU with tiny shapes: every op runs, byte and FLOP counts match
hand-computed values, bad input exits 2 (and a list goes on), files hold what the table shows.

The command line runs in-process through ``main()``; the entry points users call
(TorchTensorOpsBench/torch_tensor_ops_bench.py from inside its folder, run.sh) run as
subprocesses. Counts and error mapping are checked on the functions themselves.
"""
import csv
import json
import math
import os
import subprocess
import sys

from types import SimpleNamespace

import pytest
import torch

from conftest import ROOT, assert_one_line_error, run_main
from microbench.platform import devices
from microbench.measure import flops
from microbench.platform.errors import UsageError
from microbench.ops import catalog, cli as ops_cli, report, runner
from microbench.ops import command as ops_command
from microbench.ops.cli import main as ops_main
from microbench.measure.timing import Measurement, time_calls

REPO_ROOT = str(ROOT)
BENCH_DIR = os.path.join(REPO_ROOT, "TorchTensorOpsBench")
SCRIPT = os.path.join(BENCH_DIR, "torch_tensor_ops_bench.py")
QUICK = ("--num-iters", "3", "--num-warmup-iters", "1")
CPU = torch.device("cpu")


@pytest.fixture
def run_cli(capfd):
    """The op bench's command line, in-process."""
    return lambda *args: run_main(capfd, *args, main=ops_main)


def run_script(*args, cwd=REPO_ROOT, script=SCRIPT):
    # One thread: the tests share two cores with whatever else runs.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, script, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180)


def cost_of(op, input1, input2=None, dtype="fp32", op_type=None, inplace=False):
    case = runner.make_case(runner.CaseRequest(op, op_type, input1, input2, inplace),
                            dtype, append_dtype=False)
    element_size = torch.empty((), dtype=catalog.DTYPES[dtype]).element_size()
    return case.spec.cost(case.shapes, element_size, case.inplace)


def cpu_config(dtype="fp32", **overrides):
    settings = {"num_iters": 2, "num_warmup_iters": 1, **overrides}
    return runner.RunConfig(CPU, dtype, **settings)


# ---------------------------------------------------------------------------------------------
# Every op runs
# ---------------------------------------------------------------------------------------------

def test_the_flags_choices_known_without_torch_are_the_catalogs():
    from microbench.ops import choices
    assert choices.OP_NAMES == tuple(catalog.known_op_names())
    assert choices.DTYPE_NAMES == tuple(catalog.DTYPES)


def test_each_predefined_op_runs_through_the_cli(tmp_path, run_cli):
    output = tmp_path / "predefined.json"
    result = run_cli("--run-predefined", "--device", "cpu", "--input1-dim", "4-32",
                     "--output-json", str(output), *QUICK)
    assert result.returncode == 0, result.stderr
    rows = json.loads(output.read_text())["results"]
    assert [row["op"] for row in rows] == list(catalog.PREDEFINED_OPS)
    assert all(row["status"] == "ok" and row["median_ms"] > 0 for row in rows)
    for name in catalog.PREDEFINED_OPS:
        assert any(line.startswith(name + " ") for line in result.stdout.splitlines()), name


@pytest.mark.parametrize("name, input1, input2", [
    ("matmul", "2-16-8", "8-12"),
    ("bmm", "2-16-8", "2-8-12"),
    ("conv2d", "2-4-8-8", "3-4-3-3"),
    ("sdpa", "1-2-16-8", None),
    ("layer_norm", "8-32", None),
    ("softmax", "8-32", None),
])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_each_compute_op_runs(name, input1, input2, dtype):
    case = runner.make_case(runner.CaseRequest(name, None, input1, input2), dtype, False)
    row = runner.measure_case(case, cpu_config(dtype), runner.Peaks(None))
    assert row.status == "ok", row.message
    assert row.measurement.count == 2 and row.gbs > 0 and row.tflops > 0


def test_model_ops_run_except_the_16_gb_table():
    requests = [request for request in runner.model_requests(None)
                if request.op_type != "sparse"]
    assert len(requests) == len(catalog.MODEL_OPS) - 1
    outcome = runner.run_requests(requests, cpu_config(num_iters=1, num_warmup_iters=0),
                                  runner.Peaks(None), on_result=lambda row: None)
    assert [row.status for row in outcome.results] == ["ok"] * len(requests)
    assert outcome.results[8].op == "add_"  # ('add_', 'binary', '32-128-1024', '1024')
    assert outcome.exit_code == 0


def test_sparse_update_runs_in_place_and_out_of_place():
    for name in ("add_", "add"):
        case = runner.make_case(runner.CaseRequest(name, "sparse", "1000-16", "100"), "fp32",
                                False)
        row = runner.measure_case(case, cpu_config(), runner.Peaks(None))
        assert row.status == "ok", row.message
        assert row.op == name + "(sparse)" and row.shapes == "1000-16,100-16"


def test_entry_runs_from_inside_its_folder():
    result = run_script("--op", "relu_", "--input1-dim", "8", "--device", "cpu", *QUICK,
                        cwd=BENCH_DIR, script="torch_tensor_ops_bench.py")
    assert result.returncode == 0, result.stderr
    assert any(line.startswith("relu_ ") for line in result.stdout.splitlines())


# ---------------------------------------------------------------------------------------------
# Bytes and FLOPs, by hand
# ---------------------------------------------------------------------------------------------

def test_add_fp32_moves_12_bytes_per_element():
    n = 64 * 1024 * 1024
    cost = cost_of("add", "64-1024-1024", "64-1024-1024")
    assert (cost.bytes_read, cost.bytes_written, cost.flops) == (8 * n, 4 * n, n)
    assert cost.bytes_moved == 12 * n


def test_broadcast_add_counts_the_small_input_at_its_own_size():
    big, small = 32 * 16 * 128 * 128, 32 * 128
    cost = cost_of("add", "32-16-128-128", "32-1-1-128", dtype="fp16")
    assert cost.bytes_moved == 2 * (big + small) + 2 * big and cost.flops == big


def test_eq_writes_one_byte_per_element_and_in_place_ops_allocate_no_output():
    assert cost_of("eq", "1000", "1000").bytes_written == 1000
    in_place = cost_of("add_", "128-256", "256")
    assert in_place.bytes_moved == 4 * (128 * 256 + 256) + 4 * 128 * 256
    assert in_place.bytes_allocated == 4 * (128 * 256 + 256)


def test_matmul_is_2mnk_flops_with_broadcast_batch():
    m, k, n = 64, 32, 48
    cost = cost_of("matmul", f"{m}-{k}", f"{k}-{n}")
    assert cost.flops == 2 * m * n * k
    assert cost.bytes_moved == 4 * (m * k + k * n + m * n)
    batched = cost_of("matmul", f"3-{m}-{k}", f"{k}-{n}", dtype="bf16")
    assert batched.flops == 3 * 2 * m * n * k
    assert batched.bytes_moved == 2 * (3 * m * k + k * n + 3 * m * n)
    assert cost_of("matmul", "8192-8192", "8192-8192").flops == 2 * 8192 ** 3


def test_reductions_read_once_and_write_a_scalar():
    n = 4 * 512 * 1024
    total = cost_of("sum", "4-512-1024")
    assert (total.bytes_read, total.bytes_written, total.flops) == (4 * n, 4, n)
    assert cost_of("argmax", "4-512-1024").bytes_written == 8  # an int64 index
    assert cost_of("norm", "4-512-1024").flops == 2 * n
    assert cost_of("var", "4-512-1024", dtype="bf16").bytes_read == 2 * n


def test_embedding_update_moves_indices_values_and_touched_rows():
    rows, dim, updated = 32709138, 128, 851968
    cost = cost_of("add_", "32709138-128", "851968", op_type="sparse")
    assert cost.flops == updated * dim
    assert cost.bytes_read == 8 * updated + 4 * updated * dim + 4 * updated * dim
    assert cost.bytes_written == 4 * updated * dim
    assert cost.bytes_moved == 8 * updated + 3 * 4 * updated * dim
    assert cost.bytes_allocated >= 4 * rows * dim  # the 16.7 GB table itself


def test_conv2d_and_sdpa_flops():
    conv = cost_of("conv2d", "2-4-8-8", "3-4-3-3")
    assert conv.flops == 2 * (2 * 3 * 8 * 8) * 4 * 3 * 3
    attention = cost_of("sdpa", "2-4-128-64", "2-4-256-64")
    assert attention.flops == 4 * 2 * 4 * 128 * 256 * 64


def test_rates_come_from_the_median_and_the_roof_decides_the_peak():
    case = runner.make_case(runner.CaseRequest("add", None, "1000", None), "fp32", False)
    row = report.OpResult.for_case(case.label, "binary", case.shapes_text, "fp32",
                                   catalog.MEMORY_BOUND, 12_000, 1000)
    peaks = runner.Peaks(flops.H100_SXM)
    rated = runner._with_rates(row, Measurement([1.0, 2.0, 30.0]), case.spec, "fp32", peaks)
    assert rated.gbs == pytest.approx(12_000 / 2e-3 / 1e9)
    assert rated.pct_of_peak == pytest.approx(100 * rated.gbs / 3350.0)
    assert rated.peak_label == "BW"
    matmul = runner.make_case(runner.CaseRequest("matmul", None, "8-8", "8-8"), "bf16", False)
    rated = runner._with_rates(row, Measurement([1.0]), matmul.spec, "bf16", peaks)
    assert rated.peak_label == "bf16" and rated.peak_value == 989.5


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (("--op", "frobnicate"), "unknown op 'frobnicate'"),
    (("--op", "add", "--input1-dim", "64x1024"), "malformed shape '64x1024'"),
    (("--op", "add", "--input1-dim", "3-4", "--input2-dim", "5-4"), "do not broadcast"),
    (("--op", "matmul", "--input1-dim", "3-4", "--input2-dim", "5-4"), "inner dimensions"),
    (("--op", "exp", "--op-type", "binary"), "not a binary op"),
    (("--queued-delay-ms", "nan"), "--queued-delay-ms: must be a finite"),
    (("--queued-delay-ms", "-0.5"), "--queued-delay-ms: must be a finite"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, run_cli):
    assert_one_line_error(run_cli(*args, "--device", "cpu", *QUICK), 2, message)


def test_a_list_goes_on_after_a_bad_op_and_exits_2(tmp_path, run_cli):
    output = tmp_path / "mixed.csv"
    result = run_cli("--run-predefined", "--device", "cpu", "--input1-dim", "3-4",
                     "--input2-dim", "5-4", "--output-csv", str(output), *QUICK)
    assert result.returncode == 2
    assert result.stderr.count("error: ") == len(catalog.BINARY_OPS)
    with open(output, newline="") as handle:
        statuses = [row["status"] for row in csv.DictReader(handle)]
    assert statuses.count("failed") == len(catalog.BINARY_OPS)
    assert statuses.count("ok") == len(catalog.UNARY_OPS) + len(catalog.REDUCTION_OPS)


def test_unsupported_dtype_on_the_device_is_a_usage_error():
    def unsupported(*_):
        def call():
            raise RuntimeError("\"exp_vml_cpu\" not implemented for 'BFloat16'")
        return call
    spec = catalog.resolve_op("exp")[0]
    case = runner.OpCase(catalog.OpSpec(**{**spec.__dict__, "build": unsupported}),
                         catalog.Shapes((8,)), False, "exp", "8")
    row = runner.measure_case(case, cpu_config("bf16"), runner.Peaks(None))
    assert row.status == "failed" and row.exit_code == 2
    assert "exp does not support bf16 on cpu" in row.message
    assert runner.RunOutcome([row]).exit_code == 2


def test_a_shape_that_does_not_fit_is_skipped_with_a_line(monkeypatch):
    monkeypatch.setattr(devices, "free_memory_bytes", lambda device: 1 << 30)
    request = runner.model_requests("sparse")[0]
    lines, out = [], []
    printer = report.TablePrinter([], "fp32", out=out.append, err=lines.append)
    outcome = runner.run_requests([request], cpu_config(), runner.Peaks(None), printer)
    assert outcome.results[0].status == "skipped"
    assert out == [] and lines == ["skipped add_(sparse) 32709138-128,851968-128: needs 18.6 GB, "
                     "1.1 GB free on cpu"]
    assert outcome.exit_code == 3  # a lone op that could not run


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_asking_for_a_gpu_without_one_exits_4(run_cli, tmp_path):
    assert_one_line_error(run_cli("--op", "add", "--device", "cuda", *QUICK), 4, "sees none")
    # A results path, not os.devnull: result files are swapped in by rename, and a device file
    # is refused as a target.
    proof = subprocess.run([sys.executable, "-m", "benchmarks.ops_gpu_proof", "--output",
                            str(tmp_path / "proof.json")], cwd=REPO_ROOT, capture_output=True,
                           text=True, timeout=180)
    assert proof.returncode == 4 and "needs a GPU" in proof.stderr


# ---------------------------------------------------------------------------------------------
# JSON and CSV
# ---------------------------------------------------------------------------------------------

def test_json_and_csv_hold_the_measured_row(tmp_path, run_cli):
    json_path, csv_path = tmp_path / "add.json", tmp_path / "add.csv"
    result = run_cli("--op", "add", "--input1-dim", "4-8", "--device", "cpu", "--peak-gbs",
                     "100", "--peak-tflops", "1", "--append-dtype", "--output-json",
                     str(json_path), "--output-csv", str(csv_path), *QUICK)
    assert result.returncode == 0, result.stderr
    document = json.loads(json_path.read_text())
    assert document["tool"] == "TorchTensorOpsBench" and document["dtype"] == "fp32"
    assert document["num_iters"] == 3 and document["peak_gbs"] == 100
    (row,) = document["results"]
    assert (row["op"], row["shapes"], row["status"]) == ("add(fp32)", "4-8,4-8", "ok")
    assert row["bytes_moved"] == 12 * 32 and row["flops"] == 32
    assert len(row["samples_ms"]) == 3
    assert row["median_ms"] == pytest.approx(sorted(row["samples_ms"])[1])
    assert row["gbs"] == pytest.approx(row["bytes_moved"] / row["median_ms"] / 1e6)
    assert row["pct_of_peak"] == pytest.approx(row["gbs"])  # of 100 GB/s
    with open(csv_path, newline="") as handle:
        (csv_row,) = list(csv.DictReader(handle))
    assert csv_row["op"] == "add(fp32)" and int(csv_row["bytes_moved"]) == 384
    assert float(csv_row["median_ms"]) == pytest.approx(row["median_ms"])
    assert sorted(os.listdir(tmp_path)) == ["add.csv", "add.json"]  # no temporary files left
    assert "add(fp32)" in result.stdout and "(BW)" in result.stdout


def test_unwritable_output_fails_before_running(run_cli, tmp_path):
    (tmp_path / "a-file").write_text("")
    result = run_cli("--op", "add", "--device", "cpu", "--output-json",
                     str(tmp_path / "a-file" / "x.json"))
    assert_one_line_error(result, 2, "does not exist")
    assert "op(s)" not in result.stdout


def test_a_missing_output_folder_is_made_as_microbench_makes_its_own(run_cli, tmp_path):
    output = tmp_path / "new" / "deeper" / "x.json"
    result = run_cli("--op", "add", "--input1-dim", "8", "--device", "cpu", "--num-iters", "2",
                     "--num-warmup-iters", "0", "--output-json", str(output))
    assert result.returncode == 0, result.stderr
    assert json.loads(output.read_text())["results"][0]["op"] == "add"
    assert f"Results JSON : {output}" in result.stdout


@pytest.mark.slow
def test_run_sh_keeps_logs_json_and_csv_per_list(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "LOG_ROOT": str(tmp_path),
           "LISTS": "predefined", "DTYPES": "fp32 bf16", "DEVICE": "cpu"}
    result = subprocess.run(["bash", os.path.join(BENCH_DIR, "run.sh"), "--input1-dim", "8",
                             "--op-type", "unary", *QUICK], env=env, capture_output=True,
                            text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    (log_dir,) = list(tmp_path.iterdir())
    assert sorted(path.name for path in log_dir.iterdir()) == sorted(
        f"predefined_ops_{dtype}.{ext}" for dtype in ("fp32", "bf16")
        for ext in ("log", "json", "csv"))
    assert "exp " in (log_dir / "predefined_ops_bf16.log").read_text()


# ---------------------------------------------------------------------------------------------
# The peak table
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, expected", [
    ("NVIDIA H100 80GB HBM3", flops.H100_SXM),
    ("NVIDIA H100 PCIe", flops.H100_PCIE),
    ("NVIDIA H200", flops.H200_SXM),
    ("NVIDIA B200", flops.B200),
    ("NVIDIA L40S", flops.L40S),
    ("NVIDIA A100-SXM4-80GB", flops.A100_SXM_80GB),
    ("Tesla V100-SXM2-32GB", flops.V100_SXM2),
    ("AMD Instinct MI300X", flops.MI300X),
    ("AMD Instinct MI300A", flops.MI300A),
    ("AMD Instinct MI325X", flops.MI325X),
    ("AMD Instinct MI355X", flops.MI355X),
    ("AMD Instinct MI250X / MI250", flops.MI250X_GCD),
    ("AMD Instinct MI210", flops.MI210),
    ("AMD Instinct MI100", flops.MI100),
    ("NVIDIA H200 NVL", None),
    ("NVIDIA H100 NVL", None),
    ("NVIDIA A100-SXM4-40GB", None),
    ("NVIDIA GeForce RTX 4090", None),
    ("cpu", None),
])
def test_lookup_peak_matches_torch_device_names(name, expected):
    assert flops.lookup_peak(name) is expected


def test_compute_units_tell_apart_mi250_and_reject_partitions():
    assert flops.lookup_peak("AMD Instinct MI250X / MI250", 104) is flops.MI250_GCD
    assert flops.lookup_peak("AMD Instinct MI250X / MI250", 110) is flops.MI250X_GCD
    assert flops.lookup_peak("AMD Instinct MI300X", 304) is flops.MI300X
    assert flops.lookup_peak("AMD Instinct MI300X", 38) is None  # one XCD in CPX mode


def test_table_holds_dense_rates():
    # NVIDIA's datasheet prints 1979 TFLOPS* for H100 SXM BF16, with sparsity.
    assert flops.peak_tflops(flops.H100_SXM, "bf16") == pytest.approx(1979 / 2, abs=0.5)
    assert flops.peak_tflops(flops.MI300X, "fp16") == pytest.approx(1307.4)
    assert flops.peak_tflops(flops.V100_SXM2, "bf16") is None
    assert flops.peak_tflops(flops.H100_SXM, "fp32_matrix") == flops.H100_SXM.fp32
    assert flops.peak_tflops(None, "fp16") is None
    with pytest.raises(ValueError):
        flops.peak_tflops(flops.H100_SXM, "int8")
    assert all(peak.source and math.isfinite(peak.memory_gbs)
               for peak in (entry.peak for entry in flops._TABLE))


def test_fp32_matmul_is_compared_with_the_rate_it_runs_at():
    matmul = catalog.resolve_op("matmul")[0]
    from microbench.settings.precision import apply_tf32, tf32_allowed
    apply_tf32(False)           # what the model benchmark sets, with the newer API where it exists
    assert not tf32_allowed("matmul") and not tf32_allowed("conv")
    assert runner.peak_precision(matmul, "fp32") == "fp32_matrix"
    assert runner.peak_precision(matmul, "bf16") == "bf16"
    assert runner.peak_precision(catalog.resolve_op("add")[0], "fp32") == "fp32"
    with pytest.raises(UsageError, match="no in-place form"):
        runner.make_case(runner.CaseRequest("sum", None, "8", None, inplace=True), "fp32", False)


# ---------------------------------------------------------------------------------------------
# On a GPU
# ---------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_rows_use_device_events_flush_l2_and_know_the_peak(tmp_path, run_cli):
    output = tmp_path / "gpu.json"
    # No --flush-l2: it is the default on a GPU.
    result = run_cli("--op", "add", "--device", "cuda", "--input1-dim", "64-1024-1024",
                     "--output-json", str(output), *QUICK)
    assert result.returncode == 0, result.stderr
    document = json.loads(output.read_text())
    assert document["clock"] in ("CUDA events", "HIP events")
    assert document["flush_l2"] is True and document["calls_per_interval"] == 1
    assert document["l2_flush_bytes"] >= 2 * torch.cuda.get_device_properties(0).L2_cache_size
    assert document["dispatch_outside_interval"] is True
    (row,) = document["results"]
    assert row["status"] == "ok" and row["gbs"] > 0 and row["cache_resident"] is False
    if flops.peak_for_device(torch.device("cuda")) is not None:
        assert 0 < row["pct_of_peak"] < 110


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_without_flush_spins_before_each_call_and_marks_what_fits(tmp_path, run_cli):
    output = tmp_path / "warm.json"
    result = run_cli("--op", "add", "--device", "cuda", "--input1-dim", "1024",
                     "--no-flush-l2", "--output-json", str(output), *QUICK)
    assert result.returncode == 0, result.stderr
    document = json.loads(output.read_text())
    assert document["flush_l2"] is False and document["l2_flush_bytes"] is None
    assert document["queued_delay_ms"] == runner.DEFAULT_QUEUED_DELAY_MS
    assert document["queued_delay_cycles"] > 0
    (row,) = document["results"]
    assert row["cache_resident"] is True and "cache" in row["flags"]


# ---------------------------------------------------------------------------------------------
# Trust: the flush, cache-resident rows, values above the peak, dispatch outside the interval
# ---------------------------------------------------------------------------------------------

GPU = torch.device("cuda")        # a device object only: nothing here runs on it
MIB = 1 << 20


@pytest.mark.parametrize("properties, hip, cache_mib, flush_mib", [
    (SimpleNamespace(L2_cache_size=50 * MIB), None, 50, 512),            # H100: the floor
    (SimpleNamespace(L2_cache_size=400 * MIB), None, 400, 800),          # a larger L2: 2x
    (SimpleNamespace(L2_cache_size=4 * MIB, gcnArchName="gfx942:sramecc+:xnack-"), "6.4",
     256, 512),                                                          # MI300X: Infinity Cache
    (SimpleNamespace(L2_cache_size=4 * MIB, gcnArchName="gfx950"), "7.0", 256, 512),  # MI355X
    (SimpleNamespace(L2_cache_size=8 * MIB, gcnArchName="gfx90a:sramecc+:xnack-"), "6.4",
     8, 512),                                                            # MI250X: none behind L2
    (SimpleNamespace(L2_cache_size=0), None, None, 512),                 # not reported
])
def test_flush_buffer_is_twice_the_last_level_cache_with_a_floor(properties, hip, cache_mib,
                                                                 flush_mib):
    cache = devices.last_level_cache(GPU, properties, hip=hip)
    assert cache.size_bytes == (cache_mib * MIB if cache_mib else None)
    assert runner.flush_buffer_bytes(cache) == flush_mib * MIB


def test_the_cpu_cache_is_unknown_and_never_flushed(run_cli):
    assert devices.last_level_cache(CPU).size_bytes is None
    plan = runner.TimingPlan.build(CPU, flush=True)
    assert (plan.flusher, plan.delay, plan.dispatch_hidden) == (None, None, None)
    parser = ops_cli.build_parser()
    assert ops_command.flush_wanted(parser.parse_args([]), GPU) is True       # the GPU default
    assert ops_command.flush_wanted(parser.parse_args(["--no-flush-l2"]), GPU) is False
    assert ops_command.flush_wanted(parser.parse_args([]), CPU) is False
    assert ops_command.flush_wanted(parser.parse_args(["--flush-l2"]), CPU) is False
    result = run_cli("--op", "add", "--input1-dim", "8", "--device", "cpu", "--flush-l2", *QUICK)
    assert result.returncode == 0 and "note: --flush-l2 has no effect on the CPU" in result.stdout


def test_the_working_set_counts_inputs_and_output_once():
    n = 1024 * 1024
    assert catalog.working_set_bytes(cost_of("add", "1048576", "1048576"), False) == 12 * n
    # In place the output is input1: 1M + 1024 elements read, nothing new written.
    in_place = cost_of("add_", "1024-1024", "1024")
    assert catalog.working_set_bytes(in_place, True) == 4 * (n + 1024)
    assert catalog.working_set_bytes(cost_of("sum", "1048576"), False) == 4 * n + 4


@pytest.mark.parametrize("working_set, cache, flushed, expected", [
    (12 * MIB, 50 * MIB, False, True),      # 1M-element fp32 add in an H100's L2
    (50 * MIB, 50 * MIB, False, True),
    (50 * MIB + 1, 50 * MIB, False, False),
    (12 * MIB, 50 * MIB, True, False),      # the flush evicts it before every call
    (12 * MIB, None, False, None),          # CPU: unknown, not guessed
])
def test_cache_resident_is_computed_from_the_bytes(working_set, cache, flushed, expected):
    assert runner.cache_resident(working_set, cache, flushed) is expected


def test_a_row_that_fits_in_the_cache_is_marked_in_the_table_json_and_csv(tmp_path):
    case = runner.make_case(runner.CaseRequest("add", None, "4-8", None), "fp32", False)
    config = cpu_config(cache_bytes=384, flush_l2=False)      # exactly the add's 384 bytes
    row = runner.measure_case(case, config, runner.Peaks(None))
    assert (row.working_set_bytes, row.cache_resident, row.flags) == (384, True, ("cache",))
    bigger = runner.make_case(runner.CaseRequest("add", None, "4-9", None), "fp32", False)
    assert runner.measure_case(bigger, config, runner.Peaks(None)).cache_resident is False
    assert "cache" in report.row_cells(row)[-1]
    assert any(line.startswith("cache: the working set") for line in report.summary_lines([row]))
    report.write_csv(str(tmp_path / "rows.csv"), [row])
    with open(tmp_path / "rows.csv", newline="") as handle:
        (csv_row,) = list(csv.DictReader(handle))
    assert (csv_row["cache_resident"], csv_row["flags"], csv_row["working_set_bytes"]) == (
        "True", "cache", "384")


def test_a_share_above_100_percent_is_marked():
    case = runner.make_case(runner.CaseRequest("add", None, "1000", None), "fp32", False)
    row = report.OpResult.for_case(case.label, "binary", case.shapes_text, "fp32",
                                   catalog.MEMORY_BOUND, 12_000_000, 1000)
    # 12 MB in 1 us is 12,000 GB/s: more than an H100's HBM (3,350 GB/s) can give.
    rated = runner._with_rates(row, Measurement([0.001]), case.spec, "fp32",
                               runner.Peaks(flops.H100_SXM))
    assert rated.pct_of_peak > 100 and rated.above_peak and rated.flags == (">peak",)
    assert rated.as_dict()["above_peak"] is True
    assert any(line.startswith(">peak:") for line in report.summary_lines([rated]))
    slower = runner._with_rates(row, Measurement([1.0]), case.spec, "fp32",
                                runner.Peaks(flops.H100_SXM))
    assert slower.above_peak is False and slower.flags == ()
    assert runner._with_rates(row, Measurement([1.0]), case.spec, "fp32",
                              runner.Peaks(None)).above_peak is None


def test_the_spin_is_calibrated_from_a_timed_probe():
    spins = []
    # The fake GPU spins 1e6 cycles in 0.508 ms (an H100 at 1.97 GHz).
    delay = runner.QueuedDelay.calibrate(GPU, 0.5, sleep=spins.append,
                                         measure_ms=lambda call: (call(), 0.508)[1])
    assert delay.cycles == math.ceil(1_000_000 * 0.5 / 0.508)
    delay()
    assert spins == [runner.SPIN_PROBE_CYCLES, runner.SPIN_PROBE_CYCLES, delay.cycles]
    assert runner.QueuedDelay.calibrate(GPU, 0.5, sleep=spins.append,
                                        measure_ms=lambda call: math.nan) is None
    assert runner.QueuedDelay.calibrate(GPU, 0.0, sleep=spins.append) is None


class FakeStream:
    """A GPU stream on a fake timeline (milliseconds): the host pays to launch work, the GPU
    runs queued work in order, and an event fires when the GPU reaches it (at once when idle)."""

    def __init__(self):
        self.host = 0.0          # host time
        self.free_at = 0.0       # when the GPU finishes what is queued

    def launch(self, gpu_ms: float, host_ms: float) -> None:
        self.host += host_ms
        self.free_at = max(self.host, self.free_at) + gpu_ms

    def event_seconds(self) -> float:
        self.host += 0.001
        self.free_at = max(self.host, self.free_at)
        return self.free_at / 1e3


def time_on_fake_gpu(plan_parts):
    """The median time of an op of 4 us on the GPU and 7 us of host dispatch (a 1024-element
    add on an H100), timed with ``plan_parts`` (flusher, delay) before each call."""
    stream = FakeStream()
    flusher, delay = plan_parts(stream)
    plan = runner.TimingPlan(GPU, devices.CacheInfo(50 * MIB, "fake"), flusher=flusher,
                             delay=delay)
    times = time_calls(lambda: stream.launch(0.004, 0.007), 20, CPU, between=plan,
                       time_fn=stream.event_seconds)
    return times.median


def test_queued_work_keeps_host_dispatch_out_of_the_interval():
    def flush(stream):                 # zeroing 512 MiB: 0.17 ms on an H100
        return (lambda: stream.launch(0.17, 0.003)), None

    def spin(stream):
        return None, runner.QueuedDelay(lambda cycles: stream.launch(cycles / 2e6, 0.003),
                                        1_000_000, 0.5)

    # Nothing queued: the start event fires on an idle GPU and the interval holds the dispatch.
    assert time_on_fake_gpu(lambda stream: (None, None)) == pytest.approx(0.007 + 0.004,
                                                                          abs=2e-3)
    assert time_on_fake_gpu(flush) == pytest.approx(0.004, abs=1e-6)
    assert time_on_fake_gpu(spin) == pytest.approx(0.004, abs=1e-6)


def test_the_gpu_plan_flushes_or_spins_never_both(monkeypatch):
    made = []
    monkeypatch.setattr(runner, "CacheFlusher", lambda device, size: made.append(size) or "F")
    monkeypatch.setattr(runner.QueuedDelay, "calibrate",
                        classmethod(lambda cls, device, ms: cls(print, 123, ms)))
    cache = devices.CacheInfo(50 * MIB, "fake")
    flushing = runner.TimingPlan.build(GPU, flush=True, cache=cache)
    assert (flushing.flusher, flushing.delay, made) == ("F", None, [512 * MIB])
    spinning = runner.TimingPlan.build(GPU, flush=False, queued_delay_ms=0.5, cache=cache)
    assert spinning.flusher is None and spinning.delay.cycles == 123
    assert spinning.info()["queued_delay_ms"] == 0.5 and spinning.dispatch_hidden
    assert "0.5 ms spin" in spinning.describe()[0]
    off = runner.TimingPlan.build(GPU, flush=False, queued_delay_ms=0, cache=cache)
    assert off.delay is None and off.dispatch_hidden is False
    assert "--queued-delay-ms 0" in off.describe()[0]
    monkeypatch.delattr(torch.cuda, "_sleep")
    missing = runner.TimingPlan.build(GPU, flush=False, queued_delay_ms=0.5, cache=cache)
    assert missing.delay is None and "_sleep is missing" in missing.describe()[0]


OLD_CSV_COLUMNS = ["op", "op_type", "shapes", "dtype", "status", "message", "median_ms",
                   "mean_ms", "std_ms", "min_ms", "max_ms", "p90_ms", "cv", "iterations",
                   "bytes_moved", "flops", "gbs", "tflops", "roof", "peak", "peak_unit",
                   "peak_precision", "pct_of_peak"]


def test_files_keep_their_keys_and_add_the_trust_ones(tmp_path, run_cli):
    json_path, csv_path = tmp_path / "add.json", tmp_path / "add.csv"
    result = run_cli("--op", "add", "--input1-dim", "4-8", "--device", "cpu", "--peak-gbs",
                     "1e-6", "--output-json", str(json_path), "--output-csv", str(csv_path),
                     *QUICK)
    assert result.returncode == 0, result.stderr
    with open(csv_path, newline="") as handle:
        header = next(csv.reader(handle))
    assert header[:len(OLD_CSV_COLUMNS)] == OLD_CSV_COLUMNS
    assert header[len(OLD_CSV_COLUMNS):] == ["working_set_bytes", "cache_resident",
                                             "above_peak", "flags"]
    document = json.loads(json_path.read_text())
    assert document["l2_flush_bytes"] is None and document["flush_l2"] is False
    assert document["calls_per_interval"] == 1 and document["cache_bytes"] is None
    (row,) = document["results"]
    assert row["above_peak"] is True and row["cache_resident"] is None
    assert row["working_set_bytes"] == 384 and row["flags"] == ">peak"
    table_row = next(line for line in result.stdout.splitlines() if line.startswith("add "))
    assert table_row.endswith(">peak")
    assert "1 call per timed interval" in result.stdout and "flags" in result.stdout
