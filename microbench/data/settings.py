"""What a run asks of its input pipeline, and what the model on the other end takes.

:class:`DataSettings` is one frozen value per run (the lead's scenario builds it from the
``--data*``, ``--decode``, ``--transforms``, ``--workers``, ``--pin-memory`` and
``--prefetch-factor`` flags); :meth:`DataSettings.check` refuses, from the settings alone,
combinations that cannot take effect, so that no label ever names one. :class:`ModelInput` is
what the pipeline must produce for the model: images of one size and class, or token ids.

Example::

    settings = DataSettings(source="loader", workers=8, decode="cpu", transforms="gpu")
    settings.check()
    model_input = ModelInput.of(spec.model, dtype=torch.float16, channels_last=True,
                                training=True)
    workers = settings.resolved_workers(local_world_size=8)   # cores available / ranks here
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from microbench.models.family import ModelFamily
from microbench.models.language import LanguageModelSpec
from microbench.models.registry import ModelSpec

from microbench.platform.errors import UsageError

SOURCES = ("synthetic", "loader", "folder")
FORMATS = ("jpeg", "png")
PLACES = ("cpu", "gpu")          # where decoding, or normalisation and casting, happen

# The generated set: how many images, and their side in pixels. Larger than the usual 224
# crop, so that RandomResizedCrop resamples as it does on photographs; the JSON block records
# the side and the mean bytes per file, to compare with a user's own data (--data folder).
DEFAULT_IMAGES = 4096
DEFAULT_IMAGE_SIDE = 384
# JPEG quality of the generated set (libjpeg's scale, 1-100): high, as cameras and photo
# sites save; the decode cost grows with it.
JPEG_QUALITY = 90
# No image a benchmark reads is larger; a bigger file is refused, not read into memory.
MAX_FILE_BYTES = 64 * 2**20
# DataLoader's own default: each worker keeps two batches in flight.
DEFAULT_PREFETCH = 2


@dataclass(frozen=True)
class DataSettings:
    """The input pipeline a run asked for (defaults as the flags' defaults)."""

    source: str = "synthetic"              # synthetic | loader | folder
    image_format: str = "jpeg"             # the generated set: jpeg | png
    count: int = DEFAULT_IMAGES            # images of the generated set (sequences: tokens)
    image_side: int = DEFAULT_IMAGE_SIDE   # pixels, square
    cache_dir: str | None = None           # None: writing.user_cache_root()
    data_dir: str | None = None            # --data folder
    decode: str = "cpu"                    # cpu | gpu (torchvision.io.decode_jpeg on device)
    transforms: str = "cpu"                # cpu | gpu: normalise and cast before/after the copy
    workers: int | None = None             # None: the cores available (resolved_workers)
    pin_memory: bool = True
    prefetch_factor: int = DEFAULT_PREFETCH
    persistent_workers: bool = True
    max_file_bytes: int = MAX_FILE_BYTES
    seed: int = 0

    @property
    def is_synthetic(self) -> bool:
        return self.source == "synthetic"

    def check(self) -> None:
        """Refuse settings that cannot take effect as named (exit 2)."""
        _one_of("--data", self.source, SOURCES)
        _one_of("--data-format", self.image_format, FORMATS)
        _one_of("--decode", self.decode, PLACES)
        _one_of("--transforms", self.transforms, PLACES)
        if self.source == "folder" and not self.data_dir:
            raise UsageError("--data folder needs --data-dir DIR, a tree of your images "
                             "(class folders or flat)")
        if self.data_dir and self.source != "folder":
            raise UsageError(f"--data-dir applies to --data folder, not --data {self.source}")
        if self.decode == "gpu" and self.transforms == "cpu":
            raise UsageError("--decode gpu decodes on the device, so the crop and the "
                             "normalisation run there too: use --transforms gpu")
        if self.decode == "gpu" and self.source == "loader" and self.image_format != "jpeg":
            raise UsageError("--decode gpu decodes JPEG only (torchvision.io.decode_jpeg): "
                             "use --data-format jpeg or --decode cpu")
        for flag, value, least in (("--data-images", self.count, 1),
                                   ("--prefetch-factor", self.prefetch_factor, 1),
                                   ("--workers", 0 if self.workers is None else self.workers, 0),
                                   ("the image side", self.image_side, 16)):
            if value < least:
                raise UsageError(f"{flag} must be at least {least}, got {value}")

    def check_for(self, model_input: "ModelInput") -> None:
        """Refuse settings that do not apply to what this model takes (exit 2)."""
        if model_input.kind != "tokens":
            return
        if self.source == "folder":
            raise UsageError("--data folder holds images; a language model reads token ids: "
                             "use --data loader (a generated token corpus) or --data synthetic")
        moved = [flag for flag, place in (("--decode", self.decode),
                                          ("--transforms", self.transforms)) if place == "gpu"]
        if moved:
            raise UsageError(f"{' and '.join(moved)} gpu apply to images; a language model's "
                             f"token ids are neither decoded nor normalised: drop them")

    def resolved_workers(self, local_world_size: int = 1) -> int:
        """The loader processes of one rank: as asked, or the cores this process may run on
        shared by the ranks of this host (16 cores and 8 ranks: 2 workers each), at least 1."""
        if self.workers is not None:
            return self.workers
        return max(1, available_cores() // max(1, local_world_size))


def _one_of(flag: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UsageError(f"{flag} must be one of {', '.join(choices)}, got '{value}'")


def available_cores() -> int:
    """The cores this process may run on (its affinity mask, which taskset, cgroups' cpusets
    and SLURM set), not the host's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):          # not Linux
        return os.cpu_count() or 1


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
