"""One rank of the two-process FSDP check in tests/steps/test_sharding.py (torchrun, gloo).

Trains a shrunk llama_tiny (2 layers, 32 tokens, vocabulary 999) for a few steps twice from the same seeded
weights and the same data: sharded with microbench.steps.sharding (built on meta, selective activation
checkpointing) and replicated with DDP. Writes what it saw to OUT_DIR/rank<R>.json.

    PYTHONPATH=. python -m torch.distributed.run --nproc-per-node 2 tests/support/fsdp_worker.py OUT_DIR \
        [FAIL_RANK]

With FAIL_RANK, that rank raises in its second sharded step, as a rank that dies mid-run.
"""
from __future__ import annotations

import datetime
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from microbench.steps import activation_checkpointing, optim, sharding
from microbench.settings import precision
from microbench.models.archs import llama

STEPS, GLOBAL_BATCH, SEED = 3, 4, 0
# An odd vocabulary: the (tied) embedding's 999 rows split 500 / 499, so uneven shards are
# initialised and trained too.
CONFIG = replace(llama.PRESETS["llama_tiny"], num_layers=2, max_seq_len=32, vocab_size=999)
CPU = torch.device("cpu")
FP32 = precision.lookup("fp32")


def local_batch(rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, CONFIG.vocab_size, (GLOBAL_BATCH, CONFIG.max_seq_len + 1),
                           generator=torch.Generator().manual_seed(SEED))
    mine = tokens.chunk(world)[rank]
    return mine[:, :-1], mine[:, 1:]


def train(model, rank: int, world: int, fail_rank: int | None = None):
    """The global mean loss of each step (the mean of the ranks' losses), and the optimizer."""
    inputs, target = local_batch(rank, world)
    optimizer = optim.make_optimizer(model.parameters(), "adamw", "foreach")
    losses = []
    for step in range(STEPS):
        if step == 1 and rank == fail_rank:
            raise RuntimeError(f"failure injected on rank {rank}")
        loss = torch.nn.functional.cross_entropy(model(inputs).flatten(0, 1), target.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)
        losses.append(mean.item())
    return losses, optimizer


def sharded(rank: int, world: int, fail_rank: int | None) -> dict:
    model = llama.build_on_meta(CONFIG)
    activation_checkpointing.apply(model, "selective")
    plan = sharding.shard(model, CPU, FP32, name="llama_tiny")
    sharding.materialize(model, CPU, lambda m: llama.initialize(m, SEED))
    losses, optimizer = train(model, rank, world, fail_rank)
    state = sharding.local_state_bytes(model, optimizer)
    weights = {name.replace("_checkpoint_wrapped_module.", ""): p.full_tensor()
               for name, p in model.named_parameters()}
    return {"losses": losses, "plan": plan.to_dict(),
            "local_parameters": sharding.local_parameter_count(model),
            "parameter_bytes": state.parameters, "optimizer_bytes": state.optimizer,
            "weights": weights}


def replicated(rank: int, world: int) -> dict:
    model = llama.build(CONFIG)
    llama.initialize(model, SEED)
    losses, _ = train(DistributedDataParallel(model), rank, world)
    return {"losses": losses, "weights": dict(model.named_parameters())}


def main(out_dir: str, fail_rank: int | None) -> None:
    # A wait far longer than the test's: a job that ends in time ended because a rank failed.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank, world = dist.get_rank(), dist.get_world_size()
    fsdp = sharded(rank, world, fail_rank)
    ddp = replicated(rank, world)
    difference = max((fsdp["weights"][name] - weight).abs().max().item()
                     for name, weight in ddp["weights"].items())
    record = {key: value for key, value in fsdp.items() if key != "weights"}
    record.update(ddp_losses=ddp["losses"], max_weight_difference=difference,
                  total_parameters=llama.parameter_count(CONFIG))
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(record))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
