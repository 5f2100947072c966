"""Multi-process runs: which launcher started us, who we are, and what all ranks measured.

Launchers (torch.distributed is the engine: NCCL, which is RCCL on ROCm, on GPUs; gloo on the CPU):

* torchrun, one or many nodes: the global rank comes from ``RANK``, the device from
  ``LOCAL_RANK`` (the older tool took the global rank from LOCAL_RANK and broke multi-node runs).
* SLURM ``srun`` without torchrun: ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``, with
  the rendezvous from ``MASTER_ADDR``/``MASTER_PORT`` or ``--dist-url``.
* the older tool's manual launch: ``--distributed_dataparallel --rank R --world-size W
  --dist-url tcp://host:port --dist-backend nccl [--device_ids 0,1]``; each process starts one
  worker per listed device, worker i being global rank R * n + i of W * n.

Under torchrun and SLURM ``--batch-size`` is the global batch, split evenly across the
data-parallel ranks (every rank, unless the strategy says otherwise: ``Launch.data_parallel``);
the manual launch keeps the older meaning: the batch of this process, split over its devices.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence, TypeVar

import torch
import torch.distributed as dist

from microbench.platform import devices
from microbench.platform.errors import BenchmarkError, DistributedFailure, RankFailed, UsageError
from microbench.platform.process import env_rank_prefix

T = TypeVar("T")

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
    # The node this process runs on, as its launcher numbers nodes (torchrun's GROUP_RANK,
    # SLURM_NODEID, a manual launch's --rank); None where none does. With the host name it
    # names a node that shares its host name with another (containers, simulated nodes).
    node_rank: int | None = None
    backend: str | None = None        # None: nccl on GPUs, gloo on the CPU
    init_method: str | None = None
    device_index: int | None = None   # the GPU of this rank
    workers: int = 1                  # manual launch: workers this process starts
    # The ranks of this node (torchrun's LOCAL_WORLD_SIZE, srun's SLURM_NTASKS_PER_NODE, a
    # manual launch's workers); None where the launcher does not say.
    local_world_size: int | None = 1
    # Ranks that each take their own share of the global batch (the strategy's data-parallel
    # degree: every rank under DDP, FSDP and HSDP); the other world_size / data_parallel ranks
    # of a share (tensor or pipeline parallel) take the same one. The batch split and the
    # global batch read it.
    data_parallel: int = 1
    local_batch: int = 0
    global_batch: int = 0

    @property
    def sharing_a_batch(self) -> int:
        """Ranks that take the same share of the batch (1: every rank its own)."""
        return self.world_size // self.data_parallel

    @property
    def distributed(self) -> bool:
        return self.launcher != "single"

    @property
    def is_main(self) -> bool:
        return self.rank == 0


# What torchrun sets for every worker; a process started by hand as one rank sets them all too.
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")

# The launch of this process once detected, for the rank prefix of its error lines (the manual
# launch has no RANK variable to read it from).
_current: Launch | None = None


def _int_env(environ: Mapping[str, str], name: str, low: int = 0, high: int = 2**31 - 1) -> int:
    if name not in environ:
        raise UsageError(f"environment variable {name} is not set, but the launcher's other "
                         f"variables are: set it, or launch with torchrun or srun")
    try:
        value = int(environ[name])
    except ValueError:
        raise UsageError(f"environment variable {name}={environ[name]!r} is not an "
                         f"integer") from None
    if not low <= value <= high:
        raise UsageError(f"environment variable {name}={value} must be in [{low}, {high}]")
    return value


def _optional_int_env(environ: Mapping[str, str], name: str) -> int | None:
    """A launcher's variable that may be absent (a rank's variables set by hand)."""
    return _int_env(environ, name) if name in environ else None


def _check_torchrun_environment(environ: Mapping[str, str]) -> None:
    """A partial environment (RANK without WORLD_SIZE, no MASTER_ADDR...) would end in a
    KeyError or a silent single-process run: name what is missing instead."""
    missing = [name for name in TORCHRUN_VARIABLES if name not in environ]
    if missing:
        present = [name for name in TORCHRUN_VARIABLES if name in environ]
        raise UsageError(f"partial launcher environment: "
                         f"{', '.join(present) or 'TORCHELASTIC_RUN_ID'} set but "
                         f"{', '.join(missing)} not; launch with torchrun, set all of "
                         f"{', '.join(TORCHRUN_VARIABLES)}, or unset them for a single process")
    _int_env(environ, "MASTER_PORT", 1, 65535)


def _split(batch: int, parts: int, what: str) -> int:
    if batch % parts:
        raise UsageError(f"--batch-size {batch} does not split evenly across {parts} {what}: "
                         f"use a multiple of {parts}")
    return batch // parts


# What the strategy says of a launch: its data-parallel degree (None: every rank).
DataParallel = Callable[["Launch"], int]


def _degree(launch: Launch, data_parallel: DataParallel | None) -> int:
    """The data-parallel degree ``data_parallel`` gives ``launch``, checked: a divisor of its
    world size."""
    degree = launch.world_size if data_parallel is None else data_parallel(launch)
    if not 1 <= degree <= launch.world_size or launch.world_size % degree:
        raise ValueError(f"a data-parallel degree of {degree} does not divide "
                         f"{launch.world_size} ranks")
    return degree


def _manual(config: LaunchFlags, environ: Mapping[str, str],
            data_parallel: DataParallel | None = None) -> Launch:
    rank, world = config.rank, config.world_size
    missing = [flag for flag, value in (("--rank", rank), ("--world-size", world),
                                        ("--dist-backend", config.dist_backend),
                                        ("--dist-url", config.dist_url)) if value is None]
    if missing or rank is None or world is None:
        raise UsageError("--distributed_dataparallel needs --rank, --world-size, --dist-backend "
                         f"and --dist-url (missing: {', '.join(missing)})")
    if not 0 <= rank < world:
        raise UsageError(f"--rank {rank} must be in [0, --world-size {world})")
    workers = len(config.device_ids) if config.device_ids else 1
    global _current                  # known from here on: later error lines carry the rank
    _current = Launch(launcher="manual", rank=rank * workers)
    local = _split(config.batch_size, workers, "devices of this process")
    launch = Launch(launcher="manual", rank=rank * workers, node_rank=rank,
                    world_size=world * workers, backend=config.dist_backend,
                    init_method=config.dist_url, workers=workers, local_world_size=workers,
                    device_index=config.device_ids[0] if config.device_ids else None)
    degree = _degree(launch, data_parallel)
    return replace(launch, data_parallel=degree, local_batch=local, global_batch=local * degree)


def _from_environment(config: LaunchFlags, environ: Mapping[str, str],
                      data_parallel: DataParallel | None = None) -> Launch | None:
    if "TORCHELASTIC_RUN_ID" in environ or any(name in environ
                                               for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        _check_torchrun_environment(environ)
        world = _int_env(environ, "WORLD_SIZE", 1)
        launcher, rank, local = ("torchrun", _int_env(environ, "RANK", 0, world - 1),
                                 _int_env(environ, "LOCAL_RANK"))
        node = _optional_int_env(environ, "GROUP_RANK")
        here = _optional_int_env(environ, "LOCAL_WORLD_SIZE")
        init_method = "env://"
    elif "SLURM_PROCID" in environ and "SLURM_NTASKS" in environ \
            and _int_env(environ, "SLURM_NTASKS", 1) > 1:
        world = _int_env(environ, "SLURM_NTASKS", 1)
        launcher, rank, local = ("slurm", _int_env(environ, "SLURM_PROCID", 0, world - 1),
                                 _int_env(environ, "SLURM_LOCALID"))
        node = _optional_int_env(environ, "SLURM_NODEID")
        # srun sets it only where every node runs as many tasks (--ntasks-per-node).
        here = _optional_int_env(environ, "SLURM_NTASKS_PER_NODE") \
            if environ.get("SLURM_NTASKS_PER_NODE", "").isdigit() else None
        init_method = config.dist_url or _slurm_rendezvous(environ)
    else:
        return None
    launch = Launch(launcher=launcher, rank=rank, local_rank=local, world_size=world,
                    node_rank=node, backend=config.dist_backend, init_method=init_method,
                    device_index=local, local_world_size=here)
    degree = _degree(launch, data_parallel)
    what = "ranks" if degree == world else "data-parallel groups of ranks"
    return replace(launch, data_parallel=degree,
                   local_batch=_split(config.batch_size, degree, what),
                   global_batch=config.batch_size)


class LaunchFlags(Protocol):
    """What :func:`detect` reads of the flags: ``settings.config.BenchConfig``, or the node
    check's own (which has no manual-launch flags)."""

    @property
    def distributed_dataparallel(self) -> bool: ...

    @property
    def rank(self) -> int | None: ...

    @property
    def world_size(self) -> int | None: ...

    @property
    def device_ids(self) -> tuple[int, ...] | None: ...

    @property
    def batch_size(self) -> int: ...

    @property
    def dist_backend(self) -> str | None: ...

    @property
    def dist_url(self) -> str | None: ...


