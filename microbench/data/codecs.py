"""Encoding and decoding images: the one module that calls an image codec library.

torchvision.io does it (``decode_image`` on the host, ``decode_jpeg(device=...)`` on a GPU,
``encode_jpeg``/``encode_png`` to make the generated set), from the oldest torchvision this
project supports (0.18) to the newest installed here (0.29). torchvision 0.29 deprecates these
functions in favour of TorchCodec (0.16 and newer, which needs torch 2.11), whose decoders take the
same arguments; moving there is a change to this module alone. The deprecation warning is
silenced here, for these functions only, since a benchmark run has nothing to act on in it.

Example::

    encoded = encode(image_uint8_chw, "jpeg")            # 1-D uint8 tensor
    image = decode_on_host(encoded)                      # 3 x H x W uint8, RGB
    images = decode_jpegs_on_device([encoded], device)   # list of 3 x H x W on the device
    probe_device_decode(device)                          # MissingEnvironment where it cannot
"""
from __future__ import annotations

import warnings

import torch
import torchvision
from torchvision import io as tvio

from microbench.platform.errors import MissingEnvironment

warnings.filterwarnings("ignore", category=DeprecationWarning,
                        message="The image decoding and encoding capabilities of TorchVision")

LIBRARY = f"torchvision.io {torchvision.__version__}"
_RGB = tvio.ImageReadMode.RGB          # grey and RGBA files become 3 channels, as models take


def encode(image: torch.Tensor, image_format: str, quality: int = 90) -> torch.Tensor:
    """A 3 x H x W uint8 image as the bytes of a JPEG (at ``quality``) or PNG file."""
    if image_format == "jpeg":
        return tvio.encode_jpeg(image, quality=quality)
    return tvio.encode_png(image)


def decode_on_host(encoded: torch.Tensor) -> torch.Tensor:
    """Any still JPEG, PNG or WebP as 3 x H x W uint8 RGB; RuntimeError for a corrupt one."""
    return tvio.decode_image(encoded, mode=_RGB)


def decode_jpegs_on_device(encoded: list[torch.Tensor],
                           device: torch.device) -> list[torch.Tensor]:
    """JPEGs (bytes on the host) decoded on the GPU in one batched call (nvJPEG on CUDA builds);
    RuntimeError if any one is corrupt (no partial results: torchvision's own contract)."""
    return tvio.decode_jpeg(encoded, mode=_RGB, device=device)


def probe_device_decode(device: torch.device) -> None:
    """Decode one tiny JPEG on ``device``, at setup, so that a build without GPU decoding fails
    with one line before anything runs, not in the middle of the timed loop."""
    if device.type == "cpu":
        raise MissingEnvironment("--decode gpu needs a GPU, and this run is on the CPU: use "
                                 "--decode cpu")
    tiny = encode(torch.zeros(3, 16, 16, dtype=torch.uint8), "jpeg")
    try:
        decode_jpegs_on_device([tiny], device)
    except (RuntimeError, NotImplementedError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise MissingEnvironment(f"--decode gpu: this build ({LIBRARY}, torch "
                                 f"{torch.__version__}) cannot decode JPEG on {device} "
                                 f"({reason[:160]}): use --decode cpu") from None
