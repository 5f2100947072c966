"""A decoder-only LLaMA-style language model, written from the published architecture.

Touvron et al., "LLaMA: Open and Efficient Foundation Language Models", 2023 (arXiv:2302.13971),
Section 2.2 lists the three changes to the original Transformer decoder that this model follows:

- pre-normalization with RMSNorm (Zhang & Sennrich, "Root Mean Square Layer Normalization",
  NeurIPS 2019, arXiv:1910.07467);
- the SwiGLU feed-forward block (Shazeer, "GLU Variants Improve Transformer", arXiv:2002.05202);
- rotary position embeddings (Su et al., "RoFormer", arXiv:2104.09864).

Keys and values may have fewer heads than queries: grouped-query attention (Ainslie et al., "GQA",
arXiv:2305.13245). There are no biases, no dropout and no pretrained weights: weights are random
(normal, std 0.02), which is all a benchmark needs.

The presets include the Llama 3 shapes (`llama3_1b`, `llama3_3b`, `llama3_8b`: vocabulary 128,256,
8 kv heads, RoPE theta 500,000 with Llama 3's frequency scaling, `RopeScaling`). A model too large
for one device is built on the meta device (`build_on_meta`: shapes, no memory), sharded, and only
then given memory and values (`initialize`: seeded per parameter, so a sharded model holds the
same weights as a whole one)::

    model = build_on_meta("llama3_8b")
    print(sum(p.numel() for p in model.parameters()))   # 8,030,261,248; nothing allocated
    # ... microbench.steps.sharding.shard(model, ...), then:
    # microbench.steps.sharding.materialize(model, device, lambda m: initialize(m, seed=0))

Attention runs one of `ATTENTION_IMPLS`: the explicit formula ("eager"), or PyTorch's
`scaled_dot_product_attention` with the backend left to PyTorch ("sdpa") or pinned ("flash",
"efficient", "math"). Call `check_attention` before a run to turn "this backend cannot run here"
into a `UsageError` instead of a RuntimeError deep inside the first step.

Generation uses a static KV cache (`KVCache`): its tensors are allocated once at full length, new
keys and values are written in place at the positions given as a tensor, and a decode step attends
over the whole cache through a boolean mask. Every decode step therefore has the same shapes, so
`torch.compile` (and CUDA graphs) capture it once instead of once per generated token.

Usage::

    import torch
    from microbench.models.archs.llama import PRESETS, build, parameter_count, prefill

    config = PRESETS["llama_tiny"].with_overrides(seq_len=256, kv_heads=2)
    print(parameter_count(config))                      # closed form, no model needed
    model = build(config, attention="sdpa")
    tokens = torch.randint(0, config.vocab_size, (4, config.max_seq_len))
    logits = model(tokens)                              # -> (4, 256, vocab_size)
    loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())

    model.eval()
    cache = model.make_cache(4, 48, device=tokens.device)
    token = prefill(model, tokens[:, :32], cache)      # -> (4, 1), greedy; the generate
                                                        # scenario then times decode_step
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import math
import warnings
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Callable, cast

import torch
import torch.nn.functional as F
from torch import nn

# The configuration lives in llama_config and the attention names in settings (torch-free, for
# the command line); re-exported here.
from microbench.models.llama_config import PRESETS, LlamaConfig, RopeScaling, parameter_count
from microbench.platform import devices
from microbench.platform.errors import UsageError
from microbench.settings.model_options import ATTENTION_IMPLS

if TYPE_CHECKING:
    from torch.nn.attention import SDPBackend

__all__ = [
    "ATTENTION_IMPLS", "KVCache", "Llama", "LlamaConfig", "PRESETS", "RopeScaling", "build",
    "build_on_meta", "check_attention", "decode_step", "initialize", "parameter_count",
    "prefill",
]


# Weight init: normal(0, 0.02) for every matrix, the GPT-2 / LLaMA-reference choice. The AMD
# TinyTransformer workshop (HPCTrainingExamples, MLExamples/TinyTransformer/version3_triton/
# exercises/performance_debugging/README.md, "Stage 1") shows what happens without it: PyTorch's
# default Linear init makes the logits explode and the first loss is ~942 instead of ~ln(vocab).
INIT_STD = 0.02


# ----------------------------------------------------------------------------------------------
# Building blocks
# ----------------------------------------------------------------------------------------------

_FUSED_RMS_NORM = hasattr(F, "rms_norm")


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * g, without centering or bias (Zhang & Sennrich 2019, eq. 4)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _FUSED_RMS_NORM and x.dtype == self.weight.dtype:
            # One kernel each way (PyTorch 2.4+) instead of six elementwise passes over the
            # activations, each saved for the backward; it also accumulates in float32.
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        # The mean of squares is taken in float32: in fp16/bf16 it loses precision (and fp16 can
        # overflow), as the LLaMA reference implementation also avoids.
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope_frequencies(head_dim: int, theta: float,
                     scaling: RopeScaling | None = None) -> torch.Tensor:
    """The head_dim / 2 rotary frequencies (radians per position), in float64.

    Su et al., Section 3.4.2: pair i rotates by position * theta^(-2i/d). With Llama 3 scaling,
    each frequency is then adjusted as `RopeScaling` describes.
    """
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    if scaling is None:
        return inv_freq
    context = scaling.original_max_position_embeddings
    # Periods in positions: the short ones (high frequencies) are kept, the long ones slowed by
    # `factor`, and between them `smooth` goes from 0 (slowed) to 1 (kept), linear in
    # context / wavelength.
    wavelength = 2 * math.pi / inv_freq
    smooth = ((context / wavelength - scaling.low_freq_factor)
              / (scaling.high_freq_factor - scaling.low_freq_factor)).clamp(0.0, 1.0)
    return (1 - smooth) * inv_freq / scaling.factor + smooth * inv_freq


def rope_tables(head_dim: int, max_seq_len: int, theta: float,
                scaling: RopeScaling | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles, each (max_seq_len, head_dim), in float32.

    Real cos/sin tables (not complex numbers) keep every backend and torch.compile happy.
    """
    inv_freq = rope_frequencies(head_dim, theta, scaling)
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (batch, heads, seq, head_dim) by the angles of its positions.

    Feature i is paired with feature i + head_dim/2 (the GPT-NeoX layout) rather than with its
    neighbour as in the paper's equation 34: a fixed permutation of the features, identical for
    random weights, that avoids strided even/odd slicing.
    """
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def expand_kv(t: torch.Tensor, groups: int) -> torch.Tensor:
    """Repeat each kv head for its group of query heads (GQA), as a contiguous tensor.

    The TinyTransformer workshop (version3_triton/exercises/performance_debugging, "Stage 2")
    measured 15 vs 311 samples/s, about 20x, when GQA tensors reached the attention kernel
    non-contiguous; `.contiguous()` is free when the tensor already is.
    """
    if groups == 1:
        return t
    return t.repeat_interleave(groups, dim=1).contiguous()


def attend_grouped(impl: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   mask: torch.Tensor) -> torch.Tensor:
    """One decode step's attention over the cache without expanding it for GQA.

    With one query per head, the `groups` query heads that share a kv head are `groups` rows of
    one query block against that kv head's keys: q (batch, heads, 1, d) is viewed as (batch,
    kv_heads, groups, d), since query head h uses kv head h // groups (`expand_kv`'s order).
    The cache is then read once per kv head instead of being copied `groups` times per step (at
    batch 16 on llama_1b that copy was 8 x the cache's bytes, written and read again). `mask`
    (1, 1, 1, max_len) broadcasts over the rows as it did over the heads.
    """
    batch, heads, seq, dim = q.shape
    kv_heads = k.shape[1]
    grouped = q.reshape(batch, kv_heads, heads // kv_heads * seq, dim)
    return attend(impl, grouped, k, v, mask).reshape(batch, heads, seq, dim)


def _groups_as_rows(impl: str) -> bool:
    """Whether a decode step attends with `attend_grouped` rather than over an expanded cache.

    Always, except for the spelled-out formulas ("eager", "math") inside torch.compile: there
    inductor folds the expansion into the index arithmetic of the kernels it writes (nothing
    is copied), and a one-row query lets its coordinate-descent setting write the two products
    as bandwidth-tuned reductions, which `groups` rows would turn back into batched GEMMs.
    """
    return impl not in ("eager", "math") or not torch.compiler.is_compiling()


def _sdpa_backends() -> dict[str, SDPBackend]:
    """SDPBackend members for the pinned impls (torch.nn.attention exists from torch 2.3)."""
    from torch.nn.attention import SDPBackend
    return {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "math": SDPBackend.MATH}


def _backend_context(impl: str, masked: bool) -> AbstractContextManager:
    """The sdpa_kernel pin for `impl`; "sdpa" lets PyTorch choose.

    FlashAttention takes no explicit mask (Dao, arXiv:2307.08691; PyTorch's sdp_utils rejects an
    attn_mask for it), and a cached decode step needs one. So under "flash" masked calls may also
    use the memory-efficient kernel; the mask-free training and prefill calls stay on flash.
    """
    if impl == "sdpa":
        return nullcontext()
    from torch.nn.attention import sdpa_kernel
    backends = _sdpa_backends()
    if impl == "flash" and masked:
        return sdpa_kernel([backends["flash"], backends["efficient"]])
    return sdpa_kernel(backends[impl])


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    mask: torch.Tensor | None) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + causal mask) v, spelled out (Vaswani et al. 2017, eq. 1).

    `mask` is boolean (True = may attend) and broadcastable to the scores; None means causal.
    """
    scores = torch.matmul(q, k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
    if mask is None:
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    # Softmax in float32: in fp16 the exponentials overflow and bf16 sums lose precision.
    scores = scores.float().masked_fill(~mask, float("-inf"))
    return torch.matmul(scores.softmax(dim=-1).to(v.dtype), v)


def attend(impl: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           mask: torch.Tensor | None, grouped: bool = False) -> torch.Tensor:
    """Causal attention with the chosen implementation; mask None means causal over q's own keys.

    `grouped`: k and v have fewer heads than q, and the kernel repeats them itself (see
    `grouped_in_kernel`)."""
    if impl == "eager":
        return eager_attention(q, k, v, mask)
    extra = {"enable_gqa": True} if grouped else {}
    with _backend_context(impl, masked=mask is not None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None,
                                              **extra)


# (impl, device, dtype, head_dim) -> whether a fused kernel takes grouped k/v heads there.
_GROUPED_KERNEL: dict[tuple, bool] = {}


def grouped_in_kernel(impl: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether causal attention may hand k and v with their own (fewer) heads to the kernel.

    With `enable_gqa` (PyTorch 2.5+) a fused GPU kernel reads each kv head for its group of
    query heads, so `expand_kv`'s copies (written, read, and summed back in the backward: at
    llama3_3b, seq 4096, twice the keys' and values' bytes per layer) are never made. Only where
    PyTorch's own checks say a fused kernel takes these tensors: the math form would repeat the
    heads itself, and a backend that refuses grouped heads must not make PyTorch fall back to
    it. The checks read shapes and dtypes and run nothing, so nothing is recorded by a
    checkpoint's policy or a FLOP counter around the forward. Asked once per implementation,
    device and dtype outside torch.compile; a compiled forward reuses the eager answer, or
    copies.
    """
    if impl in ("eager", "math") or q.device.type != "cuda":   # torch.backends.cuda's checks:
        return False                                               # CUDA and ROCm GPUs
    key = (impl, q.device, q.dtype, q.shape[-1])
    if key not in _GROUPED_KERNEL and not torch.compiler.is_compiling():
        _GROUPED_KERNEL[key] = _fused_takes_groups(impl, q, k, v)
    return _GROUPED_KERNEL.get(key, False)


def _fused_takes_groups(impl: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    checks = torch.backends.cuda
    try:
        params = checks.SDPAParams(q, k, v, None, 0.0, True, True)
    except TypeError:                   # PyTorch < 2.5: no enable_gqa
        return False
    by_impl: dict[str, list[Callable[[Any, bool], bool] | None]] = {
        "flash": [checks.can_use_flash_attention],
        "efficient": [checks.can_use_efficient_attention],
        "sdpa": [checks.can_use_flash_attention, checks.can_use_efficient_attention,
                 getattr(checks, "can_use_cudnn_attention", None)]}
    fused = by_impl[impl]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # each refusal is also a UserWarning
        return any(check(params, False) for check in fused if check is not None)


# ----------------------------------------------------------------------------------------------
# KV cache
# ----------------------------------------------------------------------------------------------

class LayerCache(nn.Module):
    """One layer's keys and values, (batch, kv_heads, max_len, head_dim) each, as buffers."""

    k: torch.Tensor                     # the buffers' types (a Module's own attributes are
    v: torch.Tensor                     # Tensor | Module to a type checker)

    def __init__(self, shape: tuple[int, ...], device: torch.device | str,
                 dtype: torch.dtype) -> None:
        super().__init__()
        # Not persistent: state of one generation, not of the model.
        self.register_buffer("k", torch.zeros(shape, device=device, dtype=dtype),
                             persistent=False)
        self.register_buffer("v", torch.zeros(shape, device=device, dtype=dtype),
                             persistent=False)


class KVCache(nn.Module):
    """Static per-layer key/value cache, allocated once at full length.

    Shapes never change: `update` writes new keys/values in place (`index_copy_` at the positions
    in `input_pos`, a tensor) and a decode step attends over all `max_len` slots, with a boolean
    mask row per position that hides the slots not yet written. This is the approach of PyTorch's
    gpt-fast: with fixed shapes and positions passed as tensor data rather than Python ints,
    torch.compile and CUDA graphs capture one decode step and replay it for every token.

    The tensors are module buffers, so a compiled module that holds the cache as a submodule
    (``scenarios.decoding``) sees them as static state: CUDA/HIP graphs may mutate them in place,
    where tensors passed in as arguments would make inductor skip the graphs ("mutated inputs").
    """

    causal_mask: torch.Tensor
    def __init__(self, num_layers: int, batch: int, kv_heads: int, max_len: int, head_dim: int,
                 device: torch.device | str, dtype: torch.dtype) -> None:
        super().__init__()
        shape = (batch, kv_heads, max_len, head_dim)
        self.layers = nn.ModuleList(LayerCache(shape, device, dtype) for _ in range(num_layers))
        # Row p is True for slots 0..p: what a query at position p may see (the causal mask).
        self.register_buffer("causal_mask", torch.ones(max_len, max_len, dtype=torch.bool,
                                                       device=device).tril(), persistent=False)

    def _layers(self) -> list[LayerCache]:
        """The layers' caches, as their type (an nn.ModuleList holds Modules to a checker)."""
        return [layer for layer in self.layers if isinstance(layer, LayerCache)]

    @property
    def keys(self) -> list[torch.Tensor]:
        return [layer.k for layer in self._layers()]

    @property
    def values(self) -> list[torch.Tensor]:
        return [layer.v for layer in self._layers()]

    @property
    def batch(self) -> int:
        return self._layers()[0].k.shape[0]

    @property
    def max_len(self) -> int:
        return self._layers()[0].k.shape[2]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)

    def update(self, layer: int, input_pos: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (batch, kv_heads, seq, head_dim) at `input_pos`; return the whole cache."""
        cache = self.layers[layer]
        assert isinstance(cache, LayerCache)    # for the type checker; folded away when compiled
        keys, values = cache.k, cache.v
        keys.index_copy_(2, input_pos, k.to(keys.dtype))
        values.index_copy_(2, input_pos, v.to(values.dtype))
        return keys, values

    def mask(self, input_pos: torch.Tensor) -> torch.Tensor:
        """Boolean mask (1, 1, seq, max_len) for queries at `input_pos`, broadcast over heads."""
        return self.causal_mask[input_pos].unsqueeze(0).unsqueeze(0)

    def reset(self) -> None:
        for t in self.keys + self.values:
            t.zero_()


# ----------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------

def concatenated(*layers: nn.Linear) -> nn.Linear:
    """One bias-free linear layer whose outputs are ``layers``' outputs in order, over their one
    input: their weights stacked (a new tensor; the layers keep theirs until dropped)."""
    first = layers[0].weight
    with torch.no_grad():
        weight = torch.cat([layer.weight for layer in layers])
    joined = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device=first.device,
                       dtype=first.dtype)
    joined.weight = nn.Parameter(weight, requires_grad=first.requires_grad)
    return joined


class Attention(nn.Module):
    """Multi-head causal self-attention with rotary embeddings and grouped-query k/v heads."""

    def __init__(self, config: LlamaConfig, layer_index: int, impl: str) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads = config.num_heads, config.num_kv_heads
        self.head_dim, self.layer_index, self.impl = config.head_dim, layer_index, impl
        hidden, kv_width = config.hidden_size, config.num_kv_heads * config.head_dim
        self.wq = nn.Linear(hidden, config.num_heads * config.head_dim, bias=False)
        self.wk = nn.Linear(hidden, kv_width, bias=False)
        self.wv = nn.Linear(hidden, kv_width, bias=False)
        self.wo = nn.Linear(config.num_heads * config.head_dim, hidden, bias=False)
        self.wqkv: nn.Linear | None = None       # set by fuse_projections (generation)

    def fuse_projections(self) -> None:
        """Replace wq, wk and wv by one projection onto their concatenated outputs.

        One matrix product per layer instead of three: a decode step is bound by launching
        and reading, and the k and v products alone (hidden x 256 on llama_1b) are too small
        to fill the GPU. The same weights, so the same outputs; done once, in place (the
        three matrices are freed), for generation, which never trains the model.
        """
        if self.wqkv is not None:
            return
        self.wqkv = concatenated(self.wq, self.wk, self.wv)
        del self.wq, self.wk, self.wv

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.wqkv is None:
            return self.wq(x), self.wk(x), self.wv(x)
        width, kv_width = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return self.wqkv(x).split([width, kv_width, kv_width], dim=-1)

    def _heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        batch, seq, _ = x.shape
        return x.view(batch, seq, heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                input_pos: torch.Tensor, cache: KVCache | None,
                mask: torch.Tensor | None) -> torch.Tensor:
        q, k, v = self._project(x)
        # The rotation in the activations' dtype (autocast's, or FSDP's BF16): FP32 tables would
        # make BF16 queries and keys FP32, twice the bytes, cast back before attention.
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = apply_rope(self._heads(q, self.num_heads), cos, sin)
        k = apply_rope(self._heads(k, self.num_kv_heads), cos, sin)
        v = self._heads(v, self.num_kv_heads)
        if cache is not None:
            cached_k, cached_v = cache.update(self.layer_index, input_pos, k, v)
            if mask is not None:          # decode: one query per head over every slot, masked
                k, v = cached_k, cached_v
                if _groups_as_rows(self.impl):
                    return self._output(attend_grouped(self.impl, q, k, v, mask))
        groups = self.num_heads // self.num_kv_heads
        if groups > 1 and grouped_in_kernel(self.impl, q, k, v):
            return self._output(attend(self.impl, q, k, v, mask, grouped=True))
        return self._output(attend(self.impl, q, expand_kv(k, groups), expand_kv(v, groups),
                                   mask))

    def _output(self, out: torch.Tensor) -> torch.Tensor:
        batch, _, seq, _ = out.shape
        return self.wo(out.transpose(1, 2).reshape(batch, seq, self.num_heads * self.head_dim))


class FeedForward(nn.Module):
    """SwiGLU: W2 (silu(W1 x) * W3 x) (Shazeer 2020, eq. 6; LLaMA Section 2.2)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)   # gate
        self.w3 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)   # up
        self.w2 = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)   # down
        self.w13: nn.Linear | None = None        # set by fuse_projections (generation)

    def fuse_projections(self) -> None:
        """Replace the gate (w1) and up (w3) projections by one onto their concatenated outputs.

        One product reads both weights, as vLLM's merged gate_up_proj does: one kernel where a
        decode step launched two, each on half the rows (a quantized layer: one set of
        scales and one kernel choice for both). The same weights, so the same outputs; in
        place, for generation only.
        """
        if self.w13 is not None:
            return
        self.w13 = concatenated(self.w1, self.w3)
        del self.w1, self.w3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.w13 is None:
            hidden = F.silu(self.w1(x)) * self.w3(x)
        else:
            gate, up = self.w13(x).chunk(2, dim=-1)
            hidden = F.silu(gate) * up
        if getattr(self.w2, "materialize_input", False):
            hidden = materialized(hidden)
        return self.w2(hidden)


