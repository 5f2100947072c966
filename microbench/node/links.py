"""The links between GPUs: all-reduce bus bandwidth at a few message sizes, and a copy
between every pair of GPUs of a node, through torch.distributed (NCCL, which is RCCL on
ROCm; gloo on the CPU).

The pairs are measured in rounds of disjoint pairs (a round-robin tournament's schedule, the
circle method): in each round every GPU exchanges with one other, both directions at once, so
n GPUs take n-1 rounds (8 GPUs: 7 rounds, not 56 pairs one at a time) and no two pairs of a
round share a GPU. Within a node of NVLink/NVSwitch or xGMI each pair has links of its own;
behind a shared PCIe switch disjoint pairs can still share its uplink, and a slow pair is then
judged against its round's load, which the pair's figure does not isolate.

Bus bandwidth is nccl-tests' definition (doc/PERFORMANCE.md of NVIDIA/nccl-tests): algorithm
bandwidth = bytes / time of one all-reduce, bus bandwidth = algbw * 2(n-1)/n, the rate each
link carries, comparable across rank counts. One sample is ``ITERATIONS`` back-to-back
all-reduces between synchronisations, as nccl-tests times them, on the slowest rank (every
rank's time is reduced with MAX: the collective ends when its last rank does).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass, field

import torch

from microbench.platform import devices
from microbench.platform import distributed

if TYPE_CHECKING:
    import torch.distributed as dist

# Message sizes (bytes): a GPU's reach the NVLink/Infinity Fabric peak at the largest; gloo on
# two CPU processes stays within a second.
GPU_SIZES = (8 << 20, 64 << 20, 512 << 20)
CPU_SIZES = (64 << 10, 1 << 20, 4 << 20)
GPU_ITERATIONS, CPU_ITERATIONS = 10, 2
P2P_BYTES, P2P_ITERATIONS = 256 << 20, 4
NO_P2P_ON_CPU = "peer-to-peer copies need GPUs: skipped on the CPU"


@dataclass(frozen=True)
class Collective:
    """One group's all-reduce at each size: bus bandwidth samples in GB/s."""

    scope: str                          # "node <host>" or "all nodes"
    ranks: tuple[int, ...]
    sizes: tuple[int, ...]
    busbw_gbs: dict[int, tuple[float, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class PairCopy:
    """A copy from one rank's GPU to another's: GB/s samples, timed on the receiver."""

    host: str
    source_rank: int
    target_rank: int
    gbs: tuple[float, ...]


def bus_factor(ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth factor 2(n-1)/n."""
    return 2 * (ranks - 1) / ranks


def node_groups(hosts: list[str]) -> dict[str, list[int]]:
    """The ranks of each host, hosts in first-rank order (every rank computes the same)."""
    groups: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        groups.setdefault(host, []).append(rank)
    return groups


def all_reduce(group: dist.ProcessGroup | None, ranks: list[int], device: torch.device,
               samples: int, scope: str) -> Collective:
    """Bus bandwidth of ``group``'s all-reduce at each size, ``samples`` times each."""
    gpu = devices.is_gpu(device)
    sizes, iterations = (GPU_SIZES, GPU_ITERATIONS) if gpu else (CPU_SIZES, CPU_ITERATIONS)
    result = Collective(scope, tuple(ranks), sizes)
    if len(ranks) < 2:
        return result
    for size in sizes:
        tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
        distributed.timed_all_reduce(tensor, 1, device, group)               # warm-up
        values = []
        for _ in range(samples):
            seconds = distributed.timed_all_reduce(tensor, iterations, device, group)
            seconds = distributed.slowest(seconds, device, group) / iterations
            values.append(size / seconds * bus_factor(len(ranks)) / 1e9)
        result.busbw_gbs[size] = tuple(values)
    return result


def rounds(ranks: list[int]) -> list[list[tuple[int, int]]]:
    """Every unordered pair of ``ranks`` once, in rounds of disjoint pairs: the circle method
    (the first rank fixed, the others rotating one place a round); an odd count gives one rank
    a rest each round. Every rank computes the same schedule."""
    players: list[int | None] = list(ranks) + ([None] if len(ranks) % 2 else [])
    count = len(players)
    schedule = []
    for _ in range(count - 1):
        pairs = [(players[i], players[count - 1 - i]) for i in range(count // 2)]
        schedule.append([(min(a, b), max(a, b)) for a, b in pairs
                         if a is not None and b is not None])
        players = [players[0], players[-1], *players[1:-1]]
    return schedule


def pair_copies(group: dist.ProcessGroup | None, ranks: list[int], host: str, rank: int,
                device: torch.device, samples: int, only: frozenset | None = None
               ) -> list[PairCopy]:
    """Every ordered pair of ``ranks`` (one node), in rounds of disjoint pairs (``rounds``),
    each pair both ways at once, the node's ranks waiting for each other between rounds; the
    receiver's records (a copy into this rank's GPU). ``only``: these pairs (``(low, high)``
    ranks), measured again to confirm their flags; every rank of the node must pass the same."""
    copies = []
    outgoing = torch.empty(P2P_BYTES, dtype=torch.uint8, device=device)
    incoming = torch.empty(P2P_BYTES, dtype=torch.uint8, device=device)
    for pairs in rounds(ranks):
        if only is not None:
            pairs = [pair for pair in pairs if pair in only]
            if not pairs:
                continue                    # the same rounds skipped on every rank of the node
        peer = next((b if a == rank else a for a, b in pairs if rank in (a, b)), None)
        if peer is not None:
            copies.append(PairCopy(host, peer, rank, _one_pair(
                outgoing, incoming, peer, device, samples, group)))
        distributed.barrier(device, group)
    return copies


def _one_pair(outgoing: torch.Tensor, incoming: torch.Tensor, peer: int, device: torch.device,
              samples: int, group: dist.ProcessGroup | None) -> tuple[float, ...]:
    """GB/s into this GPU of each sample of ``P2P_ITERATIONS`` exchanges with ``peer``."""
    distributed.timed_exchange(outgoing, incoming, peer, 1, device, group)     # warm-up
    return tuple(incoming.numel() * P2P_ITERATIONS
                 / distributed.timed_exchange(outgoing, incoming, peer, P2P_ITERATIONS,
                                              device, group) / 1e9 for _ in range(samples))
