"""Profilers, kept out of the numbers they sit beside.

* ``--autograd_profiler``: one named ROCTX/NVTX range per timed iteration, so rocprofv3/rocprof/
  nsys timelines line up with iterations; then, after the timed pass, a short marked pass with a
  range per operator (``emit_nvtx``) and a pass under torch.profiler for operator tables by
  device time, CPU time and memory. Per-operator ranges stay out of the timed pass because they
  cost CPU time on every operator: 7% of resnet50 AMP training throughput on an H100, where
  GradScaler's per-step synchronisation keeps the CPU from running ahead.
* ``--kineto``: a separate pass under torch.profiler with a wait/warmup/active schedule; Chrome
  traces ``trace<step>.json`` (``trace<step>_rank<r>.json`` when there are several ranks).
* ``--flops-prof-step N``: DeepSpeed's FlopsProfiler on timed iteration N, which is left out of
  the statistics (the loop is timed in two segments around it).
* ``--capture-range``: the device profiler API (cudaProfilerStart/Stop, hipProfilerStart/Stop,
  and ROCTX resume/pause where the ROCTX library is loadable) around the timed iterations, for
  ``nsys profile --capture-range=cudaProfilerApi`` and rocprofv3's region selection.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import tempfile
from dataclasses import dataclass
from typing import Callable, ContextManager

import torch

from microbench.settings.config import BenchConfig
from torch.profiler import ProfilerActivity, profile, schedule

from microbench.platform import devices, noise
from microbench.platform.errors import MissingEnvironment, UsageError
from microbench.platform import writing

TABLE_ROWS = 15
# Iterations of the separate pass that --autograd_profiler's operator tables come from.
OPERATOR_TABLE_ITERATIONS = 3


@dataclass(frozen=True)
class KinetoSchedule:
    wait: int = 1
    warmup: int = 2
    active: int = 2

    @property
    def steps(self) -> int:
        return self.wait + self.warmup + self.active


def _activities(device: torch.device) -> list[ProfilerActivity]:
    if devices.is_gpu(device):
        return [ProfilerActivity.CPU, ProfilerActivity.CUDA]     # CUDA covers HIP on ROCm
    return [ProfilerActivity.CPU]


def _time_key(device: torch.device) -> str:
    return "self_device_time_total" if devices.is_gpu(device) else "self_cpu_time_total"


# ---------------------------------------------------------------- during the timed pass

def iteration_range(device: torch.device) -> Callable[[int], ContextManager] | None:
    """A named ROCTX/NVTX range per iteration (PyTorch's nvtx module emits ROCTX on ROCm)."""
    if not devices.is_gpu(device):
        return None
    return lambda index: torch.cuda.nvtx.range(f"iteration {index}")


def operator_range_pass(step: Callable[[], object], device: torch.device,
                        iterations: int = OPERATOR_TABLE_ITERATIONS) -> None:
    """A marked pass after the timed one: a range per operator (emit_nvtx) inside ranges named
    ``profiled iteration i``, for external profilers' timelines."""
    if not devices.is_gpu(device):
        return
    with torch.autograd.profiler.emit_nvtx():
        for index in range(iterations):
            with torch.cuda.nvtx.range(f"profiled iteration {index}"):
                step()
    devices.synchronize(device)


def _roctx_library():
    for name in ("librocprofiler-sdk-roctx.so", "libroctx64.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


@contextlib.contextmanager
def capture_range(enabled: bool, device: torch.device):
    """Start the device profiler API just before the timed iterations and stop it after."""
    if not enabled or not devices.is_gpu(device):
        yield
        return
    roctx = _roctx_library() if devices.rocm_version(device) else None
    devices.synchronize(device)
    torch.cuda.profiler.start()
    if roctx is not None:
        roctx.roctxProfilerResume(0)
    try:
        yield
    finally:
        devices.synchronize(device)
        if roctx is not None:
            roctx.roctxProfilerPause(0)
        torch.cuda.profiler.stop()


# ---------------------------------------------------------------- DeepSpeed FLOPS profiler

def require_deepspeed() -> None:
    try:
        with noise.captured(stdout=True):          # DeepSpeed announces its accelerator probe
            import deepspeed.profiling.flops_profiler  # noqa: F401
    except ImportError as error:
        raise MissingEnvironment(f"--flops-prof-step needs DeepSpeed's FLOPS profiler "
                                 f"({error.msg}): pip install deepspeed") from None
    except Exception as error:          # noqa: BLE001 (a broken install is not our bug)
        # DeepSpeed's import probes compilers and accelerators and can fail in many ways
        # (a missing CUDA_HOME, a version clash); the user fixes that environment, not us.
        text = " ".join(str(error).split())[:300]
        raise MissingEnvironment(f"--flops-prof-step: DeepSpeed is installed but fails to "
                                 f"import ({type(error).__name__}: {text}); fix or reinstall "
                                 f"it (pip install -U deepspeed)") from None


def deepspeed_profile_step(model: torch.nn.Module, step: Callable[[], object],
                           device: torch.device, profile_step: int) -> str:
    """Run one step under DeepSpeed's FlopsProfiler; its model profile, as text to print after
    the summary (printed here, it would land in the middle of the timed iterations' output)."""
    from deepspeed.profiling.flops_profiler import FlopsProfiler
    profiler = FlopsProfiler(model)
    profiler.start_profile()
    step()
    devices.synchronize(device)
    profiler.stop_profile()
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "profile.txt")
        profiler.print_model_profile(profile_step=profile_step, module_depth=-1, top_modules=3,
                                     detailed=True, output_file=path)
        with open(path) as stream:
            text = stream.read()
    profiler.end_profile()
    return text.strip("\n")


# ---------------------------------------------------------------- separate profiled passes

def _profiled_averages(step: Callable[[], object], device: torch.device, iterations: int,
                       memory: bool = False):
    with profile(activities=_activities(device), profile_memory=memory) as profiler:
        for _ in range(iterations):
            step()
        devices.synchronize(device)
    return profiler.key_averages()


def operator_table(step: Callable[[], object], device: torch.device, iterations: int,
                   row_limit: int = TABLE_ROWS) -> str:
    """The top operators of ``iterations`` calls of ``step`` by self device time (CPU time on
    the CPU); the op bench's --enable-profiling table."""
    averages = _profiled_averages(step, device, iterations)
    return averages.table(sort_by=_time_key(device), row_limit=row_limit)


def operator_tables(step: Callable[[], object], device: torch.device,
                    iterations: int = OPERATOR_TABLE_ITERATIONS) -> str:
    """Top operators by device time, CPU time and memory, from a short profiled pass."""
    averages = _profiled_averages(step, device, iterations, memory=True)
    on_gpu = devices.is_gpu(device)
    memory_key = "self_device_memory_usage" if on_gpu else "self_cpu_memory_usage"
    sections = []
    if on_gpu:
        sections.append(("Top operators by device time", "self_device_time_total"))
    sections += [("Top operators by CPU time", "cpu_time_total"),
                 ("Top operators by memory", memory_key)]
    text = [f"Operator tables from a separate profiled pass of {iterations} iterations "
            f"(not part of the timed statistics)"]
    for title, key in sections:
        text += ["", f"{title} (sorted by {key}):",
                 averages.table(sort_by=key, row_limit=TABLE_ROWS)]
    return "\n".join(text)


def trace_directory(output: str) -> str:
    """The directory the traces go to: ``output`` itself when it is one (or ends in a
    separator), else the directory of the file-name prefix."""
    if output.endswith(os.sep) or os.path.isdir(output):
        return output
    return os.path.dirname(output) or "."


def trace_output(config: BenchConfig) -> str:
    return config.profiler_output or config.output_dir + os.sep


def prepare_trace_output(config: BenchConfig) -> None:
    """Before the run: the trace directory exists (created now) and is writable."""
    output = trace_output(config)
    directory = trace_directory(output)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot write --kineto traces to {directory} (--profiler-output "
                         f"{output}): {error.strerror}") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write --kineto traces to {directory} (--profiler-output "
                         f"{output}): directory not writable")


def trace_path(output: str, step: int, rank: int, world_size: int, stem: str = "") -> str:
    """``<dir>/<stem>_trace<step>.json`` (the stem is the result's name, so that runs of other
    configurations never replace each other's traces), or ``<prefix>trace<step>.json`` for a
    prefix the user chose; the rank joins the name when there are several."""
    suffix = f"_rank{rank}" if world_size > 1 else ""
    name = f"trace{step}{suffix}.json"
    if output.endswith(os.sep) or os.path.isdir(output):
        return os.path.join(output, f"{stem}_{name}" if stem else name)
    return output + name


def kineto_pass(step: Callable[[], object], device: torch.device, plan: KinetoSchedule,
                output: str, rank: int = 0, world_size: int = 1,
                stem: str = "") -> tuple[list[str], str]:
    """A scheduled torch.profiler pass; returns the trace files and the operator table."""
    written: list[str] = []

    def export(profiler: torch.profiler.profile) -> None:
        path = trace_path(output, profiler.step_num, rank, world_size, stem)
        writing.write_via(path, profiler.export_chrome_trace)
        written.append(path)

    os.makedirs(trace_directory(output), exist_ok=True)
    with profile(activities=_activities(device), record_shapes=True,
                 schedule=schedule(wait=plan.wait, warmup=plan.warmup, active=plan.active,
                                   repeat=1),
                 on_trace_ready=export) as profiler:
        for _ in range(plan.steps):
            step()
            profiler.step()
    table = profiler.key_averages().table(sort_by=_time_key(device), row_limit=TABLE_ROWS)
    return written, table
