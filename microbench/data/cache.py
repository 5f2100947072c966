"""Generated data sets, made once into a cache directory, whole or not at all, and reused.

A set is a directory ``<root>/<name>`` holding its files and a ``manifest.json`` that says what
they are (what was asked for, and every file with its size). It is built in a temporary directory
beside it (``.building-<name>-*``) and renamed into place in one step, after the manifest is
written and synced, so a directory under the final name is always whole. Processes that start at
once (the ranks of a torchrun job) serialise on an ``fcntl`` lock file, ``.<name>.lock``: the
first builds, the others wait and then find it made. Where ``fcntl`` is missing, the first rename
wins and the others discard theirs. A set whose manifest is missing, unreadable, for another
request, or whose files are missing or of another size is never trusted: it is rebuilt. A build
cut short (Ctrl-C, SIGTERM, a full disk) removes its temporary directory; one left by a killed
process is removed by the next build.

* :func:`ensure_image_set`: ``count`` deterministic JPEG or PNG images of one side, named
  ``0000000.jpg`` ...; the loader gives image ``i`` the class ``i % num_classes``.
* :func:`ensure_token_corpus`: int32 token ids in one file (written through a plain file, its
  blocks reserved first; read through a memory map).

Example::

    made = ensure_image_set(user_cache_root(), "jpeg", count=4096, side=384)
    made.path, made.built, made.mean_file_bytes
"""
from __future__ import annotations

import contextlib
import errno
import glob
import json
import os
import secrets
import shutil
import stat
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Callable, Iterator

import torch

from microbench.platform.errors import CannotWrite, UsageError
from microbench.platform import writing
from microbench.store import schema
from microbench.data import codecs
from microbench.data.image_files import FileRefused, read_checked
from microbench.settings.data_settings import JPEG_QUALITY

fcntl: ModuleType | None
try:
    import fcntl
except ImportError:                      # not POSIX: the first rename wins
    fcntl = None

MANIFEST = "manifest.json"
MANIFEST_LIMIT = 64 * 2**20
# Bump when the files a request produces change, so that older sets are rebuilt.
LAYOUT_VERSION = 1
BUILDING_PREFIX = ".building-"
SUFFIXES = {"jpeg": ".jpg", "png": ".png"}
TOKENS_FILE = "tokens.int32"
_TOKEN_CHUNK = 1 << 20


@dataclass(frozen=True)
class CachedSet:
    """A whole generated set: where it is, what its manifest says, and whether this call made
    it (False: it was there and valid, and was reused)."""

    path: str
    manifest: dict
    built: bool

    def file_paths(self) -> list[str]:
        return [os.path.join(self.path, name) for name, _ in self.manifest["files"]]

    @property
    def mean_file_bytes(self) -> float:
        """From the files' sizes, which were checked against the disk (the manifest's own
        figure is a number from a file, and the files are the set)."""
        sizes = [size for _, size in self.manifest["files"]]
        return sum(sizes) / len(sizes) if sizes else 0.0


# ---------------------------------------------------------------- made once

def made_once(root: str, name: str, wanted: dict,
              build: Callable[[str], dict],
              notify: Callable[[str], None] = lambda message: None) -> CachedSet:
    """The valid set ``root/name`` for the request ``wanted``, building it if needed.

    ``build(directory)`` writes the files into an empty directory and returns the manifest's
    other fields, including ``files``: ``[[name, size_in_bytes], ...]``. ``notify`` is told,
    in one line, when this process starts building and when it waits for another that is.
    """
    root = _checked_root(root)
    final = os.path.join(root, name)
    with _locked(root, name, notify) as exclusive:
        manifest = _valid_manifest(final, wanted)
        if manifest is not None:
            return CachedSet(final, manifest, built=False)
        if exclusive:
            _remove_leftovers(root, name)
        notify(f"making {final} (once; later runs reuse it)")
        manifest = _build_and_rename(root, name, wanted, build)
        if manifest is None:                  # another process renamed its set in first
            manifest = _valid_manifest(final, wanted)
            if manifest is None:
                raise CannotWrite(f"cannot make the data set {final}: another process left "
                                  f"one that does not match; remove it and run again")
            return CachedSet(final, manifest, built=False)
        return CachedSet(final, manifest, built=True)


def _checked_root(root: str) -> str:
    root = os.path.abspath(os.path.expanduser(root))
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as error:
        raise UsageError(f"--data-cache {root}: cannot create it ({error.strerror or error})"
                         ) from None
    if not os.path.isdir(root):
        raise UsageError(f"--data-cache {root}: not a directory")
    if not os.access(root, os.R_OK | os.W_OK | os.X_OK):
        raise UsageError(f"--data-cache {root}: not writable; name another directory")
    return root


