"""FSDP2 sharding (microbench/steps/sharding.py) on the CPU with gloo: one process in this interpreter,
and two ranks under torchrun (tests/support/fsdp_worker.py) against DDP."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torchvision
from torch.distributed.tensor import DTensor

from conftest import ROOT, free_port
from microbench.steps import optim, sharding
from microbench.settings import precision
from microbench.models.archs import llama
from microbench.platform.errors import UsageError
from support.launch import child_env

CPU = torch.device("cpu")
CONFIG = llama.LlamaConfig(vocab_size=256, hidden_size=64, num_layers=2, num_heads=4,
                           num_kv_heads=2, intermediate_size=128, max_seq_len=32)
TOKENS = torch.randint(0, 256, (4, 33), generator=torch.Generator().manual_seed(0))
WORKER_TIMEOUT_S = 180       # the worker's own collective timeout is 600 s


def train(model, mode: str, steps: int = 3) -> tuple[list[float], torch.optim.Optimizer]:
    policy = precision.lookup(mode)
    optimizer = optim.make_optimizer(model.parameters(), "adamw", "foreach")
    losses = []
    for _ in range(steps):
        with policy.autocast(CPU):
            logits = model(TOKENS[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), TOKENS[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, optimizer


def sharded_model(mode: str = "fp32", **options):
    model = llama.build_on_meta(CONFIG)
    plan = sharding.shard(model, CPU, precision.lookup(mode), **options)
    sharding.materialize(model, CPU, lambda m: llama.initialize(m, seed=0))
    return model, plan


def whole_model():
    model = llama.build(CONFIG)
    llama.initialize(model, seed=0)
    return model


@pytest.fixture
def one_rank():
    with sharding.process_group(CPU):
        yield


def test_one_process_trains_exactly_like_plain_training(one_rank):
    model, plan = sharded_model()
    assert all(isinstance(p, DTensor) for p in model.parameters())
    assert plan.to_dict() == {"parallel": "fsdp", "world_size": 1, "blocks": 2,
                              "reshard_after_forward": True, "param_dtype": "fp32",
                              "reduce_dtype": "fp32", "mesh_shape": [1]}
    sharded_losses, optimizer = train(model, "fp32")
    assert sharded_losses == train(whole_model(), "fp32")[0]
    # One rank holds everything: FP32 weights, and AdamW's two FP32 moments plus a step count
    # (a 4-byte scalar) per parameter tensor.
    state = sharding.local_state_bytes(model, optimizer)
    count = llama.parameter_count(CONFIG)
    tensors = len(list(model.parameters()))
    assert sharding.local_parameter_count(model) == count
    assert (state.parameters, state.optimizer) == (4 * count, 8 * count + 4 * tensors)


def test_bf16_mixed_precision_computes_in_bf16_and_keeps_fp32_masters(one_rank):
    model, plan = sharded_model("amp-bf16")
    assert plan.describe() == (
        "FSDP2 over 1 rank: 2 blocks + root; block parameters freed after forward, gathered "
        "again for backward (the last block's kept); compute in BF16, gradients reduced in FP32, master weights and "
        "optimizer state FP32")
    seen = []
    model.layers[0].feed_forward.w1.register_forward_pre_hook(
        lambda module, args: seen.append(module.weight.dtype))
    sharded_losses, _ = train(model, "amp-bf16")
    assert seen == [torch.bfloat16] * 3
    assert all(p.dtype == torch.float32 for p in model.parameters())
    plain_losses, _ = train(whole_model(), "amp-bf16")
    assert sharded_losses == pytest.approx(plain_losses, rel=2e-3)


@pytest.mark.parametrize("reshard", [True, False])
def test_reshard_after_forward_takes_effect(one_rank, reshard):
    model, plan = sharded_model(reshard_after_forward=reshard)
    assert plan.reshard_after_forward is reshard
    logits = model(TOKENS[:, :-1])
    # Between forward and backward a block holds its shards (resharded) or the gathered
    # parameters (plain tensors); the root keeps its gathered parameters either way.
    block_weight = model.layers[0].attention.wq.weight
    assert isinstance(block_weight, DTensor) is reshard
    assert not isinstance(model.output.weight, DTensor)
    # The last block's backward comes first: it keeps its parameters gathered either way.
    assert not isinstance(model.layers[-1].attention.wq.weight, DTensor)
    logits.sum().backward()


def test_an_image_model_fp16_and_a_bad_reduce_dtype_are_usage_errors(one_rank):
    with pytest.raises(UsageError, match="--parallel fsdp works on the transformer blocks of a "
                                         "language model, and resnet18 has none"):
        sharding.shard(torchvision.models.resnet18(), CPU, precision.lookup("fp32"),
                       name="resnet18")
    for mode in ("fp16", "amp-fp16"):
        with pytest.raises(UsageError, match=f"does not run --precision {mode}.*amp-bf16"):
            sharding.mixed_precision(precision.lookup(mode))
    with pytest.raises(UsageError, match="reduce dtype 'fp16': choose one of fp32, bf16"):
        sharding.mixed_precision(precision.lookup("amp-bf16"), "fp16")


def test_shard_without_a_process_group_says_how_to_get_one():
    with pytest.raises(RuntimeError, match="sharding.process_group"):
        sharding.shard(llama.build_on_meta(CONFIG), CPU, precision.lookup("fp32"))


def torchrun_worker(out_dir, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--master-port", str(free_port()), str(ROOT / "tests" / "support" / "fsdp_worker.py"),
               str(out_dir), *extra]
    env = child_env(PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                             os.environ.get("PYTHONPATH")])))
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=WORKER_TIMEOUT_S)


@pytest.mark.slow
def test_two_ranks_hold_half_each_and_train_like_ddp(tmp_path):
    process = torchrun_worker(tmp_path)
    assert process.returncode == 0, process.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    total = ranks[0]["total_parameters"]
    assert sum(r["local_parameters"] for r in ranks) == total
    for record in ranks:
        assert record["plan"]["world_size"] == 2 and record["plan"]["parallel"] == "fsdp"
        assert abs(record["local_parameters"] / total - 0.5) < 0.01
        assert record["parameter_bytes"] == 4 * record["local_parameters"]
        assert 2 * record["parameter_bytes"] <= record["optimizer_bytes"] \
            <= 2 * record["parameter_bytes"] + 4 * 64   # 2 moments, a 4-byte step per tensor
        assert record["losses"] == pytest.approx(record["ddp_losses"], rel=1e-5)
        assert record["losses"][-1] < record["losses"][0]
        assert record["max_weight_difference"] < 1e-5


@pytest.mark.slow
def test_a_failing_rank_ends_every_rank(tmp_path):
    # Rank 1 raises in its second step while rank 0 waits in a collective: torchrun ends rank 0
    # at once. Had it not, rank 0 would wait out its 600 s collective timeout and subprocess.run
    # would time out first.
    process = torchrun_worker(tmp_path, "1")
    assert process.returncode == 1
    assert "RuntimeError: failure injected on rank 1" in process.stderr
    assert list(tmp_path.glob("rank*.json")) == []
