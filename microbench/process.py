"""How a process of this tool starts and ends: the entry points, SIGTERM, the rank prefix.

SIGTERM (what SLURM, Kubernetes and torchrun send to stop a job) is handled like Ctrl-C: it
raises :class:`~microbench.errors.Terminated`, so ``finally`` blocks run and temporary files go,
and ``main`` prints ``error: terminated (SIGTERM)`` and exits 143 (Ctrl-C: ``error: interrupted``,
130). The entry points import the benchmark (seconds of torch imports) under the same handling,
so a signal that lands during the imports gives the same one line, not a traceback. This module
imports nothing heavy, so that it is in place before torch is.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import threading
from typing import Iterator, Mapping

from .errors import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated

INTERRUPTED = "error: interrupted"
TERMINATED = "error: terminated (SIGTERM)"


def _raise_terminated(signum, frame) -> None:
    # A second SIGTERM must not cut the cleanup of the first short.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated()


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises Terminated; the previous handler comes back after it
    (main() is also called in-process, by tests and by scripts)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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


def entry(module: str) -> int:
    """Import ``module`` and run its ``main()``; Ctrl-C or SIGTERM during the imports prints
    the same one line as later, instead of a traceback."""
    signal.signal(signal.SIGTERM, _raise_terminated)   # for the whole life of this process
    try:
        main = importlib.import_module(module).main
    except KeyboardInterrupt:
        return stopped(INTERRUPTED, EXIT_INTERRUPTED, env_rank_prefix())
    except Terminated:
        return stopped(TERMINATED, EXIT_TERMINATED, env_rank_prefix())
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
