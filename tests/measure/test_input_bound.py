"""The pipeline's measurements (microbench.measure.input_bound) from a fake clock: the wait share
from the samples it names, the loader alone, the model alone and the pipeline through the run's
own timed loop, worker CPU, and the verdict and data block they make."""
from __future__ import annotations

import math
import os

import pytest
import torch

from microbench.scenarios.base import timed_loop
from microbench.data import DataSettings, ModelInput, WaitTimes, open_pipeline, report, verdict
from microbench.measure.input_bound import (CpuMeter, CpuUse, LoaderRun, PipelineRun,
                                            cpu_seconds_from_stat, proc_cpu_seconds)
from microbench.data.pipeline import FedStep

CPU = torch.device("cpu")
BATCH = 4


class ManualClock:
    """A clock that moves only when the test's work says so (seconds)."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# ---------------------------------------------------------------- the wait share

def test_the_wait_share_is_derived_from_the_samples_it_names():
    waits = WaitTimes(wait_ms=(1.0, 0.5, 4.0, 0.0), step_ms=(10.0, 10.0, 8.0, 12.0))
    assert waits.shares == (0.1, 0.05, 0.5, 0.0)
    assert waits.share_median == pytest.approx(0.075)               # between 0.05 and 0.1
    assert waits.share_p99 == pytest.approx(0.1 + 0.97 * 0.4)      # numpy's linear method
    assert waits.share_total == pytest.approx(5.5 / 40)
    block = waits.to_dict()
    assert block["wait_ms"] == [1.0, 0.5, 4.0, 0.0] and block["step_ms"] == [10, 10, 8, 12]
    assert block["wait_median_ms"] == pytest.approx(0.75) and "next(iterator)" in block["basis"]
    merged = WaitTimes.merge([waits, WaitTimes((2.0,), (4.0,))])
    assert merged.steps == 5 and merged.share_total == pytest.approx(7.5 / 44)
    with pytest.raises(ValueError):
        WaitTimes((1.0,), ())


class StubPipeline:
    """next_batch costs ``fetch_s`` on the clock; worker CPU unknown."""

    def __init__(self, clock: ManualClock, fetch_s: float):
        self.clock, self.fetch_s, self.fetched = clock, fetch_s, 0

    def next_batch(self):
        self.clock.advance(self.fetch_s)
        self.fetched += 1
        return torch.full((BATCH, 3), float(self.fetched)), torch.arange(BATCH)

    def cpu_meter(self) -> CpuMeter:
        return CpuMeter(lambda: (), self.clock)


def test_a_fed_step_records_waits_after_start_only_and_fills_the_workload_tensors():
    clock = ManualClock()
    inputs, target = torch.zeros(BATCH, 3), torch.zeros(BATCH, dtype=torch.int64)
    fed = FedStep(StubPipeline(clock, fetch_s=0.002), lambda: clock.advance(0.008),
                  inputs, target, clock)
    fed()                                                   # warm-up: fed, not recorded
    fed.start(3)
    for _ in range(3):
        fed()
    clock.advance(0.001)                                    # the loop's final synchronisation
    fed.stop()
    waits = fed.waits()
    assert waits.wait_ms == pytest.approx((2.0, 2.0, 2.0))
    assert waits.step_ms == pytest.approx((10.0, 10.0, 11.0))
    assert inputs[0, 0] == 4.0 and target.tolist() == [0, 1, 2, 3]
    run = fed.result(per_s=123.0)
    assert run.per_s == 123.0 and run.worker_cpu is None     # no worker processes


def test_waits_cannot_be_read_before_the_last_step_is_closed():
    clock = ManualClock()
    fed = FedStep(StubPipeline(clock, 0.001), lambda: None, torch.zeros(BATCH, 3), None, clock)
    fed.start(1)
    fed()
    with pytest.raises(RuntimeError, match="stop"):
        fed.waits()


# ---------------------------------------------------------------- the three figures

@pytest.fixture
def slow_pipeline(tmp_path, monkeypatch):
    """A real pipeline over a generated set whose batches cost 10 ms on a manual clock."""
    clock = ManualClock()
    settings = DataSettings(source="loader", count=16, image_side=40, workers=0,
                            cache_dir=str(tmp_path))
    wanted = ModelInput("image", True, image_size=32, num_classes=10)
    pipeline = open_pipeline(settings, wanted, batch_size=BATCH, device=CPU, clock=clock)
    real_next = pipeline.next_batch

    def next_batch():
        clock.advance(0.010)
        return real_next()

    monkeypatch.setattr(pipeline, "next_batch", next_batch)
    yield pipeline, clock
    pipeline.close()


def test_loader_alone_model_alone_and_pipeline_from_a_fake_clock(slow_pipeline):
    pipeline, clock = slow_pipeline
    loader = pipeline.loader_alone(batches=5)
    assert loader.items == 5 * BATCH and loader.seconds == pytest.approx(0.050)
    assert loader.per_s == pytest.approx(400.0)                 # 4 images per 10 ms

    inputs, target = torch.zeros(BATCH, 3, 32, 32), torch.zeros(BATCH, dtype=torch.int64)

    def model_step():                                           # 8 ms of "compute" per step
        clock.advance(0.008)

    model_alone = timed_loop(model_step, 6, CPU, time_fn=clock).times
    model_per_s = 6 * BATCH / (model_alone.total_ms / 1e3)
    assert model_per_s == pytest.approx(500.0)

    fed = pipeline.feeding(model_step, inputs, target)
    fed.start(6)
    timed = timed_loop(fed, 6, CPU, time_fn=clock).times
    fed.stop()
    pipeline_per_s = 6 * BATCH / (timed.total_ms / 1e3)
    assert pipeline_per_s == pytest.approx(4 / 0.018)          # 10 ms wait + 8 ms step
    run = fed.result(pipeline_per_s)
    assert run.waits.share_median == pytest.approx(10 / 18)
    assert run.waits.step_ms == pytest.approx(timed.samples_ms)   # one clock for both

    data = report(pipeline.description(), run, loader, model_per_s, pipeline.skipped(),
                  pipeline.unit)
    assert data.verdict.kind == "input-bound"
    assert data.verdict.line.startswith("input-bound: the loader alone delivers 400 images/s, "
                                        "80% of what the model takes alone; the pipeline keeps "
                                        "44% of the model's 500 images/s")
    block = data.block()
    assert block["loader_alone_per_s"] == pytest.approx(400.0)
    assert block["model_alone_per_s"] == pytest.approx(500.0)
    assert block["wait"]["share_median"] == pytest.approx(10 / 18)
    for key in ("source", "format", "decode", "transforms", "workers", "pin_memory",
                "prefetch_factor", "unit", "pipeline_per_s"):
        assert key in block
    assert block["workers"] == 0 and block["prefetch_factor"] is None
    lines = data.lines()
    assert lines[-1] == f"Verdict            : {data.verdict.line}"
    assert any(line.startswith("Wait for data      : 55.6% of a step (median)")
               for line in lines)
    assert any("Loader worker CPU  : unknown" in line for line in lines)


# ---------------------------------------------------------------- the verdict

@pytest.mark.parametrize("pipeline_s, loader_s, model_s, kind, words", [
    (300.0, 310.0, 1000.0, "input-bound", "the loader alone delivers 310 images/s, 31% of"),
    (980.0, 2500.0, 1000.0, "compute-bound", "the loader alone delivers 2.5x what the model"),
    (700.0, 2500.0, 1000.0, "interference", "loading and the model slow each other"),
    (None, 2500.0, 1000.0, "unknown", "not all known"),
    (980.0, 2500.0, math.nan, "unknown", "not all known"),
    # The pipeline includes the model: 270% of the model alone means that figure was disturbed.
    (1300.0, 2500.0, 480.0, "unknown", "below the pipeline's 1,300 images/s that includes it "
                                       "(271%), so that figure was disturbed"),
])
def test_the_verdict_names_the_side_that_limits_and_by_how_much(pipeline_s, loader_s, model_s,
                                                                kind, words):
    found = verdict(pipeline_s, loader_s, model_s)
    assert found.kind == kind and words in found.line
    if kind != "unknown":
        assert found.kept == pytest.approx(pipeline_s / model_s)
        assert f"keeps {pipeline_s / model_s:.0%}" in found.line


def test_skipped_files_and_worker_cpu_are_shown():
    run = PipelineRun(100.0, WaitTimes((1.0,), (10.0,)), CpuUse(3.0, 2.0, 4))
    data = report({"source": "folder", "summary": "12 JPEG images"}, run,
                  LoaderRun(400, 2.0, 10, None), 120.0,
                  skipped=[("/d/a.jpg", "cannot decode: x"), ("/d/b.jpg", "empty")])
    lines = data.lines()
    assert "Skipped files      : 2: /d/a.jpg (cannot decode: x) and 1 more (see the JSON)" in lines
    assert "Loader worker CPU  : 1.5 cores busy of 4 workers (38% each)" in lines
    block = data.block()
    assert block["skipped_files"][1] == {"path": "/d/b.jpg", "reason": "empty"}
    assert block["worker_cpu"]["cores_busy"] == 1.5 and block["loader_alone_worker_cpu"] is None


# ---------------------------------------------------------------- worker CPU

def test_worker_cpu_comes_from_the_workers_cpu_times_over_the_wall_time():
    clock, cpu = ManualClock(), {11: 1.0, 12: 2.0}
    meter = CpuMeter(lambda: (11, 12), clock, cpu.get)
    meter.start()
    clock.advance(2.0)
    cpu.update({11: 2.5, 12: 3.5})
    use = meter.stop()
    assert use == CpuUse(3.0, 2.0, 2) and use.cores == 1.5 and use.utilisation == 0.75


@pytest.mark.parametrize("pids_then, pids_now, cpu", [
    ((11,), (11, 12), {11: 1.0, 12: 1.0}),       # the workers changed: unknown
    ((), (), {}),                                # no worker processes: unknown
    ((11,), (11,), {}),                          # not measurable here: unknown
])
def test_worker_cpu_is_unknown_rather_than_guessed(pids_then, pids_now, cpu):
    answers = iter((pids_then, pids_now))
    meter = CpuMeter(lambda: next(answers), ManualClock(), cpu.get)
    meter.start()
    assert meter.stop() is None


def test_proc_stat_is_read_past_a_command_name_with_spaces_and_parentheses():
    ticks = os.sysconf("SC_CLK_TCK")
    line = f"42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 {3 * ticks} {ticks} 0 0 20 0 1 0"
    assert cpu_seconds_from_stat(line) == pytest.approx(4.0)
    assert proc_cpu_seconds(os.getpid()) >= 0.0
    assert proc_cpu_seconds(2**22 + 12345) is None                 # no such process


def test_real_workers_cpu_is_measured_during_the_loader_alone(tmp_path):
    settings = DataSettings(source="loader", count=16, image_side=40, workers=1,
                            cache_dir=str(tmp_path))
    wanted = ModelInput("image", True, image_size=32, num_classes=10)
    with open_pipeline(settings, wanted, batch_size=BATCH, device=CPU) as pipeline:
        run = pipeline.loader_alone(batches=6)
    assert run.worker_cpu is not None and run.worker_cpu.workers == 1
    assert run.worker_cpu.cpu_s >= 0.0 and run.worker_cpu.wall_s > 0.0
