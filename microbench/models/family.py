"""The model family: the one interface every model spec offers, image and language alike.

:class:`~microbench.models.registry.ModelSpec` (torchvision's classification, segmentation and
video models, and the architectures in :mod:`.archs`) and
:class:`~microbench.models.language.LanguageModelSpec` (the llama_* presets and ``hf:`` models)
both implement :class:`ModelFamily`, so code above the models asks a spec what it is
(``reads_tokens``, ``llama_config``, ``can_generate``) instead of testing a ``family`` string or
probing for an attribute with ``getattr``. A new family implements this protocol.

Example::

    model = registry.resolve("llama_tiny", ModelOptions(seq_len=64))
    model.reads_tokens, model.item, model.tokens_per_item      # True, 'sequence', 64
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from microbench.models.archs.llama import LlamaConfig


class ModelFamily(Protocol):
    """What every model spec answers; ``None`` or ``False`` where it does not apply. Read-only
    (a spec is frozen)."""

    @property
    def name(self) -> str: ...

    @property
    def family(self) -> str: ...        # "classification", "segmentation", "video", "language"

    @property
    def reads_tokens(self) -> bool: ...     # token ids in (a language model), not images

    @property
    def tokens_per_item(self) -> int | None: ...   # a language model's sequence length

    @property
    def llama_config(self) -> LlamaConfig | None: ...   # the llama_* presets' architecture

    @property
    def can_generate(self) -> bool: ...     # --mode generate can decode it (static KV cache)

    @property
    def loss_name(self) -> str: ...

    @property
    def channels_last(self) -> torch.memory_format | None: ...  # --nhwc's; None: token ids

    @property
    def attention(self) -> str: ...     # a language model's attention; "" for images

    @property
    def item(self) -> str: ...

    @property
    def input_size(self) -> int: ...

    def build(self) -> torch.nn.Module: ...

    def input_shape(self, batch_size: int) -> tuple[int, ...]: ...

    def check(self) -> None: ...

    def make_batch(self, batch_size: int, device: torch.device, dtype: torch.dtype | None,
                   seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]: ...

    def loss(self, output: Any, target: torch.Tensor) -> torch.Tensor: ...

    def describe(self) -> str: ...
