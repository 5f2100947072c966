"""Result files written whole or not at all, for the model benchmark and the op bench alike.

* **Whole files** (JSON results, the op bench's CSV, plots, traces): written to a temporary file
  in the target's own directory, synced, and renamed over the target, so a reader sees the old
  file or the new one, never half of one. Any failure, Ctrl-C or SIGTERM included, removes the
  temporary file and leaves the previous file as it was.
* **CSV appends** (the model benchmark's summary): one write of whole lines under an exclusive
  lock, so concurrent runs never interleave; a failed write is truncated back, so a full disk
  never leaves half a row for the next run's row to be glued onto.
* **Temporary files** are named ``.tmp-<pid>.<host>.<random>-<target>``: a process killed
  before it could remove its own (SIGKILL, a power cut) leaves one behind, and the next write
  into that directory removes those whose process is gone (:func:`sweep_stale`). Only this
  host's are swept (``<host>``: a hash of its name), since on a shared file system a process id
  of another node says nothing here.
* **A JSON result and its CSV row** (:func:`write_then`): the JSON is swapped in first, then
  the row appended; if the append fails, the previous JSON is put back. So a row never exists
  without its JSON; a process killed between the two leaves a JSON without its row (the report
  reads the JSONs; the CSV is their summary), never a row pointing at nothing.
* Files are created with mode 0o666 and the umask applied by the kernel, like any file the user
  creates (tempfile's 0600 would hide results from colleagues and CI artifact collectors).
* An OSError while writing is :class:`~microbench.platform.errors.CannotWrite` (exit 4), one line naming
  the file. JSON is strict: NaN and infinity become null.
"""
from __future__ import annotations

import atexit
import contextlib
import csv
import errno
import hashlib
import io
import json
import math
import os
import re
import secrets
import shutil
import signal
import socket
import threading
import time
from types import ModuleType
from typing import Callable, Iterator, Sequence

from microbench.platform import process
from microbench.platform.errors import CannotWrite, UsageError

fcntl: ModuleType | None
try:
    import fcntl
except ImportError:                      # not POSIX: appends are still single writes
    fcntl = None

TEMPORARY_PREFIX = ".tmp-"
# This host in temporary names: the first 8 hex digits of its name's SHA-1.
_HOST = hashlib.sha1(socket.gethostname().encode("utf-8", "surrogateescape")).hexdigest()[:8]
_TEMPORARY_NAME = re.compile(re.escape(TEMPORARY_PREFIX)
                             + r"(\d{1,10})\.([0-9a-f]{8})\.[0-9a-f]{8}-")
# How much of a CSV is read to check its header and to find its last line.
_HEAD_BYTES = 1 << 16


# ---------------------------------------------------------------- shared pieces

