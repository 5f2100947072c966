"""Optimizers by name and implementation (microbench/steps/optim.py)."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

from microbench.steps import optim, workload
from microbench.platform.errors import UsageError


def tiny_models(count: int) -> list[nn.Module]:
    torch.manual_seed(0)
    first = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
    models = [first]
    for _ in range(count - 1):
        copy = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
        copy.load_state_dict(first.state_dict())
        models.append(copy)
    return models


def train(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int = 3) -> None:
    inputs, target = torch.randn(4, 8, generator=torch.Generator().manual_seed(1)), \
        torch.tensor([0, 1, 2, 0])
    for _ in range(steps):
        nn.functional.cross_entropy(model(inputs), target).backward()
        optimizer.step()
        optimizer.zero_grad()


def test_make_sgd_keeps_the_recipe_it_always_had():
    [model] = tiny_models(1)
    optimizer = workload.make_sgd(model.parameters())
    group = optimizer.param_groups[0]
    assert isinstance(optimizer, torch.optim.SGD)
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (0.01, 0.9, 1e-4)
    assert optim.implementation(optimizer) == "foreach"


def test_adamw_follows_torchtitan_and_fused_matches_foreach():
    models = tiny_models(2)
    optimizers = [optim.make_optimizer(models[0].parameters(), "adamw", "foreach"),
                  optim.make_optimizer(models[1].parameters(), "adamw", "fused")]
    group = optimizers[0].param_groups[0]
    assert isinstance(optimizers[0], torch.optim.AdamW)
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == (
        3e-4, (0.9, 0.95), 1e-8, 0.1)
    assert [optim.implementation(o) for o in optimizers] == ["foreach", "fused"]
    for model, optimizer in zip(models, optimizers):
        train(model, optimizer)
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    state = optimizers[0].state[next(models[0].parameters())]
    assert {"exp_avg", "exp_avg_sq"} <= state.keys()       # two moments per parameter


@pytest.mark.parametrize("name", optim.NAMES)
def test_auto_falls_back_to_foreach_where_no_fused_kernel_exists(name):
    on_meta = [nn.Parameter(torch.empty(4, 4, device="meta"))]
    assert optim.implementation(optim.make_optimizer(on_meta, name, "auto")) == "foreach"
    with pytest.raises(UsageError, match="--optimizer-impl fused cannot run here.*use "
                                         "--optimizer-impl foreach"):
        optim.make_optimizer(on_meta, name, "fused")


@pytest.mark.parametrize("name, impl, message", [
    ("adam", "foreach", "--optimizer 'adam': choose one of sgd, adamw"),
    ("adamw", "fast", "--optimizer-impl 'fast': choose one of foreach, fused, auto"),
])
def test_unknown_names_are_usage_errors(name, impl, message):
    with pytest.raises(UsageError, match=message):
        optim.make_optimizer(tiny_models(1)[0].parameters(), name, impl)


@pytest.fixture
def one_rank_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def sharded_model() -> nn.Module:
    from torch.distributed.fsdp import fully_shard
    [model] = tiny_models(1)
    return fully_shard(model)


def test_fused_sgd_is_refused_for_sharded_parameters_and_auto_picks_foreach(one_rank_group):
    model = sharded_model()
    # What the refusal is about, in the installed PyTorch: the kernel has no DTensor strategy.
    # If this stops raising, fused SGD has learnt DTensors and optim may allow it.
    raw = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)
    with pytest.raises(NotImplementedError, match="_fused_sgd_"):
        train(model, raw, steps=1)
    with pytest.raises(UsageError, match="fused SGD kernel has no DTensor support"):
        optim.make_optimizer(model.parameters(), "sgd", "fused")
    chosen = optim.make_optimizer(model.parameters(), "sgd", "auto")
    assert optim.implementation(chosen) == "foreach"
    train(model, chosen, steps=1)


def test_fused_adamw_steps_sharded_parameters(one_rank_group):
    model = sharded_model()
    optimizer = optim.make_optimizer(model.parameters(), "adamw", "fused")
    before = [p.full_tensor().clone() for p in model.parameters()]
    train(model, optimizer, steps=1)
    assert all(not torch.equal(b, p.full_tensor()) for b, p in zip(before, model.parameters()))
