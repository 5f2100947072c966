"""How a process of this tool starts and ends: :func:`entry` (which the commands of
:mod:`microbench.commands` call), SIGTERM, the rank prefix.

SIGTERM (what SLURM, Kubernetes and torchrun send to stop a job) is handled like Ctrl-C: it
raises :class:`~microbench.platform.errors.Terminated`, so ``finally`` blocks run and temporary files go,
and ``main`` prints ``error: terminated (SIGTERM)`` and exits 143 (Ctrl-C: ``error: interrupted``,
130). The entry points import the benchmark (seconds of torch imports) under the same handling,
so a signal that lands during the imports gives the same one line, not a traceback. This module
imports nothing heavy, so that it is in place before torch is.

Child processes (issue 38): :func:`check_can_start` refuses more workers than the process limits
allow (cgroup ``pids.max``, ``ulimit -u``) before anything is built; :func:`starting` turns a
refused start into one line after stopping the workers already started; an exit handler stops
every child still alive before multiprocessing's own (which waits forever for a DataLoader worker,
since those ignore SIGTERM); :func:`orphan_safe_worker` makes a spawned worker notice a dead
parent from its first line.
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import importlib
import importlib.metadata
import io
import multiprocessing
import multiprocessing.util           # registers its exit handler, which ours must precede
import os
import pickle
import resource
import select
import signal
import sys
import threading
import time
import traceback
from types import ModuleType
from multiprocessing.connection import Connection
from types import FrameType
from typing import Callable, Iterator, Mapping, MutableMapping, Sequence, TextIO

from microbench.platform import install_pair, safe_text
from microbench.platform.errors import (EXIT_HANGUP, EXIT_INTERRUPTED, EXIT_MISSING_ENVIRONMENT,
                                        EXIT_QUIT, EXIT_TERMINATED, BenchmarkError,
                                        MissingEnvironment, Terminated)

INTERRUPTED = "error: interrupted"
# Runtime dependencies (requirements.txt) that every command imports at start: a checkout
# updated without reinstalling may lack one added since (rich, for the console).
_IMPORTED_AT_START = frozenset({"rich", "torch", "torchvision", "jsonschema"})


# The signals that stop a run cleanly, like SIGTERM: temporaries removed, one line, the shell's
# exit code (128 + the signal). SIGHUP: the terminal or SSH session went away; SIGQUIT: Ctrl-\,
# handled cleanly too (no core dump, no thread dump: what was asked is to stop).
STOPPING: dict[int, tuple[str, int]] = {signal.SIGTERM: ("SIGTERM", EXIT_TERMINATED),
            **({signal.SIGHUP: ("SIGHUP", EXIT_HANGUP)} if hasattr(signal, "SIGHUP") else {}),
            **({signal.SIGQUIT: ("SIGQUIT", EXIT_QUIT)} if hasattr(signal, "SIGQUIT") else {})}


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    # A second signal must not cut the cleanup of the first short.
    for number in STOPPING:
        signal.signal(number, signal.SIG_IGN)
    raise Terminated(*STOPPING.get(signum, ("SIGTERM", EXIT_TERMINATED)))


def _install() -> dict:
    """Every stopping signal raises Terminated; the previous handlers."""
    return {number: signal.signal(number, _raise_terminated) for number in STOPPING}


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM, SIGHUP and SIGQUIT raise Terminated; the previous handlers
    come back after it (main() is also called in-process, by tests and by scripts)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = _install()
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def env_rank_prefix(environ: Mapping[str, str] | None = None) -> str:
    """'[rank N] ' when the launcher's variables say this process is one rank of several."""
    environ = os.environ if environ is None else environ
    for rank_name, size_name in (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        rank, size = environ.get(rank_name), environ.get(size_name, "1")
        if rank is not None and size.isdigit() and int(size) > 1:
            return f"[rank {rank}] "
    return ""


def error_line(line: str) -> None:
    """``line`` on standard error in one write: ranks share the launcher's stderr, and
    print()'s separate write of the newline let two ranks' lines run into one (unbuffered
    stderr, as under PYTHONUNBUFFERED). Escaped whole, whoever built it: a rank's prefix comes
    from the environment, a message may quote a value as typed."""
    sys.stderr.write(f"{safe_text.terminal(line)}\n")
    sys.stderr.flush()


def stopped(line: str, code: int, prefix: str = "") -> int:
    """Report a signal as one line; the exit code a shell gives for it."""
    error_line(f"{prefix}{line}")
    _reported_stop.set()
    return code


def terminated(error: Terminated, prefix: str = "") -> int:
    """Report the signal that raised ``error`` (SIGTERM, SIGHUP, SIGQUIT) as one line."""
    return stopped(f"error: terminated ({error.signal_name})", error.exit_code, prefix)


# What a shell reports for a process killed by SIGPIPE (128 + 13): the reader of our output
# (``| head``) went away, which is not an error of ours.
EXIT_READER_GONE = 141


def reader_gone() -> int:
    """Standard output's reader closed the pipe: say nothing (there is no one to tell), and
    point stdout at /dev/null so that the interpreter's last flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return EXIT_READER_GONE


def command(body: Callable[[], int], prefix: Callable[[], str] = lambda: "") -> int:
    """A console command (the model benchmark, the op bench, the report): its body's exit code,
    with the expected failures as one line on stderr (after ``prefix()``, a rank's, asked when
    the line is printed) and their documented exit code, standard output guarded and the
    stopping signals raising Terminated while it runs."""
    with sigterm_raises(), guarded_stdout() as output:
        try:
            try:
                code = body()
            except (OSError, RuntimeError) as error:   # a limit reached is no bug of ours
                limit = limit_reached(error)
                if limit is None:
                    raise
                raise limit from None
        except BenchmarkError as error:
            # One line, whatever the message holds (a torch error quoted in it may not), and
            # nothing a terminal would act on (a name from a result file may hold ESC ]52;).
            message = safe_text.terminal(" ".join(str(error).splitlines()))
            error_line(f"{prefix()}error: {message}")
            code = error.exit_code
        except KeyboardInterrupt:
            code = stopped(INTERRUPTED, EXIT_INTERRUPTED, prefix())
            stop_descendants()
        except Terminated as error:
            code = terminated(error, prefix())
            stop_descendants()
        except BrokenPipeError:                          # | head: the reader left
            code = reader_gone()
        return ended(code, output, prefix())


# ---------------------------------------------------------------- a stop that ends the process

# Set by entry(): this process is a command of its own (not main() called by a test or a
# script), so a stop may end every process below it, and the process itself.
_OWNS_PROCESS = False
# After a stopping signal: how long the run's own handling may take before every descendant
# is killed, and before the process ends itself with the signal's code (the main thread stuck
# in native code, or an exit handler waiting without end: inductor's compile-worker pool
# waits up to 300 s for a sidecar busy compiling a kernel, issue 46).
STOP_GRACE_S = 3.0
STOP_DEADLINE_S = 8.0
_reported_stop = threading.Event()


def _descendants(root: int, proc: str = "/proc") -> list[int]:
    """Every process below ``root`` (children, their children...), from /proc; [] where there
    is no /proc (then multiprocessing's own children are stopped by _no_child_left)."""
    parents: dict[int, list[int]] = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, "stat"), encoding="ascii",
                      errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and fields[1].isdigit():
            parents.setdefault(int(fields[1]), []).append(int(name))
    found, stack = [], [root]
    while stack:
        for child in parents.get(stack.pop(), ()):
            if child not in found:
                found.append(child)
                stack.append(child)
    return found


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stop_descendants(grace_s: float = 1.0) -> None:
    """In a process of its own (entry()): SIGTERM to every process below this one (trial and
    loader workers, ranks, inductor's compile-worker sidecar and its pool, which are
    subprocesses that multiprocessing does not know), up to ``grace_s`` for them to end,
    SIGKILL to the rest. Called when a stopping signal or Ctrl-C ends the run: nothing below
    may keep the process (an exit handler waiting for them) or outlive it."""
    if not _OWNS_PROCESS:
        return
    with contextlib.suppress(Exception), _child_deaths_expected():
        pids = _descendants(os.getpid())
        for number in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, number)
            deadline = time.monotonic() + (grace_s if number == signal.SIGTERM else 2.0)
            while time.monotonic() < deadline:
                pids = [pid for pid in pids if _running(pid)]
                if not pids:
                    return
                time.sleep(0.05)