@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM while a file is swapped in or a failed append is undone; they
    take effect right after, so neither a half-done cleanup nor a traceback is left behind."""
    if (not hasattr(signal, "pthread_sigmask")
            or threading.current_thread() is not threading.main_thread()):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, *process.STOPPING})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


# What a failed write is about, by its errno: a full disk is the common case, and its advice
# must not be given for a name too long or a permission (exit 4 alike, each with its remedy).
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_ADVICE_NO_SPACE = "free space, raise the quota or file-size limit, or write elsewhere"
_ADVICE_TOO_LONG = "choose a shorter name or directory"
_ADVICE_OTHER = "check the directory and its permissions, or write elsewhere"


def _cannot_write(path: str, error: OSError) -> CannotWrite:
    reason = error.strerror or str(error)
    advice = (_ADVICE_NO_SPACE if error.errno in _NO_SPACE
              else _ADVICE_TOO_LONG if error.errno == errno.ENAMETOOLONG else _ADVICE_OTHER)
    return CannotWrite(f"cannot write {path}: {reason}; the previous file is unchanged "
                       f"({advice}, and run again)")


def _write_all(fd: int, data: bytes) -> None:
    """os.write may write less than asked (a file-size limit reached mid-way): go on until all
    is written or it raises."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _sync_directory(directory: str) -> None:
    """Make the rename durable; some file systems cannot sync a directory, which is harmless."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


# ---------------------------------------------------------------- checks before the run

def existing_ancestor(directory: str) -> str:
    """``directory``, or the nearest of its parents that exists (what a makedirs starts from)."""
    directory = os.path.abspath(directory)
    while not os.path.lexists(directory) and os.path.dirname(directory) != directory:
        directory = os.path.dirname(directory)
    return directory


def ensure_directory(path: str) -> list[str]:
    """Create the directory of the result file ``path`` when it is about to be written (never
    before: a run refused or failed leaves no empty --output-dir behind); the directories it
    made, deepest first, for :func:`remove_made` when the write fails."""
    directory = os.path.dirname(os.path.abspath(path))
    made = []
    while not os.path.lexists(directory) and os.path.dirname(directory) != directory:
        made.append(directory)
        directory = os.path.dirname(directory)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    except OSError as error:
        remove_made(made)
        raise _cannot_write(path, error) from None
    return made


def remove_made(made: list[str]) -> None:
    """Remove the directories ``ensure_directory`` made, while they are empty (a write that
    failed on a full disk leaves no empty --output-dir)."""
    for directory in made:
        try:
            os.rmdir(directory)
        except OSError:
            return


def check_target(path: str, flag: str, directory_made: bool = False) -> None:
    """Refuse, before any time is spent benchmarking, a result path that cannot be written: its
    directory missing (unless ``directory_made``: then it is created when the file is written,
    and its nearest existing parent must be a writable directory) or read-only, the path a
    directory or a device, the file read-only, or a name too long for the file system."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UsageError(f"cannot write {flag} {path}: it is a directory; name a file")
    if os.path.lexists(path) and not os.path.isfile(path):
        raise UsageError(f"cannot write {flag} {path}: not a regular file")
    if not os.path.isdir(directory) and directory_made:
        directory = existing_ancestor(directory)
    if not os.path.isdir(directory):
        raise UsageError(f"cannot write {flag} {path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write {flag} {path}: directory {directory} is not writable")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise UsageError(f"cannot write {flag} {path}: the file is read-only; make it writable "
                         f"or name another")
    problem = length_problem(path, directory)
    if problem is not None:
        raise UsageError(f"cannot write {flag} {path}: {problem}; choose a shorter name or "
                         f"directory")


def _limit(directory: str, name: str, default: int) -> int:
    try:
        return os.pathconf(directory, name)
    except (OSError, ValueError, AttributeError):
        return default


def _bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))


def length_problem(path: str, existing: str) -> str | None:
    """Why the file system cannot take ``path`` whole, or None: every name of it (the
    directories still to be made, the file's name with its claim file ``.NAME.claim``) within
    NAME_MAX, and the longest path a write makes beside it (the claim file, the temporary file)
    within PATH_MAX, as ``existing`` (its nearest existing directory) reports them. Checked
    before the run: a path too long is found then, not as a failed write after it."""
    name_max = _limit(existing, "PC_NAME_MAX", 255)
    path_max = _limit(existing, "PC_PATH_MAX", 4096)
    absolute = os.path.abspath(path)
    directory, base = os.path.split(absolute)
    longest_name = max((_bytes(part) for part in directory.split(os.sep)), default=0)
    if max(longest_name, _bytes(os.path.basename(_claim_file(absolute)))) > name_max:
        return f"a name in it is longer than the {name_max} bytes the file system allows"
    longest = max(_bytes(_claim_file(absolute)), _bytes(_temporary_name(absolute)))
    if longest >= path_max:
        return (f"the path with the files written beside it is {longest} bytes, beyond the "
                f"{path_max - 1} the system allows")
    return None


# Old name, kept for callers outside the package.
check_writable = check_target


# ---------------------------------------------------------------- whole files

def user_cache_root() -> str:
    """Where this tool keeps what it makes once and reuses (generated data sets, measured kernel
    choices): $XDG_CACHE_HOME (else ~/.cache)/micro_benchmarking_pytorch, the XDG Base
    Directory Specification's user cache directory."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "micro_benchmarking_pytorch")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:                           # another user's process: alive
        return True
    except (OverflowError, OSError):                  # not a process id at all
        return False
    return True


def sweep_stale(directory: str) -> list[str]:
    """Remove the temporary files in ``directory`` that processes of this host left when they
    were killed (their process is gone); the names removed. A pid reused since keeps its file
    until that process is gone too: the sweep errs on the side of keeping."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        match = _TEMPORARY_NAME.match(entry.name)
        if (match is None or match.group(2) != _HOST or int(match.group(1)) == os.getpid()
                or _alive(int(match.group(1)))):
            continue
        with contextlib.suppress(OSError):
            if entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
                removed.append(entry.path)
    return removed


# ---------------------------------------------------------------- names claimed

