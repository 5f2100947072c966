"""Which device to run on, and what it and the software around it are.

ROCm builds of PyTorch expose AMD GPUs through the ``torch.cuda`` API; ``torch.version.hip`` tells
them apart, and the report then says ROCm/HIP, never CUDA.
"""
from __future__ import annotations

import datetime
import os
import platform
import socket

import torch
import torchvision

from .errors import MissingEnvironment, UsageError


def gpu_runtime() -> str:
    """'ROCm' on HIP builds, 'CUDA' on CUDA builds, 'none' on CPU-only builds."""
    if torch.version.hip:
        return "ROCm"
    return "CUDA" if torch.version.cuda else "none"


def select_device(requested: str, local_rank: int | None = None) -> tuple[torch.device, str | None]:
    """The device to run on, and a notice to print when the choice was not asked for."""
    if requested == "auto":
        if torch.cuda.is_available():
            index = local_rank if local_rank is not None else torch.cuda.current_device()
            return _cuda_device(index), None
        return torch.device("cpu"), ("No GPU found (torch.cuda.is_available() is False): "
                                     "running on the CPU.")
    try:
        device = torch.device(requested)
    except RuntimeError:
        raise UsageError(f"--device must be auto, cpu, cuda or cuda:N, got '{requested}'") from None
    if device.type == "cpu":
        return device, None
    if device.type != "cuda":
        raise UsageError(f"--device {requested}: only cpu and cuda (which includes ROCm GPUs) "
                         f"are supported")
    if not torch.cuda.is_available():
        raise MissingEnvironment(f"--device {requested} asked for a GPU, but PyTorch sees none "
                                 f"(PyTorch {torch.__version__}, {gpu_runtime()} build): install a "
                                 f"ROCm or CUDA build of PyTorch, check the driver, or use "
                                 f"--device cpu")
    index = device.index if device.index is not None else (local_rank or 0)
    return _cuda_device(index), None


def _cuda_device(index: int) -> torch.device:
    count = torch.cuda.device_count()
    if index >= count:
        raise MissingEnvironment(f"GPU {index} asked for, but only {count} visible "
                                 f"(check CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES)")
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return _cpu_model()


def _architecture(device: torch.device) -> str:
    if device.type != "cuda":
        return platform.machine()
    props = torch.cuda.get_device_properties(device)
    if torch.version.hip:
        return getattr(props, "gcnArchName", "unknown")     # e.g. gfx942:sramecc+:xnack-
    return f"sm_{props.major}{props.minor}"


def _driver_version() -> str:
    """The GPU driver, where PyTorch can tell without vendor tools; else 'unknown'."""
    if torch.version.hip:
        try:
            with open("/sys/module/amdgpu/version") as handle:
                return handle.read().strip() or "unknown"
        except OSError:
            return "unknown"
    try:
        import pynvml  # optional: nvidia-ml-py ships with many CUDA images
        pynvml.nvmlInit()
        return pynvml.nvmlSystemGetDriverVersion()
    except Exception:                                         # noqa: BLE001 (any failure: unknown)
        return "unknown"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def describe(device: torch.device) -> dict:
    """Versions, device and host, for the config echo and the JSON ``env`` block."""
    env = {
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "python": platform.python_version(),
        "gpu_runtime": gpu_runtime(),
        "hip": torch.version.hip,
        "cuda": torch.version.cuda,
        "device": str(device),
        "device_name": device_name(device),
        "architecture": _architecture(device),
        "host": socket.gethostname(),
        "cpu": _cpu_model(),
        "cpu_threads": torch.get_num_threads(),
        "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env["device_memory_gb"] = round(props.total_memory / 1e9, 1)
        env["multiprocessors"] = props.multi_processor_count
        env["driver"] = _driver_version()
        env["dnn_library"] = ("MIOpen" if torch.version.hip else "cuDNN")
        env["dnn_library_version"] = torch.backends.cudnn.version()
        env["visible_devices"] = (os.environ.get("HIP_VISIBLE_DEVICES")
                                  or os.environ.get("ROCR_VISIBLE_DEVICES")
                                  or os.environ.get("CUDA_VISIBLE_DEVICES"))
    return env


def runtime_version(env: dict) -> str:
    if env["hip"]:
        return f"ROCm/HIP {env['hip']}"
    if env["cuda"]:
        return f"CUDA {env['cuda']}"
    return "CPU-only build"
