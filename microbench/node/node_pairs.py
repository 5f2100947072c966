"""The job's all-reduce across nodes, split by pairs of nodes, to name the node whose network
is slow (issue 62).

The all-reduce over every rank of the job has no peer: a baseline flags it, but it cannot say
which node made it slow. The all-reduce over each pair of nodes (every rank of the two) can:
a node whose network is slow makes every pair it is in slow, and no other. So where the job's
all-reduce across 3 or more nodes is flagged at first, every pair of nodes is measured, at the
moment the flagged all-reduces are measured again (``check.py``), and nothing more is measured
on a healthy job. Two nodes have one pair, the job itself: one link cannot tell which side of
it is slow, and the verdict says so.

The pairs run in rounds of disjoint pairs (``links.rounds``, the circle method: n nodes in n-1
rounds, or n where n is odd), the whole job waiting between rounds. Pairs of one round share
no node, only the fabric between the nodes (its spine switches): a pair's figure includes its
round's load on that fabric, as a pair of GPUs' copy includes its round's.

This module measures the pairs and says which node they name; ``verdict.py`` judges each pair.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from dataclasses import dataclass

from microbench.node import links
from microbench.platform import distributed

if TYPE_CHECKING:
    import torch

# Two nodes have one pair, the job's all-reduce itself: nothing to split.
MIN_NODES = 3


@dataclass(frozen=True)
class NodePair:
    """The all-reduce over every rank of two nodes (first-rank order)."""

    nodes: tuple[str, str]
    all_reduce: links.Collective


def scope(nodes: tuple[str, str]) -> str:
    return f"nodes {nodes[0]} and {nodes[1]}"


def schedule(nodes: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Every pair of ``nodes`` once, in rounds of disjoint pairs (every rank computes the same
    from the same node order)."""
    return [[(nodes[a], nodes[b]) for a, b in round_]
            for round_ in links.rounds(list(range(len(nodes))))]


def measure(groups: Mapping[str, list[int]], node: str, device: torch.device,
            samples: int) -> list[NodePair]:
    """The all-reduce over each pair of the nodes of ``groups`` (each node's ranks, in
    first-rank order) that ``node`` (this rank's) is in; every rank of the job calls this."""
    rounds = schedule(list(groups))
    ranks = {pair: sorted(groups[pair[0]] + groups[pair[1]])
             for round_ in rounds for pair in round_}
    # Every rank creates every pair's group, in one order (torch.distributed's rule), though
    # it joins only its own node's pairs.
    pair_groups = {pair: distributed.new_group(members) for pair, members in ranks.items()}
    measured = []
    for round_ in rounds:
        for pair in round_:
            if node in pair:
                measured.append(NodePair(pair, links.all_reduce(
                    pair_groups[pair], ranks[pair], device, samples, scope(pair))))
        distributed.barrier(device)         # the next round's pairs start together
    return measured


def slow_node(nodes: Sequence[str], slow: Mapping[tuple[str, str], bool]) -> str | None:
    """The one node every slow pair shares, every pair with it slow and none without it; None
    where no single node explains the slow pairs (none slow; one slow pair, either of whose
    nodes may be the slow one; slow pairs without a node in common)."""
    if not any(slow.values()):
        return None
    named = [node for node in nodes if all(is_slow == (node in pair)
                                           for pair, is_slow in slow.items())]
    return named[0] if len(named) == 1 else None


def finding(named: str | None, slow: Mapping[tuple[str, str], bool]) -> str:
    """What the pairs say, in one line, the all-reduce across nodes being slow."""
    if named is not None:
        return (f"{named} is slow: every pair of nodes with it is slow, and no pair "
                f"without it")
    pairs = [pair for pair, is_slow in slow.items() if is_slow]
    if not pairs:
        return ("no pair of nodes is slower than the others: the fabric between them, or "
                "every node alike, not one node")
    return (f"no single node explains it; slow pairs of nodes: "
            f"{'; '.join(' and '.join(pair) for pair in pairs)}")


def not_confirmed() -> str:
    """The pairs measured, but the all-reduce across nodes measured again was not slow."""
    return "not slow when measured again: its pairs of nodes are shown, no node named"


def one_link(nodes: Sequence[str]) -> str:
    """Two nodes: the job's all-reduce is their one link, which cannot name a side."""
    return (f"the link between {nodes[0]} and {nodes[1]} is slow; one link cannot tell which "
            f"side (with a third node, each pair of nodes is measured and the slow one named)")
