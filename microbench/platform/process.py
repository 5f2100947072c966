"""How a process of this tool starts and ends: the entry points, SIGTERM, the rank prefix.

SIGTERM (what SLURM, Kubernetes and torchrun send to stop a job) is handled like Ctrl-C: it
raises :class:`~microbench.platform.errors.Terminated`, so ``finally`` blocks run and temporary files go,
and ``main`` prints ``error: terminated (SIGTERM)`` and exits 143 (Ctrl-C: ``error: interrupted``,
130). The entry points import the benchmark (seconds of torch imports) under the same handling,
so a signal that lands during the imports gives the same one line, not a traceback. This module
imports nothing heavy, so that it is in place before torch is.
"""
from __future__ import annotations

import contextlib
import errno
import importlib
import io
import os
import signal
import sys
import threading
from typing import Callable, Iterator, Mapping

from microbench.platform.errors import (EXIT_HANGUP, EXIT_INTERRUPTED, EXIT_MISSING_ENVIRONMENT,
                                        EXIT_QUIT, EXIT_TERMINATED, BenchmarkError, Terminated)

INTERRUPTED = "error: interrupted"
# Runtime dependencies (requirements.txt) that every command imports at start: a checkout
# updated without reinstalling may lack one added since (rich, for the console).
_IMPORTED_AT_START = frozenset({"rich", "torch", "torchvision", "jsonschema"})


# The signals that stop a run cleanly, like SIGTERM: temporaries removed, one line, the shell's
# exit code (128 + the signal). SIGHUP: the terminal or SSH session went away; SIGQUIT: Ctrl-\,
# handled cleanly too (no core dump, no thread dump: what was asked is to stop).
STOPPING = {signal.SIGTERM: ("SIGTERM", EXIT_TERMINATED),
            **({signal.SIGHUP: ("SIGHUP", EXIT_HANGUP)} if hasattr(signal, "SIGHUP") else {}),
            **({signal.SIGQUIT: ("SIGQUIT", EXIT_QUIT)} if hasattr(signal, "SIGQUIT") else {})}


def _raise_terminated(signum, frame) -> None:
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


def stopped(line: str, code: int, prefix: str = "") -> int:
    """Report a signal as one line; the exit code a shell gives for it."""
    print(f"{prefix}{line}", file=sys.stderr, flush=True)
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
            code = body()
        except BenchmarkError as error:
            # One line, whatever the message holds (a torch error quoted in it may not).
            message = " ".join(str(error).splitlines())
            print(f"{prefix()}error: {message}", file=sys.stderr, flush=True)
            code = error.exit_code
        except KeyboardInterrupt:
            code = stopped(INTERRUPTED, EXIT_INTERRUPTED, prefix())
        except Terminated as error:
            code = terminated(error, prefix())
        except BrokenPipeError:                          # | head: the reader left
            code = reader_gone()
        return ended(code, output, prefix())


# ---------------------------------------------------------------- a terminal that takes no writes

def _fill_closed_descriptors() -> None:
    """Open /dev/null on standard input, output or error where the shell closed one (``>&-``):
    otherwise the next file this process opens (a result's temporary file) would get that
    number, and anything writing to "standard output", C++ included, would write into it."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)
            if opened != fd:                   # a lower one was free after all: leave it be
                os.close(opened)


class GuardedOutput(io.TextIOBase):
    """Standard output that never stops the run: the first write or flush that fails (a closed
    stdout, ``>/dev/full``, an I/O error) is remembered, the descriptor pointed at /dev/null so
    that no later flush (the interpreter's last one included) fails again, and every later
    write is dropped. The run goes on and writes its result files; :func:`ended` says, as the
    process's one line, that the console output was lost. A reader that went away
    (``BrokenPipeError``, ``| head``) is not this: it propagates, as before."""

    def __init__(self, stream):
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
        self._attempt(lambda: self.stream.write(text))
        return len(text)

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

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"


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
    print(f"{prefix}error: standard output could not be written ({output.lost}); the run "
          f"finished and its result files, if any, were written", file=sys.stderr, flush=True)
    return EXIT_MISSING_ENVIRONMENT


def entry(module: str) -> int:
    """Import ``module`` and run its ``main()``; Ctrl-C or SIGTERM during the imports prints
    the same one line as later, instead of a traceback."""
    _install()                                          # for the whole life of this process
    _fill_closed_descriptors()                          # before any file is opened
    try:
        main = importlib.import_module(module).main
    except KeyboardInterrupt:
        return stopped(INTERRUPTED, EXIT_INTERRUPTED, env_rank_prefix())
    except Terminated as error:
        return terminated(error, env_rank_prefix())
    except ModuleNotFoundError as error:
        missing = (error.name or "").partition(".")[0]
        if missing not in _IMPORTED_AT_START:
            raise
        return stopped(f"error: {missing} is not installed: pip install -r requirements.txt "
                       f"(or pip install . from the checkout)", EXIT_MISSING_ENVIRONMENT,
                       env_rank_prefix())
    return main()


def microbench() -> int:
    """The ``microbench`` command."""
    return entry("microbench.main")


def microbench_ops() -> int:
    """The ``microbench-ops`` command."""
    return entry("microbench.ops.cli")


def microbench_report() -> int:
    """The ``microbench-report`` command."""
    return entry("microbench.report.command")
