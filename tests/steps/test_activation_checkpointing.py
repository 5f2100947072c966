"""Activation checkpointing (microbench/steps/activation_checkpointing.py) and the block finder
(microbench/steps/blocks.py), on a tiny LLaMA on the CPU.

Memory is measured with PyTorch's own MemTracker (torch.distributed._tools.mem_tracker), which
follows every tensor's storage through the dispatcher, so it works on the CPU; recomputation is
counted with FlopCounterMode (measure/flops.py's counting()).
"""
from __future__ import annotations

import pytest
import torch
import torchvision
from torch.distributed._tools.mem_tracker import MemTracker

from microbench.measure import flops
from microbench.steps import activation_checkpointing
from microbench.models.archs.llama import LlamaConfig, build, initialize
from microbench.steps.blocks import transformer_blocks
from microbench.platform.errors import UsageError

CONFIG = LlamaConfig(vocab_size=256, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                     intermediate_size=256, max_seq_len=64)
BATCH = 4
TOKENS = torch.randint(0, 256, (BATCH, 64), generator=torch.Generator().manual_seed(0))


def model_with(mode: str, attention: str = "sdpa"):
    model = build(CONFIG, attention)
    initialize(model, seed=0)
    assert activation_checkpointing.apply(model, mode) == (0 if mode == "none" else 2)
    return model


def forward_backward(model) -> None:
    model(TOKENS).float().logsumexp(-1).mean().backward()


def peak_bytes(model) -> int:
    tracker = MemTracker()
    tracker.track_external(model, TOKENS)
    with tracker:
        forward_backward(model)
    return tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]


def training_flops(model) -> int:
    with flops.counting() as counter:
        forward_backward(model)
    return counter.get_total_flops()


def projection_flops(*widths: tuple[int, int]) -> int:
    """Forward FLOPs of projections (in, out) over every token of the batch, in every layer."""
    tokens = BATCH * 64
    return CONFIG.num_layers * sum(2 * tokens * a * b for a, b in widths)


def test_gradients_are_the_same_in_every_mode():
    reference = model_with("none")
    forward_backward(reference)
    for mode in ("full", "selective"):
        model = model_with(mode)
        forward_backward(model)
        for (name, ours), theirs in zip(model.named_parameters(), reference.parameters()):
            torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_checkpointing_lowers_peak_memory_full_most(attention):
    peaks = {mode: peak_bytes(model_with(mode, attention))
             for mode in activation_checkpointing.MODES}
    assert peaks["none"] > peaks["selective"] > peaks["full"], peaks


def test_recomputation_is_what_each_mode_says():
    flops = {mode: training_flops(model_with(mode)) for mode in activation_checkpointing.MODES}
    hidden, kv, ffn = 64, 2 * 16, 256
    # Selective keeps the 1st, 3rd, 5th and 7th projection of each block (wq, wv, w1, w2) and
    # the attention kernel; exactly wk, wo and w3 run again in the backward.
    assert flops["selective"] - flops["none"] == projection_flops((hidden, kv), (hidden, hidden),
                                                                  (hidden, ffn))
    # Full recomputes the block's forward: at least every projection whose input or output the
    # backward needs (all but w2, whose output only feeds the residual sum), at most all of it.
    all_but_w2 = projection_flops((hidden, hidden), (hidden, kv), (hidden, kv), (hidden, hidden),
                                  (hidden, ffn), (hidden, ffn))
    assert all_but_w2 <= flops["full"] - flops["none"] <= (
        all_but_w2 + projection_flops((ffn, hidden)) + 4 * BATCH * 4 * 64 * 64 * 16)


def test_an_image_model_and_an_unknown_mode_are_usage_errors():
    with pytest.raises(UsageError, match="--activation-checkpointing full works on the "
                                         "transformer blocks of a language model, and resnet18 "
                                         "has none"):
        activation_checkpointing.apply(torchvision.models.resnet18(), "full", name="resnet18")
    with pytest.raises(UsageError, match="choose one of none, full, selective"):
        activation_checkpointing.apply(build(CONFIG), "some")
    assert activation_checkpointing.apply(torchvision.models.resnet18(), "none") == 0


def test_hugging_face_decoder_layers_are_found_and_checkpointed():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=3, num_attention_heads=4,
                                      num_key_value_heads=2)
    model = transformers.LlamaForCausalLM(config)
    blocks = transformer_blocks(model)
    assert (blocks.path, len(blocks)) == ("model.layers", 3)
    assert activation_checkpointing.apply(model, "selective") == 3
    assert model.config.use_cache is False     # a KV cache filled again by the recomputation
    assert transformer_blocks(model).path == "model.layers"      # still found once wrapped
    tokens = torch.randint(0, 128, (2, 16))
    model(tokens).logits.sum().backward()
    assert model.model.layers[0]._checkpoint_wrapped_module.mlp.up_proj.weight.grad is not None



def test_selective_checkpointing_of_fp8_recomputes_the_same_projections_and_no_maximum():
    """Under FP8 (torchao's Float8Linear) selective checkpointing recomputes wk, wo and w3 as in
    BF16 (their products reach the policy as mm on Float8 tensors), and keeps the absolute
    maxima the tensorwise scales come from, as torchtitan does: the recomputation reduces
    nothing again (issue 58)."""
    pytest.importorskip("torchao")
    from collections import Counter
    from torch.utils._python_dispatch import TorchDispatchMode
    from microbench.steps import low_precision

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen[func] += 1
            return func(*args, **(kwargs or {}))

    def ops(mode: str) -> Counter:
        model = build(CONFIG)
        initialize(model, seed=0)
        low_precision.convert_fp8(model, "tensorwise")
        activation_checkpointing.apply(model, mode)
        with Ops() as counter:
            forward_backward(model)
        return counter.seen

    none, selective = ops("none"), ops("selective")
    mm, amax = torch.ops.aten.mm.default, torch.ops.aten.max.default
    assert selective[mm] - none[mm] == 3 * CONFIG.num_layers
    assert none[amax] > 0 and selective[amax] == none[amax]
