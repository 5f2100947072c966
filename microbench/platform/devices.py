"""The device layer: the one module that knows device types.

Which device to run on, what it is, and the operations whose spelling differs between a GPU and
the CPU: synchronise, timing events, empty the cache, peak and free memory, the memory cap, and
whether an exception means "out of memory". Everything else calls these and never branches on
``device.type`` for them.

GPUs go through ``torch.accelerator`` where the installed PyTorch has the functions we need
(2.9 and newer), else through ``torch.cuda``; ROCm builds implement both for AMD GPUs, and
``torch.version.hip`` tells them apart, so the report then says ROCm/HIP, never CUDA.

Example::

    device, notice = select("auto")
    activate(device)
    synchronize(device)
    allocated_mb, reserved_mb = peak_memory_mb(device)   # (None, None) on the CPU
    vendor(device)                                       # Vendor.AMD on a ROCm build
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import platform
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, ClassVar, Mapping, Protocol, TypeVar

import torch
from torch.utils import collect_env

from microbench.platform.errors import MissingEnvironment, UsageError

# The torch.accelerator functions this module uses; an older torch lacks some of them, and then
# torch.cuda (which HIP builds implement too) serves instead.
_ACCELERATOR_FUNCTIONS = ("synchronize", "empty_cache", "max_memory_allocated",
                          "max_memory_reserved", "reset_peak_memory_stats", "get_memory_info",
                          "memory_reserved", "memory_allocated", "set_device_index",
                          "current_device_index")


@functools.lru_cache(maxsize=1)
def _gpu_api():
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and all(hasattr(accelerator, name)
                                       for name in _ACCELERATOR_FUNCTIONS):
        return accelerator
    cuda = torch.cuda
    return SimpleNamespace(
        synchronize=cuda.synchronize, empty_cache=cuda.empty_cache,
        max_memory_allocated=cuda.max_memory_allocated,
        max_memory_reserved=cuda.max_memory_reserved,
        reset_peak_memory_stats=cuda.reset_peak_memory_stats, get_memory_info=cuda.mem_get_info,
        memory_reserved=cuda.memory_reserved, memory_allocated=cuda.memory_allocated,
        set_device_index=cuda.set_device, current_device_index=cuda.current_device)


def _gpu_runtime_started() -> bool:
    """Whether this process has started its GPU runtime (HIP builds answer through torch.cuda
    too). Asking a thread's current device would start it: a process that only coordinates
    others, or runs on the CPU, must not create a GPU context for that."""
    return torch.cuda.is_initialized()


def is_gpu(device: torch.device) -> bool:
    return device.type != "cpu"


class Vendor(enum.Enum):
    """Whose runtime runs a device's kernels; telemetry picks its management library by it."""

    CPU = "cpu"
    AMD = "amd"            # a ROCm (HIP) build, whose GPUs torch also calls "cuda"
    NVIDIA = "nvidia"      # a CUDA build
    UNKNOWN = "unknown"    # a GPU under a build with neither runtime


def vendor(device: torch.device) -> Vendor:
    if not is_gpu(device):
        return Vendor.CPU
    if torch.version.hip:
        return Vendor.AMD
    return Vendor.NVIDIA if torch.version.cuda else Vendor.UNKNOWN


# ---------------------------------------------------------------- choosing the device

def gpu_runtime() -> str:
    """'ROCm' on HIP builds, 'CUDA' on CUDA builds, 'none' on CPU-only builds."""
    if torch.version.hip:
        return "ROCm"
    return "CUDA" if torch.version.cuda else "none"


def select(requested: str, local_rank: int | None = None) -> tuple[torch.device, str | None]:
    """The device to run on (checked, not yet made current), and a notice when the choice was
    not asked for."""
    if requested == "auto":
        if torch.cuda.is_available():
            return _gpu(local_rank if local_rank is not None else 0), None
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
    return _gpu(device.index if device.index is not None else (local_rank or 0)), None


