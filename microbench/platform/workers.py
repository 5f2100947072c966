"""Spawn and reply (issue 54): fresh processes that each run one function and send one reply,
its value or its failure, back to the process that started them. A trial in a worker process
(``drivers/trials.py``) and each process of the node check (``node/check.py``) are such
workers; this is the one place that starts them, waits for them and says how they failed.

The parent, :func:`run`: every worker is spawned through ``process.orphan_safe_worker`` (it
ends with its parent, even while its imports run) inside ``process.starting`` (a refused start
is one line, exit 4), and every reply is waited for; the first failure stops the others at once
(they would wait for the failed one in a collective until their timeout) and is raised here.

The worker, :func:`serve`: its body's value is sent as it is; its failure as the one line and
exit code the parent raises (:func:`failure`): an expected failure as itself, a thread or
process limit as exit 4 (``process.limit_reached``), a bug as its traceback here and one line,
exit 1, a value that cannot be pickled included. A stop (Ctrl-C, SIGTERM) sends nothing: the
parent says what stopped the run.

The ranks of the manual launch (``drivers/runner.py``) report by their exit code instead, as a
rank torchrun starts does: they run under ``process.command``, the commands' own mapping.

Example::

    [value] = workers.run("microbench.drivers.trials:_worker_main", [(spec, None, None)],
                          ["microbench-trial-1"], lambda index: "the worker of trial 1",
                          "the worker process of trial 1", "use --trials in-process")
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import signal
import sys
import traceback
from multiprocessing.connection import wait
from multiprocessing.reduction import ForkingPickler
from multiprocessing.connection import Connection
from typing import Callable, Sequence

from microbench.platform import distributed, process
from microbench.platform.errors import (EXIT_INTERRUPTED, EXIT_UNEXPECTED, BenchmarkError,
                                        ReportedFailure, Terminated)

OK, ERROR = "ok", "error"
# How long the other workers have to end after SIGTERM once one failed, before SIGKILL.
STOP_GRACE_S = 30.0
# A worker that handled a stopping signal exits with the shell's 128 + the signal (serve).
_STOPPED_BY = 128


# ---------------------------------------------------------------- the parent

def run(target: str, arguments: Sequence[tuple], names: Sequence[str],
        what: Callable[[int], str], starting: str, advice: str) -> list:
    """Worker ``i`` runs ``target`` ("module:function") with ``*arguments[i]`` and a connection
    to reply on, as process ``names[i]``; every worker's value, in order. ``what(i)`` names
    worker ``i`` in a line; ``starting`` and ``advice`` make the line of a refused start."""
    context = multiprocessing.get_context("spawn")
    started, channels = [], []
    try:
        with process.starting(starting, advice):
            for given, name in zip(arguments, names):
                receive, send = context.Pipe(duplex=False)
                channels.append(receive)
                # The arguments travel pickled, unpickled by the worker once it watches its
                # parent (unpickling imports torch: seconds in which a killed parent would go
                # unnoticed).
                worker = context.Process(
                    target=process.orphan_safe_worker, name=name,
                    args=(os.getpid(), target, bytes(ForkingPickler.dumps(given)), send))
                try:
                    worker.start()
                finally:
                    send.close()                # the worker's end: ours closed, EOF is seen
                started.append(worker)
        return _replies(channels, started, what)
    except BaseException:
        process.stop_children(started, STOP_GRACE_S)
        raise
    finally:
        for channel in channels:
            channel.close()
        for worker in started:
            worker.join(STOP_GRACE_S)


def _replies(channels: Sequence[Connection], started: Sequence[multiprocessing.process.BaseProcess],
             what: Callable[[int], str]) -> list:
    """Every worker's value, in order; the first failure raised (a worker that ended without a
    reply is one)."""
    values: dict[int, object] = {}
    waiting = dict(enumerate(channels))
    while waiting:
        ready = distributed.interruptible(lambda: wait(list(waiting.values())))
        for index in [i for i, channel in waiting.items() if channel in ready]:
            channel = waiting.pop(index)
            try:
                kind, payload = channel.recv()
            except EOFError:
                started[index].join()
                how = how_it_ended(started[index].exitcode)
                raise BenchmarkError(f"{what(index)} ended ({how}) before it reported a "
                                     f"result") from None
            if kind == ERROR:
                started[index].join(10)         # it ends by itself once it has replied
                raise payload
            values[index] = payload
    return [values[index] for index in range(len(channels))]


def how_it_ended(exit_code: int | None) -> str:
    """A worker's end in words: the signal that killed it, the stop it handled (its exit code
    is the shell's 128 + the signal, as :func:`serve` ends on one), or its exit code."""
    if exit_code is not None and exit_code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-exit_code).name}"
    if exit_code is not None and _STOPPED_BY <= exit_code < _STOPPED_BY + 64:
        with contextlib.suppress(ValueError):
            return f"stopped by {signal.Signals(exit_code - _STOPPED_BY).name}"
    return f"exit code {exit_code}"


# ---------------------------------------------------------------- the worker

def serve(connection: Connection, body: Callable[[], object], what: str, prefix: str = "") -> None:
    """In a worker: ``body()``'s value sent on ``connection``, or its failure (:func:`failure`);
    nothing when a stop ends it. ``what`` names this worker in the line of a bug; ``prefix``
    (``[rank N] ``) starts the line of any other failure."""
    stopped = None
    with process.sigterm_raises():
        try:
            _send(connection, (OK, body()))     # a value that cannot be pickled raises here
        except KeyboardInterrupt:               # the parent says what stopped the run;
            stopped = EXIT_INTERRUPTED          # the exit code says it to the parent
        except Terminated as stop:
            stopped = stop.exit_code
        except Exception as error:              # noqa: BLE001 (each failure is one reply)
            _send(connection, (ERROR, failure(error, what, prefix)))
        finally:
            connection.close()
            with contextlib.suppress(OSError, ValueError):
                sys.stdout.flush()
    if stopped is not None:
        sys.exit(stopped)


def failure(error: Exception, what: str, prefix: str = "") -> BenchmarkError:
    """The error the parent raises for ``error`` in a worker: the one line and the exit code.
    An expected failure keeps its type (the largest-batch search tells out of memory by it)
    where it can travel; a limit the system set is exit 4; anything else is a bug, whose
    traceback is printed here (the parent has only the line), exit 1."""
    if not isinstance(error, BenchmarkError):
        limit = process.limit_reached(error)
        if limit is None:
            traceback.print_exception(type(error), error, error.__traceback__)
            return ReportedFailure(f"unexpected {type(error).__name__} in {what}: {error}",
                                   EXIT_UNEXPECTED)
        error = limit
    if not prefix and _picklable(error):
        return error
    return ReportedFailure(prefix + str(error), error.exit_code)


def _send(connection: Connection, message: object) -> None:
    """``message`` to the parent; nothing where the parent no longer reads (it died, or it
    stopped the run): there is no one left to tell."""
    with contextlib.suppress(OSError, EOFError):
        connection.send(message)


def _picklable(error: BaseException) -> bool:
    try:
        pickle.loads(pickle.dumps(error))
        return True
    except Exception:                          # noqa: BLE001 (any failure: not picklable)
        return False
