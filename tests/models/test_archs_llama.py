"""The LLaMA-style model (microbench/models/archs/llama.py) and the optional Hugging Face builder.

CPU only and small (hidden 64, 2 layers, vocab 256, 32 positions); the large presets are checked
by their closed-form parameter counts only, never built.
"""
from __future__ import annotations

import math
import sys

import pytest
import torch
import torch.nn.functional as F

from support.llama_reference import generate, generate_without_cache, hand_count
from microbench.models.archs.llama import (ATTENTION_IMPLS, PRESETS, KVCache, LlamaConfig, build,
                                           check_attention, decode_step, parameter_count, prefill)
from microbench.platform.errors import MissingEnvironment, UsageError
from microbench.models.hf import parse_model_kwargs, parse_value

VOCAB = 256


def tiny_config(**changes) -> LlamaConfig:
    fields = dict(vocab_size=VOCAB, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=4,
                  intermediate_size=128, max_seq_len=32)
    return LlamaConfig(**{**fields, **changes})


def tiny_model(attention: str = "sdpa", **changes):
    torch.manual_seed(0)
    return build(tiny_config(**changes), attention).eval()


# --- configuration and parameter counts ------------------------------------------------------

@pytest.mark.parametrize("name, expected", [
    ("llama_tiny", hand_count(1000, 512, 8, 8, 4, 2048, tied=True)),
    ("llama_medium", hand_count(1000, 1024, 12, 8, 4, 4096, tied=True)),
    # TinyLlama-1.1B's published size.
    ("llama_1b", 1_100_048_384),
])
def test_preset_parameter_counts(name, expected):
    assert parameter_count(PRESETS[name]) == expected


def test_llama_1b_has_the_tinyllama_shape():
    config = PRESETS["llama_1b"]
    assert parameter_count(config) == hand_count(32000, 2048, 22, 32, 4, 5632, tied=False)
    assert (config.max_seq_len, config.head_dim) == (2048, 64)


@pytest.mark.parametrize("changes", [{}, {"num_kv_heads": 2}, {"num_kv_heads": 1},
                                     {"tie_embeddings": True}])
def test_parameter_count_matches_the_built_model(changes):
    model = tiny_model(**changes)
    assert parameter_count(model.config) == sum(p.numel() for p in model.parameters())


def test_with_overrides_returns_a_validated_copy():
    base = PRESETS["llama_tiny"]
    config = base.with_overrides(seq_len=64, vocab_size=500, kv_heads=2)
    assert (config.max_seq_len, config.vocab_size, config.num_kv_heads) == (64, 500, 2)
    assert base.max_seq_len == 128 and base.with_overrides() == base


@pytest.mark.parametrize("overrides, flag", [
    ({"kv_heads": 3}, "--kv-heads"), ({"kv_heads": 0}, "--kv-heads"),
    ({"seq_len": 0}, "--seq-len"), ({"vocab_size": -1}, "--vocab-size"),
])
def test_invalid_overrides_name_the_flag(overrides, flag):
    with pytest.raises(UsageError, match=flag):
        PRESETS["llama_tiny"].with_overrides(**overrides)


def test_unknown_preset_and_attention_are_usage_errors():
    with pytest.raises(UsageError, match="llama_tiny"):
        build("llama_tiyn")
    with pytest.raises(UsageError, match="eager, sdpa, flash, efficient, math"):
        build(tiny_config(), attention="fast")


# --- attention implementations -----------------------------------------------------------------

@pytest.mark.parametrize("kv_heads", [4, 2])
def test_attention_implementations_agree(kv_heads):
    model = tiny_model("eager", num_kv_heads=kv_heads)
    tokens = torch.randint(0, VOCAB, (2, 32))
    with torch.no_grad():
        reference = model(tokens)
        for impl in ("sdpa", "math"):
            model.set_attention(impl)
            torch.testing.assert_close(model(tokens), reference, rtol=1e-4, atol=1e-5)
    assert reference.shape == (2, 32, VOCAB)


def test_logits_are_causal():
    """Changing a later token must not change earlier positions' logits."""
    model = tiny_model("eager")
    tokens = torch.randint(0, VOCAB, (1, 16))
    changed = tokens.clone()
    changed[0, 10] = (changed[0, 10] + 1) % VOCAB
    with torch.no_grad():
        before, after = model(tokens), model(changed)
    torch.testing.assert_close(before[:, :10], after[:, :10])
    assert not torch.allclose(before[:, 10:], after[:, 10:])


def test_check_attention_on_cpu():
    for impl in ("eager", "sdpa", "math"):
        check_attention(impl, torch.device("cpu"), torch.float32, 16)
    for impl in ("flash", "efficient"):
        with pytest.raises(UsageError, match="GPU"):
            check_attention(impl, torch.device("cpu"), torch.bfloat16, 64)
    with pytest.raises(UsageError, match="choose one of"):
        check_attention("xformers", "cpu", torch.float32, 64)
    assert set(ATTENTION_IMPLS) == {"eager", "sdpa", "flash", "efficient", "math"}


