"""Profilers and FLOPs on the CPU: traces, tables, DeepSpeed, MFU, and exclusion from timing."""
import contextlib
import json
import sys
from types import SimpleNamespace

import pytest
import torch
import torchvision

from conftest import TINY, assert_one_line_error, run_cli
from microbench.drivers import benchmark
from microbench.plan import cli
from microbench.measure import flops, profilers
from microbench.models import registry
from microbench.scenarios.training import Training


def test_resnet50_flops_match_the_published_count():
    """8.2 GFLOP per image forward (He et al. 2016, Table 1: 3.8e9 multiply-adds at 224, which
    torchvision's implementation puts at 4.1e9), about three times that for training."""
    model = torchvision.models.resnet50()
    x, y = torch.randn(1, 3, 224, 224), torch.randint(0, 1000, (1,))
    loss = registry.resolve("resnet50").loss
    forward = flops.count_iteration_flops(model.eval(), x, y, loss, contextlib.nullcontext(),
                                          training=False)
    training = flops.count_iteration_flops(model.train(), x, y, loss, contextlib.nullcontext(),
                                           training=True)
    assert forward / 1e9 == pytest.approx(8.2, rel=0.05)
    assert training / forward == pytest.approx(3.0, rel=0.05)
    assert all(p.grad is None for p in model.parameters()), "counting must leave no gradients"


def test_peak_choice_and_mfu():
    cpu = torch.device("cpu")
    assert flops.choose_peak(cpu, "fp32", None).tflops is None
    choice = flops.choose_peak(cpu, "bf16", 100.0)
    # 2 TFLOP per iteration at 10 iterations per second: 20 TFLOP/s, 20% of 100.
    use = flops.Utilization(flops_per_iteration=2 * 10**12, iterations_per_s=10.0, peak=choice)
    assert use.achieved_tflops == pytest.approx(20.0) and use.mfu == pytest.approx(0.2)


def test_known_gpu_gets_its_datasheet_peak():
    h100 = flops.lookup_peak("NVIDIA H100 80GB HBM3")
    assert flops.peak_tflops(h100, "bf16") == pytest.approx(989.5)
    assert flops.lookup_peak("Some Future GPU") is None


def test_mfu_printed_with_peak_and_unknown_without(cli):
    process, out_dir = cli("--network", "resnet18", "--peak-tflops", "1.5", *TINY)
    assert process.returncode == 0, process.stderr
    assert "  MFU                   : " in process.stdout
    assert "of 1.5 TFLOP/s (--peak-tflops)" in process.stdout
    doc = json.loads(next(out_dir.glob("*.json")).read_text())
    assert doc["flops"]["mfu"] == pytest.approx(doc["flops"]["achieved_tflops"] / 1.5)
    # MFU uses the throughput's basis: FLOPs x iterations over the timed total.
    samples = doc["timing"]["samples_ms"]
    assert doc["flops"]["achieved_tflops"] == pytest.approx(
        doc["flops"]["flops_per_iteration"] * len(samples) / (sum(samples) / 1e3) / 1e12)
    process, _ = cli("--network", "resnet18", "--no-files", *TINY)
    assert "  MFU                   : unknown" in process.stdout


def test_kineto_traces_load_and_hold_events(cli, tmp_path):
    traces = tmp_path / "traces"
    process, _ = cli("--network", "resnet18", "--kineto", "--profiler-output", f"{traces}/",
                     "--profiler-schedule", "0,1,1", *TINY)
    assert process.returncode == 0, process.stderr
    files = sorted(traces.glob("*trace*.json"))
    assert [f.name for f in files] == ["resnet18_training_fp32_kineto_b2_trace2.json"]
    assert len(json.loads(files[0].read_text())["traceEvents"]) > 100
    assert "Kineto profile of a separate pass" in process.stdout and "aten::" in process.stdout


def test_trace_names_carry_the_rank_when_there_are_several(tmp_path):
    assert profilers.trace_path(f"{tmp_path}/", 5, 0, 1).endswith("/trace5.json")
    assert profilers.trace_path(f"{tmp_path}/", 5, 0, 1, "resnet50_training_fp32_b8") \
        .endswith("/resnet50_training_fp32_b8_trace5.json")
    assert profilers.trace_path(f"{tmp_path}/", 5, 3, 4).endswith("/trace5_rank3.json")
    assert profilers.trace_path(str(tmp_path / "run1_"), 5, 0, 1).endswith("run1_trace5.json")


@pytest.mark.slow
def test_autograd_profiler_prints_operator_tables(cli):
    process, _ = cli("--network", "resnet18", "--autograd_profiler", "--no-files", *TINY)
    assert process.returncode == 0, process.stderr
    for title in ("Top operators by CPU time", "Top operators by memory"):
        assert title in process.stdout
    assert "aten::convolution" in process.stdout
    process, _ = cli("--network", "resnet18", "--autograd-profiler", "--no-files", *TINY)
    assert process.returncode == 0


@pytest.mark.parametrize("mode", ["training", "inference"])
def test_deepspeed_profile_prints_in_both_modes(cli, mode):
    pytest.importorskip("deepspeed")
    process, out_dir = cli("--network", "resnet18", "--mode", mode, "--image-size", "32",
                           "--batch-size", "2", "--iterations", "3", "--warmup", "1",
                           "--flops-prof-step", "1")
    assert process.returncode == 0, process.stderr[-2000:]
    assert "DeepSpeed Flops Profiler" in process.stdout and "Profile Summary at step 1" in process.stdout
    assert "Iteration 1: profiled by DeepSpeed, not in the statistics" in process.stdout
    doc = json.loads(next(out_dir.glob("*.json")).read_text())
    assert len(doc["timing"]["samples_ms"]) == 2


def test_flops_prof_step_must_be_below_iterations(cli):
    process, _ = cli("--network", "resnet18", "--iterations", "10", "--flops-prof-step", "10")
    assert_one_line_error(process, 2, "must be below --iterations 10")


@pytest.mark.slow
def test_missing_deepspeed_exits_4_with_the_install_command(tmp_path):
    stub = tmp_path / "stub" / "deepspeed"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('No module named deepspeed')\n")
    process = run_cli("--network", "resnet18", "--flops-prof-step", "1", *TINY,
                      env={"PYTHONPATH": str(tmp_path / "stub")})
    assert process.returncode == 4, process.stderr
    assert "pip install deepspeed" in process.stderr and "Traceback" not in process.stderr


def test_profiled_work_never_enters_a_timed_interval(monkeypatch):
    """A fake clock advanced by the steps alone: each timed step costs 10 ms, the DeepSpeed
    iteration costs 1 s more, and the separate passes cost 1 s per step. The statistics must
    hold exactly the timed steps."""
    now = [0.0]

    def step():
        now[0] += 0.010

    def slow_profiled_step(model, run_step, device, index):
        now[0] += 1.0
        run_step()

    monkeypatch.setattr(profilers, "deepspeed_profile_step", slow_profiled_step)
    config = cli.to_plan(cli.parse_args(["--iterations", "6", "--flops-prof-step", "2"])).configs[0]
    work = SimpleNamespace(step=step, eager_model=None, phases=None)
    timed = benchmark.measure(config, Training(config, None), work, torch.device("cpu"), True,
                              time_fn=lambda: now[0])
    assert timed.times.count == 5 and len(timed.outputs) == 5
    assert timed.times.samples_ms == pytest.approx((10.0,) * 5)
