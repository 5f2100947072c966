"""Sweep rows with known samples, as a sweep leaves them, for the tests of what reads rows
(the sweep plot, the report, the console)."""
from microbench.drivers.sweep import Row
from microbench.measure.results import ProcessResult, RankRecord, Trial
from microbench.measure.timing import Measurement
from microbench.output.summary import Summary
from microbench.plan.spec import resolve
from microbench.platform.environment import DeviceInfo
from microbench.settings.config import BenchConfig


def fake_env(**fields) -> DeviceInfo:
    base = dict(torch="2.99.0+test", torchvision="0.99.0", python="3.11", gpu_runtime="none",
                hip=None, cuda=None, device="cpu", device_type="cpu",
                device_name="Test CPU 9000", architecture="x86_64", host="host", cpu="cpu",
                cpu_threads=2, time_utc="2026-01-01T00:00:00+00:00")
    return DeviceInfo(**{**base, **fields})


CPU_ENV = fake_env()
GPU_ENV = fake_env(device_type="gpu", device="cuda:0", device_name="AMD Instinct MI300X",
                   cpu_threads=16, torch="2.99.0+rocm9.9", hip="9.9.1", gpu_runtime="ROCm")


def measured_row(batch, samples_ms=(10.0, 20.0, 30.0, 40.0, 50.0), precision="fp32",
                 network="resnet18", env=CPU_ENV, memory_mb=None, trials=None, **settings):
    """A row as a sweep leaves it, with the given per-iteration samples (one trial each);
    ``settings``: other BenchConfig fields (image_size=None, seq_len=16 for a language model)."""
    settings = {"image_size": 32, **settings}
    spec = resolve(BenchConfig(network=network, batch_size=batch, precision=precision,
                               write_files=False, **settings), check=False)
    row = Row(spec)
    for samples in trials or [samples_ms]:
        result = ProcessResult(
            times=Measurement(samples), losses=[], warmup_s=0.0, first_iteration_s=None,
            peak_allocated_mb=memory_mb, peak_reserved_mb=memory_mb, parameters=1)
        record = RankRecord(0, 0, "host", env.device_name, batch, tuple(samples), memory_mb,
                            memory_mb)
        row.trials.append(Trial(result, (record,)))
    row.record(Summary(spec, env, row.trials))
    return row
