"""The shapes of the LLaMA-style models (:mod:`microbench.models.archs.llama`): the
configuration, its validation, the presets and their closed-form parameter count.

Kept apart from the model, and free of torch, so that ``--list-networks`` answers without
importing torch (issue 45); the attention implementations are named below it, in
:mod:`microbench.settings.model_options`, where ``--attention``'s declaration reads them.

Example::

    from microbench.models.llama_config import PRESETS, parameter_count
    parameter_count(PRESETS["llama_tiny"].with_overrides(kv_heads=2))
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypedDict

from microbench.platform.errors import UsageError


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3's RoPE frequency scaling (``"rope_type": "llama3"`` in the published config.json).

    Meta's reference code (meta-llama/llama-models, ``apply_scaling``) adjusts the rotary
    frequencies once: wavelengths shorter than ``original_max_position_embeddings /
    high_freq_factor`` keep their frequency, those longer than ``original_max_position_embeddings
    / low_freq_factor`` are slowed down by ``factor``, and the band between is interpolated
    linearly in ``original_max_position_embeddings / wavelength``. Llama 3.1 uses factor 8,
    Llama 3.2 factor 32; both low 1, high 4, original context 8192.
    """

    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def __post_init__(self) -> None:
        if not (self.factor > 0 and 0 < self.low_freq_factor < self.high_freq_factor
                and _positive_int(self.original_max_position_embeddings)):
            raise UsageError(f"RoPE scaling needs factor > 0, 0 < low_freq_factor < "
                             f"high_freq_factor and a positive original context; got {self}.")


@dataclass(frozen=True)
class LlamaConfig:
    """Shape of a LLaMA-style model; validated on construction.

    `max_seq_len` is the preset's training sequence length: the rotary tables and the largest KV
    cache are sized by it, and it is the default sequence length of a training run.
    """

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    max_seq_len: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    rope_scaling: RopeScaling | None = None     # Llama 3.1 / 3.2 frequency scaling

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def with_overrides(self, seq_len: int | None = None, vocab_size: int | None = None,
                       kv_heads: int | None = None) -> LlamaConfig:
        """A validated copy with the user-settable fields (--seq-len, --vocab-size, --kv-heads)."""
        return replace(self, max_seq_len=self.max_seq_len if seq_len is None else seq_len,
                       vocab_size=self.vocab_size if vocab_size is None else vocab_size,
                       num_kv_heads=self.num_kv_heads if kv_heads is None else kv_heads)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _validate(config: LlamaConfig) -> None:
    """Raise UsageError naming the flag to change; the user-settable fields come first."""
    if not _positive_int(config.vocab_size):
        raise UsageError(f"--vocab-size must be a positive integer, got {config.vocab_size!r}.")
    if not _positive_int(config.max_seq_len):
        raise UsageError(f"--seq-len must be a positive integer, got {config.max_seq_len!r}.")
    for name in ("hidden_size", "num_layers", "num_heads", "intermediate_size"):
        if not _positive_int(getattr(config, name)):
            raise UsageError(f"LlamaConfig.{name} must be a positive integer, "
                             f"got {getattr(config, name)!r}.")
    heads, kv_heads = config.num_heads, config.num_kv_heads
    # GQA (Ainslie et al. 2023, Section 2.2): each key/value head serves an equal group of query
    # heads, so the number of kv heads must divide the number of query heads.
    if not _positive_int(kv_heads) or heads % kv_heads:
        raise UsageError(f"--kv-heads {kv_heads!r} does not divide the {heads} attention heads of "
                         f"this model; pass one of {_divisors(heads)}.")
    if config.hidden_size % heads:
        raise UsageError(f"hidden size {config.hidden_size} is not divisible by the {heads} "
                         "attention heads; choose a head count that divides it.")
    # RoPE rotates pairs of features (Su et al., Section 3.2), so each head needs an even width.
    if config.head_dim % 2:
        raise UsageError(f"head dimension {config.head_dim} (hidden {config.hidden_size} / "
                         f"{heads} heads) is odd, but rotary embeddings need an even one.")
    if not config.rope_theta > 0 or not config.norm_eps > 0:
        raise UsageError("LlamaConfig.rope_theta and norm_eps must be positive.")


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


# Presets. llama_tiny and llama_medium are the AMD "TinyTransformer" profiling workshop's model
# (amd/HPCTrainingExamples, MLExamples/TinyTransformer/version1_pytorch_baseline/tiny_llama_v1.py):
# its TinyLlamaConfig and command line give vocab 1000, 4 kv heads (GQA), RMSNorm eps 1e-6,
# rope theta 10000, intermediate = 4 * hidden ("standard 4x multiplier"), 8 heads by default, and
# an output head tied to the token embedding. Its sizes come from version1's
# launch_performance_study.sh: "small" = hidden 512, 8 layers (the README runs it with
# --seq-len 128) and "medium" = hidden 1024, 12 layers, seq 512, which passes no --num-heads, so
# the workshop's medium model keeps the default 8 heads (head_dim 128).
class _Workshop(TypedDict):
    """The fields the workshop's presets share."""
    vocab_size: int
    num_kv_heads: int
    rope_theta: float
    norm_eps: float
    tie_embeddings: bool


