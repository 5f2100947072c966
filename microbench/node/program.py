"""The program every GPU runs in the node check, the same on each, every part repeated so that
its spread is known (docs/node-check.md):

* **GEMM** and **memory**: the measured-peak probe's own rows (``ops/peaks.py``: the op bench's
  ``matmul`` and ``copy`` through ``runner.measure_case``), one sample per timed call;
* **host->dev**, **dev->host**: a copy between pinned host memory and the GPU, each call timed
  with device events (``measure/timing.time_calls``); the PCIe link and the error counters are
  read while these copies are queued (a link trains down when idle);
* **train step**: a CNN's training step (``drivers/benchmark.run`` on a resolved spec, as the
  ``microbench`` command runs it), one sample per iteration;
* **decode step**: a small language model's decode steps (``--mode generate``), one sample per
  step.

Each part runs under its own telemetry (``watch.py``). A part that fails (out of memory on a
GPU another process fills) is recorded with its reason and flags the GPU; the program goes on.
"""
from __future__ import annotations

import math
import os
import socket
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

import torch

from microbench.measure.results import GenerationTimes
from microbench.measure.telemetry.health import DeviceHealth
from microbench.measure.timing import time_calls
from microbench.node.parts import FIGURES, GPU_FIGURES, QUICK_PARTS
from microbench.node.watch import PartTelemetry, watched
from microbench.ops import peaks
from microbench.platform import devices
from microbench.platform.errors import BenchmarkError, UsageError
from microbench.store import ranges

if TYPE_CHECKING:
    from microbench.measure.telemetry.sampler import Source

# A test hook, as distributed.FAIL_RANK_VARIABLE: "RANK:FACTOR" multiplies every figure that
# rank measures by FACTOR (a slow GPU without a slow GPU; tests and the docs' dry run); several
# are separated by commas, and "*:FACTOR" scales every rank (a uniformly slow node, which only
# --baseline can see).
SCALE_VARIABLE = "MICROBENCH_NODE_SCALE"
# The factors the hook takes: beyond a millionfold either way the samples leave every range a
# rate has (a TFLOP/s times 1e300 is no number a reader can show, times 1e-320 is subnormal),
# so the whole check would run to measure nothing.
SCALE_RANGE = (1e-6, 1e6)


@dataclass(frozen=True)
class Sizes:
    """How large each part is on this kind of device."""

    probe: peaks.ProbeSize
    gemm_dtype: str
    host_copy_bytes: int           # 0: no host-device link (the CPU)
    train: dict             # the training part's settings (BenchConfig's fields)
    decode: dict            # the decode part's


# A GPU: the probe's own sizes (8192^3 GEMM, 1 GiB copy); 256 MiB host copies (PCIe 5 x16
# moves it in ~5 ms); resnet50 at 64 images in BF16 autocast, channels-last (a data-parallel
# job's per-GPU step); llama_tiny's eager decode in BF16, 4 sequences (the host's launch speed
# too).
GPU_SIZES = Sizes(peaks.GPU_SIZE, "bf16", 256 << 20,
                  dict(network="resnet50", batch_size=64, precision="amp-bf16", nhwc=True,
                       warmup=5),
                  dict(network="llama_tiny", mode="generate", batch_size=4, precision="bf16",
                       seq_len=128, prompt_len=64, gen_len=16, warmup=1))
# The CPU (CI): a second or two a part on two busy cores.
CPU_SIZES = Sizes(peaks.CPU_SIZE, "fp32", 0,
                  dict(network="resnet18", batch_size=2, image_size=32, warmup=1),
                  dict(network="llama_tiny", mode="generate", batch_size=1, seq_len=16,
                       prompt_len=4, gen_len=4, warmup=1))


@dataclass(frozen=True)
class Part:
    """One part's figure on one GPU: a rate per sample (the figure's unit), or why none."""

    key: str
    samples: tuple[float, ...] = ()
    basis: str = ""                         # what was measured, in words
    telemetry: PartTelemetry | None = None
    failure: str = ""                       # why it could not be measured ("" ok)
    skipped: str = ""                       # why it does not apply here (the CPU's PCIe)

    @property
    def value(self) -> float | None:
        """The median sample: the part's figure."""
        if not self.samples:
            return None
        ordered = sorted(self.samples)
        middle = len(ordered) // 2
        return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


