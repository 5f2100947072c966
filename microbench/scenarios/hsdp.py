"""``--parallel hsdp``: hybrid sharding, FSDP2 on a 2-D device mesh (issue 62).

Past one node, ``--parallel fsdp`` all-gathers every block's parameters across the slow links
between nodes at every step. HSDP shards inside a group of ranks (by default the ranks of one
node: torchrun's LOCAL_WORLD_SIZE, or ``--hsdp-shard-size``) and replicates the shards across
the groups, as torchtitan's ``data_parallel_replicate_degree`` x ``data_parallel_shard_degree``
mesh does: a block's all-gather and reduce-scatter stay inside a group, and only the gradient
shards are all-reduced across groups. Each rank holds 1/shards of the model (more than under
FSDP over every rank, less than a DDP replica).

Everything else is FSDP's (``scenarios/fsdp.py``): the llama_* presets built on the meta device,
its refusals, activation checkpointing, FP8 (tensorwise with its FP8 all-gather inside a shard
group, rowwise), the step and the report. Every rank still takes its own share of the batch:
the data-parallel degree is the world size (replicas x shards), as under FSDP. The mesh's shape
(:func:`microbench.settings.mesh.hybrid_shape`) is refused before torch's import where the
launcher's variables decide it (``plan/cli.py``), and again here for the manual launch.

Example::

    torchrun --nnodes 2 --nproc-per-node 4 ... micro_benchmarking_pytorch.py \\
        --network llama3_8b --parallel hsdp --precision amp-bf16 --optimizer adamw
    # mesh 2 replicas x 4 shards: each rank holds a quarter of the model
"""
from __future__ import annotations

from microbench.platform.distributed import Launch
from microbench.scenarios.fsdp import Sharded
from microbench.settings import mesh
from microbench.settings.config import BenchConfig
from microbench.settings.mesh import Mesh
from microbench.settings.strategy_flags import HybridFlags


class Hybrid(HybridFlags, Sharded):
    """HSDP: FSDP2 inside each shard group, replicated across the groups (its flags and rules:
    ``settings/strategy_flags.HybridFlags``)."""

    def mesh(self, config: BenchConfig, launch: Launch) -> Mesh:
        """(replicas, shards): groups of --hsdp-shard-size ranks, by default the ranks of one
        node (one process alone: 1 x 1)."""
        size = config.hsdp_shard_size if config.hsdp_shard_size is not None else \
            launch.local_world_size
        return Mesh(mesh.hybrid_shape(launch.world_size, size), ("replicate", "shard"))