PR_SET_CHILD_SUBREAPER = 36             # linux/prctl.h


def _adopt_orphans() -> None:
    """Linux: a process below this one whose parent dies comes to this process, not to init,
    so that a stop still finds it below. A SIGTERM that lands while inductor waits for ``g++``
    kills the driver (subprocess.run's cleanup) but not its ``cc1plus``, which would compile on
    after the run ended, out of :func:`stop_descendants`' sight."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)


def _watch_stopping_signals() -> None:
    """A thread that hears every stopping signal and Ctrl-C the moment it arrives
    (``signal.set_wakeup_fd``: written by the C-level handler, even while the main thread is in
    native code and cannot run Python's handler), and makes sure the process ends: after
    STOP_GRACE_S every descendant is killed; after STOP_DEADLINE_S the process ends with the
    signal's code, with its one line if the main thread could not print it."""
    if (not hasattr(signal, "set_wakeup_fd")
            or threading.current_thread() is not threading.main_thread()):
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except (ValueError, OSError):
        os.close(read_fd)
        os.close(write_fd)
        return
    threading.Thread(target=_stop_watch, args=(read_fd,), name="microbench-stop-watch",
                     daemon=True).start()


def _stop_watch(read_fd: int) -> None:
    heard_of = {signal.SIGINT, *STOPPING}
    while True:
        try:
            data = os.read(read_fd, 64)
        except OSError:
            return
        if not data:
            return
        heard = [number for number in data if number in heard_of]
        if heard:
            break
    number = heard[0]
    time.sleep(STOP_GRACE_S)
    stop_descendants(grace_s=0.5)
    time.sleep(STOP_DEADLINE_S - STOP_GRACE_S)
    _end_now(number, say=not _reported_stop.is_set())


def _end_now(number: int, say: bool) -> None:
    """End this process with the code of the stop ``number`` (a stopping signal or SIGINT),
    after its one line where ``say``; in one write, from a thread or a signal handler."""
    if number == signal.SIGINT:
        line, code = INTERRUPTED, EXIT_INTERRUPTED
    else:
        name, code = STOPPING[number]
        line = f"error: terminated ({name})"
    if say:
        with contextlib.suppress(Exception):
            os.write(2, f"{env_rank_prefix()}{line}\n".encode())
    os._exit(code)


# ---------------------------------------------------------------- a terminal that takes no writes

def _fill_closed_descriptors() -> None:
    """Open /dev/null on standard input, output or error where the shell closed one (``>&-``):
    otherwise the next file this process opens (a result's temporary file) would get that
    number, and anything writing to "standard output", C++ included, would write into it.
    Inheritable (os.open's descriptors are not, PEP 446): a spawned worker starts with the
    same /dev/null, not with the stream closed again."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)
            if opened != fd:                   # a lower one was free after all: leave it be
                os.close(opened)
            else:
                os.set_inheritable(fd, True)


class GuardedOutput(io.TextIOBase):
    """Standard output that never stops the run: the first write or flush that fails (a closed
    stdout, ``>/dev/full``, an I/O error) is remembered, the descriptor pointed at /dev/null so
    that no later flush (the interpreter's last one included) fails again, and every later
    write is dropped. The run goes on and writes its result files; :func:`ended` says, as the
    process's one line, that the console output was lost. A reader that went away
    (``BrokenPipeError``, ``| head``) is not this: it propagates, as before."""

    def __init__(self, stream: TextIO):             # sys.stdout: None where it is closed
        super().__init__()
        self.stream = stream
        self.lost: str | None = None if stream is not None else "it is closed"

    def _attempt(self, operation: Callable[[], object]) -> None:
        """``operation()`` on the stream, until the first failure; none after it (a lambda,
        since the stream may be None)."""
        if self.lost is not None:
            return
        try:
            operation()
        except BrokenPipeError:
            raise
        except (OSError, ValueError) as error:         # ValueError: a closed file object
            self._failed(error if isinstance(error, OSError)
                         else OSError(errno.EBADF, "it is closed"))

    def _failed(self, error: OSError) -> None:
        self.lost = error.strerror or str(error)
        with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
            fd = self.stream.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)

    def write(self, text: str) -> int:
        self._attempt(lambda: self._write(text))
        return len(text)

    def _write(self, text: str) -> None:
        """``text`` written whole. A character the stream's encoding lacks (``LC_ALL=C``:
        ASCII) is written as an escape (``\\u00b1``): UnicodeEncodeError is a ValueError, and
        was taken for a closed stream. Unbuffered (``PYTHONUNBUFFERED``), the bytes go to the
        raw stream here, in a loop: TextIOWrapper ignores a raw write that took only part of
        them (a pipe whose reader left mid-write), and the rest was dropped without an error."""
        raw = _raw_buffer(self.stream)
        if raw is None:
            try:
                self.stream.write(text)
            except UnicodeEncodeError:                  # nothing of it was written
                self.stream.write(text.encode(self.encoding, "backslashreplace")
                                  .decode(self.encoding))
            return
        self.stream.flush()                             # what went before goes first
        _write_all(raw, self._encoded(text))

    def _encoded(self, text: str) -> bytes:
        try:
            return text.encode(self.encoding, getattr(self.stream, "errors", None) or "strict")
        except UnicodeEncodeError:
            return text.encode(self.encoding, "backslashreplace")

    def flush(self) -> None:
        self._attempt(lambda: self.stream.flush())

    def isatty(self) -> bool:
        return self.lost is None and self.stream.isatty()

    def fileno(self) -> int:
        if self.lost is not None and self.stream is None:
            raise io.UnsupportedOperation("standard output is closed")
        return self.stream.fileno()

    def writable(self) -> bool:
        return True

    # typeshed declares TextIOBase.encoding a plain attribute; here it is the stream's, read-only
    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", None) or "utf-8"


def _raw_buffer(stream: object) -> io.RawIOBase | None:
    """The raw binary stream under text ``stream`` when nothing buffers between them
    (``python -u``, ``PYTHONUNBUFFERED``), else None."""
    buffer = getattr(stream, "buffer", None)
    return buffer if isinstance(buffer, io.RawIOBase) else None


def _write_all(raw: io.RawIOBase, data: bytes) -> None:
    """Every byte of ``data``: a raw write may take part of them; it is repeated with the rest
    until all are written or it raises (BrokenPipeError when the reader left: exit 141)."""
    view = memoryview(data)
    while view:
        written = raw.write(view)
        if written is None:                     # a non-blocking descriptor is full: wait
            select.select([], [raw.fileno()], [])
            continue
        view = view[written:]


@contextlib.contextmanager
def guarded_stdout() -> Iterator[GuardedOutput]:
    """``sys.stdout`` as a :class:`GuardedOutput` within the block (the previous one after it,
    for callers of main() in-process)."""
    _fill_closed_descriptors()
    previous = sys.stdout
    guard = GuardedOutput(previous)
    sys.stdout = guard
    try:
        yield guard
    finally:
        sys.stdout = previous


def ended(code: int, output: GuardedOutput, prefix: str = "") -> int:
    """The exit code of a command whose standard output may have been lost. A run that
    otherwise succeeded says so in one line and exits 4 (EXIT_MISSING_ENVIRONMENT: an output
    the run needs could not be written; its result files were); a run that failed keeps its own
    code and line (a regression found by --compare must still fail the gate as 5)."""
    if output.lost is None or code != 0:
        return code
    error_line(f"{prefix}error: standard output could not be written ({output.lost}); the run "
               f"finished and its result files, if any, were written")
    return EXIT_MISSING_ENVIRONMENT


def entry(module: str) -> int:
    """Import ``module`` and run its ``main()``; Ctrl-C or SIGTERM during the imports prints
    the same one line as later, instead of a traceback."""
    global _OWNS_PROCESS
    _OWNS_PROCESS = True
    _install()                                          # for the whole life of this process
    _adopt_orphans()
    _watch_stopping_signals()
    _fill_closed_descriptors()                          # before any file is opened
    quiet_native_logs()                                 # before torch loads c10
    try:
        with imports_checked():
            main = importlib.import_module(module).main
    except KeyboardInterrupt:
        return stopped(INTERRUPTED, EXIT_INTERRUPTED, env_rank_prefix())
    except Terminated as error:
        return terminated(error, env_rank_prefix())
    except MissingEnvironment as error:
        return stopped(safe_text.terminal(f"error: {error}"), error.exit_code, env_rank_prefix())
    code = main()
    # Flushed first: _stop_after_body ends with os._exit, which would drop what the summary
    # left in a pipe's or a file's buffer.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    for number in (signal.SIGINT, *STOPPING):
        signal.signal(number, _stop_after_body)
    return code


# c10's own log (the glog-style ``[E... socket.cpp] [c10d] ...`` lines C++ writes to file
# descriptor 2), read from the environment once, when torch loads it. At its default level a
# rank whose rendezvous never forms printed 41 lines (c10d's socket retries, each with ~20 C++
# frames) before the tool's one line (issue 65); at ERROR, 22. FATAL leaves the one line: the
# reason is in the error the tool reports, and a process ended by NCCL's watchdog still says
# why (its exception reaches std::terminate, which prints it without c10's log).
NATIVE_LOG_VARIABLE, NATIVE_LOG_LEVEL = "TORCH_CPP_LOG_LEVEL", "FATAL"


def quiet_native_logs(environ: MutableMapping[str, str] | None = None) -> None:
    """c10's native log at FATAL in this process and the ones it starts (which inherit the
    environment: spawned workers, a rank's trial workers), unless the user set a level (their
    ``TORCH_CPP_LOG_LEVEL=INFO`` shows every line again). Before torch is imported: c10 reads
    it once, when it loads."""
    environ = os.environ if environ is None else environ
    if not environ.get(NATIVE_LOG_VARIABLE):
        environ[NATIVE_LOG_VARIABLE] = NATIVE_LOG_LEVEL


def _stop_after_body(number: int, _frame: FrameType | None) -> None:
    """A stop after the command's body returned (its results written and shown, the
    interpreter ending): its one line and its code at once. Python's own Ctrl-C there ends
    with no line (or a traceback from an exit handler); a claim this skips is taken over as
    a gone process's (platform/writing.py)."""
    _end_now(number, say=True)