@contextlib.contextmanager
def _locked(root: str, name: str, notify: Callable[[str], None]) -> Iterator[bool]:
    """Hold the set's lock file; yields whether the lock is exclusive (fcntl present)."""
    if fcntl is None:
        yield False
        return
    path = os.path.join(root, f".{name}.lock")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as error:
        raise UsageError(f"--data-cache {root}: cannot create the lock file {path} "
                         f"({error.strerror or error})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            notify(f"waiting for another process to finish making {os.path.join(root, name)}")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield True
    finally:
        os.close(fd)                          # closing releases the lock


def _valid_manifest(directory: str, wanted: dict) -> dict | None:
    """The manifest of ``directory`` if it is for ``wanted`` and every file it lists is there,
    regular, and of its size; else None (missing, half made, another request, damaged)."""
    try:
        manifest = json.loads(read_checked(os.path.join(directory, MANIFEST), MANIFEST_LIMIT))
    except (FileRefused, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("wanted") != wanted:
        return None
    try:
        for file_name, size in manifest["files"]:
            if not _own_file(file_name) or type(size) is not int:
                return None             # a name outside the set, or a size that is no count
            info = os.stat(os.path.join(directory, file_name))
            if not stat.S_ISREG(info.st_mode) or info.st_size != size:
                return None
    except (OSError, KeyError, TypeError, ValueError):
        return None
    return manifest


def _own_file(name: object) -> bool:
    """A manifest's file name names a file of the set itself: a plain name, never a path (a
    cache is a shared folder, and its manifest as untrusted as any file another user wrote)."""
    return (isinstance(name, str) and name not in ("", ".", "..") and os.sep not in name
            and (os.altsep is None or os.altsep not in name) and "\0" not in name)


def _remove_leftovers(root: str, name: str) -> None:
    """Under the lock no one else is building: temporary directories are a killed build's, and
    a set under the final name failed validation."""
    for leftover in glob.glob(os.path.join(glob.escape(root), f"{BUILDING_PREFIX}{name}-*")):
        shutil.rmtree(leftover, ignore_errors=True)
    final = os.path.join(root, name)
    if os.path.lexists(final):
        aside = os.path.join(root, f"{BUILDING_PREFIX}{name}-stale-{secrets.token_hex(4)}")
        try:
            os.rename(final, aside)
        except OSError as error:
            raise CannotWrite(f"cannot replace the damaged data set {final} "
                              f"({error.strerror or error}): remove it and run again") from None
        shutil.rmtree(aside, ignore_errors=True)


def _build_and_rename(root: str, name: str, wanted: dict,
                      build: Callable[[str], dict]) -> dict | None:
    """Build in a temporary directory and rename it to ``name``; None if another process's
    rename came first (ours is discarded)."""
    staged = os.path.join(root, f"{BUILDING_PREFIX}{name}-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        os.mkdir(staged)
        manifest = {"schema_version": schema.SCHEMA_VERSION, "wanted": wanted, **build(staged)}
        writing.write_json(os.path.join(staged, MANIFEST), manifest)
        try:
            os.rename(staged, os.path.join(root, name))
        except OSError:
            if not os.path.isdir(os.path.join(root, name)):
                raise
            with writing.signals_deferred():
                shutil.rmtree(staged, ignore_errors=True)
            return None
        _sync(root)
        return manifest
    except BaseException as error:
        with writing.signals_deferred():
            shutil.rmtree(staged, ignore_errors=True)
        if isinstance(error, OSError):
            raise CannotWrite(f"cannot make the data set {os.path.join(root, name)}: "
                              f"{error.strerror or error}; free space or choose another "
                              f"--data-cache") from None
        raise


def _sync(directory: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# ---------------------------------------------------------------- the generated sets

def image_set_name(image_format: str, side: int, count: int, seed: int = 0) -> str:
    return f"images-{image_format}-{side}-{count}" + (f"-seed{seed}" if seed else "")


def synthetic_image(generator: torch.Generator, side: int) -> torch.Tensor:
    """One 3 x side x side uint8 image: smooth colour fields (a random 6x6 grid upsampled) with
    fine grain on top, so that it compresses like a photograph rather than like noise (which
    no JPEG shrinks) or a flat colour (which decodes in no time)."""
    coarse = torch.rand((1, 3, 6, 6), generator=generator) * 255
    smooth = torch.nn.functional.interpolate(coarse, size=(side, side), mode="bicubic",
                                             align_corners=False)[0]
    grain = torch.randn((3, side, side), generator=generator) * 6
    return (smooth + grain).clamp_(0, 255).to(torch.uint8)


def ensure_image_set(root: str, image_format: str, count: int, side: int, seed: int = 0,
                     quality: int = JPEG_QUALITY,
                     notify: Callable[[str], None] = lambda message: None) -> CachedSet:
    """``count`` images of ``side`` x ``side`` pixels as JPEG (``quality``) or PNG files."""
    wanted = {"kind": "images", "layout": LAYOUT_VERSION, "format": image_format,
              "count": count, "side": side, "seed": seed,
              "quality": quality if image_format == "jpeg" else None}

    def build(directory: str) -> dict:
        generator = torch.Generator().manual_seed(seed)
        files: list[list[str | int]] = []           # [name, bytes], as the manifest holds them
        total = 0
        for index in range(count):
            encoded = codecs.encode(synthetic_image(generator, side), image_format, quality)
            if index == 0:                    # the set's size, from its first image
                check_room(directory, _estimated_set_bytes(encoded.numel(), count),
                           f"{count:,} {image_format} images of {side}x{side}",
                           "a smaller --data-images")
            file_name = f"{index:07d}{SUFFIXES[image_format]}"
            _write_new(os.path.join(directory, file_name), encoded)
            files.append([file_name, encoded.numel()])
            total += encoded.numel()
        return {"files": files, "total_bytes": total, "mean_file_bytes": total / count,
                "encoder": codecs.LIBRARY}

    return made_once(root, image_set_name(image_format, side, count, seed), wanted, build,
                     notify)


def _write_new(path: str, data: torch.Tensor) -> None:
    """A file of the set being built (the set is whole or absent, so no per-file rename)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    with os.fdopen(fd, "wb") as stream:
        stream.write(_tensor_bytes(data))


def _tensor_bytes(data: torch.Tensor) -> bytes:
    """The bytes of a 1-D CPU tensor, without numpy (not a dependency of this project)."""
    buffer = bytearray(data.numel() * data.element_size())
    torch.frombuffer(buffer, dtype=data.dtype).copy_(data)
    return bytes(buffer)


# Room kept free beyond a set's own size (the manifest, the file system's own blocks).
_ROOM_MARGIN = 1.05


def _estimated_set_bytes(first_file: int, count: int) -> int:
    """A set's size from its first file (images of one generator differ little in size)."""
    return int(first_file * count * _ROOM_MARGIN)


def check_room(directory: str, needed: int, what: str, smaller: str) -> None:
    """Refuse, before it is written, a set larger than the space free where it goes (the
    ENOSPC would come minutes later, after most of it was written)."""
    try:
        info = os.statvfs(directory)
    except (OSError, AttributeError):
        return
    free = info.f_bavail * info.f_frsize
    if needed > free:
        raise CannotWrite(f"cannot make {what} in {os.path.dirname(directory)}: it needs about "
                          f"{needed / 1e9:.2f} GB and {free / 1e9:.2f} GB are free; free space, "
                          f"use {smaller} or another --data-cache")


def _reserve(fd: int, size: int) -> None:
    """Allocate the file's blocks now, so that a full disk fails here at once; a file system
    that cannot (EOPNOTSUPP, EINVAL) is written without."""
    if size and hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as error:
            if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise


def token_corpus_name(vocab_size: int, tokens: int, seed: int = 0) -> str:
    return f"tokens-int32-v{vocab_size}-{tokens}" + (f"-seed{seed}" if seed else "")


def ensure_token_corpus(root: str, vocab_size: int, tokens: int, seed: int = 0,
                        notify: Callable[[str], None] = lambda message: None) -> CachedSet:
    """``tokens`` token ids, uniform over ``vocab_size``, as native-endian int32 in one file
    (``TOKENS_FILE``) that the loader maps into memory (torch.from_file)."""
    wanted = {"kind": "tokens", "layout": LAYOUT_VERSION, "dtype": "int32",
              "byteorder": sys.byteorder, "vocab_size": vocab_size, "tokens": tokens,
              "seed": seed}

    def build(directory: str) -> dict:
        # Written through a plain file, not a shared memory map: a full disk under a map is a
        # SIGBUS that kills the process without a word; a write says ENOSPC.
        path = os.path.join(directory, TOKENS_FILE)
        check_room(directory, tokens * 4, f"a corpus of {tokens:,} tokens", "a smaller corpus")
        generator = torch.Generator().manual_seed(seed)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                     0o666)
        with os.fdopen(fd, "wb") as stream:
            _reserve(fd, tokens * 4)
            for start in range(0, tokens, _TOKEN_CHUNK):
                stop = min(tokens, start + _TOKEN_CHUNK)
                stream.write(_tensor_bytes(torch.randint(0, vocab_size, (stop - start,),
                                                         generator=generator,
                                                         dtype=torch.int32)))
            stream.flush()
            os.fsync(fd)
        return {"files": [[TOKENS_FILE, tokens * 4]]}

    return made_once(root, token_corpus_name(vocab_size, tokens, seed), wanted, build, notify)