class _Llama3(TypedDict):
    """The fields the Llama 3 presets share."""
    vocab_size: int
    num_kv_heads: int
    max_seq_len: int
    rope_theta: float
    norm_eps: float


_WORKSHOP = _Workshop(vocab_size=1000, num_kv_heads=4, rope_theta=10000.0, norm_eps=1e-6,
                      tie_embeddings=True)
_LLAMA3 = _Llama3(vocab_size=128256, num_kv_heads=8, max_seq_len=8192, rope_theta=500000.0,
                  norm_eps=1e-5)

PRESETS: dict[str, LlamaConfig] = {
    "llama_tiny": LlamaConfig(hidden_size=512, num_layers=8, num_heads=8, intermediate_size=2048,
                              max_seq_len=128, **_WORKSHOP),
    "llama_medium": LlamaConfig(hidden_size=1024, num_layers=12, num_heads=8,
                                intermediate_size=4096, max_seq_len=512, **_WORKSHOP),
    # TinyLlama-1.1B (Zhang et al., "TinyLlama: An Open-Source Small Language Model", 2024,
    # arXiv:2401.02385, and the config.json of its Hugging Face checkpoints): the LLaMA-2 shape
    # with 22 layers, hidden 2048, 32 query heads sharing 4 kv heads, SwiGLU width 5632,
    # vocab 32000, context 2048, untied head. 1,100,048,384 parameters.
    "llama_1b": LlamaConfig(vocab_size=32000, hidden_size=2048, num_layers=22, num_heads=32,
                            num_kv_heads=4, intermediate_size=5632, max_seq_len=2048,
                            rope_theta=10000.0, norm_eps=1e-5, tie_embeddings=False),
    # Llama 3 (Grattafiori et al., "The Llama 3 Herd of Models", 2024, arXiv:2407.21783, Table 3
    # for 8B: 32 layers, width 4096, FFN 14,336, 32 heads, 8 kv heads, RoPE theta 500,000). The
    # exact numbers below are those of the config.json Meta publishes with each checkpoint on
    # Hugging Face (meta-llama/Llama-3.2-1B, Llama-3.2-3B, Llama-3.1-8B), which torchtitan's
    # llama3 registry reproduces: vocabulary 128,256 (128,000 BPE tokens + 256 reserved special
    # tokens), 8 kv heads (GQA), RoPE theta 500,000 with the Llama 3 frequency scaling (factor 32
    # for 3.2, 8 for 3.1), RMSNorm eps 1e-5, SwiGLU widths 8,192 / 8,192 / 14,336, and the
    # output head tied to the embedding in the 3.2 models only. Sequence 8,192 is the pretraining
    # context before the long-context stage (paper, Section 3.4; the configs'
    # original_max_position_embeddings) and torchtitan's training length for 8B.
    # Parameters: 1,235,814,400 / 3,212,749,824 / 8,030,261,248 ("1.24B", "3.21B", "8.03B").
    "llama3_1b": LlamaConfig(hidden_size=2048, num_layers=16, num_heads=32,
                             intermediate_size=8192, tie_embeddings=True,
                             rope_scaling=RopeScaling(factor=32.0), **_LLAMA3),
    "llama3_3b": LlamaConfig(hidden_size=3072, num_layers=28, num_heads=24,
                             intermediate_size=8192, tie_embeddings=True,
                             rope_scaling=RopeScaling(factor=32.0), **_LLAMA3),
    "llama3_8b": LlamaConfig(hidden_size=4096, num_layers=32, num_heads=32,
                             intermediate_size=14336, tie_embeddings=False,
                             rope_scaling=RopeScaling(factor=8.0), **_LLAMA3),
}


def parameter_count(config: LlamaConfig) -> int:
    """Closed-form number of parameters (no biases anywhere, LLaMA Section 2.2)."""
    hidden, kv_width = config.hidden_size, config.num_kv_heads * config.head_dim
    attention = 2 * hidden * hidden + 2 * hidden * kv_width   # q and o full width; k and v GQA
    feed_forward = 3 * hidden * config.intermediate_size      # SwiGLU: gate, up, down
    norms = 2 * hidden                                        # before attention, before FFN
    per_layer = attention + feed_forward + norms
    embedding = config.vocab_size * hidden
    head = 0 if config.tie_embeddings else config.vocab_size * hidden
    return embedding + config.num_layers * per_layer + hidden + head   # + final norm


def summary(config: LlamaConfig) -> str:
    """One line for --list-networks: size and shape."""
    return (f"{parameter_count(config) / 1e6:,.1f}M parameters: {config.num_layers} layers, "
            f"hidden {config.hidden_size}, {config.num_heads} heads / {config.num_kv_heads} kv, "
            f"sequence {config.max_seq_len}, vocab {config.vocab_size}")
