"""Every feature on one real GPU (``python3 -m pytest -m gpu``); skipped without a GPU.

Each test runs the tool as a user would (in this process, where a process adds nothing) and
asserts what a GPU run of that feature must show, never a machine-dependent number.
"""
import json
import os
import signal
import sys

import pytest
import torch
from torch import nn

import fp16util
from microbench.measure.stats import NO_DIFFERENCE
from conftest import SCRIPT, TINY, run_main
from gpu_checks import (GENERATE, IMAGES, TIMEOUT, TOKENS, check_document, check_run,
                        fp8_device, gpu_suite, has_module, left_after, results, start_logged,
                        wait_for_text)

pytestmark = gpu_suite


# ---------------------------------------------------------------- training and inference

def test_gpu_run_uses_device_events_and_tracks_memory(cli):
    ran, out_dir = cli("--network", "resnet18", "--device", "cuda", *TINY)
    check_run(ran, out_dir)
    assert "Throughput [img/sec] :" in ran.stdout and "Peak memory" in ran.stdout
    assert "not tracked" not in ran.stdout


@pytest.mark.parametrize("flags, precision", [
    ([], "fp32"),
    (["--precision", "amp-fp16"], "amp-fp16"),
    (["--precision", "bf16"], "bf16"),
    (["--nhwc"], "fp32"),
])
def test_eager_training(cli, flags, precision):
    ran, out_dir = cli(*IMAGES, *flags)
    doc = check_run(ran, out_dir)
    assert doc["precision"]["name"] == precision and doc["config"]["nhwc"] == ("--nhwc" in flags)
    assert doc["compiler"] is None and len(doc["losses"]) == 3
    assert all(loss == loss for loss in doc["losses"])           # no NaN from the precision


def test_fast_preset_trains_compiled_and_says_what_it_chose(cli):
    """--preset fast is the compiled training path (with channels-last and AMP): one compile
    of a training step covers both, the suite's time being a budget."""
    ran, out_dir = cli(*IMAGES, "--preset", "fast", "--warmup", "3")
    doc = check_run(ran, out_dir)
    assert doc["config"]["preset"] == "fast" and doc["config"]["nhwc"] is True
    assert doc["config"]["compile"] is True and doc["precision"]["name"].startswith("amp-")
    assert doc["compiler"]["graphs"] >= 1 and doc["compiler"]["timed_recompiles"] == 0
    assert doc["timing"]["compile_s"] > 0


def test_inference_in_bf16(cli):
    ran, out_dir = cli(*IMAGES, "--mode", "inference", "--precision", "amp-bf16")
    doc = check_run(ran, out_dir)
    assert doc["config"]["mode"] == "inference" and doc["losses"] == []


def test_language_model_training_counts_tokens(cli):
    ran, out_dir = cli(*TOKENS, "--precision", "amp-bf16")
    doc = check_run(ran, out_dir)
    assert doc["throughput"]["tokens_per_s"] == pytest.approx(
        doc["Throughput [img/sec]"] * 128)
    assert "Throughput [tokens/sec] :" in ran.stdout and "[img/sec]" not in ran.stdout


def test_fp16_network_with_fp32_norms_runs_on_the_gpu():
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.GroupNorm(2, 8), nn.Flatten(),
                        nn.LayerNorm(8 * 6 * 6), nn.Linear(8 * 6 * 6, 4)).cuda()
    fp16util.network_to_half(net)
    out = net(torch.randn(2, 3, 8, 8, device="cuda", dtype=torch.float16))
    out.float().sum().backward()
    assert out.dtype == torch.float16 and net[1].weight.grad.dtype == torch.float32


# ---------------------------------------------------------------- generation

def test_compiled_decode_replays_cuda_graphs_and_attributes_its_step(cli):
    ran, out_dir = cli(*GENERATE, "--batch-size", "1", "--precision", "bf16",
                       "--compile-mode", "reduce-overhead")
    doc = check_run(ran, out_dir)
    generation = doc["generation"]
    assert generation["decode_tokens_per_s"] > 0 and generation["batch_size"] == 1
    assert generation["time_to_first_token"]["stats"]["median_ms"] > 0
    assert generation["inter_token_latency"]["stats"]["count"] > 0
    assert doc["compiler"]["cuda_graphs"] == "replayed", doc["compiler"]
    assert doc["compiler"]["timed_recompiles"] == 0
    attribution = generation["decode_attribution"]
    assert attribution["steps_profiled"] > 0 and attribution["busy_ms"] > 0
    assert attribution["measured_step_ms"] > 0
    assert generation["decode_bandwidth"]["peak_gb_per_s"] > 0       # a GPU's is known
    assert "Decode step (profiled)" in ran.stdout