def _slurm_rendezvous(environ: Mapping[str, str]) -> str:
    if "MASTER_ADDR" in environ and "MASTER_PORT" in environ:
        return "env://"
    raise UsageError("under srun, set MASTER_ADDR and MASTER_PORT (e.g. the first host of "
                     "$SLURM_JOB_NODELIST and a free port) or pass --dist-url tcp://host:port")


def detect(config: LaunchFlags, environ: Mapping[str, str] | None = None,
           data_parallel: DataParallel | None = None) -> Launch:
    """The launch this process belongs to; usage errors are raised before any rendezvous, so
    every rank fails the same way at once instead of waiting for the others. ``data_parallel``:
    the strategy's data-parallel degree of the launch (None: every rank), which the batch is
    split by."""
    environ = os.environ if environ is None else environ
    _fail_rank(environ)                          # a test hook, but checked like the others
    if config.distributed_dataparallel:
        launch = _manual(config, environ, data_parallel)
        check_fail_rank(launch.world_size, environ)
        return launch
    stray = [flag for flag, value in (("--rank", config.rank), ("--world-size", config.world_size),
                                      ("--device_ids", config.device_ids)) if value is not None]
    if stray:
        raise UsageError(f"{', '.join(stray)} only apply with --distributed_dataparallel "
                         f"(under torchrun or srun the launcher sets them)")
    found = _from_environment(config, environ, data_parallel)
    if found is None:
        launch = Launch(local_batch=config.batch_size, global_batch=config.batch_size)
    else:
        launch = found
    if found is not None and launch.distributed:
        check_fail_rank(launch.world_size, environ)
    global _current
    _current = launch
    return launch