@dataclass(frozen=True)
class GpuRecord:
    """Everything one process measured of its device."""

    rank: int
    host: str
    local_rank: int
    device: str                             # "cuda:1", "cpu"
    device_name: str
    parts: dict[str, Part] = field(default_factory=dict)
    health: DeviceHealth | None = None
    telemetry_note: str = ""
    power_limit_w: float | None = None
    default_power_limit_w: float | None = None
    node_rank: int | None = None            # the launcher's number of this GPU's node

    @property
    def node(self) -> str:
        """The node, named so that two of one host name differ: the host name, and the
        launcher's node rank where it numbers nodes (torchrun's GROUP_RANK, SLURM_NODEID)."""
        return self.host if self.node_rank is None else f"{self.host} node {self.node_rank}"

    @property
    def label(self) -> str:
        """This GPU as the table, the findings, the verdict line and the plot name it."""
        return self.labelled()

    def labelled(self, between: str = " ") -> str:
        """The label with ``between`` before the rank (the plot's ticks break the line)."""
        return f"{self.node}{between}rank {self.rank}"

    @property
    def power_capped(self) -> bool | None:
        if self.power_limit_w is None or self.default_power_limit_w is None:
            return None
        return self.power_limit_w < self.default_power_limit_w

    @property
    def name(self) -> str:
        return f"{self.host} {self.device}"


def sizes_for(device: torch.device) -> Sizes:
    return GPU_SIZES if devices.is_gpu(device) else CPU_SIZES


def run(device: torch.device, rank: int, local_rank: int, samples: int, quick: bool,
        source: Source | None = None, telemetry_note: str = "",
        environ: Mapping[str, str] | None = None, align: Callable[[], object] = lambda: None,
        only: tuple[str, ...] | None = None, node_rank: int | None = None) -> GpuRecord:
    """Every part on ``device`` (``only``: these parts, the flagged ones measured again);
    ``source`` the telemetry source read meanwhile; ``align`` runs before each part (a
    barrier: every GPU starts each part together, so that the node carries the load of a real
    job, every GPU busy at once)."""
    sizes = sizes_for(device)
    probe = replace(sizes.probe, iterations=samples)
    health: list[DeviceHealth] = []
    measures: dict[str, Callable[[], Part]] = {
        "gemm_tflops": lambda: _gemm("gemm_tflops", device, sizes.gemm_dtype, probe),
        "gemm_fp8_tflops": lambda: _fp8_gemm(device, probe),
        "memory_gbs": lambda: _memory(device, probe),
        "h2d_gbs": lambda: _host_copy(device, sizes.host_copy_bytes, samples, True,
                                      source, health),
        "d2h_gbs": lambda: _host_copy(device, sizes.host_copy_bytes, samples, False,
                                      None, health),
        "train_items_per_s": lambda: _model_part("train_items_per_s", device,
                                                 sizes.train, samples),
        "decode_tokens_per_s": lambda: _model_part("decode_tokens_per_s", device,
                                                   sizes.decode, samples),
    }
    parts = {}
    for figure in GPU_FIGURES:
        if (quick and figure.key not in QUICK_PARTS) or (only is not None
                                                         and figure.key not in only):
            continue
        align()
        with watched(source) as watch:
            part = _guarded(figure.key, measures[figure.key], device)
        parts[figure.key] = replace(part, telemetry=watch.telemetry)
    limits = getattr(source, "power_limits_w", None)
    limit, default = limits() if limits is not None else (None, None)
    if source is not None and not health and hasattr(source, "health"):
        health.append(source.health())
    record = GpuRecord(rank=rank, host=socket.gethostname(), node_rank=node_rank,
                       local_rank=local_rank,
                       device=str(device), device_name=_device_name(device), parts=parts,
                       health=health[0] if health else None, telemetry_note=telemetry_note,
                       power_limit_w=limit, default_power_limit_w=default)
    record = scaled(record, os.environ if environ is None else environ)
    return replace(record, parts={key: sound(part) for key, part in record.parts.items()})


