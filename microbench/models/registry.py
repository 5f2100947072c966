"""Model registry: names, aliases, and the input and target each model family needs.

Every classification, segmentation and video model that ``torchvision.models.list_models()``
offers is here, built without weights, plus ShuffleNet v1 and Xception (``microbench.models.archs``),
which torchvision lacks, the older tool's spellings (``SqueezeNet``, ``resnext50``, ...), and the
language models of :mod:`microbench.models.language` (LLaMA presets, ``hf:<model_type>``).

A spec is configured for one run (:func:`resolve` with the input options) and then knows how to
build the model, make its inputs and targets, and take its loss, whatever the family.

Example::

    spec = resolve("resnet50", ModelOptions(image_size=160))
    model = spec.build()
    inputs, target = spec.make_batch(batch_size=8, device=device)
    loss = spec.loss(model(inputs), target)
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Callable

import torch
import torchvision.models as tvm
from torchvision.models import get_model, list_models

from microbench.models import archs, language, names
from microbench.models.names import LEGACY_ALIASES
from microbench.settings.model_options import LANGUAGE_OPTIONS, ModelOptions
from microbench.platform.errors import UsageError

IMAGENET_CLASSES = 1000
VOC_CLASSES = 21          # torchvision's segmentation models are defined on Pascal VOC's 21 classes
KINETICS_CLASSES = 400    # torchvision's video models are defined on Kinetics-400

# Native input sizes that differ from the family default (the resolution each was designed for).
NATIVE_IMAGE_SIZE = {"inception_v3": 299, "xception": 299}
# Clips: 16 frames; the ResNet-3D family was trained on 112x112 crops, the others on 224x224.
VIDEO_FRAMES = 16
VIDEO_IMAGE_SIZE = {"r3d_18": 112, "mc3_18": 112, "r2plus1d_18": 112}
# The smallest input each model accepts, for quick runs and tests (found by trying; the
# pooling stacks of these reject anything smaller).
SMALLEST_IMAGE_SIZE = {"alexnet": 64, "inception_v3": 96, "xception": 64, "maxvit_t": 224,
                       "vit_h_14": 112, "s3d": 224, "mvit_v1_b": 224, "mvit_v2_s": 224,
                       "swin3d_t": 64, "swin3d_s": 64, "swin3d_b": 64}
# Builders that fix their input size themselves (MViT's positional embeddings).
FIXED_IMAGE_SIZE = {"mvit_v1_b", "mvit_v2_s"}




@dataclass(frozen=True)
class ModelSpec:
    """How to build one vision model and feed it, at one input size."""

    name: str
    family: str                                  # "classification" | "segmentation" | "video"
    num_classes: int
    native_image_size: int                       # the resolution the model was designed for
    smallest_image_size: int
    frames: int | None                           # clip length for video models
    _builder: Callable[[int], torch.nn.Module]
    image_size: int = 0                          # the run's input height = width

    tokens_per_item = None                       # images, not token sequences
    reads_tokens = False
    llama_config = None                          # not a llama_* preset
    attention = ""                               # no attention to choose
    can_generate = False
    loss_name = "cross-entropy over classes"

    def __post_init__(self) -> None:
        if not self.image_size:
            object.__setattr__(self, "image_size", self.native_image_size)

    def __reduce__(self):
        # Builders are closures, which do not pickle; a spec travels to a spawned worker by its
        # registry name and input size and is looked up again there.
        return resolve, (self.name, ModelOptions(image_size=self.image_size))

    def configure(self, options: ModelOptions) -> "ModelSpec":
        given = options.given(*LANGUAGE_OPTIONS)
        if given:
            raise UsageError(f"{', '.join(given)} apply to language models (llama_*, hf:...), "
                             f"not to {self.name}")
        return replace(self, image_size=options.image_size or self.native_image_size)

    @property
    def item(self) -> str:
        return "clip" if self.family == "video" else "image"

    @property
    def input_size(self) -> int:
        """The input's height and width (what --image-size sets)."""
        return self.image_size

    @property
    def channels_last(self) -> torch.memory_format:
        return torch.channels_last_3d if self.family == "video" else torch.channels_last

    def build(self) -> torch.nn.Module:
        with warnings.catch_warnings():
            # torchvision warns about future weight-init defaults on some weightless builds.
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", UserWarning)
            return self._builder(self.image_size)

    def check(self) -> None:
        """Refuse an input size the model cannot take (a sweep row fails alone)."""
        if self.name in FIXED_IMAGE_SIZE and self.image_size != self.native_image_size:
            raise UsageError(f"{self.name} takes {self.native_image_size}x"
                             f"{self.native_image_size} input only; drop --image-size")
        if self.image_size < self.smallest_image_size:
            raise UsageError(f"{self.name} needs --image-size of at least "
                             f"{self.smallest_image_size}, got {self.image_size}")

    def input_shape(self, batch_size: int) -> tuple[int, ...]:
        size = self.image_size
        if self.frames is not None:                 # a video model's clips (family "video")
            return (batch_size, 3, self.frames, size, size)
        return (batch_size, 3, size, size)

    def target_shape(self, batch_size: int) -> tuple[int, ...]:
        if self.family == "segmentation":
            return (batch_size, self.image_size, self.image_size)     # one class per pixel
        return (batch_size,)

    def make_batch(self, batch_size: int, device: torch.device,
                   dtype: torch.dtype = torch.float32, seed: int = 0):
        """Random inputs and class targets, made once on the device."""
        generator = torch.Generator(device="cpu").manual_seed(seed)
        inputs = torch.randn(self.input_shape(batch_size), generator=generator)
        target = torch.randint(0, self.num_classes, self.target_shape(batch_size),
                               generator=generator)
        return inputs.to(device=device, dtype=dtype), target.to(device)

    @staticmethod
    def logits(output: Any) -> torch.Tensor:
        """The tensor the loss is taken on: segmentation returns a dict, GoogLeNet a tuple."""
        if isinstance(output, dict):
            return output["out"]
        if hasattr(output, "logits"):
            return output.logits
        return output

    def loss(self, output: Any, target: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.logits(output), target)

    def describe(self) -> str:
        shape = "x".join(str(d) for d in self.input_shape(1)[1:])
        return f"{self.name} ({self.family}, input {shape}, {self.num_classes} classes)"


