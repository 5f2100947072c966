"""Multi-process runs: which launcher started us, who we are, and what all ranks measured.

Launchers (torch.distributed is the engine: NCCL, which is RCCL on ROCm, on GPUs; gloo on the CPU):

* torchrun, one or many nodes: the global rank comes from ``RANK``, the device from
  ``LOCAL_RANK`` (the older tool took the global rank from LOCAL_RANK and broke multi-node runs).
* SLURM ``srun`` without torchrun: ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``, with
  the rendezvous from ``MASTER_ADDR``/``MASTER_PORT`` or ``--dist-url``.
* the older tool's manual launch: ``--distributed_dataparallel --rank R --world-size W
  --dist-url tcp://host:port --dist-backend nccl [--device_ids 0,1]``; each process starts one
  worker per listed device, worker i being global rank R * n + i of W * n.

Under torchrun and SLURM ``--batch-size`` is the global batch, split evenly across ranks; the
manual launch keeps the older meaning: the batch of this process, split over its devices.
"""
from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, replace
from typing import Mapping

import torch
import torch.distributed as dist

from .device import is_gpu
from .errors import UsageError

# Set by tests (and by anyone checking failure handling): this global rank raises just before
# the timed region, as a rank that dies mid-run would.
FAIL_RANK_VARIABLE = "MICROBENCH_FAIL_RANK"


@dataclass(frozen=True)
class Launch:
    """Who this process is in the job."""

    launcher: str = "single"          # single | torchrun | slurm | manual
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    backend: str | None = None        # None: nccl on GPUs, gloo on the CPU
    init_method: str | None = None
    device_index: int | None = None   # the GPU of this rank
    workers: int = 1                  # manual launch: workers this process starts
    local_batch: int = 0
    global_batch: int = 0

    @property
    def distributed(self) -> bool:
        return self.launcher != "single"

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _int_env(environ: Mapping[str, str], name: str) -> int:
    try:
        return int(environ[name])
    except ValueError:
        raise UsageError(f"environment variable {name}={environ[name]!r} is not an integer") from None


def _split(batch: int, parts: int, what: str) -> int:
    if batch % parts:
        raise UsageError(f"--batch-size {batch} does not split evenly across {parts} {what}: "
                         f"use a multiple of {parts}")
    return batch // parts


def _manual(config, environ: Mapping[str, str]) -> Launch:
    missing = [flag for flag, value in (("--rank", config.rank), ("--world-size", config.world_size),
                                        ("--dist-backend", config.dist_backend),
                                        ("--dist-url", config.dist_url)) if value is None]
    if missing:
        raise UsageError("--distributed_dataparallel needs --rank, --world-size, --dist-backend "
                         f"and --dist-url (missing: {', '.join(missing)})")
    if not 0 <= config.rank < config.world_size:
        raise UsageError(f"--rank {config.rank} must be in [0, --world-size {config.world_size})")
    workers = len(config.device_ids) if config.device_ids else 1
    local = _split(config.batch_size, workers, "devices of this process")
    return Launch(launcher="manual", rank=config.rank * workers,
                  world_size=config.world_size * workers, backend=config.dist_backend,
                  init_method=config.dist_url, workers=workers,
                  device_index=config.device_ids[0] if config.device_ids else None,
                  local_batch=local, global_batch=local * config.world_size * workers)


def _from_environment(config, environ: Mapping[str, str]) -> Launch | None:
    if "TORCHELASTIC_RUN_ID" in environ or {"RANK", "WORLD_SIZE", "LOCAL_RANK"} <= set(environ):
        launcher, rank, local, world = ("torchrun", _int_env(environ, "RANK"),
                                        _int_env(environ, "LOCAL_RANK"),
                                        _int_env(environ, "WORLD_SIZE"))
        init_method = "env://"
    elif "SLURM_PROCID" in environ and _int_env(environ, "SLURM_NTASKS") > 1:
        launcher, rank, local, world = ("slurm", _int_env(environ, "SLURM_PROCID"),
                                        _int_env(environ, "SLURM_LOCALID"),
                                        _int_env(environ, "SLURM_NTASKS"))
        init_method = config.dist_url or _slurm_rendezvous(environ)
    else:
        return None
    local_batch = _split(config.batch_size, world, "ranks")
    return Launch(launcher=launcher, rank=rank, local_rank=local, world_size=world,
                  backend=config.dist_backend, init_method=init_method, device_index=local,
                  local_batch=local_batch, global_batch=config.batch_size)


