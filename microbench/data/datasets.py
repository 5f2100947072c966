"""The datasets a loader worker runs, and the batch they make.

* :class:`EncodedImages`: image files read with checks and, for host decoding, decoded and
  transformed in the worker (the uint8 crop, or the normalised tensor with ``--transforms cpu``);
  for device decoding, the file's bytes only. A file that cannot be read or decoded is recorded
  with its reason and the next one is used in its place, so a batch is always full, a worker never
  raises, and the main process shows what was skipped. Only if no file of the set can be used does
  a batch come back empty, and the pipeline stops with one line.
* :class:`TokenWindows`: consecutive windows of ``seq_len + 1`` token ids from a memory-mapped
  int32 file (the model's input and, shifted by one, its target).

Both return :class:`Batch` through :func:`collate`; ``Batch.pin_memory`` is what DataLoader's
pinning thread calls for a custom batch type.

Example::

    dataset = EncodedImages(paths, labels, num_classes=1000, transform=host_transform(...))
    loader = DataLoader(dataset, batch_size=64, collate_fn=collate, num_workers=8)
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch.utils.data import Dataset

from microbench.data import codecs
from microbench.data.image_files import FileRefused, read_checked, sniff

Failure = tuple[str, str]                 # (path, reason)


class Batch:
    """What one step consumes: inputs (a tensor, or encoded images to decode on the device),
    labels, and the files skipped while making it."""

    __slots__ = ("inputs", "labels", "failures", "sources")

    def __init__(self, inputs: torch.Tensor | list[torch.Tensor] | None, labels: torch.Tensor,
                 failures: tuple[Failure, ...] = (), sources: tuple[str, ...] = ()):
        self.inputs = inputs              # Tensor | list[Tensor] | None (no file was usable)
        self.labels = labels
        self.failures = failures
        self.sources = sources            # the files of encoded inputs (named if they fail)

    def __len__(self) -> int:
        return len(self.labels)

    def pin_memory(self) -> "Batch":
        inputs = self.inputs
        if isinstance(inputs, torch.Tensor):
            inputs = inputs.pin_memory()
        elif isinstance(inputs, list):
            inputs = [item.pin_memory() for item in inputs]
        return Batch(inputs, self.labels.pin_memory(), self.failures, self.sources)


class EncodedImages(Dataset):
    """Images from files; sample ``i`` is (image, label, failures met while making it, the file
    used)."""

    def __init__(self, paths: tuple[str, ...] | list[str], labels: Sequence[int], num_classes: int,
                 max_file_bytes: int, transform: Callable[[torch.Tensor], torch.Tensor] | None,
                 decode_on_host: bool = True):
        self.paths = tuple(paths)
        self.labels = tuple(int(label) % num_classes for label in labels)
        self.max_file_bytes = max_file_bytes
        self.transform = transform
        self.decode_on_host = decode_on_host
        self._bad: set[int] = set()       # this worker's known bad files: skipped at once

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        failures: list[Failure] = []
        for offset in range(len(self.paths)):
            candidate = (index + offset) % len(self.paths)
            if candidate in self._bad:
                continue
            try:
                return (self._load(candidate), self.labels[candidate], tuple(failures),
                        self.paths[candidate])
            except (FileRefused, RuntimeError, ValueError) as error:
                self._bad.add(candidate)
                failures.append((self.paths[candidate], reason(error)))
        return None, self.labels[index], tuple(failures), self.paths[index]

    def _load(self, index: int) -> torch.Tensor:
        data = read_checked(self.paths[index], self.max_file_bytes)
        encoded = torch.frombuffer(data, dtype=torch.uint8)
        if not self.decode_on_host:
            if sniff(bytes(data[:16])) != "jpeg":
                raise FileRefused("not a JPEG file (--decode gpu decodes JPEG only)")
            return encoded
        image = codecs.decode_on_host(encoded)
        return self.transform(image) if self.transform is not None else image


def reason(error: BaseException) -> str:
    """The first line of a library's message, without the C++ source location it starts with."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if isinstance(error, RuntimeError) and text.count(", ") >= 2:
        text = text.split(", ", 2)[2]      # "decode_jpeg, /path/decode_jpeg.cpp:171, reason"
    return f"cannot decode: {text}" if isinstance(error, RuntimeError) else text


class TokenWindows(Dataset):
    """Window ``i`` holds tokens ``[i * seq_len, (i + 1) * seq_len]`` of a token file (one
    more than the sequence, for the shifted target). The file is mapped in each process when
    first read, so a forked or spawned worker maps its own."""

    def __init__(self, path: str, tokens: int, seq_len: int):
        self.path, self.tokens, self.seq_len = path, tokens, seq_len
        self._mapped: torch.Tensor | None = None

    def __len__(self) -> int:
        return (self.tokens - 1) // self.seq_len

    def __getitem__(self, index: int):
        if self._mapped is None:
            # MAP_PRIVATE: pages are read from the file as the windows touch them.
            self._mapped = torch.from_file(self.path, shared=False, size=self.tokens,
                                           dtype=torch.int32)
        start = index * self.seq_len
        return self._mapped[start:start + self.seq_len + 1].clone(), 0, (), self.path

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_mapped": None}


def collate(samples: list) -> Batch:
    """Samples into one batch: images or windows stacked (encoded images kept as a list, for a
    batched device decode), labels as a tensor, failures joined."""
    failures = tuple(failure for _, _, met, _ in samples for failure in met)
    items = [item for item, _, _, _ in samples]
    labels = torch.tensor([label for _, label, _, _ in samples], dtype=torch.int64)
    if any(item is None for item in items):
        return Batch(None, labels, failures)
    first = items[0]
    if first.dim() == 1 and first.dtype == torch.int32:        # token windows
        windows = torch.stack(items)
        return Batch(windows[:, :-1], windows[:, 1:], failures)     # int32; cast on the device
    if first.dim() == 1:                                        # encoded, decoded on the device
        return Batch(items, labels, failures, tuple(source for _, _, _, source in samples))
    return Batch(torch.stack(items), labels, failures)
