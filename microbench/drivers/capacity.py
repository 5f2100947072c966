"""The largest batch that fits: grow by doubling until a try fails, then bisect.

``fits(batch)`` builds a fresh model at that batch, runs a few warm-up steps (the optimizer's
state exists from the first step on) and reports whether it ran out of memory; caches are emptied
between tries. At the edge a probe can pass where the full benchmark (more iterations, the FLOP
count, allocator fragmentation) runs out of memory (seen on an H100: resnet50 FP32 batch 962), so
:func:`largest_that_runs` confirms the answer with the real run and searches below it when that
fails. The searches are pure functions, tested against fake memory limits.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, TypeVar

if TYPE_CHECKING:
    import torch

    from microbench.plan.spec import RunSpec

R = TypeVar("R")          # what a full run returns (its exit code)


@dataclass
class SearchResult:
    largest: int                      # 0: not even the first try fitted
    hit_limit: bool                   # the search's limit fitted; more may fit
    tries: list[tuple[int, bool]] = field(default_factory=list)


def find_max_batch(fits: Callable[[int], bool], start: int = 1, limit: int = 65536,
                   granularity: int = 1) -> SearchResult:
    """Double from ``start`` until a try fails (or ``limit`` fits), then bisect over the
    multiples of ``granularity`` between the largest fit and the first failure. The answer is
    a multiple of ``granularity`` (or, below it, a power of two), or ``limit`` when that fits;
    a smaller batch than one that fitted is taken to fit too."""
    tries: list[tuple[int, bool]] = []

    def attempt(batch: int) -> bool:
        ok = fits(batch)
        tries.append((batch, ok))
        return ok

    good, bad, batch = 0, None, min(start, limit)
    while True:
        if not attempt(batch):
            bad = batch
            break
        good = batch
        if batch == limit:
            return SearchResult(good, True, tries)
        batch = min(batch * 2, limit)
    low, high = good // granularity + 1, (bad - 1) // granularity    # multiples strictly between
    while low <= high:
        middle = (low + high) // 2
        if attempt(middle * granularity):
            good, low = middle * granularity, middle + 1
        else:
            high = middle - 1
    return SearchResult(_round_down(good, granularity), False, tries)


def _round_down(batch: int, granularity: int) -> int:
    """The largest multiple of ``granularity`` at most ``batch``; below it, a power of two."""
    if batch >= granularity:
        return batch // granularity * granularity
    return 1 << (batch.bit_length() - 1) if batch else 0


def largest_that_runs(fits: Callable[[int], bool], run: Callable[[int], R | None],
                      start: int = 1, limit: int = 65536,
                      granularity: int = 1) -> tuple[SearchResult, R | None]:
    """Search with ``fits``, then confirm with ``run`` (None: out of memory). When the run
    fails at a batch that passed the probe, that batch and every larger one count as not
    fitting, and the search repeats below it (on the same granularity); probes are remembered,
    so the repeat costs only new probes and one full run per answer."""
    known: dict[int, bool] = {}
    ceiling = limit + 1                         # batches from here on did not run

    def remembered(batch: int) -> bool:
        if batch >= ceiling:
            return False
        if batch not in known:
            known[batch] = fits(batch)
        return known[batch]

    while True:
        found = find_max_batch(remembered, min(start, limit), limit, granularity)
        if found.largest == 0:
            return found, None
        outcome = run(found.largest)
        if outcome is not None:
            return found, outcome
        ceiling = found.largest


def batch_fits(spec: RunSpec, batch: int, warmup_steps: int = 2) -> bool:
    """Build a fresh model at ``batch`` and run a few steps; False when memory runs out."""
    import gc

    from microbench.drivers import benchmark
    from microbench.platform import devices

    probe = spec.with_batch_size(batch)
    work = None
    try:
        with probe.parallel.process_group(probe):   # --parallel fsdp: a one-rank group per try
            work = benchmark.build_workload(probe)
            for _ in range(warmup_steps):
                work.step()
            devices.synchronize(probe.device)
        return True
    except Exception as error:                     # noqa: BLE001 (anything but OOM re-raised)
        if devices.is_out_of_memory(error):
            return False
        failure = benchmark.expected_failure(error, probe)   # a batch too small for batch norm
        if failure is error:
            raise
        raise failure from None
    finally:
        del work
        gc.collect()
        devices.empty_cache(probe.device)


class HostMemory:
    """The process's peak resident memory on Linux: reset by writing 5 to /proc/self/clear_refs,
    read as VmHWM from /proc/self/status (proc(5)). The CPU search's memory limit."""

    def __init__(self, proc: str = "/proc/self"):
        self.proc = proc

    def available(self) -> bool:
        return os.access(os.path.join(self.proc, "clear_refs"), os.W_OK) and \
            os.path.exists(os.path.join(self.proc, "status"))

    def reset_peak(self) -> None:
        with open(os.path.join(self.proc, "clear_refs"), "w") as stream:
            stream.write("5")

    def peak_bytes(self) -> int:
        with open(os.path.join(self.proc, "status")) as stream:
            for line in stream:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024            # kB
        raise OSError("no VmHWM line in /proc/self/status")


def within_host_budget(probe: Callable[[int], bool], budget_bytes: float,
                       memory: HostMemory) -> Callable[[int], bool]:
    """``probe`` on the CPU, failing a batch whose peak resident memory passed the budget."""
    def fits(batch: int) -> bool:
        memory.reset_peak()
        return probe(batch) and memory.peak_bytes() <= budget_bytes
    return fits


def host_budget_problem(budget_gb: float | None, memory: HostMemory,
                        total_bytes: float | None) -> str | None:
    """Why the largest-batch search cannot run on the CPU as asked, or None."""
    if budget_gb is None:
        return ("--find-max-batch on the CPU grows the batch in host memory until the machine "
                "swaps or the kernel kills the process: bound it with --memory-budget-gb GB "
                "(the process's peak resident memory)")
    if not memory.available():
        return ("--find-max-batch on the CPU reads the process's peak memory from "
                "/proc/self (Linux); it is not available here")
    if total_bytes is not None and budget_gb * 1e9 > total_bytes:
        return (f"--memory-budget-gb {budget_gb:g} is more than this machine's "
                f"{total_bytes / 1e9:.1f} GB of memory")
    return None


def apply_memory_budget(device: torch.device, budget_gb: float | None) -> str | None:
    """Cap the caching allocator at ``budget_gb``, as if the GPU were smaller; a note to print."""
    from microbench.platform import devices

    if budget_gb is None:
        return None
    if not devices.is_gpu(device):
        return (f"memory budget {budget_gb:g} GB of host memory: a batch fits when the "
                f"process's peak resident memory stays within it")
    fraction = devices.cap_memory(device, budget_gb * 1e9)
    total = devices.total_memory_bytes(device)            # a GPU's: always known
    of = f"{total / 1e9:.1f} GB" if total is not None else "its memory"
    return (f"memory budget {budget_gb:g} GB ({fraction:.1%} of {of}) for the "
            f"search and the run")
