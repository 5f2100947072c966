"""scenarios/hsdp.py: HSDP is fsdp's strategy on a 2-D mesh (replicas x shards): its mesh from
the launch, fsdp's options and rules, its own flag refused elsewhere (issue 62)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import assert_one_line_error, run_main
from microbench.platform.distributed import Launch
from microbench.platform.errors import UsageError
from microbench.scenarios import parallel
from microbench.settings.config import BenchConfig

HSDP = parallel.STRATEGIES["hsdp"]
FOUR = Launch(launcher="torchrun", world_size=4, local_world_size=2, data_parallel=4)
CONFIG = BenchConfig(network="llama_tiny", parallel="hsdp")


def test_the_mesh_is_one_node_a_shard_group_unless_told():
    assert HSDP.mesh(CONFIG, FOUR).shape == (2, 2)
    assert HSDP.mesh(CONFIG, FOUR).names == ("replicate", "shard")
    assert HSDP.mesh(replace(CONFIG, hsdp_shard_size=4), FOUR).shape == (1, 4)
    assert HSDP.mesh(replace(CONFIG, hsdp_shard_size=1), FOUR).shape == (4, 1)
    assert HSDP.mesh(CONFIG, Launch()).shape == (1, 1)          # one process
    with pytest.raises(UsageError, match="4 ranks do not form groups of 3"):
        HSDP.mesh(replace(CONFIG, hsdp_shard_size=3), FOUR)


def test_every_rank_takes_its_own_share_of_the_batch_as_under_fsdp():
    assert HSDP.data_parallel(CONFIG, FOUR) == 4 == parallel.STRATEGIES["fsdp"].data_parallel(
        CONFIG, FOUR)
    assert parallel.STRATEGIES["fsdp"].mesh(CONFIG, FOUR).shape == (4,)


def test_fully_shard_gets_fsdps_keywords_and_not_the_group_size():
    config = replace(CONFIG, hsdp_shard_size=2, reshard_after_forward=False)
    assert HSDP.options(config) == {"reshard_after_forward": False}


def test_the_shard_size_is_refused_under_another_strategy_and_reshard_is_shared():
    parallel.check_flags(replace(CONFIG, reshard_after_forward=False,
                                 explicit=("reshard_after_forward",)), training=True)
    with pytest.raises(UsageError, match="--hsdp-shard-size applies to --parallel hsdp, not to "
                                         "fsdp"):
        parallel.check_flags(replace(CONFIG, parallel="fsdp", hsdp_shard_size=2,
                                     explicit=("hsdp_shard_size",)), training=True)


@pytest.mark.parametrize("flags, text", [
    (["--network", "resnet18", "--parallel", "hsdp"], "--parallel hsdp shards the llama_*"),
    (["--network", "llama_tiny", "--parallel", "hsdp", "--precision", "bf16"],
     "--parallel hsdp does not run --precision bf16"),
    (["--network", "llama_tiny", "--hsdp-shard-size", "2"],
     "--hsdp-shard-size applies to --parallel hsdp, not to ddp"),
    (["--network", "llama_tiny", "--parallel", "hsdp", "--hsdp-shard-size", "2"],
     "1 rank does not form groups of 2"),
])
def test_refused_in_one_line_before_anything_runs(tmp_path, capfd, flags, text):
    out_dir = tmp_path / "results"
    ran = run_main(capfd, *flags, "--device", "cpu", "--output-dir", str(out_dir))
    assert_one_line_error(ran, 2, text)
    assert not out_dir.exists()


@pytest.mark.slow
def test_fp8_and_checkpointing_run_as_under_fsdp(tmp_path, capfd, monkeypatch):
    """One process: a 1 x 1 mesh, FP8 tensorwise through fsdp's conversion (nothing gathered
    in FP8 with one shard), selective checkpointing; the CPU is told it has FP8 units, as
    tests/e2e/test_fsdp_run.py does."""
    pytest.importorskip("torchao")
    from microbench.plan import cli
    from microbench.platform import devices
    from support.documents import check_document
    monkeypatch.setattr(devices, "no_fp8_reason", lambda device: None)
    monkeypatch.setattr(devices, "fp8_formats", lambda device: ("float8_e4m3fn", "float8_e5m2"))
    monkeypatch.setattr(cli, "_refuse_fp8_on_cpu", lambda configs: None)
    out_dir = tmp_path / "results"
    ran = run_main(capfd, "--network", "llama_tiny", "--seq-len", "16", "--vocab-size", "512",
                   "--iterations", "1", "--warmup", "0", "--device", "cpu",
                   "--telemetry-interval", "0", "--batch-size", "1", "--parallel", "hsdp",
                   "--precision", "fp8", "--activation-checkpointing", "selective",
                   "--output-dir", str(out_dir))
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "FSDP2 over 1 rank, mesh 1 replica x 1 shard" in ran.stdout
    [path] = out_dir.glob("*.json")
    document = check_document(path)
    block = document["parallel"]
    assert (block["mode"], block["mesh_shape"], block["activation_checkpointing"]) == (
        "hsdp", [1, 1], "selective")
    assert 0.5 < document["low_precision"]["fp8_flops_share"] < 1
    assert document["low_precision"]["fp8_all_gather"] is False
