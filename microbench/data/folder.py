"""``--data folder``: the user's own images, in class folders or flat, checked before anything
runs.

Two layouts, as torchvision's ImageFolder and a plain directory of photographs:

* class folders: ``DIR/<class>/**/<image>``, one class per subdirectory of DIR (sorted by name,
  the class index is the position), images at any depth below it;
* flat: ``DIR/<image>``, every image in class 0.

The classes are torchvision's (``find_classes``, ImageFolder's own rule) less hidden folders, and
an image is a file whose suffix is .jpg, .jpeg, .png or .webp, any case
(``has_file_allowed_extension``; the formats torchvision.io decodes here, fewer than
``IMG_EXTENSIONS``); other files are ignored, as ImageFolder does. The files below a class folder
are not listed by ``make_dataset``: it follows links to directories with no guard against loops
(two links back up a tree keep it walking for ever), so this module walks them itself, links to
directories not followed. Before the run, every image is checked to be a regular file,
readable, not empty and within the size bound, and a spread sample of them (all of them up to
``SNIFF_LIMIT``) to start as an image of its kind; whatever fails is left out with its reason
(counted and shown). A missing, unreadable or empty directory, a directory without images, a tree
that mixes loose images with class folders, or one where no image passes: one line, exit 2.
The loader checks each file again when it reads it (it may have changed since).

Example::

    listing = scan_folder("/data/flowers", max_file_bytes=64 * 2**20)
    listing.paths[0], listing.labels[0], listing.classes, listing.rejected
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from torchvision.datasets.folder import find_classes, has_file_allowed_extension

from microbench.platform.errors import UsageError
from microbench.data.image_files import (HEAD_BYTES, IMAGE_SUFFIXES, FileRefused, check_directory,
                                   open_checked, sniff)

FLAG = "--data-dir"
# Reading the first bytes of every file of a million-image tree would cost a pass over it
# before the benchmark starts; a spread sample finds a tree of the wrong files, and the loader
# catches the odd bad file among good ones as it reads.
SNIFF_LIMIT = 1024


@dataclass(frozen=True)
class ImageList:
    """The images of a folder, in a fixed order, with their classes and what was left out."""

    root: str
    paths: tuple[str, ...]
    labels: tuple[int, ...]
    classes: tuple[str, ...]                     # () for a flat folder
    rejected: tuple[tuple[str, str], ...]        # (path, reason)
    total_bytes: int = 0                         # of the kept files
    outside: tuple[tuple[str, str], ...] = ()    # (path, where it leads): links out of root

    @property
    def mean_file_bytes(self) -> float:
        return self.total_bytes / len(self.paths) if self.paths else 0.0

    @property
    def layout(self) -> str:
        return "class folders" if self.classes else "flat"

    def suffix_formats(self) -> dict[str, int]:
        """How many images each format's suffix names (``--decode gpu`` needs JPEG only)."""
        counts: dict[str, int] = {}
        for path in self.paths:
            kind = IMAGE_SUFFIXES[os.path.splitext(path)[1].lower()]
            counts[kind] = counts.get(kind, 0) + 1
        return counts


def scan_folder(directory: str, max_file_bytes: int) -> ImageList:
    root, classes, candidates = list_images(directory)
    kept, total_bytes, rejected = _checked(candidates, max_file_bytes)
    if not kept:
        first_path, first_reason = rejected[0]
        raise UsageError(f"{FLAG} {directory}: none of its {len(candidates)} images can be read "
                         f"as one (e.g. {first_path}: {first_reason})")
    return ImageList(root, tuple(path for path, _ in kept), tuple(label for _, label in kept),
                     classes, tuple(rejected), total_bytes,
                     tuple(_leading_out(root, [path for path, _ in kept])))


def _leading_out(root: str, paths: list[str]) -> list[tuple[str, str]]:
    """The files read through a symbolic link (theirs or a folder's) from outside ``root``:
    a user told where the images are should hear that some are elsewhere."""
    real_root = os.path.realpath(root)
    outside = []
    for path in paths:
        real = os.path.realpath(path)
        if real != os.path.abspath(path) and os.path.commonpath([real_root, real]) != real_root:
            outside.append((path, real))
    return outside


