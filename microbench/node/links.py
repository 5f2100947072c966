"""The links between GPUs: all-reduce bus bandwidth at a few message sizes, and a copy
between every pair of GPUs of a node, through torch.distributed (NCCL, which is RCCL on
ROCm; gloo on the CPU).

Bus bandwidth is nccl-tests' definition (doc/PERFORMANCE.md of NVIDIA/nccl-tests): algorithm
bandwidth = bytes / time of one all-reduce, bus bandwidth = algbw * 2(n-1)/n, the rate each
link carries, comparable across rank counts. One sample is ``ITERATIONS`` back-to-back
all-reduces between synchronisations, as nccl-tests times them, on the slowest rank (every
rank's time is reduced with MAX: the collective ends when its last rank does).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from microbench.platform import devices
from microbench.platform import distributed

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


def all_reduce(group, ranks: list[int], device: torch.device, samples: int,
               scope: str) -> Collective:
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


def pair_copies(group, ranks: list[int], host: str, rank: int, device: torch.device,
                samples: int) -> list[PairCopy]:
    """Every ordered pair of ``ranks`` (one node), one pair at a time with the node's ranks
    waiting between pairs, so that no two copies share a link; the receiver's records."""
    copies = []
    buffer = torch.empty(P2P_BYTES, dtype=torch.uint8, device=device)
    pairs = [(a, b) for a in ranks for b in ranks if a != b]
    for sender, receiver in pairs:
        if rank == sender:
            _one_pair(buffer, distributed.timed_send, receiver, device, samples)
        elif rank == receiver:
            copies.append(PairCopy(host, sender, receiver, _one_pair(
                buffer, distributed.timed_recv, sender, device, samples)))
        distributed.barrier(device, group)
    return copies


def _one_pair(buffer: torch.Tensor, timed, peer: int, device: torch.device,
              samples: int) -> tuple[float, ...]:
    """GB/s of each sample of ``P2P_ITERATIONS`` copies (``timed``: the send or the receive)."""
    timed(buffer, peer, 1, device)           # warm-up: the pair's communicator forms here
    return tuple(buffer.numel() * P2P_ITERATIONS / timed(buffer, peer, P2P_ITERATIONS, device)
                 / 1e9 for _ in range(samples))