def test_generate_sweep_prints_its_table_and_draws_its_plot(cli, tmp_path):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "decode.png"
    # Eager: compiled decode has its test above, and two compiles here cost the suite ~30 s.
    ran, out_dir = cli(*GENERATE, "--batch-size", "1,4", "--precision", "bf16",
                       "--plot", str(plot))
    assert ran.returncode == 0, ran.stderr[-3000:]
    docs = results(out_dir)
    assert sorted(doc["generation"]["batch_size"] for doc in docs) == [1, 4]
    for doc in docs:
        check_document(doc)
    assert plot.stat().st_size > 10_000 and plot.read_bytes()[:4] == b"\x89PNG"
    assert "TTFT" in ran.stdout or "time to first token" in ran.stdout.lower()


# ---------------------------------------------------------------- trials and A/B

def test_trials_run_in_worker_processes_each_on_the_gpu(cli):
    ran, out_dir = cli(*IMAGES, "--mode", "inference", "--repeat", "2")
    doc = check_run(ran, out_dir)
    trials = doc["trials"]
    assert trials["trials"] == 2 and trials["where"] == "worker processes"
    pids = [trial["pid"] for trial in trials["per_trial"]]
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert trials["ci95_low"] <= trials["headline"] <= trials["ci95_high"]


def test_ab_alternates_fresh_processes_and_gives_a_verdict(cli):
    ran, out_dir = cli(*IMAGES, "--mode", "inference", "--repeat", "2", "--ab", "--nhwc")
    assert ran.returncode == 0, ran.stderr[-3000:]
    [summary] = out_dir.glob("ab_*.json")
    ab = json.loads(summary.read_text())["ab"]
    assert ab["rounds"] == 2 and ab["ratio"] > 0 and ab["flags_b"] == "--nhwc"
    assert ab["verdict"] in ("faster", "slower", NO_DIFFERENCE) or \
        ab["verdict"].startswith("same within"), ab["verdict"]
    assert "A/B: B (--nhwc) / A = " in ran.stdout
    for side in results(out_dir):
        check_document(side)


# ---------------------------------------------------------------- profilers

def test_kineto_trace_holds_gpu_kernels(cli, tmp_path):
    ran, out_dir = cli(*IMAGES, "--kineto", "--profiler-schedule", "0,1,1")
    check_run(ran, out_dir)
    [trace] = out_dir.glob("*_trace*.json")
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(event.get("cat") == "kernel" for event in events)
    assert "Self CUDA" in ran.stdout or "Self Device" in ran.stdout or "device" in ran.stdout


def test_autograd_profiler_gives_device_time_tables_outside_the_timed_pass(cli):
    ran, out_dir = cli(*IMAGES, "--autograd-profiler")
    check_run(ran, out_dir)
    assert "Top operators by device time" in ran.stdout
    assert "not part of the timed statistics" in ran.stdout


def test_deepspeed_flops_profiler_profiles_one_step(cli):
    if not has_module("deepspeed"):
        pytest.skip("DeepSpeed is not installed")
    ran, out_dir = cli(*IMAGES, "--iterations", "4", "--flops-prof-step", "1")
    doc = check_run(ran, out_dir)
    assert doc["flops"]["deepspeed_profiled_iteration"] == 1
    assert len(doc["timing"]["samples_ms"]) == 3          # the profiled one left out
    assert "DeepSpeed Flops Profiler" in ran.stdout or "Flops Profiler" in ran.stdout


# ---------------------------------------------------------------- peaks, telemetry, data

def test_measured_peaks_give_the_second_denominator(cli):
    ran, out_dir = cli(*IMAGES, "--precision", "amp-bf16", "--measure-peaks", "1")
    doc = check_run(ran, out_dir)
    measured = doc["peaks"]["measured"]
    assert measured["tflops"] > 0 and measured["gb_per_s"] > 0 and measured["dtype"] == "bf16"
    assert doc["peaks"]["datasheet"]["tflops"] is None or doc["peaks"]["datasheet"]["tflops"] > 0
    assert doc["flops"]["mfu_measured"] > 0 and "measured" in ran.stdout


