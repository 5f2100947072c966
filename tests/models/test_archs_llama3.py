"""The Llama 3 presets, RoPE frequency scaling, the meta-device build and the seeded init
(microbench/models/archs/llama.py). The large presets are built on the meta device only."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

from microbench.models.archs.llama import (INIT_STD, PRESETS, LlamaConfig, RopeScaling, build,
                                           build_on_meta, initialize, parameter_count,
                                           rope_frequencies, rope_tables)
from microbench.platform.errors import UsageError
from support.llama_reference import hand_count

# What Meta's config.json files say (meta-llama/Llama-3.2-1B, Llama-3.2-3B, Llama-3.1-8B).
PUBLISHED = {
    "llama3_1b": dict(hidden=2048, layers=16, heads=32, ffn=8192, tied=True, factor=32.0,
                      parameters=1_235_814_400),
    "llama3_3b": dict(hidden=3072, layers=28, heads=24, ffn=8192, tied=True, factor=32.0,
                      parameters=3_212_749_824),
    "llama3_8b": dict(hidden=4096, layers=32, heads=32, ffn=14336, tied=False, factor=8.0,
                      parameters=8_030_261_248),
}


def small_llama3(**changes) -> LlamaConfig:
    """llama3_1b's recipe (GQA, theta 500k, scaling, tied head) at a size the CPU trains."""
    fields = dict(vocab_size=256, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                  intermediate_size=128, max_seq_len=32)
    return replace(PRESETS["llama3_1b"], **{**fields, **changes})


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_presets_have_the_published_shapes_and_parameter_counts(name):
    config, published = PRESETS[name], PUBLISHED[name]
    assert (config.hidden_size, config.num_layers, config.num_heads, config.intermediate_size,
            config.tie_embeddings) == (published["hidden"], published["layers"],
                                       published["heads"], published["ffn"], published["tied"])
    assert (config.vocab_size, config.num_kv_heads, config.rope_theta, config.norm_eps,
            config.max_seq_len) == (128256, 8, 500000.0, 1e-5, 8192)
    assert config.rope_scaling == RopeScaling(factor=published["factor"], low_freq_factor=1.0,
                                              high_freq_factor=4.0,
                                              original_max_position_embeddings=8192)
    assert parameter_count(config) == published["parameters"] == hand_count(
        128256, published["hidden"], published["layers"], published["heads"], 8,
        published["ffn"], published["tied"])


def test_8b_builds_on_the_meta_device_without_memory():
    model = build_on_meta("llama3_8b")
    tensors = list(model.parameters()) + list(model.buffers())
    assert tensors and all(t.is_meta for t in tensors)     # shapes only: nothing allocated
    assert sum(p.numel() for p in model.parameters()) == 8_030_261_248
    assert model.rope_cos.shape == (8192, 128)


def test_counts_and_rope_frequencies_match_transformers():
    """An independent implementation: Hugging Face's LlamaForCausalLM (on meta) and its
    llama3 RoPE initialisation, fed the published configs."""
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    for name, config in PRESETS.items():
        if config.rope_scaling is None:
            continue
        scaling = config.rope_scaling
        theirs = transformers.LlamaConfig(
            vocab_size=config.vocab_size, hidden_size=config.hidden_size,
            intermediate_size=config.intermediate_size, num_hidden_layers=config.num_layers,
            num_attention_heads=config.num_heads, num_key_value_heads=config.num_kv_heads,
            tie_word_embeddings=config.tie_embeddings, max_position_embeddings=131072,
            rope_theta=config.rope_theta,
            rope_scaling={"rope_type": "llama3", "factor": scaling.factor,
                          "low_freq_factor": scaling.low_freq_factor,
                          "high_freq_factor": scaling.high_freq_factor,
                          "original_max_position_embeddings":
                              scaling.original_max_position_embeddings})
        with torch.device("meta"):
            hf_model = transformers.LlamaForCausalLM(theirs)
        assert sum(p.numel() for p in hf_model.parameters()) == parameter_count(config), name
        inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["llama3"](theirs, device="cpu")
        assert attention_factor == 1.0
        ours = rope_frequencies(config.head_dim, config.rope_theta, scaling)
        torch.testing.assert_close(ours.float(), inv_freq, rtol=1e-6, atol=0)