@contextlib.contextmanager
def imports_checked() -> Iterator[None]:
    """The imports of a bad install as one line (MissingEnvironment, exit 4): a runtime
    dependency missing, or a torchvision that fails inside its own import beside this torch.
    Around an entry point's imports, and around the imports a command makes once it knows it
    will run (the model benchmark imports torch only then: issue 45)."""
    try:
        yield
    except ModuleNotFoundError as error:
        missing = (error.name or "").partition(".")[0]
        if missing not in _IMPORTED_AT_START:
            raise
        raise MissingEnvironment(f"{missing} is not installed: pip install -r requirements.txt "
                                 f"(or pip install . from the checkout)") from None
    except BenchmarkError:
        raise
    except Exception as error:                          # noqa: BLE001 - re-raised unless ours
        line = short_of_memory(error) or broken_pair(error) or torch_refused(error)
        if line is None:
            raise
        raise MissingEnvironment(line.removeprefix("error: ")) from None


def _raised_inside(error: BaseException, package: str) -> bool:
    marker = f"{os.sep}{package}{os.sep}"
    return any(marker in frame.filename for frame in traceback.extract_tb(error.__traceback__))


# How a shared library that could not be mapped reads (glibc's dlopen: "failed to map segment
# from shared object", "cannot allocate memory"; ENOMEM's strerror) or a MemoryError.
_UNMAPPED = ("failed to map segment", "cannot allocate memory", "cannot map zero-fill pages")


