"""The step builder (microbench/steps/workload.py): the hooks a precision recipe runs after each
optimizer step, for every strategy (issue 54, item 3; issue 58: FP8 under FSDP2 precomputes
its weights' scales there), on the CPU with gloo and torchao's FP8 layers in eager mode."""
from __future__ import annotations

import pytest
import torch

from microbench.models import registry
from microbench.models.archs import llama
from microbench.settings import precision
from microbench.settings.model_options import ModelOptions
from microbench.steps import low_precision, sharding, workload

torchao_float8 = pytest.importorskip("torchao.float8")

CPU = torch.device("cpu")
FP8 = precision.lookup("fp8")
STEPS = 2
# Layers whose sides are multiples of 16, as FP8 needs; two blocks.
CONFIG = llama.LlamaConfig(vocab_size=256, hidden_size=64, num_layers=2, num_heads=4,
                           num_kv_heads=2, intermediate_size=128, max_seq_len=32)


@pytest.fixture
def events(monkeypatch):
    """What happened, in order: "step" after each optimizer step (torch's global post-step
    hook), "precompute" for each call of torchao's scale precompute (a spy that calls it)."""
    seen: list[str] = []
    real = torchao_float8.precompute_float8_dynamic_scale_for_fsdp

    def spy(model):
        seen.append("precompute")
        real(model)

    monkeypatch.setattr(torchao_float8, "precompute_float8_dynamic_scale_for_fsdp", spy)
    from torch.optim.optimizer import register_optimizer_step_post_hook
    handle = register_optimizer_step_post_hook(
        lambda optimizer, args, kwargs: seen.append("step"))
    yield seen
    handle.remove()


def _train(model, spec) -> None:
    tokens = torch.randint(0, CONFIG.vocab_size, (2, 17),
                           generator=torch.Generator().manual_seed(0))
    inputs, target = tokens[:, :-1], tokens[:, 1:]
    update = workload.make_update(model, FP8, CPU, "foreach", "adamw")
    step = workload.training_step(model, spec, inputs, target, FP8, CPU, 1,
                                  workload.PhaseMarks(), update=update)
    for _ in range(STEPS):
        step()


def _tiny():
    """The language models' loss; the model is CONFIG (seconds a test on two shared cores)."""
    return registry.resolve("llama_tiny", ModelOptions(seq_len=16, vocab_size=256))


def _trained_sharded(recipe: str, spec):
    """CONFIG converted to FP8 ``recipe`` for FSDP, sharded, materialised and trained (inside
    the caller's process group)."""
    model = llama.build_on_meta(CONFIG)
    low_precision.convert_fp8(model, recipe, fsdp=True)
    sharding.shard(model, CPU, FP8, name=spec.name)
    sharding.materialize(model, CPU, lambda m: llama.initialize(m, seed=0))
    _train(model, spec)
    return model


def test_fp8_gathered_in_fp8_under_fsdp_precomputes_its_scales_after_each_optimizer_step(events):
    spec = _tiny()
    with sharding.process_group(CPU):
        model = _trained_sharded("tensorwise", spec)
        from torchao.float8.float8_linear import Float8Linear
        scales = [module.weight._local_tensor._precomputed_scale for module in model.modules()
                  if isinstance(module, Float8Linear)]
    assert events == ["step", "precompute"] * STEPS
    # What torchao left for the next all-gathers: a scale for every FP8 weight.
    assert scales and all(scale is not None and scale > 0 for scale in scales)


@pytest.mark.parametrize("where", ["one process", "fsdp, gathered in bf16 (rowwise)"])
def test_fp8_without_an_fp8_all_gather_runs_no_hook(events, where):
    spec = _tiny()
    if where == "one process":
        model = llama.build(CONFIG)
        low_precision.convert_fp8(model, "tensorwise")
        _train(model, spec)
    else:
        with sharding.process_group(CPU):
            _trained_sharded("rowwise", spec)
    assert events == ["step"] * STEPS


def test_only_fp8_runs_look_for_a_hook():
    """A BF16 run never imports torchao for its hooks (it may not be installed)."""
    model = torch.nn.Linear(16, 16)
    assert workload.post_step_hooks(model, precision.lookup("amp-bf16")) == ()