def forget() -> None:
    """A new invocation in this process (tests call main() many times) starts unknown."""
    global _current
    _current = None


def rank_prefix(environ: Mapping[str, str] | None = None) -> str:
    """'[rank N] ' when this process is one rank of several (error lines): from the detected
    launch (the manual launch sets no variable), else from the launcher's variables."""
    if environ is None and _current is not None:
        return f"[rank {_current.rank}] " if _current.distributed else ""
    return env_rank_prefix(environ)


def worker_launch(launch: Launch, index: int, device_ids: Sequence[int] | None) -> Launch:
    """Worker ``index`` of a manual launch that starts several."""
    return replace(launch, rank=launch.rank + index, local_rank=index,
                   device_index=device_ids[index] if device_ids else None)


# How often a thread waiting for a collective lets the signal handlers run.
SIGNAL_POLL_S = 0.1


def interruptible(call: Callable[[], T]) -> T:
    """The result of a blocking rendezvous or collective, waited for so that SIGTERM and Ctrl-C
    still work while a peer never comes.

    Python runs signal handlers between bytecodes of the main thread, so a main thread blocked
    inside torch.distributed's C++ (a rendezvous whose peers died, a gather one rank never
    reaches) would ignore torchrun's SIGTERM until torchrun kills it. The call runs in a helper
    thread instead, and the main thread waits for it in short slices.

    The helper runs on the caller's GPU: a current device belongs to a thread, and a new one
    starts on GPU 0, where NCCL would see every rank of the node ("Duplicate GPU") and object
    collectives would stage their tensors."""
    if threading.current_thread() is not threading.main_thread():
        return call()
    device = devices.current_gpu()
    values: list[T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            if device is not None:
                devices.activate(device)
            values.append(call())
        except BaseException as error:             # noqa: BLE001 (re-raised in the caller)
            errors.append(error)

    helper = threading.Thread(target=target, name="microbench-collective", daemon=True)
    helper.start()
    while helper.is_alive():
        helper.join(SIGNAL_POLL_S)
    if errors:
        raise errors[0]
    return values[0]


def _new_group(backend: str, device: torch.device, timeout_s: float, init_method: str | None,
               rank: int = -1, world_size: int = -1) -> None:
    """``dist.init_process_group`` bound to this rank's GPU where the backend drives GPUs: the
    group then knows its device (barriers and object collectives use it, and NCCL forms its
    communicator for it at once) instead of guessing it from the calling thread. ``rank`` and
    ``world_size`` -1: the launcher's environment gives them (torch's defaults)."""
    timeout = datetime.timedelta(seconds=timeout_s)
    if backend != "gloo" and devices.is_gpu(device):
        interruptible(lambda: dist.init_process_group(
            backend=backend, timeout=timeout, init_method=init_method, rank=rank,
            world_size=world_size, device_id=device))
    else:
        interruptible(lambda: dist.init_process_group(
            backend=backend, timeout=timeout, init_method=init_method, rank=rank,
            world_size=world_size))


def init_process_group(launch: Launch, device: torch.device, timeout_s: float,
                       coordination_only: bool = False) -> None:
    """The job's process group. ``coordination_only``: this process only meets the others and
    passes small objects (its trials run in worker processes, which form their own groups), so
    it takes gloo and never touches the GPU."""
    backend = "gloo" if coordination_only else (
        launch.backend or devices.collective_backend(device))
    if launch.launcher != "torchrun":      # torchrun's env:// carries rank and world size
        _new_group(backend, device, timeout_s, launch.init_method, launch.rank,
                   launch.world_size)
    else:
        _new_group(backend, device, timeout_s, launch.init_method)


def init_trial_group(launch: Launch, device: torch.device, timeout_s: float,
                     rendezvous: str) -> None:
    """A trial worker's process group, at the rendezvous rank 0 chose for this trial."""
    _new_group(launch.backend or devices.collective_backend(device), device, timeout_s,
               rendezvous, launch.rank, launch.world_size)


def rendezvous_host(launch: Launch) -> str:
    """The host the ranks reach rank 0 at: MASTER_ADDR under env:// (torchrun, SLURM), else the
    host of --dist-url's tcp:// address."""
    if launch.init_method == "env://" or not launch.init_method:
        return os.environ.get("MASTER_ADDR", "127.0.0.1")
    return urllib.parse.urlsplit(launch.init_method).hostname or "127.0.0.1"


def broadcast_from_main(objects: list, device: torch.device) -> None:
    """Replace ``objects`` on every rank by rank 0's, in place (staged on ``device`` where the
    backend needs a GPU tensor)."""
    staging = device if dist.get_backend() == "nccl" else None
    interruptible(lambda: dist.broadcast_object_list(objects, src=0, device=staging))


# --------------------------------------------------------------- ranks agree, or fail together

def agree(settings: dict, problem: BenchmarkError | None, result_name: str = "") -> str:
    """Right after the process group forms, every rank shows the others its settings and any
    problem it found before the run (an output path rank 0 cannot write). Ranks started with
    different settings would otherwise run mismatched collectives and hang until --dist-timeout;
    a rank that cannot run would leave the others waiting. Either way every rank stops now, with
    one line and the same exit code. Returns rank 0's result name, which names every rank's
    traces (rank 0 alone chooses it: it reads and writes the result directory)."""
    mine = {"settings": settings, "result_name": result_name,
            "problem": None if problem is None else (str(problem), problem.exit_code)}
    everyone: list = [None] * dist.get_world_size()
    interruptible(lambda: dist.all_gather_object(everyone, mine))
    if problem is not None:
        raise problem
    for rank, theirs in enumerate(everyone):
        if theirs["problem"] is not None:
            message, code = theirs["problem"]
            raise RankFailed(f"rank {rank} cannot run, so neither can this one: {message}", code)
    difference = first_difference([theirs["settings"] for theirs in everyone])
    if difference:
        raise UsageError(f"ranks were started with different settings: {difference}; start "
                         f"every rank with the same flags")
    return everyone[0]["result_name"]


# Field names whose flag is not the name in kebab case.
_FLAG_NAMES = {"compile_options": "--compileContext", "precision": "the precision mode",
               "device_type": "the device type", "local_batch": "the per-rank batch",
               "distributed_dataparallel": "--distributed_dataparallel"}


def first_difference(settings: list[dict]) -> str | None:
    """'--iterations is 20 on rank 0, 30 on rank 1' for the first setting that differs."""
    for key in settings[0]:
        values: dict[str, list[int]] = {}
        for rank, theirs in enumerate(settings):
            values.setdefault(repr(theirs.get(key)), []).append(rank)
        if len(values) > 1:
            name = _FLAG_NAMES.get(key, "--" + key.replace("_", "-"))
            shown = [f"{value} on rank{'s' if len(ranks) > 1 else ''} "
                     f"{','.join(map(str, ranks[:8]))}{'...' if len(ranks) > 8 else ''}"
                     for value, ranks in values.items()]
            return f"{name} is {', '.join(shown)}"
    return None


# Words of torch.distributed's and its backends' errors when a peer is gone or too slow.
_PEER_FAILURE_WORDS = ("timed out", "timeout", "connection closed", "connection reset",
                       "connection refused", "broken pipe", "peer", "socket", "aborted",
                       "watchdog", "heartbeat")

# Words that say the rendezvous address was never reached: only these get the address advice.
_UNREACHED_WORDS = ("timed out", "timeout", "connection refused")

# NCCL's (and RCCL's, which keeps its names) own reasons, most specific first, and what to do.
_BACKEND_ADVICE = (
    ("duplicate gpu", "two ranks of one node are on the same GPU: start at most one rank per "
                      "visible GPU (torchrun --nproc-per-node, --device_ids) and check "
                      "CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES on every rank"),
    ("unhandled cuda error", "the GPU runtime failed inside the collective: check the GPUs and "
                             "the driver, and rerun with NCCL_DEBUG=WARN for its reason"),
    ("unhandled system error", "a system call failed inside the collective (shared memory, "
                               "network interfaces, peer access): rerun with NCCL_DEBUG=INFO; "
                               "in a container, enlarge /dev/shm"),
    ("remote process exited", "another rank failed or was killed: see its error line"),
    ("invalid usage", "the collective library refused the call: rerun with NCCL_DEBUG=WARN "
                      "for its reason"),
    ("internal error", "the collective library failed: rerun with NCCL_DEBUG=INFO for its "
                       "reason"),
)


def is_peer_failure(error: BaseException) -> bool:
    if isinstance(error, dist.DistError):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and any(word in text for word in _PEER_FAILURE_WORDS)


def backend_reason(text: str) -> tuple[str, str] | None:
    """(what NCCL said, advice that fits it) where an error carries NCCL's own reason: its
    "Last error:" line where it gave one, else its error class ("invalid usage")."""
    library = re.search(r"[NR]CCL error[^,\n]*, ([^(\n]+)", text)
    if library is None:
        return None
    last = re.search(r"Last error:\s*(\S[^\n]*)", text)
    said = " ".join((last.group(1) if last else library.group(1)).split())
    lowered = text.lower()
    for words, advice in _BACKEND_ADVICE:
        if words in lowered:
            return said, advice
    return said, "rerun with NCCL_DEBUG=WARN for the collective library's reason"


# Where c10d's C++ error text turns from its reason to its stack ("Exception raised from
# ... frame #0: ..."): dozens of lines of library frames that say nothing to the user.
_FRAMES = re.compile(r"Exception raised from |\bframe #\d+:")


def _without_frames(text: str) -> str:
    """The library's error text without its C++ frames (the reason is before them)."""
    found = _FRAMES.search(text)
    return text if found is None else text[:found.start()].rstrip()


def _failure_line(launch: Launch, timeout_s: float, phase: str, error: BaseException) -> str:
    """One line for a failed rendezvous or collective: the backend's own reason first where it
    gave one; the rendezvous address only where it was never reached."""
    text = _without_frames(str(error))
    what = "rendezvous failed" if phase == "rendezvous" else "lost the other ranks"
    kind = type(error).__name__
    reason = backend_reason(text)
    if reason is not None:
        said, advice = reason
        return f"{what}: {devices.collective_library()} says '{said[:200]}' ({kind}): {advice}"
    shown = " ".join(text.split())[:240]
    if phase == "rendezvous" and any(word in text.lower() for word in _UNREACHED_WORDS):
        address = launch.init_method
        if address == "env://":
            address = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
        advice = (f"not every rank joined within --dist-timeout {timeout_s:g} s: check that "
                  f"all {launch.world_size} ranks were started with the same world size and "
                  f"rendezvous address ({address}) and that its port is reachable")
    else:
        advice = ("another rank failed or was killed (see its error line) or the network "
                  f"between ranks failed; --dist-timeout {timeout_s:g} s bounds the wait")
    return f"{what} ({kind}: {shown}): {advice}"


@contextlib.contextmanager
def failures_reported(launch: Launch, timeout_s: float, phase: str) -> Iterator[None]:
    """Turn a failed rendezvous (``phase`` "rendezvous"), a dead peer, a collective that timed
    out ("run") or the collective library's own refusal into one line that says what happened
    and what to check (exit 1), instead of a traceback."""
    try:
        yield
    except BenchmarkError:
        raise
    except Exception as error:                       # noqa: BLE001 (re-raised unless a peer's)
        if not (launch.distributed and is_peer_failure(error)):
            raise
        raise DistributedFailure(_failure_line(launch, timeout_s, phase, error)) from None


def barrier(device: torch.device, group: dist.ProcessGroup | None = None) -> None:
    """Every rank of ``group`` (None: the job) waits for the others."""
    ids = devices.rank_device_ids(device)
    if ids is not None and dist.get_backend() == "nccl":
        interruptible(lambda: dist.barrier(group=group, device_ids=ids))
    else:
        interruptible(lambda: dist.barrier(group=group))


def all_gather_objects(item: object) -> list:
    """Every rank's ``item``, on every rank, in rank order."""
    gathered: list = [None] * dist.get_world_size()
    interruptible(lambda: dist.all_gather_object(gathered, item))
    return gathered


def new_group(ranks: list[int]):
    """A process group of ``ranks`` (every rank of the job must call this, in the same order)."""
    return dist.new_group(ranks)


# ---------------------------------------------------------------- timed collectives (node check)
#
# A timed loop of collectives runs whole inside one interruptible call: the helper thread
# (on the caller's GPU) times it between two synchronisations of the device, as nccl-tests
# does, so that no thread is started inside the timed region.

def _timed(call: Callable[[], object], times: int, device: torch.device) -> float:
    devices.synchronize(device)
    started = time.perf_counter()
    for _ in range(times):
        call()
    devices.synchronize(device)
    return time.perf_counter() - started


def timed_all_reduce(tensor: torch.Tensor, times: int, device: torch.device,
                     group: dist.ProcessGroup | None = None) -> float:
    """Seconds for ``times`` back-to-back all-reduces (sum) of ``tensor`` over ``group``."""
    return interruptible(lambda: _timed(lambda: dist.all_reduce(tensor, group=group), times, device))


def timed_exchange(outgoing: torch.Tensor, incoming: torch.Tensor, peer: int, times: int,
                   device: torch.device, group: dist.ProcessGroup | None = None) -> float:
    """Seconds for ``times`` exchanges with global rank ``peer``: ``outgoing`` sent while
    ``incoming`` is received, both ways at once, as one batch of point-to-point operations
    (``batch_isend_irecv``). NCCL's advice: a batched operation runs on the group's own
    communicator, where an unbatched send or receive on a group of more than two ranks makes a
    two-rank communicator for each pair and warns ("unbatched P2P op") on every one."""
    def exchange() -> None:
        operations = [dist.P2POp(dist.isend, outgoing, peer, group),
                      dist.P2POp(dist.irecv, incoming, peer, group)]
        for work in dist.batch_isend_irecv(operations):
            work.wait()
    return interruptible(lambda: _timed(exchange, times, device))


def slowest(seconds: float, device: torch.device, group: dist.ProcessGroup | None = None) -> float:
    """The largest of every rank's ``seconds`` in ``group``: a collective ends with its last
    rank."""
    value = torch.tensor([seconds], dtype=torch.float64, device=device)
    interruptible(lambda: dist.all_reduce(value, op=dist.ReduceOp.MAX, group=group))
    return float(value.item())


def _fail_rank(environ: Mapping[str, str]) -> int | None:
    """The rank MICROBENCH_FAIL_RANK names, checked: a rank number or unset."""
    value = environ.get(FAIL_RANK_VARIABLE)
    return None if value is None else _int_env(environ, FAIL_RANK_VARIABLE)


def check_fail_rank(world_size: int, environ: Mapping[str, str] | None = None) -> None:
    """Refuse, before the run, a MICROBENCH_FAIL_RANK outside a job of ``world_size``
    processes: no rank would fail, and the test that set it would pass for nothing."""
    rank = _fail_rank(os.environ if environ is None else environ)
    if rank is not None and rank >= world_size:
        raise UsageError(f"{FAIL_RANK_VARIABLE}={rank}: not a rank of this job of "
                         f"{world_size} processes (ranks 0 to {world_size - 1})")


def fail_if_asked(launch: Launch) -> None:
    if _fail_rank(os.environ) == launch.rank:
        raise RuntimeError(f"failure injected on rank {launch.rank} by {FAIL_RANK_VARIABLE}")


@contextlib.contextmanager
def leaving_group() -> Iterator[None]:
    """Run the body, then leave the process group: destroyed after success, aborted after an
    error (see ``shutdown``)."""
    try:
        yield
    except BaseException:
        shutdown(failed=True)
        raise
    shutdown()


def shutdown(failed: bool = False) -> None:
    """Leave the job's process group. A rank leaving on an error (a signal, a dead peer, a
    refusal) aborts its NCCL communicators instead of destroying them: destroying one can wait
    for peers that are still running the collective this rank left, and the rank would then
    never end (torchrun waits for it, so neither would the job)."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    abort = getattr(dist.distributed_c10d, "_abort_process_group", None)   # PyTorch 2.6+
    if failed and abort is not None and dist.get_backend() == "nccl":
        abort()
    else:
        dist.destroy_process_group()


def gather_to_main(item: T) -> list[T] | None:
    """Every rank's ``item`` on global rank 0 (in rank order); None on the other ranks."""
    gathered: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    interruptible(lambda: dist.gather_object(item, gathered, dst=0))
    return gathered


def backend_name() -> str | None:
    return dist.get_backend() if dist.is_available() and dist.is_initialized() else None