def test_rope_scaling_keeps_high_slows_low_and_blends_between():
    base = rope_frequencies(128, 500000.0)
    scaled = rope_frequencies(128, 500000.0, RopeScaling(factor=8.0))
    wavelength = 2 * math.pi / base
    high = wavelength < 8192 / 4           # shorter than 2048 positions: untouched
    low = wavelength > 8192 / 1            # longer than the original context: slowed 8x
    middle = ~high & ~low
    assert high.any() and low.any() and middle.any()
    torch.testing.assert_close(scaled[high], base[high])
    torch.testing.assert_close(scaled[low], base[low] / 8)
    assert ((scaled[middle] < base[middle]) & (scaled[middle] > base[middle] / 8)).all()
    # Without scaling the tables are the plain RoPE ones (Su et al.): angle = position * freq.
    cos, _ = rope_tables(128, 16, 500000.0)
    torch.testing.assert_close(cos[5, :64], torch.cos(5 * base).float())


@pytest.mark.parametrize("fields", [dict(factor=0.0), dict(factor=8.0, low_freq_factor=4.0),
                                    dict(factor=8.0, original_max_position_embeddings=0)])
def test_invalid_rope_scaling_is_a_usage_error(fields):
    with pytest.raises(UsageError, match="RoPE scaling"):
        RopeScaling(**fields)


def test_a_small_llama3_shaped_model_trains_from_near_uniform_loss():
    torch.manual_seed(0)
    model = build(small_llama3())
    initialize(model, seed=3)
    tokens = torch.randint(0, 256, (2, 33))
    loss = torch.nn.functional.cross_entropy(model(tokens[:, :-1]).flatten(0, 1),
                                             tokens[:, 1:].flatten())
    assert abs(loss.item() - math.log(256)) < 0.5
    loss.backward()
    assert model.output.weight is model.embed.weight          # tied, as in Llama 3.2
    assert model.embed.weight.grad.abs().sum() > 0


def named_values(model) -> dict[str, torch.Tensor]:
    return {name.replace("_checkpoint_wrapped_module.", ""): p.detach().clone()
            for name, p in model.named_parameters()}


def test_initialize_depends_on_the_seed_and_names_only():
    config = small_llama3()
    torch.manual_seed(1)
    first = build(config)
    torch.manual_seed(2)                       # another global RNG state: same weights
    second = build(config)
    for index, block in enumerate(second.layers):    # wrapped blocks: same names underneath
        second.layers[index] = checkpoint_wrapper(block)
    initialize(first, seed=7)
    initialize(second, seed=7)
    ours, theirs = named_values(first), named_values(second)
    assert ours.keys() == theirs.keys()
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], rtol=0, atol=0)
    initialize(second, seed=8)
    assert not torch.equal(named_values(second)["layers.0.attention.wq.weight"],
                           ours["layers.0.attention.wq.weight"])
    # Each matrix has its own stream: no two draw the same numbers.
    assert not torch.equal(ours["layers.0.feed_forward.w1.weight"],
                           ours["layers.0.feed_forward.w3.weight"])


def test_initialize_draws_the_documented_distribution_and_rope_tables():
    model = build_on_meta(small_llama3(hidden_size=256, intermediate_size=512))
    model.to_empty(device="cpu")                 # garbage until initialised
    initialize(model, seed=0)
    weight = model.layers[0].feed_forward.w1.weight
    assert abs(weight.std().item() - INIT_STD) < 0.001 and abs(weight.mean().item()) < 0.001
    assert torch.equal(model.norm.weight, torch.ones(256))
    cos, sin = rope_tables(model.config.head_dim, 32, 500000.0, model.config.rope_scaling)
    assert torch.equal(model.rope_cos, cos) and torch.equal(model.rope_sin, sin)


def test_initialize_refuses_a_model_without_memory():
    with pytest.raises(ValueError, match="materialise"):
        initialize(build_on_meta(small_llama3()), seed=0)