# --- KV cache and generation -------------------------------------------------------------------

@pytest.mark.parametrize("attention, kv_heads", [("sdpa", 4), ("sdpa", 2), ("eager", 1),
                                                 ("math", 2)])
def test_cached_generation_matches_recomputation(attention, kv_heads):
    model = tiny_model(attention, num_kv_heads=kv_heads)
    prompt = torch.randint(0, VOCAB, (3, 7))
    cached = generate(model, prompt, gen_len=12)
    assert cached.shape == (3, 12) and cached.dtype == torch.long
    assert torch.equal(cached, generate_without_cache(model, prompt, gen_len=12))


def test_decode_logits_match_full_forward():
    """Teacher-forced: each cached step's logits equal the full pass at that position."""
    model = tiny_model("sdpa", num_kv_heads=2)
    tokens = torch.randint(0, VOCAB, (2, 20))
    cache = model.make_cache(batch=2, max_len=32)
    with torch.no_grad():
        full = model(tokens)
        torch.testing.assert_close(model(tokens[:, :8], torch.arange(8), cache), full[:, :8])
        for pos in range(8, 20):
            step = model(tokens[:, pos:pos + 1], torch.tensor([pos]), cache)
            torch.testing.assert_close(step[:, 0], full[:, pos], rtol=1e-4, atol=1e-5)


def test_cache_is_static_and_reusable():
    model = tiny_model(num_kv_heads=2)
    cache = model.make_cache(batch=2, max_len=24)
    assert isinstance(cache, KVCache) and cache.max_len == 24 and cache.batch == 2
    assert cache.keys[0].shape == (2, 2, 24, 16) and cache.keys[0].dtype == torch.float32
    buffers = [t.data_ptr() for t in cache.keys + cache.values]
    prompt = torch.randint(0, VOCAB, (2, 5))
    first = generate(model, prompt, 10, cache)
    assert [t.data_ptr() for t in cache.keys + cache.values] == buffers
    # Stale slots from the first run are hidden by the causal mask rows.
    assert torch.equal(generate(model, prompt, 10, cache), first)


def test_prefill_and_decode_step_shapes():
    model = tiny_model()
    cache = model.make_cache(batch=2, max_len=16)
    token = prefill(model, torch.randint(0, VOCAB, (2, 6)), cache)
    assert token.shape == (2, 1)
    assert decode_step(model, token, torch.tensor([6]), cache).shape == (2, 1)


def test_lengths_beyond_the_model_are_usage_errors():
    model = tiny_model()
    with pytest.raises(UsageError, match="--seq-len"):
        model.make_cache(batch=1, max_len=33)
    with pytest.raises(UsageError, match="--seq-len"):
        model(torch.zeros(1, 33, dtype=torch.long))
    with pytest.raises(UsageError, match="positions"):
        generate(model, torch.zeros(1, 30, dtype=torch.long), gen_len=4)


# --- training ----------------------------------------------------------------------------------

def test_training_step_starts_near_uniform_loss_and_updates_weights():
    model = tiny_model().train()
    tokens = torch.randint(0, VOCAB, (4, 32))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.layers[0].attention.wq.weight.detach().clone()
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    # std-0.02 init gives near-zero logits, so the loss starts at ~ln(vocab).
    assert math.isfinite(loss.item()) and abs(loss.item() - math.log(VOCAB)) < 0.1
    assert not torch.equal(model.layers[0].attention.wq.weight, before)


# --- Hugging Face builder ----------------------------------------------------------------------

def test_parse_model_kwargs():
    assert parse_model_kwargs(["hidden_size=64", "hidden_act=silu"]) == {
        "hidden_size": "64", "hidden_act": "silu"}
    for bad in (["hidden_size"], ["=3"], ["a=1", "a=2"]):
        with pytest.raises(UsageError):
            parse_model_kwargs(bad)
    assert [parse_value(v) for v in ("64", "1e-5", "true", "[1, 2]", "silu")] == [
        64, 1e-5, True, [1, 2], "silu"]


def test_missing_transformers_is_a_missing_environment(monkeypatch):
    from microbench.models.hf import build_hf_model
    monkeypatch.setitem(sys.modules, "transformers", None)   # makes `import transformers` fail
    with pytest.raises(MissingEnvironment, match="pip install transformers"):
        build_hf_model("llama", {})


def test_build_hf_llama():
    pytest.importorskip("transformers")
    from microbench.models.hf import build_hf_model, hf_max_positions, hf_vocab_size
    overrides = parse_model_kwargs(["hidden_size=64", "num_hidden_layers=2",
                                    "num_attention_heads=4", "intermediate_size=128",
                                    "vocab_size=256"])
    model, config = build_hf_model("llama", overrides)
    assert hf_vocab_size(config) == 256 and hf_max_positions(config) > 0
    with torch.no_grad():
        logits = model(torch.randint(0, 256, (2, 8))).logits
    assert logits.shape == (2, 8, 256)
    with pytest.raises(UsageError, match="llama"):
        build_hf_model("lama", {})