# A name a run will write is claimed before the run, by creating ``.<name>.claim`` beside it
# exclusively (O_EXCL: of runs started at once into one directory, one gets the name and the
# others see it taken and choose another), holding "<pid> <host>". A claim of a process of this
# host that is gone is stale and taken over; the claim is removed when the run ends.
_CLAIM_SUFFIX = ".claim"
_claims: dict[str, list[str]] = {}          # claim file -> the directories made for it


def _claim_file(path: str) -> str:
    directory, base = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{base}{_CLAIM_SUFFIX}")


# A claim holds "<pid> <host>" from the moment its creator writes it, right after creating
# it; one that still holds anything else after this long was cut short or tampered with, and
# is stale, as a lock file whose owner cannot be named (else its name is blocked forever).
_CLAIM_WRITTEN_S = 10.0
_CLAIM_TEXT = re.compile(r"(\d{1,10}) ([0-9a-f]{8})")


def _stale_claim(claim_file: str) -> bool:
    """Whether the claim at ``claim_file`` was left by a process of this host that is gone (or
    by this process in an earlier, finished run: main() is called in-process too), or holds
    no claimant after :data:`_CLAIM_WRITTEN_S`; another host's claim is never stale."""
    try:
        with open(claim_file, encoding="ascii", errors="replace") as held:
            text = held.read(64).strip()
        age = time.time() - os.stat(claim_file).st_mtime
    except FileNotFoundError:
        return True
    except OSError:
        return False
    named = _CLAIM_TEXT.fullmatch(text)
    if named is None:
        return age > _CLAIM_WRITTEN_S
    if named.group(2) != _HOST:
        return False
    pid = int(named.group(1))
    return pid == os.getpid() or not _alive(pid)


def claim(path: str) -> bool:
    """Claim the name ``path`` for this process's run: True when it is this process's now
    (claimed here, or already), False when another live run holds it. A directory that cannot
    be made or written claims nothing and returns True: the checks before the run, and the
    write, say why in one line."""
    claim_file = _claim_file(path)
    if claim_file in _claims:
        return True
    try:
        made = ensure_directory(path)
    except CannotWrite:
        return True
    for _ in range(3):
        try:
            fd = os.open(claim_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            if not _stale_claim(claim_file):
                remove_made(made)
                return False
            _remove(claim_file)
            continue
        except OSError:
            remove_made(made)
            return True
        try:
            _write_all(fd, f"{os.getpid()} {_HOST}".encode("ascii"))
        except OSError:
            pass
        finally:
            os.close(fd)
        _claims[claim_file] = made
        return True
    remove_made(made)
    return False


def claim_new(path: str) -> str:
    """``path``, or ``STEM-2.EXT``, ``STEM-3.EXT``...: the first name that no file has and no
    other run claimed, claimed for this process (a file that never replaces another)."""
    stem, extension = os.path.splitext(path)
    candidate, number = path, 2
    while (os.path.lexists(candidate) or _claim_file(candidate) in _claims
           or not claim(candidate)):
        candidate, number = f"{stem}-{number}{extension}", number + 1
    return candidate


def release_claims() -> None:
    """Remove this process's claims (at the end of a run, written or not), and the directories
    made for them that stayed empty (a run refused or failed leaves no --output-dir behind)."""
    for claim_file in _claims:             # every claim first: a directory made for one
        _remove(claim_file)                # holds the others' claims too
    for made in _claims.values():
        remove_made(made)
    _claims.clear()


atexit.register(release_claims)            # a run that ended by an exception or a signal


def _temporary_name(path: str) -> str:
    directory = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)[:64]
    return os.path.join(directory, f"{TEMPORARY_PREFIX}{os.getpid()}.{_HOST}."
                                   f"{secrets.token_hex(4)}-{base}")


def _create_temporary(path: str) -> str:
    """An empty file beside ``path``, created exclusively with mode 0o666 minus the umask (the
    directory's stale temporaries swept first)."""
    sweep_stale(os.path.dirname(os.path.abspath(path)))
    while True:
        name = _temporary_name(path)
        try:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return name
        except FileExistsError:
            continue
        except OSError as error:
            raise _cannot_write(path, error) from None


@contextlib.contextmanager
def replacing(path: str) -> Iterator[str]:
    """Yield a temporary path beside ``path`` to write; when the block ends without error it
    replaces ``path`` (atomically); on any failure or interrupt it is removed and ``path`` is
    left as it was. Code inside the block may write other files that must succeed too (the
    CSV row of a JSON result): then both are written or neither."""
    staged: list[str] = []
    made = ensure_directory(path)
    try:
        with signals_deferred():             # no interrupt between creating and remembering it
            staged.append(_create_temporary(path))
        yield staged[0]
        with signals_deferred():
            try:
                os.replace(staged[0], path)
            except OSError as error:
                raise _cannot_write(path, error) from None
            staged.clear()
        _sync_directory(os.path.dirname(os.path.abspath(path)))
    except BaseException:
        with signals_deferred():
            for name in staged:
                _remove(name)
            remove_made(made)
        raise