@torch.library.custom_op("microbench::materialized", mutates_args=())
def materialized(x: torch.Tensor) -> torch.Tensor:
    """A copy of ``x`` that ``torch.compile`` computes once, as its own buffer.

    Inductor may otherwise compute a pointwise producer inside the loads of the reduction that
    consumes it, once per output row: for a one-row product over int8 weights that is an exp and
    a division per weight element (issue 61: an H200 spent 54 us on llama3_8b's int8 down
    projection with the SwiGLU product inlined, 31 us with it materialized). An opaque op is the
    one boundary inductor does not fuse across; the copy costs one small kernel.
    """
    return x.clone()


@materialized.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Block(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then x + ffn(norm(x)) (LLaMA Section 2.2)."""

    def __init__(self, config: LlamaConfig, layer_index: int, impl: str) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.attention = Attention(config, layer_index, impl)
        self.ffn_norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.feed_forward = FeedForward(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                input_pos: torch.Tensor, cache: KVCache | None,
                mask: torch.Tensor | None) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin, input_pos, cache, mask)
        return x + self.feed_forward(self.ffn_norm(x))


def _check_impl(impl: str) -> None:
    if impl not in ATTENTION_IMPLS:
        raise UsageError(f"unknown attention implementation {impl!r}; choose one of "
                         f"{', '.join(ATTENTION_IMPLS)}.")


class Llama(nn.Module):
    """Token embedding, `num_layers` pre-norm blocks, final RMSNorm, vocabulary projection.

    `forward(tokens)` is a training / full-recompute pass. With a `cache`, a call of several tokens
    is a prefill from position 0 (input_pos = arange(seq); it attends causally over its own keys,
    so pinned flash still applies) and a call of one token is a decode step at `input_pos`
    (attends over the whole cache through its mask). Chunked prefill is not supported.
    """

    rope_cos: torch.Tensor              # buffers (a Module's attributes are Tensor | Module to
    rope_sin: torch.Tensor              # a type checker)

    def __init__(self, config: LlamaConfig, attention: str = "sdpa") -> None:
        super().__init__()
        _check_impl(attention)
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config, i, attention) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.output = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.output.weight = self.embed.weight
        cos, sin = rope_tables(config.head_dim, config.max_seq_len, config.rope_theta,
                               config.rope_scaling)
        # Not persistent: derived from the config, so they stay out of state_dict.
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(_init_weights)

    def _blocks(self) -> list[Block]:
        """The layers, as their type (an nn.ModuleList holds Modules to a type checker): each a
        Block, or activation checkpointing's wrapper, which forwards a Block's attributes."""
        return [cast(Block, block) for block in self.layers]

    @property
    def attention(self) -> str:
        return self._blocks()[0].attention.impl

    def set_attention(self, impl: str) -> None:
        """Switch every layer to another attention implementation (weights unchanged)."""
        _check_impl(impl)
        for block in self._blocks():
            block.attention.impl = impl

    def fuse_projections(self) -> None:
        """Each layer's q, k and v projections as one, and its gate and up projections as one
        (see `Attention.fuse_projections` and `FeedForward.fuse_projections`)."""
        for block in self._blocks():
            block.attention.fuse_projections()
            block.feed_forward.fuse_projections()

    def make_cache(self, batch: int, max_len: int, device: torch.device | str | None = None,
                   dtype: torch.dtype | None = None) -> KVCache:
        """Allocate a KV cache for `batch` sequences of up to `max_len` tokens."""
        if not 0 < max_len <= self.config.max_seq_len:
            raise UsageError(f"a KV cache of {max_len} tokens does not fit the model's "
                             f"{self.config.max_seq_len} positions; pass a --seq-len of at least "
                             f"{max_len}.")
        weight = self.embed.weight
        return KVCache(self.config.num_layers, batch, self.config.num_kv_heads, max_len,
                       self.config.head_dim, device or weight.device, dtype or weight.dtype)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor | None = None,
                cache: KVCache | None = None, *, last_only: bool = False) -> torch.Tensor:
        """Logits (batch, seq, vocab), or (batch, 1, vocab) for the last position if last_only."""
        seq = tokens.shape[1]
        limit = cache.max_len if cache is not None else self.config.max_seq_len
        if seq > limit:
            raise UsageError(f"{seq} tokens do not fit in {limit} positions; pass a larger "
                             "--seq-len.")
        if input_pos is None:
            input_pos = torch.arange(seq, device=tokens.device)
        mask = cache.mask(input_pos) if cache is not None and seq == 1 else None
        cos, sin = self.rope_cos[input_pos], self.rope_sin[input_pos]
        x = self.embed(tokens)
        for block in self.layers:
            x = block(x, cos, sin, input_pos, cache, mask)
        if last_only:   # prefill needs one position; skip the (seq x vocab) projection
            x = x[:, -1:]
        return self.output(self.norm(x))


def _init_weights(module: nn.Module) -> None:
    """normal(0, 0.02) for every projection and the embedding; RMSNorm gains stay 1."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)


def build(name_or_config: str | LlamaConfig, attention: str = "sdpa") -> Llama:
    """A randomly initialised Llama from a PRESETS name or a LlamaConfig."""
    if isinstance(name_or_config, LlamaConfig):
        return Llama(name_or_config, attention)
    if name_or_config not in PRESETS:
        close = difflib.get_close_matches(str(name_or_config), list(PRESETS), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UsageError(f"unknown LLaMA preset {name_or_config!r}{hint}; choose one of "
                         f"{', '.join(PRESETS)}.")
    return Llama(PRESETS[name_or_config], attention)


# ----------------------------------------------------------------------------------------------
# Built without memory, initialised where it lives (shard by shard)
# ----------------------------------------------------------------------------------------------

# Segments that wrappers insert into parameter names (activation checkpointing's
# checkpoint_wrapper, torch.compile): a parameter's seed comes from its name without them.
_WRAPPER_SEGMENTS = frozenset({"_checkpoint_wrapped_module", "_orig_mod"})


def build_on_meta(name_or_config: str | LlamaConfig, attention: str = "sdpa") -> Llama:
    """A Llama whose parameters and buffers live on the meta device: shapes, no memory.

    Shard it first (`microbench.steps.sharding.shard`), then allocate and fill it with
    `microbench.steps.sharding.materialize(model, device, lambda m: initialize(m, seed))`, so that each
    rank only ever allocates its own shards.
    """
    with torch.device("meta"):
        return build(name_or_config, attention)


def initialize(model: Llama, seed: int) -> None:
    """Fill every parameter from `seed` and recompute the RoPE tables, in place.

    Matrices and the embedding are normal(0, INIT_STD) and RMSNorm gains 1, as at construction,
    but each matrix draws from its own generator, seeded by `seed` and the parameter's name. Its
    values therefore depend neither on the order of initialisation nor on how the parameter is
    sharded: a model sharded over any number of ranks holds the same weights as one built whole
    on one device of the same type (CPU and GPU generators give different streams). A sharded
    parameter (a DTensor, as FSDP2 leaves it) is drawn whole on each rank, one parameter at a
    time, and each rank keeps its own shard: the largest temporary is one parameter
    (llama3_8b's embedding, 2.1 GB in FP32), never the model.
    """
    if any(t.is_meta for t in itertools.chain(model.parameters(), model.buffers())):
        raise ValueError("initialize() needs memory to write to: materialise the model first "
                         "(microbench.steps.sharding.materialize, or Module.to_empty)")
    config = model.config
    if config.tie_embeddings and model.output.weight is not model.embed.weight:
        # Module.to_empty gives each module a tensor of its own, which unties a plain model's
        # output projection from the embedding (FSDP2's modules keep the tie): a vocabulary's
        # worth of weights more than the architecture has.
        model.output.weight = model.embed.weight
    with torch.no_grad():
        for name, param in model.named_parameters():
            _write_whole(param, _initial_value(_canonical_name(name), param, seed))
        cos, sin = rope_tables(config.head_dim, config.max_seq_len, config.rope_theta,
                               config.rope_scaling)
        model.rope_cos.copy_(cos)
        model.rope_sin.copy_(sin)


def _canonical_name(name: str) -> str:
    return ".".join(part for part in name.split(".") if part not in _WRAPPER_SEGMENTS)


def _parameter_seed(seed: int, name: str) -> int:
    """A 63-bit seed from the run's seed and a parameter's name, the same in every process
    (Python's hash() of a string is salted per process)."""
    digest = hashlib.blake2b(f"{seed}/{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def _initial_value(name: str, param: torch.Tensor, seed: int) -> torch.Tensor:
    """The whole initial value of one parameter (its global shape, on its device)."""
    if param.dim() == 1:                       # RMSNorm gains: the model has no other vectors
        return torch.ones(param.shape, device=param.device)
    generator = torch.Generator(device=param.device).manual_seed(_parameter_seed(seed, name))
    return torch.empty(param.shape, device=param.device).normal_(0.0, INIT_STD,
                                                                generator=generator)


def _write_whole(param: torch.Tensor, value: torch.Tensor) -> None:
    """Copy a whole value into a parameter; a DTensor keeps only its own shard of it."""
    from torch.distributed.tensor import DTensor, distribute_tensor
    if isinstance(param, DTensor):
        # src_data_rank=None: every rank already holds the whole value, so each slices its own
        # shard locally instead of receiving it from rank 0.
        value = distribute_tensor(value, param.device_mesh, param.placements, src_data_rank=None)
    param.copy_(value)


# ----------------------------------------------------------------------------------------------
# Can this attention backend run here?
# ----------------------------------------------------------------------------------------------

_KERNEL_NAMES = {"flash": "FlashAttention", "efficient": "memory-efficient attention"}


def check_attention(impl: str, device: torch.device | str, dtype: torch.dtype,
                    head_dim: int) -> None:
    """Raise UsageError when `impl` cannot run attention of this dtype and head_dim on `device`.

    "eager", "sdpa" and "math" run everywhere. The pinned fused kernels are GPU kernels: on the
    CPU, torch 2.14 has no memory-efficient kernel at all, and although a FLASH_ATTENTION pin does
    run there (a separate CPU implementation of the flash algorithm), it is not the GPU kernel that
    "flash" is meant to measure, so both are refused off the GPU. On a GPU the documented limits are
    checked first, then a tiny call under the pin catches everything else (GPU generation, ROCm
    build, torch version), with PyTorch's own reason in the message.
    """
    _check_impl(impl)
    if impl not in _KERNEL_NAMES:
        return
    device = torch.device(device)
    name = _KERNEL_NAMES[impl]
    instead = "choose 'sdpa' (PyTorch picks a kernel) or 'math' instead"
    if not devices.is_gpu(device):   # ROCm GPUs are "cuda" devices in PyTorch too
        raise UsageError(f"attention '{impl}' pins PyTorch's {name} GPU kernel, which needs a CUDA "
                         f"or ROCm GPU, but the device is {device}; {instead}.")
    if impl == "flash":
        _check_flash_limits(dtype, head_dim, instead)
    reason = _probe(impl, device, dtype, head_dim)
    if reason is not None:
        gpu = devices.runtime_text()
        raise UsageError(f"attention '{impl}' ({name}) cannot run {_dtype_name(dtype)} with "
                         f"head_dim {head_dim} on {device} with PyTorch {torch.__version__} "
                         f"({gpu}): {reason}; {instead}.")


def _check_flash_limits(dtype: torch.dtype, head_dim: int, instead: str) -> None:
    # FlashAttention-2 (Dao 2023, arXiv:2307.08691) as built into PyTorch: fp16/bf16 only, head
    # dimension a multiple of 8 up to 256.
    if dtype not in (torch.float16, torch.bfloat16):
        raise UsageError(f"attention 'flash' needs float16 or bfloat16, but the model runs in "
                         f"{_dtype_name(dtype)}; use a half-precision mode or {instead}.")
    if head_dim > 256 or head_dim % 8:
        raise UsageError(f"attention 'flash' needs a head dimension that is a multiple of 8 and at "
                         f"most 256, but this model's is {head_dim}; {instead}.")


def _probe(impl: str, device: torch.device, dtype: torch.dtype, head_dim: int) -> str | None:
    """Run the two call shapes the model uses (causal, then masked) under the pin; None = fine."""
    shape = (1, 2, 16, head_dim)
    q = torch.randn(shape, device=device, dtype=dtype)
    mask = torch.ones(16, 16, dtype=torch.bool, device=device).tril()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            for call_mask in (None, mask):
                with _backend_context(impl, masked=call_mask is not None):
                    F.scaled_dot_product_attention(q, q, q, attn_mask=call_mask,
                                                   is_causal=call_mask is None)
            devices.synchronize(device)
            return None
        except RuntimeError as error:
            # PyTorch explains *why* a kernel was skipped in UserWarnings; the error only says
            # "No available kernel".
            reasons = [str(w.message).strip() for w in caught]
            text = "; ".join(reasons) or str(error)
            return " ".join(text.split())[:400]


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ----------------------------------------------------------------------------------------------
# Generation steps (the benchmark times these itself)
# ----------------------------------------------------------------------------------------------

def _greedy(logits: torch.Tensor) -> torch.Tensor:
    """argmax of the last position: (batch, 1) token ids."""
    return logits[:, -1].argmax(dim=-1, keepdim=True)


@torch.no_grad()
def prefill(model: Llama, prompt_tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """Fill the cache with the prompt (batch, P) and return the first new token, (batch, 1)."""
    input_pos = torch.arange(prompt_tokens.shape[1], device=prompt_tokens.device)
    return _greedy(model(prompt_tokens, input_pos, cache, last_only=True))


@torch.no_grad()
def decode_step(model: Llama, token: torch.Tensor, input_pos: torch.Tensor,
                cache: KVCache) -> torch.Tensor:
    """One token per sequence: `token` (batch, 1) at `input_pos` (1-element LongTensor on the
    device); returns the next token, (batch, 1)."""
    return _greedy(model(token, input_pos, cache))