def _gpu(index: int) -> torch.device:
    count = torch.cuda.device_count()
    if index >= count:
        raise MissingEnvironment(f"GPU {index} asked for, but only {count} visible "
                                 f"(check CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES)")
    return torch.device("cuda", index)


def collective_backend(device: torch.device) -> str:
    """torch.distributed's backend for ``device``: NCCL on GPUs (RCCL on ROCm, under the same
    name), gloo on the CPU."""
    return "nccl" if is_gpu(device) else "gloo"


def collective_library() -> str:
    """The library behind the "nccl" backend: RCCL on ROCm builds, NCCL otherwise."""
    return "RCCL" if torch.version.hip else "NCCL"


def rank_device_ids(device: torch.device) -> list[int] | None:
    """The ``device_ids`` DDP and NCCL barriers take for this rank's GPU; None on the CPU."""
    return [device.index] if is_gpu(device) else None


def activate(device: torch.device) -> None:
    """Make ``device`` the calling thread's current device (its events and kernels go to that
    device's stream; other threads keep theirs: see ``current_gpu``)."""
    if is_gpu(device):
        _gpu_api().set_device_index(device)


def current_gpu() -> torch.device | None:
    """The GPU the calling thread's kernels and collectives go to; None where this process has
    not started its GPU runtime (the CPU; a process that only coordinates its workers).

    A current device belongs to a thread, not a process, in CUDA and HIP alike: a thread the
    process starts later begins on GPU 0 whatever the main thread chose. Work handed to another
    thread takes this value with it (``activate`` it there), or NCCL sees every rank on GPU 0."""
    if not _gpu_runtime_started():
        return None
    return torch.device("cuda", _gpu_api().current_device_index())


# ---------------------------------------------------------------- operations

def synchronize(device: torch.device) -> None:
    if is_gpu(device):
        _gpu_api().synchronize(device)


def timing_event():
    """A device event that records a timestamp on the current stream."""
    if hasattr(torch, "Event"):
        return torch.Event(enable_timing=True)
    return torch.cuda.Event(enable_timing=True)


def clock_name(device: torch.device) -> str:
    if not is_gpu(device):
        return "host perf_counter"
    return "HIP events" if rocm_version() else "CUDA events"


def set_conv_autotuner(enabled: bool) -> None:
    """cuDNN's benchmark mode; on ROCm the same switch selects MIOpen's find (search) mode."""
    torch.backends.cudnn.benchmark = enabled


def empty_cache(device: torch.device) -> None:
    if is_gpu(device):
        _gpu_api().empty_cache()


def reset_peak_memory(device: torch.device) -> None:
    if is_gpu(device):
        _gpu_api().reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device) -> tuple[float | None, float | None]:
    """Peak allocated and reserved since the last reset; unknown (None) on the CPU."""
    if not is_gpu(device):
        return None, None
    api = _gpu_api()
    return api.max_memory_allocated(device) / 2**20, api.max_memory_reserved(device) / 2**20