def fill(temporary: str, data: bytes, path: str) -> None:
    """Write ``data`` to the temporary file of ``path`` and sync it to the disk."""
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_TRUNC)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as error:
        raise _cannot_write(path, error) from None


def _keep_previous(path: str) -> str | None:
    """A second name for the file at ``path`` (a hard link, else a copy), to put it back; None
    when there is no file."""
    if not os.path.isfile(path):
        return None
    while True:
        name = _temporary_name(path)
        try:
            os.link(path, name)
            return name
        except FileExistsError:
            continue
        except OSError:                         # no hard links here (some network file systems)
            try:
                shutil.copyfile(path, name)
                return name
            except OSError as error:
                _remove(name)
                raise _cannot_write(path, error) from None


def write_then(path: str, data: bytes, then: Callable[[], object]) -> None:
    """Swap ``data`` in at ``path`` whole, then call ``then`` (the CSV row of a JSON result).
    If ``then`` fails or is interrupted, the previous file comes back (or none, if there was
    none): both are written or neither, and a row never exists without its file, even when the
    process is killed between the two (module docstring)."""
    temporary = backup = None
    swapped = False
    made = ensure_directory(path)
    try:
        with signals_deferred():
            temporary = _create_temporary(path)
        fill(temporary, data, path)
        with signals_deferred():
            backup = _keep_previous(path)
            try:
                os.replace(temporary, path)
            except OSError as error:
                raise _cannot_write(path, error) from None
            temporary, swapped = None, True
        _sync_directory(os.path.dirname(os.path.abspath(path)))
        then()
    except BaseException:
        with signals_deferred():
            if temporary is not None:
                _remove(temporary)
            if swapped and backup is not None:
                os.replace(backup, path)
                backup = None
            elif swapped:
                _remove(path)
            remove_made(made)
        raise
    finally:
        if backup is not None:
            with signals_deferred():
                _remove(backup)


def write_whole(path: str, content: str | bytes) -> None:
    """Write ``content`` to ``path`` whole or not at all."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    with replacing(path) as temporary:
        fill(temporary, data, path)


def write_via(path: str, produce: Callable[[str], object]) -> None:
    """Whole or not at all for a file a library writes itself (a Kineto trace):
    ``produce(temporary_path)`` writes it, and it replaces ``path`` only if that succeeds."""
    with replacing(path) as temporary:
        try:
            produce(temporary)
        except OSError as error:
            raise _cannot_write(path, error) from None


def json_safe(value: object) -> object:
    """NaN and infinity are not JSON; they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def json_text(document: dict) -> str:
    """Strict JSON: non-finite numbers as null."""
    return json.dumps(json_safe(document), indent=2, allow_nan=False, default=str) + "\n"


def write_json(path: str, document: dict) -> None:
    """Strict JSON (non-finite numbers as null), written whole or not at all."""
    write_whole(path, json_text(document))


# ---------------------------------------------------------------- CSV appends

