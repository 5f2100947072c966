"""How far a number can be trusted: repeated trials, telemetry in the run, one basis for every
figure, accumulation under DDP, TF32 on ROCm, and refused baselines and warm-ups (CPU)."""
import json
import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

import fp16util
from conftest import TINY, assert_one_line_error, run_main
from microbench.drivers import benchmark
from microbench.plan import cli, spec as spec_mod
from microbench.settings import precision
from microbench.platform import devices
from microbench.measure import telemetry
from microbench.settings.config import BenchConfig
from microbench.measure.flops import PeakChoice
from microbench.store import baseline as stored_baseline
from microbench.measure.results import ProcessResult, RankRecord, Trial
from microbench.scenarios.training import Training
from microbench.output.summary import Summary
from microbench.measure import stats
from microbench.measure.stats import TrialStats
from microbench.measure.timing import Measurement


@pytest.fixture
def run(capfd, tmp_path):
    return lambda *args: run_main(capfd, "--output-dir", str(tmp_path), *args)


def only_json(directory):
    [path] = [p for p in directory.glob("*.json") if not p.name.startswith("sweep_")]
    return json.loads(path.read_text())


# ---------------------------------------------------------------- trials

def test_trial_spread_geometric_mean_and_t_interval_on_logs():
    spread = TrialStats((5275.0, 5016.0, 5262.0))
    logs = [math.log(v) for v in (5275.0, 5016.0, 5262.0)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    half = 4.302652729911275 * sd / math.sqrt(3)      # t(0.975, 2 dof)
    assert spread.headline == pytest.approx(math.exp(mean)) and spread.median == 5262.0
    assert spread.ci95 == pytest.approx((math.exp(mean - half), math.exp(mean + half)))
    assert TrialStats((10.0,)).ci95 is None


def result_with(samples_ms, flops=None):
    return ProcessResult(times=Measurement(samples_ms), losses=[], warmup_s=0.0,
                         first_iteration_s=None, peak_allocated_mb=None, peak_reserved_mb=None,
                         parameters=1, flops_per_iteration=flops)


def fake_spec(peak=100.0):
    launch = SimpleNamespace(distributed=False, rank=0)
    return SimpleNamespace(launch=launch, scaling_baseline_img_s=None, notes=(), peak=
                           PeakChoice(peak, "test"),
                           scenario=SimpleNamespace(units_per_item=1, counts_tokens=False),
                           model=SimpleNamespace(tokens_per_item=None, item="image"),
                           config=SimpleNamespace(compile=False, warmup=5), batch_size=4)


def trial(samples_ms, flops=None):
    record = RankRecord(0, 0, "h", "cpu", 4, tuple(samples_ms), None, None)
    return Trial(result_with(samples_ms, flops), (record,))


def test_the_headline_is_the_geometric_mean_and_every_figure_follows_it():
    # Three trials of 4 images x 2 iterations: 20, 10 and 40 ms in all -> 400, 800, 200 img/s,
    # whose geometric mean is 400 img/s; the median trial speaks for the run's details.
    trials = [trial([10.0, 10.0], 10**12), trial([5.0, 5.0], 10**12), trial([20.0, 20.0], 10**12)]
    summary = Summary(fake_spec(peak=100.0), {}, trials)
    assert summary.trial_spread.values == pytest.approx((400.0, 800.0, 200.0))
    assert summary.throughput == pytest.approx(400.0)
    assert summary.time_per_batch_ms == pytest.approx(10.0)
    assert summary.representative is trials[0]
    # MFU from the same basis: 1 TFLOP per iteration at 100 iterations per second.
    assert summary.utilization.achieved_tflops == pytest.approx(100.0)
    assert summary.utilization.mfu == pytest.approx(1.0)
    assert summary.times.count == 6                   # statistics pool every trial's samples


def test_repeat_runs_independent_trials_and_keeps_every_sample(run, tmp_path):
    process = run("--network", "resnet18", *TINY, "--repeat", "3", "--trials", "in-process")
    assert process.returncode == 0, process.stderr
    doc = only_json(tmp_path)
    trials = doc["trials"]
    assert trials["trials"] == 3 and len(trials["per_trial"]) == 3
    assert all(len(t["samples_ms"]) == 2 for t in trials["per_trial"])
    values = [t["throughput"] for t in trials["per_trial"]]
    assert doc["Throughput [img/sec]"] == pytest.approx(math.prod(values) ** (1 / 3))
    assert trials["ci95_method"] == stats.CI_METHOD
    assert trials["ci95_low"] < doc["Throughput [img/sec]"] < trials["ci95_high"]
    assert trials["prediction95_low"] < trials["ci95_low"]
    assert "Across trials" in process.stdout and "95% CI of the geometric mean" in process.stdout
    assert "next run likely in" in process.stdout


@pytest.mark.slow
def test_a_sweep_interleaves_the_trials_of_its_rows(capfd, tmp_path, monkeypatch):
    order = []
    real_run = benchmark.run

    def recording_run(spec, **kwargs):
        order.append(spec.config.batch_size)
        return real_run(spec, **kwargs)

    monkeypatch.setattr(benchmark, "run", recording_run)
    process = run_main(capfd, "--network", "resnet18", "--image-size", "32", "--batch-size",
                       "2,4", "--iterations", "1", "--warmup", "0", "--repeat", "3",
                       "--trials", "in-process", "--no-files")
    assert process.returncode == 0, process.stderr
    assert order == [2, 4, 2, 4, 2, 4]


# ---------------------------------------------------------------- telemetry in a run

def test_a_cpu_run_says_telemetry_is_unavailable(run, tmp_path):
    assert run("--network", "resnet18", *TINY).returncode == 0
    assert only_json(tmp_path)["telemetry"] == {"available": False,
                                                "reason": "telemetry: unavailable on the CPU"}


class DroppingClockSource:
    """A fake GPU whose SM clock falls 15% and whose energy counter gains 50 J a reading."""

    name, device_label, max_sm_clock_mhz = "fake", "fake GPU 0", 2000.0

    def __init__(self):
        self.reads = 0

    def read(self):
        self.reads += 1
        clock = 2000.0 if self.reads == 1 else 1700.0
        return telemetry.Sample(t_s=self.reads * 0.1, sm_clock_mhz=clock, memory_clock_mhz=2600.0,
                                power_w=500.0, temperature_c=60.0, utilization_pct=99.0,
                                throttle_reasons=(), energy_j=1000.0 + 50.0 * self.reads)

    def close(self):
        pass


def test_fake_telemetry_drives_energy_per_image_and_the_clock_warning(run, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setattr(telemetry, "open_source",
                        lambda device: (DroppingClockSource(), "fake telemetry"))
    process = run("--network", "resnet18", *TINY, "--telemetry-interval", "1")
    assert process.returncode == 0, process.stderr
    report = only_json(tmp_path)["telemetry"]
    samples = report["samples"]
    energy = samples[-1]["energy_j"] - samples[0]["energy_j"]
    assert report["energy_j"] == pytest.approx(energy) and report["energy_basis"] == "counter"
    assert report["joules_per_item"] == pytest.approx(energy / 4)        # 2 images x 2 iterations
    assert report["items_per_joule"] == pytest.approx(4 / energy)
    assert report["sm_clock_drop"] == pytest.approx(0.15)
    assert "WARNING: telemetry: SM clock fell 15.0% below its device maximum" in process.stdout
    assert "J per image" in process.stdout


# ---------------------------------------------------------------- DDP

def test_accumulation_under_ddp_all_reduces_once_per_optimizer_step(tmp_path):
    """One gloo rank is enough to count DDP's all-reduces: a communication hook sees each."""
    import torch.distributed as dist
    from microbench.steps import workload
    from microbench.settings.precision import lookup
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)
    try:
        calls = []

        def counting_hook(state, bucket):
            calls.append(1)
            future = torch.futures.Future()
            future.set_result(bucket.buffer())
            return future

        def all_reduces(opt_step):
            calls.clear()
            model = nn.parallel.DistributedDataParallel(nn.Linear(8, 4))
            model.register_comm_hook(None, counting_hook)
            spec = SimpleNamespace(loss=lambda out, target: nn.functional.cross_entropy(out,
                                                                                         target))
            step = workload.training_step(model, spec, torch.randn(2, 8), torch.tensor([0, 1]),
                                          lookup("fp32"), torch.device("cpu"), opt_step,
                                          workload.PhaseMarks())
            for _ in range(4):
                step()
            return len(calls)

        assert all_reduces(opt_step=1) == 4
        assert all_reduces(opt_step=2) == 2
    finally:
        dist.destroy_process_group()


def test_ranks_rejoin_after_the_profiled_iteration_before_timing_goes_on(monkeypatch):
    events = []
    monkeypatch.setattr(benchmark.profilers, "deepspeed_profile_step",
                        lambda model, step, device, index: events.append("profiled"))
    config = cli.to_plan(cli.parse_args(["--iterations", "4", "--flops-prof-step", "1"])).configs[0]
    work = SimpleNamespace(step=lambda: events.append("step"), eager_model=None, phases=None)
    timed = benchmark.measure(config, Training(config, None), work, torch.device("cpu"), True,
                              rejoin=lambda: events.append("rejoin"))
    assert events == ["step", "profiled", "rejoin", "step", "step"]
    assert timed.times.count == 3


@pytest.mark.slow
def test_ddp_with_the_flops_profiler_gives_every_rank_the_same_samples(tmp_path):
    pytest.importorskip("deepspeed")
    from support.launch import RUN, run_torchrun
    process = run_torchrun(2, *RUN, "--batch-size", "4", "--flops-prof-step", "1",
                           "--output-dir", str(tmp_path))
    assert process.returncode == 0, process.stderr[-3000:]
    per_rank = only_json(tmp_path)["distributed"]["per_rank"]
    assert [len(r["samples_ms"]) for r in per_rank] == [2, 2]


# ---------------------------------------------------------------- TF32 on ROCm

@pytest.mark.parametrize("conv_model, environ, peak_key, text", [
    (True, {"HIPBLASLT_ALLOW_TF32": "1"}, "fp32_matrix", "MIOpen has no TF32 convolutions"),
    (False, {}, "fp32_matrix", "HIPBLASLT_ALLOW_TF32=1, which is not set"),
    (False, {"HIPBLASLT_ALLOW_TF32": "1"}, "tf32", "matmuls through hipBLASLt"),
])
def test_tf32_on_rocm_says_what_runs_and_picks_the_peak(conv_model, environ, peak_key, text):
    policy, note = devices.tf32_on_rocm(precision.lookup("tf32"), "6.4", conv_model, environ)
    assert policy.peak_key == peak_key and text in note
    assert devices.tf32_on_rocm(precision.lookup("tf32"), None, True, {}) == (
        precision.lookup("tf32"), None)


# ---------------------------------------------------------------- refusals and warnings

def test_scaling_baseline_of_another_per_device_batch_or_layout_is_refused(run, tmp_path):
    assert run("--network", "resnet18", *TINY).returncode == 0
    [baseline] = tmp_path.glob("*.json")
    for changes in (dict(batch_size=4), dict(nhwc=True), dict(image_size=64)):
        spec = spec_mod.resolve(BenchConfig(
            **{**dict(network="resnet18", image_size=32, batch_size=2, device="cpu",
                      write_files=False), **changes}))
        with pytest.raises(stored_baseline.UsageError, match="differs in"):
            stored_baseline.scaling_baseline(str(baseline), spec)


def test_warmup_zero_is_warned_about(run):
    process = run("--network", "resnet18", "--image-size", "32", "--batch-size", "2",
                  "--iterations", "2", "--warmup", "0", "--no-files")
    assert process.returncode == 0 and "WARNING: --warmup 0" in process.stdout


def test_cuda_graph_compile_modes_need_three_warmup_iterations(run):
    assert_one_line_error(run("--compile", "--compileContext", "{'mode': 'reduce-overhead'}",
                              "--warmup", "2"), 2, "--warmup 3")


# ---------------------------------------------------------------- --fp16 1 master weights

def test_master_weights_skip_parameters_without_gradients_and_copy_per_dtype(monkeypatch):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 2), nn.Linear(2, 2))
    fp16util.network_to_half(model)
    updater = fp16util.MasterWeightOptimizer(
        model, lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.1))
    unused = model[3].weight.detach().clone()
    copies = []
    real_copy = torch._foreach_copy_
    monkeypatch.setattr(torch, "_foreach_copy_",
                        lambda dst, src: copies.append({t.dtype for t in src}) or
                        real_copy(dst, src))
    out = model[2](model[1](model[0](torch.randn(3, 4).half()).float()).half())
    updater.backward(out.float().sum())
    updater.step()
    assert torch.equal(model[3].weight, unused), "no gradient, no step"
    # Gradients in, weights out: one fused copy per source dtype (FP16 layers, FP32 norm).
    assert copies == [{torch.float16}, {torch.float32}, {torch.float32}, {torch.float32}]
