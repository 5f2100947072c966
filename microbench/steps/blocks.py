"""Where a model's transformer blocks are: what activation checkpointing wraps and FSDP shards.

* The LLaMA written here (:class:`microbench.models.archs.llama.Llama`): ``model.layers``.
* Hugging Face models: the modules of the classes that transformers lists in the model's
  ``_no_split_modules`` (its decoder layers, e.g. ``LlamaDecoderLayer`` in ``model.model.layers``:
  the same attribute transformers and accelerate use to wrap a model for FSDP).
* Anything else (the image models) has none: `transformer_blocks` raises UsageError naming the
  feature that needs them.

Call it on the plain module, before ``torch.compile`` or a DDP wrapper.

Example::

    blocks = transformer_blocks(model, "llama_tiny", "--activation-checkpointing")
    for index, block in enumerate(blocks):
        blocks.replace(index, checkpoint_wrapper(block))
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from torch import nn

from microbench.models.archs.llama import Llama
from microbench.platform.errors import UsageError


@dataclass(frozen=True)
class Blocks:
    """The repeated blocks of a model: a ModuleList and where it sits in the model."""

    container: nn.ModuleList
    path: str                               # e.g. "layers" or "model.layers"

    def __len__(self) -> int:
        return len(self.container)

    def __iter__(self) -> Iterator[nn.Module]:
        return iter(self.container)

    def replace(self, index: int, module: nn.Module) -> None:
        """Put `module` (a wrapped block) in place of block `index`."""
        self.container[index] = module


def transformer_blocks(model: nn.Module, name: str = "this model",
                       feature: str = "this setting") -> Blocks:
    """The transformer blocks of `model`; UsageError naming `feature` if it has none."""
    if isinstance(model, Llama):
        return Blocks(model.layers, "layers")
    found = _hugging_face_blocks(model)
    if found is not None:
        return found
    raise UsageError(f"{feature} works on the transformer blocks of a language model, and "
                     f"{name} has none; use it with a llama_* or hf: model")


def _hugging_face_blocks(model: nn.Module) -> Blocks | None:
    """The longest ModuleList made only of the classes named in ``_no_split_modules``."""
    block_classes = set(getattr(model, "_no_split_modules", None) or ())
    best: Blocks | None = None
    for path, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) == 0:
            continue
        if all(type(_unwrapped(child)).__name__ in block_classes for child in module):
            if best is None or len(module) > len(best):
                best = Blocks(module, path)
    return best


def _unwrapped(module: nn.Module) -> nn.Module:
    """A block under activation checkpointing's wrapper is still a block."""
    return getattr(module, "_checkpoint_wrapped_module", module)
