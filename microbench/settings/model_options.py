"""The flags that shape a model's input or architecture, as one value both model families take.

Example::

    options = ModelOptions(seq_len=256, attention="eager")
    options.given("seq_len", "image_size")        # ['--seq-len']
"""
from __future__ import annotations

from dataclasses import dataclass

# How a LLaMA-style model computes attention (microbench.models.archs.llama runs each): named
# here, below the models, so that --attention's declaration offers them without importing torch.
ATTENTION_IMPLS: tuple[str, ...] = ("eager", "sdpa", "flash", "efficient", "math")


@dataclass(frozen=True)
class ModelOptions:
    """The flags that shape a model's input or architecture, as the user gave them."""

    image_size: int | None = None        # vision models
    seq_len: int | None = None           # language models (the rest too)
    vocab_size: int | None = None
    kv_heads: int | None = None
    attention: str | None = None
    model_kwargs: tuple[str, ...] = ()   # hf:<model_type> config overrides, key=value

    def given(self, *names: str) -> list[str]:
        """The flags among ``names`` (field names) that the user set."""
        return [f"--{name.replace('_', '-')}" for name in names
                if getattr(self, name) not in (None, ())]


LANGUAGE_OPTIONS = ("seq_len", "vocab_size", "kv_heads", "attention", "model_kwargs")
