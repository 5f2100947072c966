"""settings/mesh.py: the hybrid mesh's shape from the world size and the shard group, refused
in one line where the group does not divide the world, before torch's import (issue 62)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT
from microbench.platform.errors import UsageError
from microbench.settings import mesh
from microbench.settings.config import BenchConfig


@pytest.mark.parametrize("world, shard, shape", [(4, 2, (2, 2)), (8, 4, (2, 4)), (4, 4, (1, 4)),
                                                 (4, 1, (4, 1)), (1, 1, (1, 1))])
def test_replicas_times_shards_is_the_world(world, shard, shape):
    assert mesh.hybrid_shape(world, shard) == shape


@pytest.mark.parametrize("world, shard, text", [
    (6, 4, "6 ranks do not form groups of 4"), (2, 4, "2 ranks do not form groups of 4"),
    (4, None, "cannot tell which of the 4 ranks share a node")])
def test_a_group_the_world_cannot_form_is_refused_with_what_to_give(world, shard, text):
    with pytest.raises(UsageError, match=text) as refused:
        mesh.hybrid_shape(world, shard)
    assert "--hsdp-shard-size" in str(refused.value)


TORCHRUN = {"RANK": "0", "WORLD_SIZE": "6", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "4"}


def test_the_launchers_sizes_are_read_without_torch():
    assert mesh.launcher_sizes(TORCHRUN) == (6, 4)
    assert mesh.launcher_sizes({**TORCHRUN, "LOCAL_WORLD_SIZE": ""}) == (6, None)
    assert mesh.launcher_sizes({"SLURM_PROCID": "1", "SLURM_NTASKS": "8",
                                "SLURM_NTASKS_PER_NODE": "4"}) == (8, 4)
    assert mesh.launcher_sizes({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}) is None
    assert mesh.launcher_sizes({}) is None


def test_only_hsdp_is_refused_and_the_flag_wins_over_the_node():
    hsdp = BenchConfig(network="llama_tiny", parallel="hsdp")
    with pytest.raises(UsageError, match="groups of 4"):
        mesh.refuse_before_torch(hsdp, TORCHRUN)
    mesh.refuse_before_torch(BenchConfig(network="llama_tiny", parallel="hsdp",
                                         hsdp_shard_size=3), TORCHRUN)
    mesh.refuse_before_torch(BenchConfig(network="llama_tiny", parallel="fsdp"), TORCHRUN)
    mesh.refuse_before_torch(hsdp, {})          # one process: a 1 x 1 mesh


def test_the_command_line_refuses_it_in_one_line_before_importing_torch():
    code = ("import sys; from microbench.main import main; "
            "code = main(['--network', 'llama_tiny', '--parallel', 'hsdp', '--batch-size', '6',"
            " '--device', 'cpu']); print(code, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, env={**TORCHRUN, "PATH": "/usr/bin:/bin",
                                            "PYTHONPATH": str(ROOT)})
    assert done.stdout.strip() == "2 False", done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line == ("[rank 0] error: --parallel hsdp: 6 ranks do not form groups of 4 (shard "
                    "group size, --hsdp-shard-size or the ranks of one node): give a "
                    "--hsdp-shard-size that divides 6")