def _slurm_rendezvous(environ: Mapping[str, str]) -> str:
    if "MASTER_ADDR" in environ and "MASTER_PORT" in environ:
        return "env://"
    raise UsageError("under srun, set MASTER_ADDR and MASTER_PORT (e.g. the first host of "
                     "$SLURM_JOB_NODELIST and a free port) or pass --dist-url tcp://host:port")


def detect(config, environ: Mapping[str, str] | None = None) -> Launch:
    """The launch this process belongs to; usage errors are raised before any rendezvous, so
    every rank fails the same way at once instead of waiting for the others."""
    environ = os.environ if environ is None else environ
    if config.distributed_dataparallel:
        return _manual(config, environ)
    stray = [flag for flag, value in (("--rank", config.rank), ("--world-size", config.world_size),
                                      ("--device_ids", config.device_ids)) if value is not None]
    if stray:
        raise UsageError(f"{', '.join(stray)} only apply with --distributed_dataparallel "
                         f"(under torchrun or srun the launcher sets them)")
    launch = _from_environment(config, environ)
    if launch is None:
        return Launch(local_batch=config.batch_size, global_batch=config.batch_size)
    return launch


def rank_prefix(environ: Mapping[str, str] | None = None) -> str:
    """'[rank N] ' when the launcher says this process is one rank of several (error lines)."""
    environ = os.environ if environ is None else environ
    for rank_name, size_name in (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        rank, size = environ.get(rank_name), environ.get(size_name, "1")
        if rank is not None and size.isdigit() and int(size) > 1:
            return f"[rank {rank}] "
    return ""


def worker_launch(launch: Launch, index: int, device_ids) -> Launch:
    """Worker ``index`` of a manual launch that starts several."""
    return replace(launch, rank=launch.rank + index, local_rank=index,
                   device_index=device_ids[index] if device_ids else None)


def init_process_group(launch: Launch, device: torch.device, timeout_s: float) -> None:
    backend = launch.backend or ("nccl" if is_gpu(device) else "gloo")
    kwargs = {}
    if launch.launcher != "torchrun":      # torchrun's env:// carries rank and world size
        kwargs.update(rank=launch.rank, world_size=launch.world_size)
    dist.init_process_group(backend=backend, init_method=launch.init_method,
                            timeout=datetime.timedelta(seconds=timeout_s), **kwargs)


def barrier(device: torch.device) -> None:
    if is_gpu(device) and dist.get_backend() == "nccl":
        dist.barrier(device_ids=[device.index])
    else:
        dist.barrier()


def fail_if_asked(launch: Launch) -> None:
    value = os.environ.get(FAIL_RANK_VARIABLE)
    if value is not None and int(value) == launch.rank:
        raise RuntimeError(f"failure injected on rank {launch.rank} by {FAIL_RANK_VARIABLE}")


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def gather_to_main(item):
    """Every rank's ``item`` on global rank 0 (in rank order); None on the other ranks."""
    gathered = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(item, gathered, dst=0)
    return gathered


def backend_name() -> str | None:
    return dist.get_backend() if dist.is_available() and dist.is_initialized() else None


def ddp_wrapper(config, device: torch.device):
    """A function that wraps a model in DistributedDataParallel with the --ddp-* settings."""
    from torch.nn.parallel import DistributedDataParallel

    def wrap(model: torch.nn.Module) -> torch.nn.Module:
        return DistributedDataParallel(
            model, device_ids=[device.index] if is_gpu(device) else None,
            bucket_cap_mb=config.ddp_bucket_cap_mb, static_graph=config.ddp_static_graph,
            gradient_as_bucket_view=config.ddp_gradient_as_bucket_view)
    return wrap