def test_telemetry_samples_the_gpu_during_the_timed_region(cli):
    library = "amdsmi" if torch.version.hip else "pynvml"
    if not has_module(library):
        pytest.skip(f"{library} is not installed")
    ran, out_dir = cli(*IMAGES, "--iterations", "30", "--telemetry-interval", "5")
    doc = check_run(ran, out_dir)
    telemetry = doc["telemetry"]
    assert telemetry["available"] is True, telemetry
    assert telemetry["sample_count"] > 0 and telemetry["max_sm_clock_mhz"] > 0
    assert "SM clock [MHz]" in ran.stdout and "Power [W]" in ran.stdout


def test_data_pipeline_with_workers_feeds_the_gpu(cli, tmp_path):
    ran, out_dir = cli(*IMAGES, "--data", "loader", "--data-images", "64", "--workers", "2",
                       "--pin-memory", "1", "--data-cache", str(tmp_path / "cache"))
    doc = check_run(ran, out_dir)
    data = doc["data"]
    assert data["pipeline_per_s"] > 0 and data["loader_alone_per_s"] > 0
    assert data["workers"] == 2


# ---------------------------------------------------------------- reduced precision

def test_fp8_training_converts_linears_and_measures_its_drift(cli):
    if not (has_module("torchao") and fp8_device()):
        pytest.skip("needs torchao and a GPU with FP8 matrix products")
    ran, out_dir = cli(*TOKENS, "--precision", "fp8")
    doc = check_run(ran, out_dir)
    assert doc["low_precision"]["fp8_layers"] and doc["low_precision"]["fp8_recipe"]
    accuracy = doc["accuracy"]            # training: the first steps' losses beside BF16's
    assert accuracy["kind"] == "loss" and accuracy["max_loss_difference"] is not None, accuracy
    assert len(accuracy["losses"]) == len(accuracy["reference_losses"]) > 0


def test_quantized_decode_stores_fewer_weight_bytes(cli):
    if not has_module("torchao"):
        pytest.skip("needs torchao")
    # One layout, not auto: what is stored is this test's concern (auto's choice is
    # test_quant_gpu's), and auto with gemlite installed tunes gemlite's kernels (~90 s).
    ran, out_dir = cli(*GENERATE, "--batch-size", "1", "--quantize", "int8wo",
                       "--quant-layout", "unwrapped")
    doc = check_run(ran, out_dir)
    low = doc["low_precision"]
    assert low["quantize"] == "int8wo" and low["weight_bytes"] < low["weight_bytes_before"]
    assert doc["generation"]["decode_tokens_per_s"] > 0 and "accuracy" in doc


# ---------------------------------------------------------------- the other commands

def test_op_benchmark_runs_on_the_gpu(capfd, tmp_path):
    from microbench.ops import cli as ops_cli
    out = tmp_path / "ops.json"
    ran = run_main(capfd, "--op", "matmul", "--input1-dim", "256-256", "--input2-dim",
                   "256-256", "--dtype", "bf16", "--device", "cuda", "--output-json",
                   str(out), main=ops_cli.main)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "Traceback" not in ran.stderr
    text = out.read_text()
    assert "cuda" in text.lower() and "matmul" in text


def test_report_reads_the_gpu_results(cli, capfd, tmp_path):
    from microbench.report import command
    for batch in ("8", "16"):
        ran, out_dir = cli(*IMAGES, "--batch-size", batch, "--output-dir", str(tmp_path / "r"))
        assert ran.returncode == 0, ran.stderr[-3000:]
    shown = run_main(capfd, str(tmp_path / "r"), "--format", "json", main=command.main)
    assert shown.returncode == 0, shown.stderr[-3000:]
    [table] = json.loads(shown.stdout)["tables"]
    assert len(table["rows"]) == 2
    name = torch.cuda.get_device_name(0)
    assert name in shown.stdout


# ---------------------------------------------------------------- signals

def test_sigterm_during_gpu_compilation_ends_the_run(tmp_path):
    """Inductor compiles in worker processes on a GPU: SIGTERM must still end the run within
    seconds, with its one line and 143, and leave no process behind."""
    logs = tmp_path / "logs"
    process = start_logged([sys.executable, str(SCRIPT), *IMAGES, "--compile",
                            "--output-dir", str(tmp_path / "out")], logs)
    wait_for_text(process, logs / "out", "Compiling", TIMEOUT)     # compilation starts here
    process.send_signal(signal.SIGTERM)
    left = left_after(process, 30)
    err = (logs / "err").read_text()
    assert left == [], (left, err[-3000:])
    assert process.returncode == 143, err[-3000:]
    assert err.strip().splitlines()[-1] == "error: terminated (SIGTERM)", err[-3000:]
    assert results(tmp_path / "out") == []        # none written (a missing folder has none)