def _meminfo_bytes(key: str) -> int | None:
    """A field of /proc/meminfo (Linux); None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def free_memory_bytes(device: torch.device) -> int | None:
    """Bytes that can still be allocated on ``device``; None when that cannot be known."""
    if not is_gpu(device):
        return _meminfo_bytes("MemAvailable")
    api = _gpu_api()
    free, _ = api.get_memory_info(device)
    # Blocks PyTorch's caching allocator holds but does not use are free to us too.
    return free + api.memory_reserved(device) - api.memory_allocated(device)


def total_memory_bytes(device: torch.device) -> int | None:
    if not is_gpu(device):
        return _meminfo_bytes("MemTotal")
    return torch.cuda.get_device_properties(device).total_memory


MIB = 1 << 20
# Memory-side caches behind L2 that torch's L2_cache_size leaves out, by AMD gfx target (the
# part of gcnArchName before ':'). AMD CDNA 3 white paper: MI300X, MI300A and MI325X (gfx942)
# have a 256 MB AMD Infinity Cache; AMD CDNA 4 white paper: MI350X and MI355X (gfx950) keep it.
INFINITY_CACHE_BYTES = {"gfx942": 256 * MIB, "gfx950": 256 * MIB}


@dataclass(frozen=True)
class CacheInfo:
    """The device's last-level cache as far as torch tells (plus what it is known to leave out);
    ``size_bytes`` None when unknown."""

    size_bytes: int | None
    source: str

    def describe(self) -> str:
        if self.size_bytes is None:
            return self.source
        return f"{self.size_bytes / MIB:.0f} MiB ({self.source})"


def last_level_cache(device: torch.device, properties: object = None, hip: str | None = None
                    ) -> CacheInfo:
    """The last-level cache of ``device`` (L2, or AMD's Infinity Cache behind it). ``properties``
    and ``hip`` default to torch's device properties and the build's HIP version (tests pass
    fakes)."""
    if not is_gpu(device):
        return CacheInfo(None, "unknown: torch does not report CPU caches")
    if properties is None:
        properties = torch.cuda.get_device_properties(device)
    if hip is None:
        hip = torch.version.hip
    l2_bytes = getattr(properties, "L2_cache_size", 0) or 0
    if hip:
        target = str(getattr(properties, "gcnArchName", "")).split(":")[0]
        infinity = INFINITY_CACHE_BYTES.get(target)
        if infinity is not None and infinity > l2_bytes:
            return CacheInfo(infinity, f"{target} Infinity Cache, behind an L2 of "
                                       f"{l2_bytes / MIB:.0f} MiB")
    if not l2_bytes:
        return CacheInfo(None, "unknown: the device reports no L2 size")
    return CacheInfo(l2_bytes, "L2_cache_size")


def cap_memory(device: torch.device, budget_bytes: float) -> float:
    """Cap the caching allocator at ``budget_bytes`` as if the GPU were smaller; the fraction."""
    fraction = min(1.0, budget_bytes / torch.cuda.get_device_properties(device).total_memory)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    return fraction


# The CPU allocator raises plain RuntimeErrors with these words (c10's DefaultCPUAllocator).
_CPU_OUT_OF_MEMORY = ("can't allocate memory", "not enough memory")


def is_out_of_memory(error: BaseException) -> bool:
    """True when ``error`` says the device (GPU or host) ran out of memory."""
    if isinstance(error, torch.OutOfMemoryError):       # CUDA and HIP allocators
        return True
    return isinstance(error, RuntimeError) and any(words in str(error)
                                                   for words in _CPU_OUT_OF_MEMORY)


# ---------------------------------------------------------------- half precision

def _cpu_has(feature: str) -> bool:
    probe = getattr(torch.cpu, f"_is_{feature}_supported", None)
    try:
        return bool(probe()) if probe is not None else False
    except RuntimeError:
        return False


def slow_half_reason(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why FP16 or BF16 arithmetic is slow on ``device`` (no matrix units or vector
    instructions for it), or None when it is not known to be."""
    if dtype not in (torch.float16, torch.bfloat16):
        return None
    if not is_gpu(device):
        if dtype == torch.float16 and not _cpu_has("amx_fp16"):
            return ("this CPU has no FP16 arithmetic instructions (AMX-FP16), so every "
                    "operation converts to FP32 and back")
        if dtype == torch.bfloat16 and not cpu_has_fast_bf16():
            return ("this CPU has no BF16 instructions (AVX512-BF16 or AMX), so every "
                    "operation converts to FP32 and back")
        return None
    if torch.version.hip:
        # MI50/MI60 (gfx906) and RDNA 1/2 (gfx10xx) have no BF16 dot products or matrix
        # units; PyTorch's is_bf16_supported() answers True on every ROCm GPU.
        arch = getattr(torch.cuda.get_device_properties(device), "gcnArchName", "")
        base = arch.split(":")[0]
        if dtype == torch.bfloat16 and (base in ("gfx900", "gfx906") or base.startswith("gfx10")):
            return f"this GPU ({base}) has no BF16 matrix or dot-product instructions"
        return None
    capability = torch.cuda.get_device_capability(device)
    if dtype == torch.bfloat16 and capability < (8, 0):
        return (f"this GPU (compute capability {capability[0]}.{capability[1]}) has no BF16 "
                f"tensor cores")
    # FP16 runs at 1/64 of FP32 on Maxwell (5.x) and consumer Pascal (6.1); P100 (6.0) and
    # Jetson TX2 (6.2) run it at twice FP32.
    if dtype == torch.float16 and (capability < (6, 0) or capability == (6, 1)):
        return (f"this GPU (compute capability {capability[0]}.{capability[1]}) runs FP16 "
                f"arithmetic far slower than FP32")
    return None


# FP8 matrix units and the FP8 encodings they take. NVIDIA Ada (sm_89) and Hopper (sm_90) and
# later take the OCP formats (E4M3 with no infinities: torch.float8_e4m3fn; E5M2). AMD CDNA 3
# (gfx942: MI300A, MI300X, MI325X) takes the earlier "FNUZ" variants (no negative zero, one NaN:
# torch.float8_e4m3fnuz, float8_e5m2fnuz); CDNA 4 (gfx950: MI350X, MI355X) and RDNA 4 (gfx12xx)
# take the OCP ones (AMD CDNA 3 and CDNA 4 ISA guides). Nothing older has FP8 matrix units.
_OCP_FP8 = ("e4m3fn", "e5m2")
_FNUZ_FP8 = ("e4m3fnuz", "e5m2fnuz")


def fp8_formats_of(hip: bool, capability: tuple[int, int] | None = None,
                   gcn_arch: str = "") -> tuple[str, ...]:
    """The FP8 formats a GPU's matrix units take (empty: none), from what torch reports of it:
    ``capability`` on NVIDIA, ``gcn_arch`` (``gcnArchName``) on AMD."""
    if hip:
        base = gcn_arch.split(":")[0]
        if base == "gfx942":
            return _FNUZ_FP8
        return _OCP_FP8 if base == "gfx950" or base.startswith("gfx12") else ()
    return _OCP_FP8 if capability is not None and tuple(capability) >= (8, 9) else ()


def fp8_formats(device: torch.device) -> tuple[str, ...]:
    """The FP8 formats ``device``'s matrix units take; empty on the CPU and on older GPUs."""
    if not is_gpu(device):
        return ()
    if torch.version.hip:
        arch = getattr(torch.cuda.get_device_properties(device), "gcnArchName", "")
        return fp8_formats_of(True, gcn_arch=arch)
    return fp8_formats_of(False, capability=torch.cuda.get_device_capability(device))


def fp8_e4m3_dtype(device: torch.device) -> torch.dtype | None:
    """The E4M3 dtype ``device``'s FP8 matrix units take (float8_e4m3fnuz on MI300, the OCP
    float8_e4m3fn elsewhere); None where it has none."""
    formats = fp8_formats(device)
    return getattr(torch, f"float8_{formats[0]}") if formats else None


def compute_capability(device: torch.device) -> tuple[int, int] | None:
    """An NVIDIA GPU's compute capability ((9, 0) for an H100); None on the CPU and on AMD,
    whose kernels are chosen by architecture instead (:func:`architecture`)."""
    if vendor(device) is not Vendor.NVIDIA:
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return major, minor


def no_fp8_reason(device: torch.device) -> str | None:
    """Why ``device`` cannot run FP8 matmuls, or None when it can."""
    if fp8_formats(device):
        return None
    if not is_gpu(device):
        return "the CPU has no FP8 matrix units"
    return (f"this GPU ({architecture(device)}) has no FP8 matrix units (NVIDIA from sm_89, "
            f"AMD from gfx942)")


def cpu_has_fast_bf16() -> bool:
    """BF16 instructions on this CPU: AVX512-BF16 or AMX tiles."""
    return _cpu_has("avx512_bf16") or _cpu_has("amx_tile")


# ---------------------------------------------------------------- what the device is

def device_name(device: torch.device) -> str:
    if is_gpu(device):
        return torch.cuda.get_device_name(device)
    return cpu_model()


def architecture(device: torch.device) -> str:
    if not is_gpu(device):
        return platform.machine()
    props = torch.cuda.get_device_properties(device)
    if torch.version.hip:
        return getattr(props, "gcnArchName", "unknown")     # e.g. gfx942:sramecc+:xnack-
    return f"sm_{props.major}{props.minor}"


@dataclass(frozen=True)
class GpuIdentity:
    """What torch knows that names a GPU, for finding the same GPU in a vendor's management
    library (NVML, amdsmi), which numbers every GPU of the machine, not the visible ones."""

    index: int | None = None            # torch's index, after *_VISIBLE_DEVICES renumbering
    uuid: str | None = None             # torch spells it without NVML's "GPU-" prefix
    pci_bus_id: str | None = None       # "dddd:bb:dd", hexadecimal


def gpu_identity(device: torch.device) -> GpuIdentity:
    """Index, UUID and PCI address of the GPU ``device`` (the current one where it has no
    index); the UUID and PCI fields are None where this torch's device properties lack them.
    Nothing names the CPU: it gets an empty identity."""
    if not is_gpu(device):
        return GpuIdentity()
    index = torch.cuda.current_device() if device.index is None else device.index
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    uuid_text = str(uuid) if uuid is not None else None
    if uuid_text is not None and not uuid_text.replace("-", "").strip("0"):
        uuid_text = None                # all zeros: the runtime has no UUID for it
    pci = None
    # Read by name: torch's stubs do not declare the PCI fields (older releases lack them).
    domain, bus, slot = (getattr(props, a, None)
                         for a in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
    if domain is not None and bus is not None and slot is not None:
        pci = f"{domain:04x}:{bus:02x}:{slot:02x}"
    return GpuIdentity(index, uuid_text, pci)


def parse_cpu_list(text: str) -> set[int]:
    """The CPUs of a Linux CPU list ("0-15,32-47"); ValueError when it is not one."""
    cpus: set[int] = set()
    for item in text.strip().split(","):
        low, _, high = item.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def local_cpus(device: torch.device, sysfs: str = "/sys/bus/pci/devices") -> set[int] | None:
    """The CPUs attached to the same NUMA node as the GPU ``device`` (the kernel's
    ``local_cpulist`` of its PCI function), or None where that is unknown: a process bound
    to them copies to and from the GPU without crossing sockets."""
    pci = gpu_identity(device).pci_bus_id
    if pci is None:
        return None
    try:
        with open(f"{sysfs}/{pci}.0/local_cpulist", encoding="ascii") as listing:
            return parse_cpu_list(listing.read()) or None
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------- the CPU's name, through collect_env
#
# torch.utils.collect_env (what PyTorch's bug template runs) names the CPU model here, and the OS
# and the C library in platform/environment.py. Only its cheap parts are called, once per process
# and never while timing: get_os (lsb_release or /etc/*-release, about 50 ms here),
# get_libc_version (no process) and get_cpu_info (lscpu, about 15 ms). get_env_info is not: it
# runs pip and conda (over 2 s here). Nor are its CUDA and driver probes: get_running_cuda_version
# asks the nvcc on PATH, which need not be the runtime this PyTorch loaded (torch.version.cuda
# is), get_cudnn_version searches the disk for libraries where torch.backends.cudnn.version()
# names the one loaded, and get_nvidia_driver_version starts nvidia-smi where NVML
# (environment.py) answers in-process. It knows nothing of AMD's driver: /sys/module/amdgpu/version
# stays.

# The keys that name the CPU in collect_env's CPU text: lscpu (Linux), Win32_Processor (Windows).
_CPU_NAME_KEYS = ("Model name", "Name")


def _cpu_model_in(cpu_info: str) -> str | None:
    """The CPU's model in collect_env.get_cpu_info's text; None where it names none (no lscpu:
    the text is the shell's error)."""
    for line in cpu_info.splitlines():
        key, colon, value = line.partition(":")
        if colon and key.strip() in _CPU_NAME_KEYS and value.strip():
            return value.strip()
    return None


def _proc_cpuinfo_model() -> str | None:
    """/proc/cpuinfo's model name: Linux without lscpu (a slim container)."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def collect_env_answer(probe: Callable[..., str | None], *args: object) -> str | None:
    """collect_env's answer, or None where its probe fails: a description of the host is not
    worth a failed run."""
    try:
        return probe(*args) or None
    except Exception:                                         # noqa: BLE001 (any failure: unknown)
        return None


@functools.cache
def cpu_model() -> str:
    return (_cpu_model_in(collect_env_answer(collect_env.get_cpu_info, collect_env.run) or "")
            or _proc_cpuinfo_model() or platform.processor() or platform.machine() or "CPU")


# ---------------------------------------------------------------- vendor rules

def build_versions() -> dict:
    """PyTorch's version and the GPU runtime it was built for (None where it was not)."""
    return {"torch": torch.__version__, "hip": torch.version.hip, "cuda": torch.version.cuda}


def runtime_text() -> str:
    """``ROCm 6.4.1`` or ``CUDA 12.8``: the GPU runtime this PyTorch was built for."""
    return f"ROCm {torch.version.hip}" if torch.version.hip else f"CUDA {torch.version.cuda}"


def rocm_version(device: torch.device | None = None) -> str | None:
    """The HIP version when this is a ROCm build (and ``device``, if given, is a GPU)."""
    if device is not None and not is_gpu(device):
        return None
    return torch.version.hip or None


def dnn_library() -> str:
    """The convolution library under torch.backends.cudnn: MIOpen on ROCm, cuDNN on CUDA."""
    return "MIOpen" if torch.version.hip else "cuDNN"


def conv_autotuner_name() -> str:
    """What ``torch.backends.cudnn.benchmark`` switches: MIOpen's find mode on ROCm."""
    return "MIOpen find mode" if torch.version.hip else "cuDNN benchmark"


def tf32_convolutions_exist() -> bool:
    """MIOpen has no TF32 convolutions; cuDNN has them (Ampere and newer)."""
    return not torch.version.hip


class TF32Policy(Protocol):
    """What :func:`tf32_on_rocm` reads of a precision (``settings.precision.Precision``)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def name(self) -> str: ...

    @property
    def tf32(self) -> bool: ...


P = TypeVar("P", bound=TF32Policy)


def tf32_on_rocm(policy: P, hip_version: str | None, conv_model: bool,
                 environ: Mapping[str, str]) -> tuple[P, str | None]:
    """What TF32 really does on a ROCm build (``policy``: a precision.Precision), and a note
    saying so.

    On ROCm, PyTorch's TF32 switch reaches hipBLASLt only when ``HIPBLASLT_ALLOW_TF32=1`` is set
    (hipBLASLt's environment variable), and MIOpen has no TF32 convolutions at all. Where TF32
    is asked for but cannot take effect, the work runs in FP32, so MFU divides by the FP32 peak.
    """
    if not hip_version or not policy.tf32:
        return policy, None
    hipblaslt = environ.get("HIPBLASLT_ALLOW_TF32") == "1"
    if conv_model or not hipblaslt:
        why = ("MIOpen has no TF32 convolutions" if conv_model else
               "hipBLASLt uses TF32 only with HIPBLASLT_ALLOW_TF32=1, which is not set")
        demoted = (dataclasses.replace(policy, peak_key="fp32_matrix") if policy.name == "tf32"
                   else policy)
        return demoted, (f"TF32 asked for, but on ROCm {hip_version} {why}: FP32 runs instead"
                         + (" and MFU uses the FP32 peak" if policy.name == "tf32" else ""))
    return policy, (f"TF32 on ROCm {hip_version}: matmuls through hipBLASLt "
                    f"(HIPBLASLT_ALLOW_TF32=1); MIOpen convolutions stay FP32")