def _torchvision_builder(name: str, family: str) -> Callable[[int], torch.nn.Module]:
    def build(image_size: int) -> torch.nn.Module:
        kwargs: dict = {}
        if family == "segmentation":
            # Segmentation builders fetch ImageNet backbone weights unless told not to.
            kwargs["weights_backbone"] = None
        if name in ("googlenet", "inception_v3"):
            # The auxiliary heads only exist in training mode and the older tool left them out.
            kwargs.update(aux_logits=False, init_weights=True)
        if name.startswith("vit_"):
            kwargs["image_size"] = image_size
        elif name == "maxvit_t":
            kwargs["input_size"] = (image_size, image_size)
        return get_model(name, weights=None, **kwargs)
    return build


def _spec(name: str, family: str, builder: Callable[[int], torch.nn.Module]) -> ModelSpec:
    if family == "video":
        num_classes, frames = KINETICS_CLASSES, VIDEO_FRAMES
        image_size = VIDEO_IMAGE_SIZE.get(name, 224)
    else:
        num_classes = VOC_CLASSES if family == "segmentation" else IMAGENET_CLASSES
        frames, image_size = None, NATIVE_IMAGE_SIZE.get(name, 224)
    return ModelSpec(name=name, family=family, num_classes=num_classes,
                     native_image_size=image_size,
                     smallest_image_size=SMALLEST_IMAGE_SIZE.get(name, 32), frames=frames,
                     _builder=builder)


@lru_cache(maxsize=1)
def registry() -> dict:
    specs: dict = {}
    for family, module in (("classification", tvm), ("segmentation", tvm.segmentation),
                           ("video", tvm.video)):
        for name in list_models(module=module):
            specs[name] = _spec(name, family, _torchvision_builder(name, family))
    specs["shufflenet"] = _spec("shufflenet", "classification",
                                lambda _size: archs.shufflenet_v1(groups=3))
    specs["xception"] = _spec("xception", "classification", lambda _size: archs.xception())
    specs.update(language.presets())
    return specs


def available_names() -> list[str]:
    return sorted(registry()) + sorted(LEGACY_ALIASES)


def listing() -> list[str]:
    """``--list-networks`` (names.listing: the same names, known without torchvision)."""
    return names.listing()


def lookup(name: str):
    """The registry's spec for a model name or legacy alias; unknown names suggest the closest."""
    if name.startswith(language.HF_PREFIX):
        return language.hf_spec(name[len(language.HF_PREFIX):])
    specs = registry()
    canonical = LEGACY_ALIASES.get(name, name)
    if canonical in specs:
        return specs[canonical]
    lowered = {n.lower(): n for n in specs}
    if canonical.lower() in lowered:
        return specs[lowered[canonical.lower()]]
    raise names.unknown(name)


def resolve(name: str, options: ModelOptions | None = None):
    """The spec of ``name`` configured with ``options`` (input size, sequence length, ...)."""
    return lookup(name).configure(options or ModelOptions())
