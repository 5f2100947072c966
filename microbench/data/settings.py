"""What the model on the other end of the pipeline takes, and what a run's input settings must
be for it.

What a run asks of its pipeline, :class:`DataSettings`, is a settings value
(``settings/data_settings.py``, below torch, where the plan checks the flags alone: issue 64).
:class:`ModelInput` is what the pipeline must produce for the model: images of one size and
class, or token ids; :func:`check_for` refuses settings that do not apply to it.

Example::

    model_input = ModelInput.of(spec.model, dtype=torch.float16, channels_last=True,
                                training=True)
    check_for(settings, model_input)            # UsageError: --data folder for a language model
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from microbench.models.family import ModelFamily
from microbench.models.language import LanguageModelSpec
from microbench.models.registry import ModelSpec

from microbench.platform.errors import UsageError
from microbench.settings.data_settings import DataSettings


@dataclass(frozen=True)
class ModelInput:
    """What the model on the other end of the pipeline takes."""

    kind: str                              # "image" | "tokens"
    training: bool = True
    image_size: int = 0                    # images: height = width of the model's input
    num_classes: int = 0                   # images: labels are taken modulo this
    dtype: torch.dtype = torch.float32     # images: the precision's input dtype
    channels_last: bool = False            # images: --nhwc
    seq_len: int = 0                       # tokens
    vocab_size: int = 0                    # tokens

    @property
    def item(self) -> str:
        return "image" if self.kind == "image" else "sequence"

    @classmethod
    def of(cls, model_spec: ModelFamily, dtype: torch.dtype = torch.float32,
           channels_last: bool = False, training: bool = True) -> "ModelInput":
        """The input of a registry spec (microbench.models.registry / microbench.models.language): classification
        models take images, language models token ids; others have no pipeline here."""
        family = model_spec.family
        if family == "classification" and isinstance(model_spec, ModelSpec):
            return cls("image", training, image_size=model_spec.image_size,
                       num_classes=model_spec.num_classes, dtype=dtype,
                       channels_last=channels_last)
        if isinstance(model_spec, LanguageModelSpec):       # reads_tokens
            return cls("tokens", training, seq_len=model_spec.seq_len,
                       vocab_size=model_spec.vocab_size)
        raise UsageError(f"--data loader and --data folder feed classification models (an image "
                         f"and a class each) and language models (token ids); {model_spec.name} "
                         f"is a {family} model: use --data synthetic")


def check_for(settings: DataSettings, model_input: ModelInput) -> None:
    """Refuse settings that do not apply to what this model takes (exit 2)."""
    if model_input.kind != "tokens":
        return
    if settings.source == "folder":
        raise UsageError("--data folder holds images; a language model reads token ids: "
                         "use --data loader (a generated token corpus) or --data synthetic")
    moved = [flag for flag, place in (("--decode", settings.decode),
                                      ("--transforms", settings.transforms)) if place == "gpu"]
    if moved:
        raise UsageError(f"{' and '.join(moved)} gpu apply to images; a language model's "
                         f"token ids are neither decoded nor normalised: drop them")
