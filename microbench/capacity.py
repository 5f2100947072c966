"""The largest batch that fits: grow by doubling until a try fails, then bisect.

``fits(batch)`` builds a fresh model at that batch, runs a few warm-up steps (the optimizer's
state exists from the first step on) and reports whether it ran out of memory; caches are emptied
between tries. At the edge a probe can pass where the full benchmark (more iterations, the FLOP
count, allocator fragmentation) runs out of memory (seen on an H100: resnet50 FP32 batch 962), so
:func:`largest_that_runs` confirms the answer with the real run and searches below it when that
fails. The searches are pure functions, tested against fake memory limits.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class SearchResult:
    largest: int                      # 0: not even the first try fitted
    hit_limit: bool                   # the search's limit fitted; more may fit
    tries: list[tuple[int, bool]] = field(default_factory=list)


def find_max_batch(fits: Callable[[int], bool], start: int = 1,
                   limit: int = 65536) -> SearchResult:
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
    # Bisect between the largest fit (0 when even the first try failed) and the first failure.
    while bad - good > 1:
        middle = (good + bad) // 2
        if attempt(middle):
            good = middle
        else:
            bad = middle
    return SearchResult(good, False, tries)


def largest_that_runs(fits: Callable[[int], bool], run: Callable[[int], object | None],
                      start: int = 1, limit: int = 65536) -> tuple[SearchResult, object | None]:
    """Search with ``fits``, then confirm with ``run`` (None: out of memory). A batch that passes
    the probe but not the run is marked as failing and the search repeats below it; tries are
    remembered, so the repeat costs only new probes."""
    known: dict[int, bool] = {}

    def remembered(batch: int) -> bool:
        if batch not in known:
            known[batch] = fits(batch)
        return known[batch]

    while True:
        found = find_max_batch(remembered, start, limit)
        if found.largest == 0:
            return found, None
        outcome = run(found.largest)
        if outcome is not None:
            return found, outcome
        known[found.largest] = False
        limit = found.largest - 1


def batch_fits(spec, batch: int, warmup_steps: int = 2) -> bool:
    """Build a fresh model at ``batch`` and run a few steps; False when memory runs out."""
    import gc

    from . import benchmark, device as device_layer

    probe = spec.with_batch_size(batch)
    work = None
    try:
        work = benchmark.build_workload(probe)
        for _ in range(warmup_steps):
            work.step()
        device_layer.synchronize(probe.device)
        return True
    except Exception as error:                     # noqa: BLE001 (anything but OOM re-raised)
        if device_layer.is_out_of_memory(error):
            return False
        failure = benchmark.expected_failure(error, probe)   # a batch too small for batch norm
        if failure is error:
            raise
        raise failure from None
    finally:
        del work
        gc.collect()
        device_layer.empty_cache(probe.device)


def apply_memory_budget(device, budget_gb: float | None) -> str | None:
    """Cap the caching allocator at ``budget_gb``, as if the GPU were smaller; a note to print."""
    from . import device as device_layer

    if budget_gb is None:
        return None
    if not device_layer.is_gpu(device):
        return "--memory-budget-gb applies to GPUs only; ignored on the CPU"
    fraction = device_layer.cap_memory(device, budget_gb * 1e9)
    total = device_layer.total_memory_bytes(device)
    return (f"memory budget {budget_gb:g} GB ({fraction:.1%} of {total / 1e9:.1f} GB) for the "
            f"search and the run")
