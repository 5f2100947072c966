"""The libraries' own log records, kept off the console and in the result: what PyTorch and
torchao log at WARNING or above while a run builds, warms up, times and profiles its model.

``--quantize`` used to open with a raw line from torch's logging before the tool's header
(``W1126 ... torch/utils/_pytree.py:630] <enum 'KernelPreference'> is an Enum subclass ...``,
logged when torchao registers its enums). Such a line says nothing about the benchmark, yet a
new user reads it as a failure. Like the compiler's Python warnings (``compile_watch``), these
records are counted and kept, once each, in the result JSON (``library_log``), and the summary
shows the first a user can act on, with how many there were; records known to say nothing to
act on (:data:`NOT_ACTIONABLE`) stay in the JSON only (issue 56: a newcomer read the pytree line
above as the one thing to fix).

torch's logging (``torch._logging``) gives ``torch`` and several of its children handlers of
their own that write to stderr; a filter on each of those handlers takes the records.
torchao logs through the root logger's last resort: a handler on ``torchao`` takes them.
``TORCH_LOGS`` set means the user asked for torch's logs: they are counted and still shown.
PyTorch's C++ warnings (``TORCH_WARN``) reach Python as warnings, attributed to the line that
called into C++ (often ours): every Python warning the filters would show during the run is
kept the same way (``compile_watch`` takes those of a compiled run's phases first).

Example::

    watch = LibraryLogWatch()
    with watch.during():
        import torchao                 # its registration warning goes into the watch
    watch.report().count               # 1
"""
from __future__ import annotations

import contextlib
import logging
import os
import warnings
from dataclasses import dataclass, field
from typing import Iterator

LIBRARIES = ("torch", "torchao")
# Each record is kept to this many characters (a traceback in a record stays in the JSON whole
# only as far as this).
LINE_CHARS = 400

# Records that say nothing a user of the benchmark can act on, by how they begin, and why.
NOT_ACTIONABLE = {
    # torchao registers its enums with torch.compile at import (torch 2.10 and later).
    "torch.utils._pytree WARNING: <enum ": "torchao's registration of its enums",
    # A CUDA build of torch on a machine without a GPU, when inductor builds its C++ kernels.
    "torch.utils.cpp_extension WARNING: No CUDA runtime is found": "a CUDA build on the CPU",
}


def actionable(line: str) -> bool:
    """Whether a kept record may say something a user can act on (anything not known not to)."""
    return not line.startswith(tuple(NOT_ACTIONABLE))


@dataclass(frozen=True)
class LibraryLog:
    """The library log records of one process's run (or several, combined)."""

    count: int = 0                          # records, repeats included
    lines: tuple[str, ...] = ()             # 'logger LEVEL: message' or 'Category: message',
                                            # once each

    def to_dict(self) -> dict:
        return {"count": self.count, "lines": list(self.lines)}

    def to_act_on(self) -> tuple[str, ...]:
        """The lines worth a user's reading, for the console (the JSON keeps every line)."""
        return tuple(line for line in self.lines if actionable(line))


def _line(record: logging.LogRecord) -> str:
    try:
        message = record.getMessage()
    except Exception:                       # noqa: BLE001 (a malformed record is still one)
        message = str(record.msg)
    return f"{record.name} {record.levelname}: {' '.join(message.split())}"[:LINE_CHARS]


@dataclass
class LibraryLogWatch:
    """Takes the libraries' WARNING (and worse) records while :meth:`during` runs."""

    count: int = 0
    lines: list[str] = field(default_factory=list)
    _last: logging.LogRecord | None = field(default=None, repr=False)

    def filter(self, record: logging.LogRecord) -> bool:
        """A handler filter: keep the record here; show it only where TORCH_LOGS asked."""
        if record.levelno < logging.WARNING:
            return True
        if record is not self._last:          # one record meets every handler of its logger
            self._last = record
            self._take(record)
        return bool(os.environ.get("TORCH_LOGS"))

    def _take(self, record: logging.LogRecord) -> None:
        self._keep(_line(record))

    def _keep(self, line: str) -> None:
        self.count += 1
        if line not in self.lines:
            self.lines.append(line)

    @contextlib.contextmanager
    def during(self) -> Iterator[None]:
        handlers = [handler for logger in _library_loggers() for handler in logger.handlers]
        keeper = _Keeper(self)
        torchao = logging.getLogger("torchao")
        propagate = torchao.propagate
        for handler in handlers:
            handler.addFilter(self)
        torchao.addHandler(keeper)
        torchao.propagate = False
        try:
            # record=True keeps the filters as they are: what they would show is kept instead.
            with warnings.catch_warnings(record=True) as caught:
                try:
                    yield
                finally:
                    for warning in caught:
                        self._keep(f"{warning.category.__name__}: "
                                   f"{' '.join(str(warning.message).split())}"[:LINE_CHARS])
        finally:
            for handler in handlers:
                handler.removeFilter(self)
            torchao.removeHandler(keeper)
            torchao.propagate = propagate

    def report(self) -> LibraryLog:
        return LibraryLog(self.count, tuple(self.lines))


class _Keeper(logging.Handler):
    """torchao's records (it has no handler of its own: Python's last resort printed them)."""

    def __init__(self, watch: LibraryLogWatch) -> None:
        super().__init__(logging.WARNING)
        self.watch = watch

    def emit(self, record: logging.LogRecord) -> None:
        if not self.watch.filter(record):
            return
        if logging.lastResort is not None:
            logging.lastResort.handle(record)     # TORCH_LOGS: shown as before


def _library_loggers() -> list[logging.Logger]:
    """The library loggers that have handlers now (torch's, set up when torch was imported)."""
    loggers = [logging.getLogger(name) for name in LIBRARIES]
    loggers += [logger for name, logger in list(logging.root.manager.loggerDict.items())
                if isinstance(logger, logging.Logger) and logger.handlers
                and name.startswith(tuple(f"{library}." for library in LIBRARIES))]
    return [logger for logger in loggers if logger.handlers]


def combine(logs: list[LibraryLog | None]) -> LibraryLog:
    """One account for several trials or ranks: every record counted, each line once."""
    known = [log for log in logs if log is not None]
    return LibraryLog(sum(log.count for log in known),
                      tuple(dict.fromkeys(line for log in known for line in log.lines)))
