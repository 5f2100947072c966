"""platform/workers.py: spawn and reply, the one loop of a trial's worker and the node check's
processes. The worker's side is run in this process with a recording connection; the parent's
side spawns real processes (small ones: the bodies below import no torch)."""
from __future__ import annotations

import os
import pickle
import threading
import time

import pytest

from microbench.platform import workers
from microbench.platform.errors import (BenchmarkError, MissingEnvironment, OutOfMemory,
                                        ReportedFailure, Terminated)


class Recording:
    """A connection that keeps what is sent, pickling it as a Pipe would."""

    def __init__(self):
        self.sent, self.closed = [], False

    def send(self, message):
        self.sent.append(pickle.loads(pickle.dumps(message)))

    def close(self):
        self.closed = True


def served(body, what="the worker of a test", prefix=""):
    connection = Recording()
    workers.serve(connection, body, what, prefix)
    assert connection.closed
    return connection.sent


def raising(error):
    def body():
        raise error
    return body


def test_a_value_is_sent_as_it_is():
    assert served(lambda: {"images": 3}) == [("ok", {"images": 3})]


def test_an_expected_failure_keeps_its_type_and_code():
    [(kind, error)] = served(raising(OutOfMemory("batch 512 does not fit")))
    assert kind == "error" and type(error) is OutOfMemory and error.exit_code == 3


def test_a_prefix_starts_the_line_and_the_code_stays():
    [(kind, error)] = served(raising(OutOfMemory("batch 512 does not fit")), prefix="[rank 2] ")
    assert isinstance(error, ReportedFailure)
    assert (str(error), error.exit_code) == ("[rank 2] batch 512 does not fit", 3)


class Unpicklable(BenchmarkError):
    exit_code = 2

    def __init__(self, message, extra):
        super().__init__(message)
        self.extra = extra


def test_an_expected_failure_that_cannot_travel_is_its_line_and_code():
    [(kind, error)] = served(raising(Unpicklable("bad flag", threading.Lock())))
    assert isinstance(error, ReportedFailure) and (str(error), error.exit_code) == ("bad flag", 2)


def test_a_thread_limit_is_exit_4_with_or_without_a_prefix():
    for prefix in ("", "[rank 1] "):
        [(kind, error)] = served(raising(RuntimeError("can't start new thread")), prefix=prefix)
        assert error.exit_code == 4 and str(error).startswith(f"{prefix}a thread or process")


def test_a_bug_is_its_traceback_here_and_one_line_exit_1(capsys):
    [(kind, error)] = served(raising(ZeroDivisionError("division by zero")),
                             what="node check process 3", prefix="[rank 3] ")
    assert (kind, error.exit_code) == ("error", 1)
    assert str(error) == "unexpected ZeroDivisionError in node check process 3: division by zero"
    assert "Traceback" in capsys.readouterr().err


def test_a_value_that_cannot_be_pickled_is_a_bug_not_silence():
    """The node check's copy swallowed the PicklingError: the parent then heard only that the
    process ended without a result."""
    [(kind, error)] = served(lambda: threading.Lock())
    assert kind == "error" and error.exit_code == 1 and "cannot pickle" in str(error)


@pytest.mark.parametrize("stop, code", [(KeyboardInterrupt(), 130), (Terminated(), 143)])
def test_a_stop_sends_nothing_and_exits_with_its_code(stop, code):
    """The parent says what stopped the run; the exit code tells it this worker was stopped
    (workers.how_it_ended: "stopped by SIGTERM", not "exit code 0")."""
    connection = Recording()
    with pytest.raises(SystemExit) as ended:
        workers.serve(connection, raising(stop), "the worker of a test")
    assert ended.value.code == code and connection.sent == [] and connection.closed


# ---------------------------------------------------------------- spawned for real

def answer(value, connection):
    workers.serve(connection, lambda: (value, os.getpid()), "test worker")


def fail_or_wait(index, connection):
    def body():
        if index == 1:
            raise MissingEnvironment("no GPU here")
        time.sleep(60)                          # stopped by the parent long before
    workers.serve(connection, body, f"test worker {index}", prefix=f"[rank {index}] ")


def end_silently(connection):
    os._exit(7)


def _run(function, arguments):
    return workers.run(f"test_workers:{function}", arguments,
                       [f"test-worker-{i}" for i in range(len(arguments))],
                       lambda index: f"test worker {index}", "test workers", "use fewer")


@pytest.mark.slow
def test_every_worker_replies_in_order_from_a_process_of_its_own():
    values = _run("answer", [("a",), ("b",)])
    assert [value for value, _ in values] == ["a", "b"]
    assert len({pid for _, pid in values} | {os.getpid()}) == 3


def test_the_first_failure_stops_the_others_and_is_raised_with_its_code():
    started = time.monotonic()
    with pytest.raises(ReportedFailure) as raised:
        _run("fail_or_wait", [(0,), (1,)])
    assert (str(raised.value), raised.value.exit_code) == ("[rank 1] no GPU here", 4)
    assert time.monotonic() - started < 45     # worker 0 did not sleep its minute out


def test_a_worker_that_ends_without_a_reply_says_how_it_ended():
    with pytest.raises(BenchmarkError, match=r"test worker 0 ended \(exit code 7\) before it "
                                             r"reported a result"):
        _run("end_silently", [()])