def sound(part: Part) -> Part:
    """The part, or a failed part where a sample is no measurement (not finite, not positive,
    beyond any rate: store/ranges.py): the verdict judges rates on a log scale and the
    document is checked against those ranges, so such a sample is the GPU's finding, never
    the check's crash."""
    kind = ranges.nature(FIGURES[part.key])
    for sample in part.samples:
        if not math.isfinite(sample) or ranges.problem_of(kind, sample) is not None:
            return replace(part, samples=(), failure=f"a sample of {sample:.3g} is not a "
                                                     f"measurement (no positive finite rate)")
    return part


def _guarded(key: str, measure: Callable[[], Part], device: torch.device) -> Part:
    """A part's failure is the GPU's finding, not the check's end: recorded, and the next part
    runs (the cache emptied first: a part that ran out of memory left its blocks)."""
    try:
        return measure()
    except (BenchmarkError, RuntimeError, MemoryError) as error:
        devices.empty_cache(device)
        return Part(key, failure=" ".join(str(error).split())[:300] or type(error).__name__)


def _rates(samples_ms: Iterable[float], work: float, scale: float) -> tuple[float, ...]:
    """Work per sample over each sample's time, in the figure's unit (``scale`` per second)."""
    return tuple(work / (ms / 1e3) / scale for ms in samples_ms if ms > 0)


def _gemm(key: str, device: torch.device, dtype: str, size: peaks.ProbeSize) -> Part:
    row = peaks.gemm_row(device, dtype, size)
    if row.status != "ok" or row.measurement is None or row.flops is None:
        return Part(key, failure=row.message or row.status)
    return Part(key, _rates(row.measurement.samples_ms, row.flops, 1e12),
                basis=f"{dtype} GEMM {size.gemm_n}^3 (torch.{peaks.gemm_op(dtype)}), per call")


def _fp8_gemm(device: torch.device, size: peaks.ProbeSize) -> Part:
    """The probe's FP8 GEMM (E4M3, tensorwise scales) where the device has FP8 matrix units."""
    fp8 = devices.fp8_e4m3_dtype(device) if devices.is_gpu(device) else None
    name = peaks.gemm_dtype(fp8) if fp8 is not None else None
    if name is None:
        return Part("gemm_fp8_tflops", skipped="no FP8 matrix units on this device")
    return _gemm("gemm_fp8_tflops", device, name, size)


def _memory(device: torch.device, size: peaks.ProbeSize) -> Part:
    row = peaks.copy_row(device, size)
    if row.status != "ok" or row.measurement is None or row.bytes_moved is None:
        return Part("memory_gbs", failure=row.message or row.status)
    return Part("memory_gbs", _rates(row.measurement.samples_ms, row.bytes_moved, 1e9),
                basis=f"device copy of {size.copy_bytes >> 20} MiB, bytes read + written, "
                      f"per call")


def _host_copy(device: torch.device, nbytes: int, samples: int, to_device: bool,
               source: Source | None, health: list) -> Part:
    key = "h2d_gbs" if to_device else "d2h_gbs"
    if nbytes == 0:
        return Part(key, skipped="no host-device link on the CPU")
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    gpu = torch.empty(nbytes, dtype=torch.uint8, device=device)
    destination, origin = (gpu, host) if to_device else (host, gpu)
    calls = {"n": 0}

    def read_link() -> None:
        # Halfway through, with earlier copies queued ahead: the link is busy as it is read.
        calls["n"] += 1
        if source is not None and calls["n"] == samples // 2 + 1 and hasattr(source, "health"):
            health.append(source.health())

    def copy() -> None:
        destination.copy_(origin, non_blocking=True)

    for _ in range(2):                       # warm-up: the first copy maps the pinned pages
        copy()
    devices.synchronize(device)
    measured = time_calls(copy, samples, device, between=read_link)
    direction = "pinned host -> device" if to_device else "device -> pinned host"
    return Part(key, _rates(measured.samples_ms, nbytes, 1e9),
                basis=f"{direction} copy of {nbytes >> 20} MiB, per call")


