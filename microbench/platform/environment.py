"""What ran the benchmark: versions, the device and the host, as the config echo and the JSON
``env`` block tell them.

The device layer (platform/devices.py) answers the device questions (its name, architecture,
runtime); this module gathers them with the versions and the host into one
:class:`DeviceInfo`, once per run and never while timing.

Example::

    env = describe(torch.device("cpu"))
    env.to_dict()["os"]          # e.g. 'Ubuntu 24.04.2 LTS (x86_64)'
    runtime_version(env.to_dict())  # 'CPU'
"""
from __future__ import annotations

import dataclasses
import datetime
import functools
import importlib.metadata
import os
import platform
import socket
import sys
from dataclasses import dataclass

import torch
from torch.utils import collect_env

from microbench.platform import devices
from microbench.platform.devices import collect_env_answer, is_gpu


def _driver_version() -> str:
    """The GPU driver, where PyTorch can tell without vendor tools; else 'unknown'."""
    if devices.rocm_version():
        try:
            with open("/sys/module/amdgpu/version") as handle:
                return handle.read().strip() or "unknown"
        except OSError:
            return "unknown"
    try:
        import pynvml  # nvidia-ml-py, a dependency; a checkout run uninstalled may lack it
        pynvml.nvmlInit()
        return pynvml.nvmlSystemGetDriverVersion()
    except Exception:                                         # noqa: BLE001 (any failure: unknown)
        return "unknown"


@functools.cache
def _os_name() -> str:
    """e.g. ``Ubuntu 24.04.2 LTS (x86_64)``; 'unknown' where collect_env cannot tell."""
    return collect_env_answer(collect_env.get_os, collect_env.run) or "unknown"


@functools.cache
def _libc() -> str | None:
    """e.g. ``glibc-2.39``; None off Linux (collect_env says N/A there)."""
    version = collect_env_answer(collect_env.get_libc_version)
    return None if version == "N/A" else version


@dataclass(frozen=True)
class DeviceInfo:
    """What ran the benchmark: versions, the device and the host (the JSON's ``env`` block)."""

    torch: str
    torchvision: str
    python: str
    gpu_runtime: str                    # ROCm, CUDA or none (the build)
    hip: str | None
    cuda: str | None
    device: str                         # e.g. cuda:0
    device_type: str                    # gpu | cpu
    device_name: str                    # e.g. NVIDIA H200, or the CPU's model
    architecture: str                   # gfx942:sramecc+:xnack-, sm_90, x86_64
    host: str
    cpu: str
    cpu_threads: int
    time_utc: str
    os: str = "unknown"                 # e.g. Ubuntu 24.04.2 LTS (x86_64), from collect_env
    libc: str | None = None             # e.g. glibc-2.39, from collect_env
    device_memory_gb: float | None = None
    multiprocessors: int | None = None
    driver: str | None = None
    dnn_library: str | None = None      # MIOpen or cuDNN
    dnn_library_version: int | None = None
    visible_devices: str | None = None

    @property
    def on_gpu(self) -> bool:
        return self.device_type == "gpu"

    @property
    def runtime(self) -> str:
        """What ran the device's kernels: the GPU runtime, or the CPU (whatever the build)."""
        return runtime_version(self.to_dict())

    def to_dict(self) -> dict:
        """The JSON ``env`` block (GPU-only keys absent on the CPU, as results always had)."""
        document = dataclasses.asdict(self)
        if not self.on_gpu:
            for key in _GPU_ONLY:
                document.pop(key)
        return document


_GPU_ONLY = ("device_memory_gb", "multiprocessors", "driver", "dnn_library",
             "dnn_library_version", "visible_devices")


def _torchvision_version() -> str:
    """torchvision's version, without importing it where nothing else has (the op bench)."""
    loaded = sys.modules.get("torchvision")
    if loaded is not None:
        return loaded.__version__              # the build's own, e.g. 0.23.0+rocm6.4
    try:
        return importlib.metadata.version("torchvision")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def describe(device: torch.device) -> DeviceInfo:
    """Versions, device and host, for the config echo and the JSON ``env`` block."""
    versions = devices.build_versions()
    gpu = {}
    if is_gpu(device):
        props = torch.cuda.get_device_properties(device)
        gpu = dict(device_memory_gb=round(props.total_memory / 1e9, 1),
                   multiprocessors=props.multi_processor_count, driver=_driver_version(),
                   dnn_library=devices.dnn_library(),
                   dnn_library_version=torch.backends.cudnn.version(),
                   visible_devices=(os.environ.get("HIP_VISIBLE_DEVICES")
                                    or os.environ.get("ROCR_VISIBLE_DEVICES")
                                    or os.environ.get("CUDA_VISIBLE_DEVICES")))
    return DeviceInfo(
        torch=torch.__version__, torchvision=_torchvision_version(),
        python=platform.python_version(), gpu_runtime=devices.gpu_runtime(),
        hip=versions["hip"], cuda=versions["cuda"], device=str(device),
        device_type="gpu" if is_gpu(device) else "cpu",
        device_name=devices.device_name(device),
        architecture=devices.architecture(device), host=socket.gethostname(),
        cpu=devices.cpu_model(),
        cpu_threads=torch.get_num_threads(), os=_os_name(), libc=_libc(),
        time_utc=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **gpu)


def runtime_version(env: dict) -> str:
    """What ran the device's kernels: the GPU runtime, or the CPU (whatever the build). ``env``:
    a stored ``env`` block (results of every version have these keys)."""
    if env.get("device_type") == "cpu":
        return "CPU"
    if env.get("hip"):
        return f"ROCm/HIP {env['hip']}"
    if env.get("cuda"):
        return f"CUDA {env['cuda']}"
    return "CPU-only build"
