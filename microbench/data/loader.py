"""The DataLoader of one rank, batches that never run out, and the copy to the device.

:func:`make_loader` is a plain ``torch.utils.data.DataLoader``: ``num_workers`` processes, each
keeping ``prefetch_factor`` batches in flight, persistent across epochs, batches pinned by its
pinning thread; a ``DistributedSampler`` gives each rank its own disjoint shard (built from the
rank and world size, so it needs no process group) and reshuffles per epoch; ``drop_last`` keeps
every batch full. :class:`EndlessSampler` joins the epochs into one stream of indices, so one
loader iterator serves the whole run and :class:`EndlessBatches` never restarts it.
:func:`to_device` copies a batch, non-blocking (asynchronous from pinned memory), and runs the
device stage on it.

Workers ignore SIGINT and SIGTERM: the main process owns their lifetime. A Ctrl-C at a terminal
or a SIGTERM to the whole job (scancel, a process group) reaches the main process too, which
reports it once and stops the workers with :meth:`EndlessBatches.close` (DataLoader's own
shutdown, at a time of our choosing); if the main process is killed outright, DataLoader's
watchdog ends them when it sees their parent gone.

Example::

    loader = make_loader(dataset, batch_size=64, workers=8, pin_memory=True, prefetch_factor=2,
                         persistent_workers=True, rank=0, world_size=1, seed=0, shuffle=True)
    batches = EndlessBatches(loader)
    try:
        inputs, labels, failures = to_device(next(batches), device, stage)
    finally:
        batches.close()
"""
from __future__ import annotations

import contextlib
import itertools
import os
import signal
import sys
import threading
from types import TracebackType
from typing import Any, Callable, Iterator, Protocol

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler
from torch.utils.data._utils import signal_handling

from microbench.platform import process
from microbench.platform.errors import EXIT_UNEXPECTED, BenchmarkError, MissingEnvironment
from microbench.data.datasets import Batch, Failure, collate

# Where a worker's batches live until the main process takes them (torch.multiprocessing shares
# tensors through POSIX shared memory, which Linux keeps in this tmpfs).
SHARED_MEMORY = "/dev/shm"


class LoaderFailed(BenchmarkError):
    """A loader worker died (killed by the kernel's out-of-memory killer, a bus error on a full
    /dev/shm): not a bug of this process, so one line with what to try; exit 1."""
    exit_code = EXIT_UNEXPECTED


def check_shared_memory(batch_bytes: int, workers: int, prefetch_factor: int,
                        path: str = SHARED_MEMORY) -> None:
    """Refuse, before the workers start, batches in flight that cannot fit in shared memory
    (containers often get 64 MB): there a worker dies of a bus error mid-run instead."""
    if workers == 0 or not os.path.isdir(path):
        return
    try:
        info = os.statvfs(path)
    except OSError:
        return
    free = info.f_bavail * info.f_frsize
    needed = batch_bytes * workers * prefetch_factor
    if needed > free:
        raise MissingEnvironment(
            f"{workers} loader workers keeping {prefetch_factor} batches of "
            f"{batch_bytes / 2**20:.0f} MiB each in flight need {needed / 2**30:.2f} GiB of "
            f"shared memory, and {path} has {free / 2**30:.2f} GiB free: use fewer --workers, "
            f"a smaller --prefetch-factor or --transforms gpu (uint8 batches), or give the "
            f"container more (docker run --shm-size)")


# Whether the workers being started are forked by the main thread (read by the forked workers):
# a parent-death signal fires when the forking *thread* ends.
_started_by_main_thread = False


# The signals a worker sets aside: it waits to be stopped by the main process, which got the
# same signal (a job's SIGTERM reaches its whole process group).
_WORKER_DEAF = (signal.SIGINT, *process.STOPPING)      # SIGTERM, SIGHUP, SIGQUIT


@contextlib.contextmanager
def _held_across_the_fork() -> Iterator[None]:
    """The stopping signals held back (not lost) while the workers are forked: each is born
    with them blocked and unblocks them in :func:`_worker_init` once it ignores them, so a
    group's SIGTERM cannot end a worker before then (on a loaded host one died so, and its
    death raised over the run's own Terminated); the main process gets any that came at once
    after (a fork copies the forking thread's mask; from another thread, the main thread
    takes them meanwhile)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _WORKER_DEAF)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _worker_init(worker_id: int) -> None:
    # A forked worker inherits the main process's handlers (SIGTERM raises Terminated), which
    # would print a traceback in the worker; dying of the signal instead makes DataLoader's
    # SIGCHLD handler raise in the main process while it shuts down. So workers ignore them,
    # then take the signals the fork held back (ignored now).
    for number in _WORKER_DEAF:
        signal.signal(number, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _WORKER_DEAF)
    if _started_by_main_thread:         # the kernel's "parent" is the thread that forked
        process.killed_with_parent()    # so they never outlive the run, however it ends
    sys.excepthook = _quiet_when_the_receiver_left(sys.excepthook)


def _quiet_when_the_receiver_left(previous: ExceptHook) -> ExceptHook:
    """A worker hands each batch's shared memory to the main process over a socket, served by
    multiprocessing's resource-sharer thread, which prints any error through sys.excepthook.
    When the main process is interrupted mid-handover the socket is reset, which is expected
    and not the worker's failure; every other error still goes to the previous hook."""
    def hook(kind: type[BaseException], value: BaseException, traceback: TracebackType | None):
        if not issubclass(kind, (ConnectionError, EOFError)):
            previous(kind, value, traceback)
    return hook


