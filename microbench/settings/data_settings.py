"""What a run asks of its input pipeline (``--data*``, ``--decode``, ``--transforms``,
``--workers``, ``--pin-memory``, ``--prefetch-factor``), and the rules those flags break alone,
below torch (issue 64: the plan refuses them before torch's import; the pipeline itself is
``microbench/data/``).

:class:`DataSettings` is one frozen value per run, built from a configuration's flags
(:func:`settings_of`); :meth:`DataSettings.check` refuses combinations that cannot take effect,
so that no label ever names one, and :func:`check_flags` those that do not apply to a kind of
run or to ``--data synthetic``.

Example::

    settings = DataSettings(source="loader", workers=8, decode="cpu", transforms="gpu")
    settings.check()
    workers = settings.resolved_workers(local_world_size=8)   # cores available / ranks here
    check_flags(config, "generate", feeds=False)              # UsageError with --data loader
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from microbench.platform.errors import UsageError
from microbench.settings.config import SCHEMA, BenchConfig

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


# Settings that mean something only with a pipeline, and those only of one source.
PIPELINE_FIELDS = ("data_format", "data_cache", "data_images", "data_dir", "decode",
                   "transforms", "workers", "pin_memory", "prefetch_factor")
GENERATED_SET_FIELDS = ("data_format", "data_cache", "data_images")


def settings_of(config: BenchConfig) -> DataSettings:
    """The pipeline's settings from a configuration's flags."""
    return DataSettings(source=config.data, image_format=config.data_format,
                        count=config.data_images, cache_dir=config.data_cache,
                        data_dir=config.data_dir, decode=config.decode,
                        transforms=config.transforms, workers=config.workers,
                        pin_memory=config.pin_memory, prefetch_factor=config.prefetch_factor,
                        seed=config.seed)


def _given(config: BenchConfig, names: tuple[str, ...]) -> list[str]:
    return [SCHEMA[name].flag for name in names if getattr(config, name) != SCHEMA[name].default]


def check_flags(config: BenchConfig, mode: str, feeds: bool) -> None:
    """Data settings that cannot take effect, from the flags alone: UsageError (exit 2)."""
    if config.data == "synthetic":
        given = _given(config, PIPELINE_FIELDS)
        if given:
            raise UsageError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to "
                             f"--data loader or --data folder; with --data synthetic the "
                             f"inputs are made once on the device: add --data loader")
        return
    if not feeds:
        raise UsageError(f"--data {config.data} feeds training and inference steps; --mode "
                         f"{mode} makes its own prompts: use --data synthetic")
    if config.data == "folder":
        given = _given(config, GENERATED_SET_FIELDS)
        if given:
            raise UsageError(f"{', '.join(given)} describe the generated set of --data loader; "
                             f"--data folder reads your images as they are: drop them")
    settings_of(config).check()
