"""Files the user names, checked before they are opened and read with a bound.

Every reader of a user-named file goes through here (``--compare``, ``--rerun`` and
``--scaling-baseline`` through :mod:`microbench.store.stored`, the file a run is about to replace, and
``microbench-report``'s inputs; the data package's images and caches open and read through
:func:`open_unblocked` and :func:`read_exactly`): the name must be valid text, the path a regular file (or a
directory, where one is expected) of at most a bounded size, checked with ``os.stat`` before it
is opened; the open does not block (``O_NONBLOCK``: a FIFO with no writer would hang it), the
open descriptor is checked again (the path may have changed since) and at most ``limit + 1``
bytes are read (``/dev/zero`` never ends). Anything else is :class:`InputRefused`, a
:class:`~microbench.platform.errors.UsageError` (one line, exit 2) that carries the bare ``reason`` too,
for callers that phrase the line their own way.

This is a leaf: it imports only :mod:`microbench.platform.errors` and
:mod:`~microbench.platform.safe_text`, so the report command (which imports no torch) uses it too.

Example::

    status = check_input("old/", "microbench-report", directory_ok=True)
    data = read_bounded("results/r.json", "--compare results/r.json")
    try:
        data = read_bounded(path, path, limit=1 << 20)
    except InputRefused as refused:
        print(refused.reason)             # "is a FIFO, not a regular file"
"""
from __future__ import annotations

from typing import BinaryIO

import errno
import os
import stat

from microbench.platform.errors import UsageError
from microbench.platform import safe_text

# Far above any result the tool writes (10 million iterations keep two copies of 10 million
# samples: about 0.4 GB); a larger file is not a result, and reading it would exhaust memory.
MAX_RESULT_BYTES = 1 << 30


class InputRefused(UsageError):
    """A named input that cannot be read as one: ``"{label}: {reason}"`` (exit 2)."""

    def __init__(self, label: str, reason: str):
        super().__init__(f"{label}: {reason}")
        self.label, self.reason = label, reason


def text_problem(path: str) -> str | None:
    """Why ``path`` is not a usable name, or None. Bytes that are not UTF-8 arrive from the
    command line as lone surrogates (PEP 383): such a name cannot be printed, stored in a result
    file or compared, so it is refused before anything runs."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return "the name is not valid UTF-8 text; rename the file or directory"
    if "\0" in path:
        return "the name holds a NUL character"
    return None


def printable(text: str) -> str:
    """``text`` with the bytes that are not UTF-8 shown as escapes (``\\xff``) and its controls
    as :func:`~microbench.platform.safe_text.terminal` shows them (a value typed with a line
    break or ESC in it), so a line that names a bad path or value can be printed anywhere."""
    try:
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:          # a surrogate that stands for no byte: terminal() shows it
        pass
    return safe_text.terminal(text)


def kind_of(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def status_problem(status: os.stat_result, limit: int | None = None,
                   directory_ok: bool = False, what: str = "a result file") -> str | None:
    """Why a file of this status cannot be read as an input, or None (``limit``: bytes, by
    default :data:`MAX_RESULT_BYTES`; ``what`` the file is meant to be, for the message). The
    one check of a file's status, before the open and again on the descriptor."""
    limit = MAX_RESULT_BYTES if limit is None else limit
    if directory_ok and stat.S_ISDIR(status.st_mode):
        return None
    if not stat.S_ISREG(status.st_mode):
        return f"is {kind_of(status.st_mode)}, not a regular file"
    if status.st_size > limit:
        return f"holds {status.st_size:,} bytes, more than the {limit:,} {what} can have"
    return None


def check_input(path: str, label: str, limit: int | None = None,
                directory_ok: bool = False) -> os.stat_result:
    """The status of ``path`` once it is known to be a valid name of a regular file of at most
    ``limit`` bytes (or a directory, with ``directory_ok``); InputRefused otherwise. Nothing is
    opened."""
    problem = text_problem(path) if path else "an empty path was given"
    if problem:
        raise InputRefused(printable(label), problem)
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise InputRefused(label, "no such file or directory") from None
    except OSError as error:
        raise InputRefused(label, f"cannot read ({error.strerror or error})") from None
    problem = status_problem(status, limit, directory_ok)
    if problem:
        raise InputRefused(label, problem)
    return status


def open_unblocked(path: str) -> int:
    """A read-only descriptor of ``path``, opened without blocking (``O_NONBLOCK``: a FIFO with
    no writer would hang the open) and not inherited by child processes; OSError as ``os.open``
    raises it. The caller checks the descriptor (``os.fstat``) before it reads."""
    return os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))


class ShortRead(Exception):
    """The file ended before the bytes its size promised: ``done`` of ``wanted`` read."""

    def __init__(self, done: int, wanted: int):
        super().__init__(f"{done} of {wanted} bytes read")
        self.done, self.wanted = done, wanted


def read_exactly(fd: int, wanted: int) -> bytearray:
    """The next ``wanted`` bytes of ``fd`` in one buffer, read in place (no copy per chunk);
    ShortRead where the file ends first, OSError as the read raises it. ``wanted`` is a size
    already checked against a bound: the buffer is that large."""
    data = bytearray(wanted)
    view, done = memoryview(data), 0
    with view:
        while done < wanted:
            got = os.readv(fd, [view[done:]])
            if got == 0:
                raise ShortRead(done, wanted)
            done += got
    return data


def read_bounded(path: str, label: str, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path``: checked before the open (:func:`check_input`),
    opened without blocking, checked again on the open descriptor, at most ``limit`` bytes
    (by default :data:`MAX_RESULT_BYTES`)."""
    limit = MAX_RESULT_BYTES if limit is None else limit
    check_input(path, label, limit)
    try:
        fd = open_unblocked(path)
    except OSError as error:
        _raise_limit(error)
        raise InputRefused(label, f"cannot read ({error.strerror or error})") from None
    with open(fd, "rb", closefd=True) as stream:
        problem = status_problem(os.fstat(stream.fileno()), limit)
        if problem:
            raise InputRefused(label, problem)
        try:
            data = _read_at_most(stream, limit + 1)
        except OSError as error:
            _raise_limit(error)
            raise InputRefused(label, f"cannot read ({error.strerror or error})") from None
    if len(data) > limit:
        raise InputRefused(label, f"grew past {limit:,} bytes while being read")
    return data


def _raise_limit(error: OSError) -> None:
    """Re-raise a process or system limit (too many open files): the file is not at fault,
    and the command's own handler gives the limit's one line and exit 4, instead of every
    file of a report being skipped as unreadable (issue 65)."""
    if error.errno in (errno.EMFILE, errno.ENFILE):
        raise error


# A read asks for this much at a time: one read of ``limit`` bytes reserves them all before
# the first byte comes (a gigabyte per result file, which ``ulimit -v`` refuses).
READ_CHUNK_BYTES = 1 << 20


def _read_at_most(stream: BinaryIO, wanted: int) -> bytes:
    """Up to ``wanted`` bytes of ``stream``, in chunks: memory grows with the file read, not
    with the bound it is read against."""
    chunks, done = [], 0
    while done < wanted:
        chunk = stream.read(min(READ_CHUNK_BYTES, wanted - done))
        if not chunk:
            break
        chunks.append(chunk)
        done += len(chunk)
    return b"".join(chunks)
