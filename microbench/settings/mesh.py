"""The shape of a hybrid-sharded job's device mesh (``--parallel hsdp``, issue 62): replicas x
shards, in plain arithmetic below torch.

HSDP shards each parameter inside a group of ranks (one node by default, where the links are
fast) and replicates the shards across the groups, as torchtitan's ``dp_replicate`` x
``dp_shard`` mesh does: each step all-gathers and reduce-scatters inside a group and
all-reduces the gradient shards across groups. The shape is decided here, once, from the world
size and the shard group's size, so that the command line can refuse a world size the group
does not divide before torch is imported (:func:`refuse_before_torch`), and the strategy
(``scenarios/hsdp.py``) builds the very mesh the refusal checked.

Example::

    hybrid_shape(world_size=4, shard_size=2)        # (2, 2): 2 replicas of 2 shards
    hybrid_shape(world_size=6, shard_size=4)        # UsageError, exit 2
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from microbench.platform.errors import UsageError

if TYPE_CHECKING:
    from microbench.settings.config import BenchConfig

@dataclass(frozen=True)
class Mesh:
    """A strategy's device mesh: the size of each dimension, outermost first, and its name
    (``("replicate", "shard")`` under HSDP; one dimension of every rank otherwise)."""

    shape: tuple[int, ...]
    names: tuple[str, ...]


HYBRID = "hsdp"                 # the strategy whose mesh this is (settings.config.PARALLEL)
SHARD_FLAG = "--hsdp-shard-size"


def hybrid_shape(world_size: int, shard_size: int | None) -> tuple[int, int]:
    """(replicas, shards) of ``world_size`` ranks in groups of ``shard_size`` (None: unknown,
    refused with what to give)."""
    if shard_size is None:
        raise UsageError(f"--parallel hsdp cannot tell which of the {world_size} ranks share a "
                         f"node (the launcher did not say: torchrun sets LOCAL_WORLD_SIZE, "
                         f"srun SLURM_NTASKS_PER_NODE): give {SHARD_FLAG} N")
    if shard_size > world_size or world_size % shard_size:
        ranks = f"{world_size} ranks do" if world_size > 1 else "1 rank does"
        raise UsageError(f"--parallel hsdp: {ranks} not form groups of {shard_size} (shard group size, {SHARD_FLAG} or "
                         f"the ranks of one node): give a {SHARD_FLAG} that divides "
                         f"{world_size}")
    return world_size // shard_size, shard_size


def _number(environ: Mapping[str, str], name: str) -> int | None:
    value = environ.get(name, "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def launcher_sizes(environ: Mapping[str, str]) -> tuple[int, int | None] | None:
    """(world size, ranks of this node) as torchrun or srun gave them, None without a launcher
    (or with numbers the launch detection refuses later, in its own words)."""
    if "RANK" in environ or "TORCHELASTIC_RUN_ID" in environ:
        world = _number(environ, "WORLD_SIZE")
        return None if world is None else (world, _number(environ, "LOCAL_WORLD_SIZE"))
    world = _number(environ, "SLURM_NTASKS")
    if "SLURM_PROCID" in environ and world is not None and world > 1:
        return world, _number(environ, "SLURM_NTASKS_PER_NODE")
    return None


def refuse_before_torch(config: BenchConfig, environ: Mapping[str, str]) -> None:
    """A hybrid mesh the launcher's world size cannot form, refused from the environment alone
    (a manual launch's world is known only once its workers are counted: resolve refuses it)."""
    sizes = launcher_sizes(environ)
    if config.parallel == HYBRID and sizes is not None:
        world, local = sizes
        shard_size = config.hsdp_shard_size
        hybrid_shape(world, shard_size if shard_size is not None else local)