def make_loader(dataset: Dataset, batch_size: int, workers: int, pin_memory: bool,
                prefetch_factor: int, persistent_workers: bool, rank: int, world_size: int,
                seed: int, shuffle: bool) -> DataLoader:
    shard: DistributedSampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank,
                                                   shuffle=shuffle, seed=seed, drop_last=True)
    # DataLoader refuses prefetch_factor and persistent_workers without worker processes.
    return DataLoader(dataset, batch_size=batch_size, sampler=EndlessSampler(shard),
                      num_workers=workers, collate_fn=collate, pin_memory=pin_memory,
                      drop_last=True, worker_init_fn=_worker_init,
                      # Each rank's workers draw their own random crops, reproducibly.
                      generator=torch.Generator().manual_seed(seed * 1009 + rank),
                      prefetch_factor=prefetch_factor if workers > 0 else None,
                      persistent_workers=persistent_workers if workers > 0 else False)


class EndlessSampler(Sampler):
    """One rank's shard, epoch after epoch (reshuffled each time), as one stream with no end.

    Why not one loader iterator per epoch: an iterator that ends drains the pipeline, since its
    workers start the next epoch's batches only when the next iterator is made. The tool's sets
    are a few thousand images (16 batches of 256), so that drain came every 16 steps: on an H100
    host, resnet50 fed by 16 workers kept 52% of the model alone while its workers idled, and a
    user's real epoch of 5,000 batches drains once per epoch. One stream keeps the workers
    ``prefetch_factor`` batches ahead across the epoch's end, as inside a long epoch.
    ``len()`` is left undefined: the stream has no length (``shard_length`` is one epoch's)."""

    def __init__(self, shard: DistributedSampler):
        self.shard = shard

    @property
    def shard_length(self) -> int:
        return len(self.shard)

    def __iter__(self):
        for epoch in itertools.count():
            self.shard.set_epoch(epoch)
            yield from self.shard


def batches_per_epoch(items: int, batch_size: int, world_size: int) -> int:
    """Full batches one rank gets per epoch (the sampler and the loader both drop the rest)."""
    return (items // world_size) // batch_size


class EndlessBatches:
    """Batches of ``loader`` (over an :class:`EndlessSampler`) for any number of steps, from
    one iterator made at the first batch."""

    def __init__(self, loader: DataLoader):
        self.loader = loader
        self.delivered = 0
        self._iterator: Iterator[Batch] | None = None

    @property
    def epoch(self) -> int:
        """The epoch of the next batch's first item (a batch may straddle two epochs)."""
        sampler, batch_size = self.loader.sampler, self.loader.batch_size
        if not isinstance(sampler, EndlessSampler) or batch_size is None:
            raise TypeError("an EndlessBatches loader has a batch size and an EndlessSampler")
        return self.delivered * batch_size // sampler.shard_length

    def __iter__(self) -> "EndlessBatches":
        return self

    def __next__(self) -> Batch:
        if self._iterator is None:
            global _started_by_main_thread
            _started_by_main_thread = threading.current_thread() is threading.main_thread()
            with process.starting(f"{self.loader.num_workers} loader workers",
                                  "use fewer --workers"), _held_across_the_fork():
                self._iterator = iter(self.loader)
        try:
            batch = next(self._iterator)
        except RuntimeError as error:
            raise _worker_death(error) from None
        self.delivered += 1
        return batch

    def worker_pids(self) -> tuple[int, ...]:
        """The process ids of the loader's workers now (none before the first batch, or with
        ``workers=0``, where the main process loads)."""
        workers = getattr(self._iterator, "_workers", None) or ()
        return tuple(worker.pid for worker in workers if worker.pid is not None)

    def close(self) -> None:
        """Stop the workers now and wait for them (DataLoader's own shutdown).

        Their deaths are expected from here, so torch's SIGCHLD handler stops watching them
        first: DataLoader stops only after joining them, and a worker that a job's SIGTERM
        (sent to the whole process group) ended during that join raised "DataLoader worker
        ... is killed by signal: Terminated" over the Terminated that was closing the run,
        which then ended in that traceback instead of its one line (seen on a loaded host)."""
        iterator, self._iterator = self._iterator, None
        if getattr(iterator, "_worker_pids_set", False):
            signal_handling._remove_worker_pids(id(iterator))
            setattr(iterator, "_worker_pids_set", False)
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        self.loader._iterator = None     # a persistent loader keeps its iterator here


def _worker_death(error: RuntimeError) -> BaseException:
    """DataLoader's report of a dead worker as one line; any other error as it was."""
    text = " ".join(str(error).split())
    if not text.startswith("DataLoader worker"):
        return error
    return LoaderFailed(f"{text.rstrip('. ')}: the host may be out of memory (see dmesg) or "
                        f"{SHARED_MEMORY} full; try fewer --workers, a smaller "
                        f"--prefetch-factor, or --transforms gpu")


# sys.excepthook's signature.
ExceptHook = Callable[[type[BaseException], BaseException, TracebackType | None], object]


class Stage(Protocol):
    """What happens to a batch on the device after its copy (``transforms.DeviceStage``; token
    ids: nothing): the model's input and the files that failed to decode there."""

    decode: bool                         # encoded images: decoded on the device

    def __call__(self, inputs: Any, sources: tuple[str, ...] = ()
                 ) -> tuple[torch.Tensor, tuple[Failure, ...]]: ...


def to_device(batch: Batch, device: torch.device, stage: Stage
              ) -> tuple[torch.Tensor, torch.Tensor, tuple[Failure, ...]]:
    """The model's input and labels on ``device`` (copies queued non-blocking), and the files
    the device stage could not decode."""
    labels = batch.labels.to(device, non_blocking=True)
    inputs = batch.inputs
    if not stage.decode and isinstance(inputs, torch.Tensor):    # encoded images stay on the
        inputs = inputs.to(device, non_blocking=True)            # host for the decoder
    inputs, failures = stage(inputs, batch.sources)
    return inputs, labels, failures
