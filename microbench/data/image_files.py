"""Reading the user's files and our own with checks first: a directory that is one, regular files
of bounded size, never a FIFO or a device that would block or never end.

Every file the data package reads goes through :func:`read_checked`: it opens without blocking
(``O_NONBLOCK``, so a FIFO put where an image was cannot hang a worker), checks on the open
descriptor (``fstat``, so nothing can be swapped in between the check and the read) that it is a
regular file no larger than the bound, and reads it whole. The open and the read are
:mod:`microbench.platform.inputs`'s (``open_unblocked``, ``read_exactly``), the checked reader of
every file the user names; what is kept here is what is particular to images: the bound an image
may have, the reasons a worker records for a file it skips, and the formats' first bytes.

Example::

    root = check_directory("/data/imagenet/train", "--data-dir")
    data = read_checked("/data/imagenet/train/n01440764/x.JPEG", limit=64 * 2**20)
    kind = sniff(data[:16])                     # "jpeg", "png", "webp" or None
"""
from __future__ import annotations

import os

from microbench.platform.errors import UsageError
from microbench.platform.inputs import ShortRead, open_unblocked, read_exactly, status_problem

# The first bytes of each format torchvision.io.decode_image reads as a still image
# (JPEG: SOI marker and the next marker's FF, ITU-T T.81 B.1.1.3; PNG: the 8-byte signature,
# RFC 2083 3.1; WebP: a RIFF container whose form type is WEBP, RFC 9649 2.5).
_JPEG = b"\xff\xd8\xff"
_PNG = b"\x89PNG\r\n\x1a\n"
HEAD_BYTES = 16
IMAGE_SUFFIXES = {".jpg": "jpeg", ".jpeg": "jpeg", ".png": "png", ".webp": "webp"}


class FileRefused(Exception):
    """A file that cannot be used, with the reason (a worker records it and skips the file)."""


def check_directory(path: str, flag: str) -> str:
    """``path`` as an absolute path if it is a readable, searchable directory; else exit 2."""
    absolute = os.path.abspath(os.path.expanduser(path))
    if not os.path.exists(absolute):
        raise UsageError(f"{flag} {path}: no such directory")
    if not os.path.isdir(absolute):
        raise UsageError(f"{flag} {path}: not a directory")
    if not os.access(absolute, os.R_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: permission denied (the directory must be readable)")
    return absolute


def open_checked(path: str, limit: int) -> tuple[int, int]:
    """An open descriptor of the regular file ``path`` and its size; FileRefused otherwise."""
    try:
        fd = open_unblocked(path)
    except OSError as error:
        raise FileRefused(f"cannot open: {error.strerror or error}") from None
    try:
        info = os.fstat(fd)
        problem = status_problem(info, limit, what="an image")
        if problem:
            raise FileRefused(problem)
        if info.st_size == 0:
            raise FileRefused("empty")
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def read_checked(path: str, limit: int, head_only: bool = False) -> bytearray:
    """The bytes of the regular file ``path`` (its first HEAD_BYTES with ``head_only``)."""
    fd, size = open_checked(path, limit)
    try:
        return read_exactly(fd, min(size, HEAD_BYTES) if head_only else size)
    except ShortRead as short:
        raise FileRefused(f"shorter than its size ({short})") from None
    except OSError as error:
        raise FileRefused(f"cannot read: {error.strerror or error}") from None
    finally:
        os.close(fd)


def sniff(head: bytes) -> str | None:
    """The image format the first bytes of a file announce, or None."""
    if head.startswith(_JPEG):
        return "jpeg"
    if head.startswith(_PNG):
        return "png"
    if len(head) >= 12 and head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    return None