def _memory_refused(error: BaseException, text: str) -> bool:
    if "static tls" in text:            # glibc's TLS block is full: LD_PRELOAD, not memory
        return False
    return (isinstance(error, MemoryError) or getattr(error, "errno", None) == errno.ENOMEM
            or any(words in text for words in _UNMAPPED))


# The packages whose libraries a command loads, innermost first (torchvision imports torch;
# ruptures, scipy; scipy and matplotlib, numpy): the first a failing frame lies in is named.
_LOADING_LIBRARIES = ("torchvision", "torch", "ruptures", "scipy", "matplotlib", "numpy")


def blas_within_address_limit() -> None:
    """Under an address-space limit (``ulimit -v``) one OpenBLAS thread, set before a library
    that bundles OpenBLAS loads it (scipy, through ruptures): the buffers of its other threads
    do not fit, and at 300 MB scipy's OpenBLAS span at 100% CPU in its load for minutes,
    deaf to SIGTERM, where one thread loads or fails at once (issue 65). A limit the user set
    on OPENBLAS_NUM_THREADS is kept."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def short_of_memory(error: BaseException) -> str | None:
    """The one line for torch or torchvision that could not load its libraries for want of
    memory, or None. Reinstalling is not the cure: under ``ulimit -v`` (an address-space
    limit, which torch's CUDA or ROCm libraries exceed at once) the limit is named."""
    text = " ".join(str(error).split())
    if not _memory_refused(error, text.lower()):
        return None
    package = next((name for name in _LOADING_LIBRARIES if _raised_inside(error, name)), None)
    if package is None:
        return None
    cause = text[:200] or type(error).__name__
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return (f"error: {package} could not load its libraries: no memory ({cause}); free "
                f"memory or raise the container's memory limit")
    return (f"error: {package} could not load its libraries within the address-space limit "
            f"(ulimit -v is {soft // 1024} KiB) ({cause}): raise it (ulimit -v unlimited); "
            f"reinstalling does not help")


def torch_refused(error: BaseException) -> str | None:
    """The one line for torch failing inside its own import, or None when ``error`` was not
    raised there. What torch refuses at import is its environment: a TORCH_* variable it
    parses then (``TORCH_LOGS=nonsense``: "Invalid log settings"), or a broken install; the
    line names the variables set, which are the usual cause."""
    if not _raised_inside(error, "torch"):
        return None
    cause = " ".join(str(error).split())[:240] or type(error).__name__
    settings = sorted(f"{name}={value}" for name, value in os.environ.items()
                      if name.startswith(("TORCH_", "PYTORCH_")))
    where = (f"; set: {', '.join(settings)[:200]} (unset or correct them: TORCH_LOGS=help lists "
             f"its names)" if settings else "; reinstall torch")
    return f"error: torch refuses this environment at import ({type(error).__name__}: {cause}){where}"


def _installed_version(name: str) -> str:
    module = sys.modules.get(name)
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    with contextlib.suppress(Exception):
        return importlib.metadata.version(name)
    return "(version unknown)"


def broken_pair(error: BaseException) -> str | None:
    """The one line for a torchvision that fails to import beside this torch (what pip leaves
    when the two come from different builds or indexes: ``operator torchvision::nms does not
    exist``), or None when ``error`` was not raised inside torchvision; what to install is
    :mod:`~microbench.platform.install_pair`'s."""
    if not _raised_inside(error, "torchvision"):
        return None
    cause = " ".join(str(error).splitlines()) or type(error).__name__
    return "error: " + install_pair.advice(_installed_version("torch"),
                                           _installed_version("torchvision"), cause)


def import_optional(name: str, needed_for: str, install: str) -> ModuleType:
    """The optional module ``name`` (torchao, matplotlib, transformers, a telemetry library),
    imported when a flag needs it; otherwise one line, exit 4 (MissingEnvironment), whatever
    the import raised: not installed (ImportError), or installed and failing inside its own
    import (an OSError loading its shared library, a RuntimeError or AttributeError against
    this torch): the user fixes that environment, not us, and a traceback helps no one."""
    top = name.partition(".")[0]
    try:
        return importlib.import_module(name)
    except Exception as error:          # noqa: BLE001 (a broken install is not our bug)
        if (isinstance(error, ModuleNotFoundError)
                and (error.name or "").partition(".")[0] == top):
            raise MissingEnvironment(f"{needed_for} needs {top}, which is not installed: "
                                     f"{install}") from None
        text = " ".join(str(error).split())[:300] or type(error).__name__
        raise MissingEnvironment(f"{needed_for}: {top} is installed but fails to import "
                                 f"({type(error).__name__}: {text}); fix or reinstall it "
                                 f"({install})") from None


# ---------------------------------------------------------------- child processes

# A start refused for lack of processes or memory: fork's EAGAIN (RLIMIT_NPROC, a cgroup's
# pids.max) or ENOMEM, and the thread a DataLoader or a pipe needs that the same limit refuses.
_CANNOT_START = (errno.EAGAIN, errno.ENOMEM)
# Too many open files: this process's descriptor limit (EMFILE, ulimit -n) or the system's
# table (ENFILE, fs.file-max). Neither errno means anything else, wherever it is raised (a
# start's pipes, a loader worker's shared memory, a result file): a limit, never a bug.
_NO_DESCRIPTOR = (errno.EMFILE, errno.ENFILE)
# A loader worker's OSError comes back as text (DataLoader re-raises it from its traceback),
# and torch's descriptor sharing fails as "received 0 items of ancdata" when out of them.
_NO_DESCRIPTOR_TEXT = ("[Errno 24]", "[Errno 23]", "received 0 items of ancdata")
CGROUP_ROOT = "/sys/fs/cgroup"


def _cgroup_pids(proc_cgroup: str = "/proc/self/cgroup", root: str = CGROUP_ROOT
                 ) -> tuple[int, int] | None:
    """(pids.max, pids.current) of this process's cgroup (v2, or v1's pids controller), or
    None where there is no limit or it cannot be read."""
    try:
        with open(proc_cgroup) as stream:
            lines = stream.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        folder = (os.path.join(root, path.lstrip("/")) if controllers == "" else
                  os.path.join(root, "pids", path.lstrip("/")) if "pids" in controllers.split(",")
                  else None)
        if folder is None:
            continue
        try:
            with open(os.path.join(folder, "pids.max")) as limit, \
                    open(os.path.join(folder, "pids.current")) as current:
                maximum, used = limit.read().strip(), current.read().strip()
        except OSError:
            continue
        if maximum.isdigit() and used.isdigit():
            return int(maximum), int(used)
    return None


def _tasks_of_user(uid: int, proc: str = "/proc") -> int | None:
    """Threads of every process of ``uid`` (what RLIMIT_NPROC counts), or None."""
    try:
        pids = [name for name in os.listdir(proc) if name.isdigit()]
    except OSError:
        return None
    count = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            if os.stat(os.path.join(proc, pid)).st_uid == uid:
                count += len(os.listdir(os.path.join(proc, pid, "task")))
    return count


def process_headroom(proc_cgroup: str = "/proc/self/cgroup", root: str = CGROUP_ROOT
                     ) -> tuple[int, str] | None:
    """How many more processes (threads count too) this process may start, and which limit
    says so; None where no limit is known. root ignores RLIMIT_NPROC (CAP_SYS_RESOURCE)."""
    found = []
    pids = _cgroup_pids(proc_cgroup, root)
    if pids is not None:
        found.append((pids[0] - pids[1], f"the cgroup's pids.max is {pids[0]}, {pids[1]} in use"))
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY and os.geteuid() != 0:
        used = _tasks_of_user(os.getuid())
        if used is not None:
            found.append((soft - used, f"ulimit -u is {soft}, {used} in use by this user"))
    return min(found) if found else None


def check_can_start(count: int, what: str, flag: str, headroom: tuple[int, str] | None = None
                   ) -> None:
    """Refuse, before anything is built, ``count`` processes that the process limits cannot
    give: the start would fail part way, with workers already running."""
    found = process_headroom() if headroom is None else headroom
    if found is None or count < found[0]:
        return
    room, why = found
    raise MissingEnvironment(f"{count} {what} cannot start: this process may start "
                             f"{max(room, 0)} more ({why}); use a smaller {flag} or raise the "
                             f"limit (docker run --pids-limit, ulimit -u)")


def out_of_descriptors(error: BaseException) -> bool:
    """Whether ``error`` is a file descriptor refused: too many open files."""
    if isinstance(error, OSError) and error.errno is not None:
        return error.errno in _NO_DESCRIPTOR
    return (isinstance(error, (OSError, RuntimeError))
            and any(text in str(error) for text in _NO_DESCRIPTOR_TEXT))


def _too_many_files(error: BaseException, what: str) -> MissingEnvironment:
    """The one line (exit 4) for a descriptor refused, naming the limit that refused it."""
    if getattr(error, "errno", None) == errno.ENFILE or "[Errno 23]" in str(error):
        limit = "the system's table of open files is full (fs.file-max)"
    else:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        room = f", up to {hard} allowed" if soft != hard != resource.RLIM_INFINITY else ""
        limit = f"ulimit -n is {soft}{room}"
    return MissingEnvironment(f"{what}: too many open files ({limit}); raise the limit "
                              f"(ulimit -n), or use fewer --workers or --trials in-process")


def cannot_start(error: BaseException) -> bool:
    """Whether ``error`` is a start refused for lack of processes, threads or memory."""
    if isinstance(error, OSError):
        return error.errno in _CANNOT_START
    return isinstance(error, RuntimeError) and "can't start new thread" in str(error)


# Where a start is made: an EAGAIN or ENOMEM raised in one of these is a start refused (the
# same errno from a read of a non-blocking pipe is not, and stays a bug with its traceback).
_STARTERS = tuple(os.sep + name for name in (
    os.path.join("multiprocessing", "popen_fork.py"),
    os.path.join("multiprocessing", "popen_spawn_posix.py"),
    os.path.join("multiprocessing", "popen_forkserver.py"), "subprocess.py", "threading.py"))


def _raised_starting(error: BaseException) -> bool:
    return any(frame.filename.endswith(_STARTERS)
               for frame in traceback.extract_tb(error.__traceback__))


def limit_reached(error: BaseException) -> MissingEnvironment | None:
    """The one line (exit 4) for ``error`` when it, or an error it was raised from, is a start
    the system refused (a thread or process limit: a cgroup's ``pids.max``, ``ulimit -u``; no
    memory), or a file descriptor it refused (too many open files: ``ulimit -n``), wherever it
    happened: a DataLoader's pin-memory thread, a loader worker (whose
    error the loader raises again with the worker's traceback as text), the progress line's
    thread, a trial worker. None for any other error (a bug keeps its traceback)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if out_of_descriptors(current):
            return _too_many_files(current, "a file or pipe could not be opened")
        if cannot_start(current) and (not isinstance(current, OSError)
                                      or _raised_starting(current)):
            reason = (current.strerror if isinstance(current, OSError) and current.strerror
                      else "can't start new thread")
            return MissingEnvironment(f"a thread or process could not start: {reason} (a "
                                      f"process limit: ulimit -u, a container's pids limit; "
                                      f"or no memory); raise the limit, or use fewer --workers "
                                      f"or --trials in-process")
        current = current.__cause__ or current.__context__
    return None


@contextlib.contextmanager
def _child_deaths_expected() -> Iterator[None]:
    """Within the block, a child's death raises nothing: DataLoader's SIGCHLD handler raises
    RuntimeError in the main thread for a worker killed by a signal, which would cut the
    stopping of the others short."""
    if (not hasattr(signal, "SIGCHLD")
            or threading.current_thread() is not threading.main_thread()):
        yield
        return
    previous = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGCHLD, previous)


def stop_children(children: Sequence[multiprocessing.process.BaseProcess], grace_s: float) -> None:
    """SIGTERM, up to ``grace_s`` for all to end, then SIGKILL to those that ignore it (a
    DataLoader worker ignores it: its parent owns its lifetime); each waited for. ``grace_s``
    0: SIGKILL at once."""
    with _child_deaths_expected():
        _terminate_then_kill(children, grace_s)


def _terminate_then_kill(children: Sequence[multiprocessing.process.BaseProcess],
                         grace_s: float) -> None:
    children = [child for child in children if child.is_alive()]
    for child in children if grace_s > 0 else ():
        with contextlib.suppress(OSError, AttributeError, ValueError):
            child.terminate()
            # A stopped child (SIGSTOP, Ctrl-Z, a debugger) would hold its SIGTERM, and the
            # run, for the whole grace: continued, it handles the SIGTERM at once.
            if child.pid is not None:               # alive: started, so it has one
                os.kill(child.pid, signal.SIGCONT)
    deadline = time.monotonic() + grace_s
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
    for child in children:
        if child.is_alive():
            with contextlib.suppress(OSError, AttributeError, ValueError):
                child.kill()
            child.join(5)


@contextlib.contextmanager
def starting(what: str, advice: str) -> Iterator[None]:
    """Processes started within the block (DataLoader workers, ranks): if a start is refused
    (a process limit, no memory), the ones already started are stopped and waited for, and the
    refusal is one line, exit 4, instead of a traceback and workers left behind."""
    before = {child.pid for child in multiprocessing.active_children()}
    try:
        yield
    except (OSError, RuntimeError) as error:
        files = out_of_descriptors(error)
        if not (files or cannot_start(error)):
            raise
        started = [child for child in multiprocessing.active_children()
                   if child.pid not in before]
        # Half-started: nothing of theirs to clean up, and a SIGTERM could land before a
        # worker set its own handlers (it would print the inherited handler's traceback).
        stop_children(started, grace_s=0)
        if files:
            raise _too_many_files(error, f"cannot start {what}") from None
        reason = error.strerror if isinstance(error, OSError) else str(error)
        raise MissingEnvironment(f"cannot start {what}: {reason} (a process limit: ulimit -u, "
                                 f"a container's pids limit; or no memory); {advice}") from None


def _no_child_left() -> None:
    """At exit, before multiprocessing's own handler (which sends daemonic children SIGTERM,
    then waits for each without end: a DataLoader worker ignores SIGTERM, so a run that failed
    with its loader open would hang there), stop every child still alive, SIGKILL after a grace
    period."""
    with contextlib.suppress(Exception):
        stop_children(multiprocessing.active_children(), grace_s=2.0)


atexit.register(_no_child_left)


# ---------------------------------------------------------------- a worker and its parent

PR_SET_PDEATHSIG = 1                    # linux/prctl.h
PARENT_POLL_S = 0.5


def _parent_death_signal(number: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, number)


def killed_with_parent() -> None:
    """In a forked worker that ignores the stopping signals (a DataLoader worker): SIGKILL from
    the kernel when its parent dies (Linux), so that it never outlives the run."""
    _parent_death_signal(signal.SIGKILL)


def die_with_parent(parent_pid: int) -> None:
    """In a worker: end quietly when the parent that started it (``parent_pid``) dies, even if
    it already has (the worker was reparented while it started) -- SIGTERM from the kernel on
    Linux (PR_SET_PDEATHSIG), and a thread that watches the parent's id elsewhere or in case
    the signal is not delivered."""
    _parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent_pid:
        os._exit(0)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)                   # cleanup after SIGTERM; then without it
        os._exit(0)
    try:
        threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    except RuntimeError as error:       # a thread limit (pids.max): PR_SET_PDEATHSIG still holds,
        if not cannot_start(error):     # and the trial meets the limit itself, as one line
            raise


def orphan_safe_worker(parent_pid: int, target: str, arguments: bytes, *channels: Connection
                      ) -> None:
    """A spawned worker's first code: it watches its parent before the heavy imports that
    unpickling its ``arguments`` (a pickled tuple) and importing ``target`` ("module:function")
    bring, so that a parent killed meanwhile does not leave it running its whole trial; then
    ``target(*arguments, *channels)``. Plain channels (a Pipe's end) travel as arguments.
    Its standard streams are kept as the parent keeps its own: a closed one filled with
    /dev/null, and output that cannot be written dropped, never a traceback (the parent, whose
    stdout it shares, reports the loss in its one line)."""
    _fill_closed_descriptors()
    sys.stdout = GuardedOutput(sys.stdout)
    die_with_parent(parent_pid)
    module, _, function = target.partition(":")
    getattr(importlib.import_module(module), function)(*pickle.loads(arguments), *channels)