def list_images(directory: str) -> tuple[str, tuple[str, ...], list[tuple[str, int]]]:
    """The tree's root, its classes and its image files with their labels, from the directory
    listing alone (no file opened): what the run checks before it builds the model."""
    root = check_directory(directory, FLAG)
    classes = _classes(root)
    loose = [entry.path for entry in _sorted_entries(root) if _is_image_name(entry.name)
             and not entry.is_dir()]
    if classes and loose:
        raise UsageError(f"{FLAG} {directory} mixes {len(loose)} images at its top level (e.g. "
                         f"{os.path.basename(loose[0])}) with class folders: move them into a "
                         f"class folder, or point {FLAG} at a folder of one layout")
    if classes:
        candidates = [(path, label) for label, name in enumerate(classes)
                      for path in _images_below(os.path.join(root, name))]
    else:
        candidates = [(path, 0) for path in loose]
    if not candidates:
        raise UsageError(f"{FLAG} {directory} holds no images (.jpg, .jpeg, .png or .webp files, "
                         f"flat or in class folders)")
    if not any(_size(path) for path, _ in candidates):
        raise UsageError(f"{FLAG} {directory}: all of its {len(candidates)} image files are "
                         f"empty (0 bytes) or cannot be read: nothing to feed the model")
    return root, classes, candidates


def _size(path: str) -> int:
    """A file's size from the listing alone (no open); 0 where it cannot be known."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _classes(root: str) -> tuple[str, ...]:
    """ImageFolder's classes of ``root`` (its subdirectories, links to them included, sorted by
    name), hidden ones left out; () for a flat folder."""
    try:
        found, _ = find_classes(root)
    except FileNotFoundError:                    # no class folder: a flat folder
        return ()
    except OSError as error:
        raise UsageError(f"{FLAG}: cannot list {root} ({error.strerror or error}); make it "
                         f"readable") from None
    return tuple(name for name in found if not name.startswith("."))


_SUFFIXES = tuple(IMAGE_SUFFIXES)


def _is_image_name(name: str) -> bool:
    return has_file_allowed_extension(name, _SUFFIXES) and not name.startswith(".")


def _sorted_entries(directory: str) -> list[os.DirEntry]:
    try:
        with os.scandir(directory) as scan:
            return sorted((entry for entry in scan if not entry.name.startswith(".")),
                          key=lambda entry: entry.name)
    except OSError as error:
        raise UsageError(f"{FLAG}: cannot list {directory} ({error.strerror or error}); make it "
                         f"readable") from None


def _images_below(directory: str) -> list[str]:
    """Image files at any depth below a class folder, in sorted order (symbolic links to
    directories are not followed, so a link loop cannot make the scan endless)."""
    found = []
    for entry in _sorted_entries(directory):
        if entry.is_dir(follow_symlinks=False):
            found.extend(_images_below(entry.path))
        elif _is_image_name(entry.name):
            found.append(entry.path)
    return found


def _checked(candidates: list[tuple[str, int]], limit: int):
    """Every candidate opened and checked (regular, readable, size); a spread sample sniffed.
    Returns the kept (path, label) pairs, their total bytes, and the rejected (path, reason)."""
    step = max(1, len(candidates) // SNIFF_LIMIT)
    kept, rejected, total = [], [], 0
    for index, (path, label) in enumerate(candidates):
        try:
            fd, size = open_checked(path, limit)
            try:
                if index % step == 0:
                    _check_head(path, os.read(fd, HEAD_BYTES))
            finally:
                os.close(fd)
        except FileRefused as refused:
            rejected.append((path, str(refused)))
            continue
        except OSError as error:
            rejected.append((path, f"cannot read: {error.strerror or error}"))
            continue
        kept.append((path, label))
        total += size
    return kept, total, rejected


def _check_head(path: str, head: bytes) -> None:
    if sniff(head) is None:
        expected = IMAGE_SUFFIXES[os.path.splitext(path)[1].lower()]
        raise FileRefused(f"not a {expected.upper()} file (it does not start as an image)")