def csv_lines(rows: Sequence[Sequence[object]], terminator: str) -> str:
    """Rows as CSV text, one physical line each: line breaks inside a cell (an error message)
    become spaces, so a row can be found, checked and cut back by its line alone."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator=terminator)
    for row in rows:
        writer.writerow([" ".join(str(cell).splitlines()) if isinstance(cell, str) else cell
                         for cell in row])
    return buffer.getvalue()


def read_head(path: str) -> bytes:
    """The first bytes of a file, enough to hold its header line."""
    with open(path, "rb") as stream:
        return stream.read(_HEAD_BYTES)


def header_problem(head: bytes, header: Sequence[str],
                   older: Sequence[Sequence[str]] = ()) -> str | None:
    """Why a CSV starting with ``head`` cannot take our rows, or None. A header that differs
    only in its line endings is ours; a first line cut short by a crash (no line end, a prefix
    of our header) is repaired by the next append. ``older``: headers this tool wrote before
    ``header`` gained columns, which take our rows in their own columns (:func:`header_of`)."""
    if header_of(head, header, older) is not None:
        return None
    return _header_problem(head, header)


def header_of(head: bytes, header: Sequence[str],
              older: Sequence[Sequence[str]] = ()) -> Sequence[str] | None:
    """Which of ``header`` and the ``older`` ones a CSV starting with ``head`` has (``header``
    for an empty file); None when it has none of them."""
    for candidate in (header, *older):
        if _header_problem(head, candidate) is None:
            return candidate
    return None


def _header_problem(head: bytes, header: Sequence[str]) -> str | None:
    if b"\0" in head:
        return "is not a text CSV (it holds NUL bytes)"
    first, newline, _ = head.partition(b"\n")
    try:
        text = first.decode("utf-8").rstrip("\r")
    except UnicodeDecodeError:
        return "is not a UTF-8 text CSV"
    ours = csv_lines([header], "")
    if not newline:
        return None if ours.startswith(text) else "has a different CSV header"
    return None if text == ours else "has a different CSV header"


def _line_end(fd: int, size: int) -> str:
    """The line end of an existing file's header ('\\r\\n' as the csv module writes, or '\\n' for
    a file that was converted); new files get '\\r\\n'."""
    first, newline, _ = os.pread(fd, min(size, _HEAD_BYTES), 0).partition(b"\n")
    return "\n" if newline and not first.endswith(b"\r") else "\r\n"


def _last_line_start(fd: int, size: int) -> int:
    """Where the last line of the file starts (0 when it has no line end at all)."""
    end = size
    while end > 0:
        start = max(0, end - _HEAD_BYTES)
        chunk = os.pread(fd, end - start, start)
        found = chunk.rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0


def _repair_tail(fd: int, size: int, columns: int, end: str) -> tuple[int, bytes, str]:
    """Deal with a last line without a line end, left by a crash in an older run (our own failed
    appends cut themselves back): a complete row is kept and ended; half a row or half a header
    is cut off. Returns where the new text goes, the bytes cut (put back if the append fails)
    and the text that must precede the new rows."""
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size, b"", ""
    start = _last_line_start(fd, size)
    fragment = os.pread(fd, size - start, start)
    row = fragment.rstrip(b"\r")
    text = row.decode("utf-8", errors="replace")
    if start > 0 and len(next(csv.reader([text]), [])) == columns:
        keep = start + len(row)                # a whole row that lost its line end: keep it
        os.ftruncate(fd, keep)
        return keep, fragment[len(row):], end
    os.ftruncate(fd, start)
    return start, fragment, ""


def append_csv_rows(path: str, header: Sequence[str], rows: Sequence[Sequence[object]],
                    older: Sequence[Sequence[str]] = ()) -> None:
    """Append ``rows`` (and ``header`` to a new or empty file) under an exclusive lock, as one
    write; any failure truncates the file back, so it is left exactly as it was. A file with
    one of the ``older`` headers (fewer columns, each of them in ``header``) takes the rows in
    its own columns, read under the lock."""
    ensure_directory(path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666)
    except OSError as error:
        raise _cannot_write(path, error) from None
    try:
        with signals_deferred():
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            _append_locked(fd, path, header, rows, older)
    finally:
        os.close(fd)                          # releases the lock


def _append_locked(fd: int, path: str, header: Sequence[str],
                   rows: Sequence[Sequence[object]], older: Sequence[Sequence[str]] = ()) -> None:
    size = os.fstat(fd).st_size
    head = os.pread(fd, min(size, _HEAD_BYTES), 0) if size else b""
    problem = header_problem(head, header, older) if size else None
    if problem:
        raise UsageError(f"--csv-file {path} {problem}: name another --csv-file or move that "
                         f"one away")
    theirs = header_of(head, header, older) if size else header
    if theirs is not None and list(theirs) != list(header):
        positions = [list(header).index(column) for column in theirs]
        header, rows = theirs, [[row[i] for i in positions] for row in rows]
    end = _line_end(fd, size)
    start, cut = size, b""
    try:
        start, cut, lead = _repair_tail(fd, size, len(header), end)
        text = lead + (csv_lines([header], end) if start == 0 else "") + csv_lines(rows, end)
        _write_all(fd, text.encode("utf-8"))
        os.fsync(fd)
    except BaseException as error:
        _restore(fd, start, cut)
        if isinstance(error, OSError):
            raise _cannot_write(path, error) from None
        raise


def _restore(fd: int, start: int, cut: bytes) -> None:
    """Put the file back as it was before the append: cut what was written, then put back the
    bytes a repair cut off."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, start)
        if cut:
            _write_all(fd, cut)
