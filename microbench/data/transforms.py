"""The image transforms, with torchvision's transforms.v2, split where the run puts them.

Geometry (the crop) always runs where the image is decoded, since only equal-sized crops make a
batch: training takes torchvision's ImageNet recipe, RandomResizedCrop and RandomHorizontalFlip;
inference resizes the short side to size * 256 / 224 and takes the centre crop (the reference
evaluation transform, 256 then 224). Normalisation (ImageNet's mean and standard deviation) and
the cast to the precision's input dtype run in the worker with ``--transforms cpu``, or after the
copy with ``--transforms gpu``, which also moves a quarter of the bytes (uint8, not float32).

Example::

    host = host_transform(224, training=True, normalise=False)    # uint8 crops in the worker
    stage = DeviceStage(device, 224, training=True, decode=False, normalise=True,
                        dtype=torch.float16, channels_last=True)
    inputs = stage(batch_inputs_on_device)
"""
from __future__ import annotations

import torch
from torchvision.transforms import v2

from . import codecs
from .datasets import reason
from .files import FileRefused

# torchvision's ImageNet statistics (the references' and the weights' own transforms).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# Evaluation resizes the short side to 256 for a 224 crop (torchvision's classification
# reference, presets.ClassificationPresetEval); the same ratio at other sizes.
EVAL_RESIZE_RATIO = 256 / 224


def geometry(size: int, training: bool) -> v2.Transform:
    if training:
        return v2.Compose([v2.RandomResizedCrop(size, antialias=True),
                           v2.RandomHorizontalFlip()])
    return v2.Compose([v2.Resize(round(size * EVAL_RESIZE_RATIO), antialias=True),
                       v2.CenterCrop(size)])


def normalisation(dtype: torch.dtype) -> v2.Transform:
    """uint8 -> float in [0, 1] -> normalised -> the model's input dtype."""
    steps = [v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    if dtype != torch.float32:
        steps.append(v2.ToDtype(dtype))
    return v2.Compose(steps)


def host_transform(size: int, training: bool, normalise: bool,
                   dtype: torch.dtype = torch.float32) -> v2.Transform:
    """What a worker applies to a decoded image."""
    if not normalise:
        return geometry(size, training)
    return v2.Compose([geometry(size, training), normalisation(dtype)])


class DeviceStage:
    """What happens to a batch after its copy to the device: decoding (``--decode gpu``), the
    crops of the decoded images, normalisation and casting (``--transforms gpu``), and the
    memory format (``--nhwc``). All of it is queued on the current stream."""

    def __init__(self, device: torch.device, size: int, training: bool, decode: bool,
                 normalise: bool, dtype: torch.dtype, channels_last: bool):
        self.device = device
        self.decode = decode
        self.crop = geometry(size, training) if decode else None
        self.normalise = normalisation(dtype) if normalise else None
        self.channels_last = channels_last

    def __call__(self, inputs, sources: tuple[str, ...] = ()):
        """The model's input from a batch on the device (encoded images: on the host), and the
        files that failed to decode there as (path, reason)."""
        failures: tuple = ()
        with torch.no_grad():
            if self.decode:
                images, failures = self._decode(inputs, sources)
                inputs = torch.stack([self.crop(image) for image in images])
            if self.normalise is not None:
                inputs = self.normalise(inputs)
            if self.channels_last:
                inputs = inputs.contiguous(memory_format=torch.channels_last)
            return inputs, failures

    def _decode(self, encoded: list[torch.Tensor], sources: tuple[str, ...]):
        """One batched decode; if a file in it is corrupt (the batch call fails as a whole),
        each on its own, with a good image standing in for each bad one so the batch stays
        full. A batch of nothing but corrupt files raises FileRefused."""
        try:
            return codecs.decode_jpegs_on_device(encoded, self.device), ()
        except RuntimeError:
            pass
        images, failures = [], []
        for index, data in enumerate(encoded):
            try:
                images.append(codecs.decode_jpegs_on_device([data], self.device)[0])
            except RuntimeError as error:
                images.append(None)
                name = sources[index] if index < len(sources) else f"item {index}"
                failures.append((name, reason(error)))
        good = [image for image in images if image is not None]
        if not good:
            raise FileRefused(f"no file of a batch could be decoded on {self.device} "
                              f"(e.g. {failures[0][0]}: {failures[0][1]})")
        return [image if image is not None else good[0] for image in images], tuple(failures)
