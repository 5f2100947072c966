"""The image transforms, with torchvision's transforms.v2, split where the run puts them.

Geometry (the crop) always runs where the image is decoded, since only equal-sized crops make a
batch: training takes torchvision's ImageNet recipe, RandomResizedCrop and RandomHorizontalFlip;
inference resizes the short side to size * 256 / 224 and takes the centre crop (the reference
evaluation transform, 256 then 224). Normalisation (ImageNet's mean and standard deviation) and
the cast to the precision's input dtype run in the worker with ``--transforms cpu``, or after the
copy with ``--transforms gpu``, which also moves a quarter of the bytes (uint8, not float32).

With ``--decode gpu`` the crops run on the device too. Cut one image at a time, as transforms.v2
does, a batch of 256 costs some thousand small kernels and their Python dispatch: on an H100 that
held the GPU pipeline to 1,461 images/s while 16 CPU workers delivered 4,527. So a batch of
equal-sized images (every generated set; folders of one camera) is cut in one call: the crop
boxes are drawn as RandomResizedCrop draws them (its own ``get_params``, same scale and ratio
ranges), then ``torchvision.ops.roi_align`` samples every box onto the output grid at once
(bilinear, averaging several samples per output pixel where a box is larger than the output,
which is what antialiasing does for a downscale), and the flip is a per-image select. Images of
mixed sizes fall back to one transforms.v2 call per image.

Example::

    host = host_transform(224, training=True, normalise=False)    # uint8 crops in the worker
    stage = DeviceStage(device, 224, training=True, decode=False, normalise=True,
                        dtype=torch.float16, channels_last=True)
    inputs = stage(batch_inputs_on_device)
"""
from __future__ import annotations

import torch
from torchvision import ops
from torchvision.transforms import RandomResizedCrop, v2

from microbench.data import codecs
from microbench.data.datasets import Failure, reason
from microbench.data.image_files import FileRefused

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
        self.size, self.training = size, training
        self.crop = geometry(size, training) if decode else None
        self.normalise = normalisation(dtype) if normalise else None
        self.channels_last = channels_last

    def __call__(self, inputs: torch.Tensor | list[torch.Tensor], sources: tuple[str, ...] = ()
                 ) -> tuple[torch.Tensor, tuple[Failure, ...]]:
        """The model's input from a batch on the device (encoded images: on the host, a list),
        and the files that failed to decode there as (path, reason)."""
        failures: tuple[Failure, ...] = ()
        with torch.no_grad():
            if isinstance(inputs, list):                # encoded: self.decode
                images, failures = self._decode(inputs, sources)
                batch = self._crop(images)
            else:
                batch = inputs
            if self.normalise is not None:
                batch = self.normalise(batch)
            if self.channels_last:
                batch = batch.contiguous(memory_format=torch.channels_last)
            return batch, failures

    def _crop(self, images: list[torch.Tensor]) -> torch.Tensor:
        crop = self.crop                    # made where the device decodes, as here
        if crop is not None and len({tuple(image.shape) for image in images}) > 1:
            return torch.stack([crop(image) for image in images])
        return batched_crops(torch.stack(images), self.size, self.training)

    def _decode(self, encoded: list[torch.Tensor], sources: tuple[str, ...]):
        """One batched decode; if a file in it is corrupt (the batch call fails as a whole),
        each on its own, with a good image standing in for each bad one so the batch stays
        full. A batch of nothing but corrupt files raises FileRefused."""
        try:
            return codecs.decode_jpegs_on_device(encoded, self.device), ()
        except RuntimeError:
            pass
        images: list[torch.Tensor | None] = []
        failures: list[Failure] = []
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


def crop_boxes(count: int, height: int, width: int, size: int, training: bool) -> torch.Tensor:
    """One box (x1, y1, x2, y2) per image: RandomResizedCrop's draw when training, else the
    region that resize-to-``size * 256 / 224``-then-centre-crop keeps (a centred square)."""
    if training:
        probe = torch.empty(0, height, width)             # get_params reads only the size
        boxes = []
        for _ in range(count):
            top, left, box_h, box_w = RandomResizedCrop.get_params(
                probe, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3))
            boxes.append((left, top, left + box_w, top + box_h))
        return torch.tensor(boxes, dtype=torch.float32)
    side = min(height, width) / EVAL_RESIZE_RATIO
    left, top = (width - side) / 2, (height - side) / 2
    return torch.tensor([(left, top, left + side, top + side)] * count, dtype=torch.float32)


def batched_crops(images: torch.Tensor, size: int, training: bool) -> torch.Tensor:
    """Crops of a uint8 batch N x 3 x H x W, resized to ``size`` in one roi_align call (and
    flipped at random per image when training); uint8 out, like the per-image path."""
    count, _, height, width = images.shape
    boxes = crop_boxes(count, height, width, size, training).to(images.device)
    indexed = torch.cat([torch.arange(count, device=images.device,
                                      dtype=torch.float32)[:, None], boxes], dim=1)
    crops = ops.roi_align(images.float(), indexed, output_size=size, aligned=True)
    if training:
        flip = torch.rand(count, device=images.device) < 0.5
        crops = torch.where(flip[:, None, None, None], crops.flip(-1), crops)
    return crops.round_().clamp_(0, 255).to(torch.uint8)