def _model_part(key: str, device: torch.device, settings: dict, samples: int) -> Part:
    """A model's step as the ``microbench`` command runs it, on this process's device alone
    (the launcher's variables hidden: each GPU measures its own, no DDP), its configuration
    made here: no command line to write and parse again (issue 63)."""
    from microbench.drivers import benchmark
    from microbench.plan.spec import resolve
    from microbench.settings.config import BenchConfig

    iterations = samples if key == "train_items_per_s" else max(2, samples // 4)
    config = BenchConfig(**settings, iterations=iterations, device=str(device),
                         write_files=False, measure_peaks=False, telemetry_interval_ms=0.0)
    spec = resolve(config, environ={})
    result = benchmark.run(spec)
    benchmark.release(spec)
    per_iteration = spec.scenario.units_per_iteration(spec.batch_size)
    if key == "train_items_per_s":
        return Part(key, _rates(result.times.samples_ms, per_iteration, 1.0),
                    basis=f"{spec.model.name} training step, {spec.batch_size} images, "
                          f"{spec.precision.label}, per iteration")
    detail = result.detail
    if not isinstance(detail, GenerationTimes):     # a generate run's: its token times
        raise TypeError(f"{key}: a generation measures its decode steps")
    steps = detail.decode.samples_ms
    return Part(key, _rates(steps, spec.batch_size, 1.0),
                basis=f"{spec.model.name} decode step, {spec.batch_size} sequences, "
                      f"{spec.precision.label}, per step")


def _device_name(device: torch.device) -> str:
    return devices.device_name(device) if devices.is_gpu(device) else "cpu"


def scale_of(environ: Mapping[str, str], world_size: int | None = None) -> dict | None:
    """The factor ``SCALE_VARIABLE`` names for each rank ("*": every rank); None when it is
    unset. Refused (one line, exit 2) before the run: a factor outside :data:`SCALE_RANGE`
    and, given the job's ``world_size``, a rank outside it (it would scale nothing)."""
    text = environ.get(SCALE_VARIABLE)
    if not text:
        return None
    factors: dict = {}
    for item in text.split(","):
        try:
            rank_text, factor_text = item.split(":")
            rank: str | int = "*" if rank_text.strip() == "*" else int(rank_text)
            factor = float(factor_text)
        except ValueError:
            raise UsageError(f"{SCALE_VARIABLE}={text!r}: expected RANK:FACTOR (several "
                             f"separated by commas, * for every rank), e.g. 1:0.5, or unset "
                             f"it") from None
        if not ((isinstance(rank, str) or rank >= 0)                 # str: "*"
                and SCALE_RANGE[0] <= factor <= SCALE_RANGE[1]):
            raise UsageError(f"{SCALE_VARIABLE}={text!r}: the rank must be 0 or more (or *) "
                             f"and the factor from {SCALE_RANGE[0]:g} to {SCALE_RANGE[1]:g}")
        if world_size is not None and isinstance(rank, int) and rank >= world_size:
            raise UsageError(f"{SCALE_VARIABLE}={text!r}: rank {rank} is not in this job of "
                             f"{world_size} processes (ranks 0 to {world_size - 1})")
        factors[rank] = factor
    return factors


def scaled(record: GpuRecord, environ: Mapping[str, str]) -> GpuRecord:
    """The record with every figure multiplied by the factor ``SCALE_VARIABLE`` names for its
    rank (the test hook); the record itself otherwise."""
    factors = scale_of(environ) or {}
    factor = factors.get(record.rank, factors.get("*"))
    if factor is None:
        return record
    parts = {key: replace(part, samples=tuple(s * factor for s in part.samples))
             for key, part in record.parts.items()}
    return replace(record, parts=parts)
