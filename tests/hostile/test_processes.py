"""Hostile conditions that need a process of their own (issue 23 and 38): a file-size limit
standing in for a full disk, signals in the timed loop and during the imports, ranks that
disagree, workers that cannot start, and workers outliving their parent; a thread or process
limit met anywhere (exit 4, in a trial's or a node check's worker too), a stop that ends the
process and everything below it within seconds (inductor's compilers, orphans), and how a
worker or a stop after the body ended, as its line says (issues 46 and 57); a rendezvous that
never forms or a peer killed mid-run without c10d's native log (issue 65).

(Part of the hostile-input tests, split from one file by what is attacked.)"""
from __future__ import annotations

import contextlib
import errno
import importlib.abc
import io
import os
import resource
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT, SCRIPT, TINY, alive, assert_one_line_error, run_main, spawn
from microbench.platform import process, workers, writing
from microbench.platform.errors import MissingEnvironment, Terminated, UsageError
from support.hostile import (CHILD_ENV, DATA_RUN, FOREIGN_CSV, HEADER, RUN, assert_disk_unchanged,
                             child, refuse_starts_after, row, snapshot, temporaries)
from support.hostile import no_launcher_environment  # noqa: F401 (autouse: this module's)


def test_ctrl_c_or_sigterm_during_the_imports_prints_one_line(capfd, monkeypatch):
    previous = {number: signal.getsignal(number) for number in process.STOPPING}
    try:
        for error, code, text in ((KeyboardInterrupt(), 130, "error: interrupted"),
                                  (Terminated(), 143, "error: terminated (SIGTERM)"),
                                  (Terminated("SIGHUP", 129), 129, "error: terminated (SIGHUP)")):
            class Interrupting(importlib.abc.MetaPathFinder):
                def find_spec(self, name, path=None, target=None):
                    if name == "microbench.main":
                        raise error
                    return None
            monkeypatch.delitem(sys.modules, "microbench.main", raising=False)
            monkeypatch.setattr(sys, "meta_path", [Interrupting(), *sys.meta_path])
            capfd.readouterr()
            assert process.entry("microbench.main") == code
            err = capfd.readouterr().err
            assert err == text + "\n"
            monkeypatch.undo()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


# ---------------------------------------------------------------- processes of their own


def file_size_limit(size: int):
    """Run in the child before exec: writes past ``size`` bytes fail with EFBIG, like a full
    disk (Python ignores SIGXFSZ, so the write returns the error)."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


@pytest.mark.slow
@pytest.mark.parametrize("where", ["json", "csv"])
def test_a_full_disk_leaves_json_and_csv_as_they_were(tmp_path, where):
    out = tmp_path / "out"
    out.mkdir()
    (out / "r.json").write_bytes(b'{"previous": true}\n')
    # A CSV of earlier rows; for the CSV case larger than the new JSON, so only its append
    # crosses the limit.
    rows = 1 if where == "json" else 200
    lines = writing.csv_lines([list(row(f"old{n}").values()) for n in range(rows)], "\r\n")
    (out / "benchmark_summary.csv").write_bytes(HEADER + lines.encode())
    before = snapshot(tmp_path)
    limit = 1500 if where == "json" else len(HEADER) + len(lines) + 100
    proc = child([*RUN, "--mode", "inference", "--output-dir", str(out), "--output-file", "r"],
                 preexec_fn=file_size_limit(limit))
    stdout, stderr = proc.communicate(timeout=240)
    ran = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert_one_line_error(ran, 4, "File too large; the previous file is unchanged")
    assert_disk_unchanged(tmp_path, before)


@pytest.mark.slow
@pytest.mark.parametrize("signal_number, code, text", [
    (signal.SIGTERM, 143, "error: terminated (SIGTERM)"),
    (signal.SIGINT, 130, "error: interrupted"),
    (signal.SIGHUP, 129, "error: terminated (SIGHUP)"),
    (signal.SIGQUIT, 131, "error: terminated (SIGQUIT)")],
    ids=["sigterm", "sigint", "sighup", "sigquit"])
def test_a_signal_in_the_timed_loop_ends_with_one_line_and_no_files(tmp_path, signal_number,
                                                                   code, text):
    proc = child([*RUN, "--iterations", str(10**6), "--output-dir", str(tmp_path)])
    deadline = time.monotonic() + 180
    for line in proc.stdout:                      # polling the output, no sleeps
        if line.startswith("Timing") or time.monotonic() > deadline:
            break
    proc.send_signal(signal_number)
    stdout, stderr = proc.communicate(timeout=60)
    ran = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert_one_line_error(ran, code, text)
    assert snapshot(tmp_path) == {} and temporaries(tmp_path) == []


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_ranks_started_with_different_settings_exit_2_at_once(tmp_path):
    """Two ranks as torchrun would start them, with different --iterations: both stop right
    after the process group forms, naming the first difference. A rank that went on would
    wait in a collective until --dist-timeout (600 s) and fail with a timeout instead, so the
    message is the proof, not the wall clock (which a busy machine stretches)."""
    port = str(free_port())
    procs = [child([*RUN, "--batch-size", "4", "--iterations", str(iterations),
                    "--output-dir", str(tmp_path)],
                   env={"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
             for rank, iterations in enumerate((2, 3))]
    outputs = [proc.communicate(timeout=300) for proc in procs]
    for rank, (proc, (stdout, stderr)) in enumerate(zip(procs, outputs)):
        ran = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        assert_one_line_error(ran, 2, f"[rank {rank}] error: ranks were started with different "
                                      f"settings: --iterations is 2 on rank 0, 3 on rank 1")
    assert snapshot(tmp_path) == {}


@pytest.mark.slow
def test_ranks_may_name_different_output_dirs_and_only_rank_0_writes(tmp_path):
    """The lead's rule: --output-dir (and --output-file, --csv-file) may differ across ranks;
    only rank 0 writes results, so rank 1's directory is never created nor checked (here it
    lies under a file, where no directory can be)."""
    (tmp_path / "afile").write_bytes(b"x")
    port = str(free_port())
    procs = [child([*RUN, "--batch-size", "4", "--output-dir", str(tmp_path / directory)],
                   env={"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
             for rank, directory in enumerate(("rank0", "afile/rank1"))]
    outputs = [proc.communicate(timeout=240) for proc in procs]
    for proc, (stdout, stderr) in zip(procs, outputs):
        assert proc.returncode == 0, stderr[-3000:]
    written = sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*"))
    assert written[0] == "afile" and all(name.startswith("rank0") for name in written[1:])
    assert len(list((tmp_path / "rank0").glob("*.json"))) == 1


@pytest.mark.slow
def test_a_problem_only_rank_0_sees_stops_every_spawned_worker(tmp_path):
    """The manual launch with two --device_ids: the CSV only rank 0 writes has another header;
    both workers stop at once, each with its [rank N] line, and nothing is written."""
    foreign = tmp_path / "f.csv"
    foreign.write_bytes(FOREIGN_CSV)
    proc = child([*RUN, "--batch-size", "4", "--output-dir", str(tmp_path / "out"),
                  "--csv-file", str(foreign), "--distributed_dataparallel", "--rank", "0",
                  "--world-size", "1", "--dist-backend", "gloo", "--dist-url",
                  f"tcp://127.0.0.1:{free_port()}", "--device_ids", "0,1"])
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 2, stderr[-3000:]
    lines = sorted(line for line in stderr.splitlines() if line)
    assert len(lines) == 2 and "Traceback" not in stderr, stderr
    assert lines[0].startswith("[rank 0] error: --csv-file") and "different CSV header" in lines[0]
    assert lines[1].startswith("[rank 1] error: rank 0 cannot run")
    assert foreign.read_bytes() == FOREIGN_CSV and not list(tmp_path.rglob("*.json"))


# ---------------------------------------------------------------- issue 38: workers that cannot start

def wait_gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("layout", ["v1", "v2"])
def test_the_cgroups_pids_limit_is_read(tmp_path, layout):
    folder = tmp_path / ("pids/job" if layout == "v1" else "job")
    folder.mkdir(parents=True)
    (folder / "pids.max").write_text("400\n")
    (folder / "pids.current").write_text("12\n")
    (tmp_path / "cgroup").write_text("4:memory:/x\n8:pids:/job\n" if layout == "v1"
                                     else "0::/job\n")
    room, why = process.process_headroom(str(tmp_path / "cgroup"), str(tmp_path))
    assert room == 388 and "pids.max is 400" in why
    (folder / "pids.max").write_text("max\n")                # no limit
    assert process.process_headroom(str(tmp_path / "cgroup"), str(tmp_path)) is None


def test_more_loader_workers_than_the_process_limit_allows_are_refused_first(tmp_path, capfd,
                                                                           monkeypatch):
    monkeypatch.setattr(process, "process_headroom",
                        lambda *a: (388, "the cgroup's pids.max is 400, 12 in use"))
    ran = run_main(capfd, *DATA_RUN, "--workers", "1024", "--data-cache", str(tmp_path / "c"),
                   "--output-dir", str(tmp_path / "out"))
    assert_one_line_error(ran, 4, "1024 loader workers cannot start")
    assert "pids.max is 400" in ran.stderr and "--workers" in ran.stderr
    assert "Building" not in ran.stdout and not (tmp_path / "out").exists()


@pytest.mark.parametrize("error", [BlockingIOError(errno.EAGAIN, "Resource temporarily "
                                                   "unavailable"),
                                   OSError(errno.ENOMEM, "Cannot allocate memory")],
                         ids=["EAGAIN", "ENOMEM"])
def test_a_loader_worker_that_cannot_start_ends_the_run_with_no_worker_left(tmp_path, capfd,
                                                                          monkeypatch, error):
    import multiprocessing
    started = refuse_starts_after(monkeypatch, 2, error)
    ran = run_main(capfd, *DATA_RUN, "--workers", "4", "--data-cache", str(tmp_path / "c"),
                   "--output-dir", str(tmp_path / "out"))
    assert_one_line_error(ran, 4, "cannot start 4 loader workers")
    assert "use fewer --workers" in ran.stderr
    assert len(started) == 2 and not [pid for pid in started if alive(pid)]
    assert multiprocessing.active_children() == []


def test_a_trial_worker_that_cannot_start_is_one_line(tmp_path, capfd, monkeypatch):
    refuse_starts_after(monkeypatch, 0, BlockingIOError(errno.EAGAIN, "Resource temporarily "
                                                        "unavailable"))
    ran = run_main(capfd, *RUN, "--repeat", "2", "--output-dir", str(tmp_path / "out"))
    assert_one_line_error(ran, 4, "cannot start the worker process of trial 1")


LOADER_LEFT_OPEN = """
import sys, torch
from microbench.platform import process
from microbench.data.loader import _worker_init       # the workers ignore SIGTERM
data = torch.utils.data.TensorDataset(torch.zeros(64, 2), torch.zeros(64))
batches = iter(torch.utils.data.DataLoader(data, batch_size=4, num_workers=2,
                                           worker_init_fn=_worker_init))
next(batches)
print(*[worker.pid for worker in batches._workers], flush=True)
raise SystemExit(7)         # a failure that leaves the loader open: the exit must not hang
"""


@pytest.mark.slow
def test_a_run_that_ends_with_its_loader_open_leaves_no_worker_and_does_not_hang():
    child_process = spawn([sys.executable, "-c", LOADER_LEFT_OPEN], cwd=ROOT,
                          env={**os.environ, **CHILD_ENV}, stdout=subprocess.PIPE, text=True)
    out, _ = child_process.communicate(timeout=120)
    workers = [int(pid) for pid in out.split()]
    assert child_process.returncode == 7 and len(workers) == 2
    assert all(wait_gone(pid, 10) for pid in workers)


# ---------------------------------------------------------------- issue 38: a worker outliving its parent

ORPHANING_PARENT = """
import os, pickle, signal, sys, multiprocessing
from microbench.platform import process
context = multiprocessing.get_context("spawn")
worker = context.Process(target=process.orphan_safe_worker,
                         args=(os.getpid(), "time:sleep", pickle.dumps((600,))))
worker.start()
print(worker.pid, flush=True)
if sys.argv[1] == "later":              # the worker is past its start, sleeping
    import time; time.sleep(3)
os.kill(os.getpid(), signal.SIGKILL)    # the parent dies without stopping its worker
"""


@pytest.mark.parametrize("when", ["while-starting", "later"])
def test_a_trial_worker_whose_parent_dies_exits_quietly(when):
    parent = spawn([sys.executable, "-c", ORPHANING_PARENT, when], cwd=ROOT,
                   env={**os.environ, **CHILD_ENV}, stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE, text=True)
    out, err = parent.communicate(timeout=120)
    [worker] = [int(pid) for pid in out.split()]
    assert parent.returncode == -signal.SIGKILL, err
    # A generous bound: a busy machine slows the worker's start, not its watch of the parent.
    assert wait_gone(worker, 60), "the orphaned worker went on"


def test_a_worker_started_after_its_parent_died_exits_at_once():
    ran = subprocess.run([sys.executable, "-c", "from microbench.platform import process; "
                          "process.die_with_parent(1); print('went on')"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0 and ran.stdout == "" and ran.stderr == ""


class _CountingStream(io.StringIO):
    writes = 0

    def write(self, text):
        self.writes += 1
        return super().write(text)


def test_an_error_line_is_one_write_so_two_ranks_lines_never_run_into_one(monkeypatch):
    """Ranks share the launcher's stderr, unbuffered under PYTHONUNBUFFERED: print()'s second
    write (the newline) let rank 1's line and rank 0's run into one line."""
    stream = _CountingStream()
    monkeypatch.setattr(sys, "stderr", stream)
    assert process.command(lambda: (_ for _ in ()).throw(UsageError("bad flag"))) == 2
    assert stream.getvalue() == "error: bad flag\n" and stream.writes == 1


# ---------------------------------------------------------------- issue 46: a thread or process limit

THREAD_LIMIT = RuntimeError("can't start new thread")


@pytest.mark.parametrize("error", [
    THREAD_LIMIT,
    RuntimeError("Caught RuntimeError in DataLoader worker process 0.\nOriginal Traceback "
                 "(most recent call last):\n  ...\nRuntimeError: can't start new thread\n"),
    RuntimeError("DataLoader worker failed"),              # its cause is the limit
])
def test_a_thread_or_process_limit_anywhere_is_one_line_exit_4(error, capfd, monkeypatch):
    from microbench.drivers import benchmark

    def run(spec, **kwargs):
        if error.args[0] == "DataLoader worker failed":
            try:
                raise THREAD_LIMIT
            except RuntimeError as limit:
                raise error from limit
        raise error
    monkeypatch.setattr(benchmark, "run", run)
    ran = run_main(capfd, *RUN, "--no-files")
    assert_one_line_error(ran, 4, "could not start")


def test_an_eagain_not_raised_by_a_start_stays_a_bug():
    try:
        raise BlockingIOError(11, "Resource temporarily unavailable")
    except BlockingIOError as error:
        assert process.limit_reached(error) is None


def _replies(worker_main, *arguments) -> list:
    """What a worker's main sends its parent, on a connection that keeps it."""
    sent = []

    class Connection:
        send = sent.append

        def close(self):
            pass
    worker_main(*arguments, Connection())
    return sent


def _meets_the_limit(*args, **kwargs):
    raise THREAD_LIMIT


def test_a_trial_worker_that_meets_the_limit_reports_it_as_one_line(monkeypatch):
    from microbench.drivers import trials
    monkeypatch.setattr(trials, "_measure_here", _meets_the_limit)
    [(kind, error)] = _replies(trials._worker_main, None, None, None)
    assert kind == "error" and isinstance(error, MissingEnvironment)


def test_a_node_check_process_that_meets_the_limit_exits_4_as_the_others_do(monkeypatch):
    """The node check's processes reply as a trial's worker does (platform/workers.py): a
    thread limit is exit 4 there too, its line prefixed with the rank (it was 1)."""
    from microbench.node import check
    monkeypatch.setattr(check, "_measure_rank", _meets_the_limit)
    [(kind, error)] = _replies(check._worker_main, 1, 2, 0, None)
    assert kind == "error" and error.exit_code == 4
    assert str(error).startswith("[rank 1] a thread or process could not start")


# ---------------------------------------------------------------- issue 46 and 57: a stop ends the process

STUCK = textwrap.dedent("""
    import atexit, signal, subprocess, sys, time
    from microbench.platform import process

    def main():
        process.STOP_GRACE_S, process.STOP_DEADLINE_S = 0.5, 2.0
        # A child that ignores SIGTERM, and an exit handler that waits for it without end:
        # inductor's compile-worker sidecar, busy compiling, and SubprocPool.shutdown.
        child = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                                  "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                  "print('child', flush=True); time.sleep(600)"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        child.stdout.readline()                   # its SIGTERM ignored from here on
        atexit.register(child.wait)
        if sys.argv[1] == "native":
            # The main thread in native code that no signal interrupts: Python's handler
            # cannot run until it returns.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        def run():
            print("ready", flush=True)        # inside the command: its stop handling is on
            time.sleep(600)
        return process.command(run)
""")


@pytest.mark.parametrize("where", ["python", "native"])
@pytest.mark.parametrize("signal_number, code, line", [
    (signal.SIGTERM, 143, "error: terminated (SIGTERM)"),
    (signal.SIGINT, 130, "error: interrupted")])
def test_a_stop_ends_the_process_and_everything_below_it_in_seconds(where, signal_number, code,
                                                                    line, tmp_path):
    if where == "native" and signal_number == signal.SIGINT:
        pytest.skip("the same path as SIGTERM")
    (tmp_path / "stuck_main.py").write_text(STUCK)
    child = spawn([sys.executable, "-c", "import sys; from microbench.platform import process; "
                   "sys.exit(process.entry('stuck_main'))", where],
                  cwd=SCRIPT.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                  env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{SCRIPT.parent}"})
    assert child.stdout.readline() == "ready\n"
    below = process._descendants(child.pid)
    assert below
    started = time.monotonic()
    child.send_signal(signal_number)
    _, err = child.communicate(timeout=60)
    assert child.returncode == code and time.monotonic() - started < 15
    assert err.strip().splitlines() == [line]
    assert not [pid for pid in below if process._running(pid)]


ORPHANING = textwrap.dedent("""
    import subprocess, time
    from microbench.platform import process

    def main():
        # A grandchild whose parent has ended (g++ killed while its cc1plus compiles on).
        orphan = subprocess.run(["sh", "-c", "sleep 600 </dev/null >/dev/null 2>&1 & echo $!"],
                                capture_output=True, text=True, check=True).stdout.strip()
        def run():
            print(orphan, flush=True)
            time.sleep(600)
        return process.command(run)
""")


def test_a_stop_also_ends_a_process_whose_parent_below_the_run_has_ended(tmp_path):
    (tmp_path / "orphaning_main.py").write_text(ORPHANING)
    child = spawn([sys.executable, "-c", "import sys; from microbench.platform import process; "
                   "sys.exit(process.entry('orphaning_main'))"],
                  cwd=SCRIPT.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                  env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{SCRIPT.parent}"})
    orphan = int(child.stdout.readline())
    try:
        assert orphan in process._descendants(child.pid)
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
        assert child.returncode == 143 and err.strip() == "error: terminated (SIGTERM)"
        assert not process._running(orphan)
    finally:
        with contextlib.suppress(OSError):
            os.kill(orphan, signal.SIGKILL)


@pytest.mark.slow
def test_sigterm_while_inductor_compiles_ends_the_run_and_its_compilers(tmp_path):
    """On the CPU inductor compiles each kernel with a C++ compiler in a process of its own:
    a SIGTERM then ends the run within seconds, with its one line, and no compiler left."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    child = spawn([sys.executable, str(SCRIPT), "--network", "resnet18", *TINY, "--device",
                   "cpu", "--mode", "inference", "--compile", "--no-files"],
                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, compiling = time.monotonic() + 240, []
    while not compiling and time.monotonic() < deadline and child.poll() is None:
        below = process._descendants(child.pid)
        compiling = [pid for pid in below if _command(pid) in ("g++", "cc1plus", "c++", "gcc")]
        time.sleep(0.05)
    if not compiling:
        child.kill()
        pytest.skip("no compiler process seen (a warm cache, or no C++ compiler)")
    started = time.monotonic()
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 143 and time.monotonic() - started < 15, err[-2000:]
    assert err.strip().splitlines()[-1] == "error: terminated (SIGTERM)"
    assert "Traceback" not in err
    assert not [pid for pid in below if process._running(pid)]


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip()
    except OSError:
        return ""


class TestHowARunEnds:
    """How a worker ended, as its parent says it; a stop that comes after the body."""

    @pytest.mark.parametrize("code, said", ((143, "stopped by SIGTERM"), (130, "stopped by SIGINT"),
                                            (-9, "killed by SIGKILL"), (0, "exit code 0")))
    def test_how_a_worker_ended(self, code, said):
        assert workers.how_it_ended(code) == said

    @pytest.mark.parametrize("number, code, line", (
        (signal.SIGINT, 130, b"error: interrupted\n"),
        (signal.SIGTERM, 143, b"error: terminated (SIGTERM)\n")))
    def test_a_stop_after_the_body_says_its_line_and_ends_with_its_code(self, monkeypatch,
                                                                       number, code, line):
        written = []

        def exit_now(status):
            raise SystemExit(status)
        monkeypatch.setattr(process.os, "write", lambda fd, data: written.append((fd, data)))
        monkeypatch.setattr(process.os, "_exit", exit_now)
        monkeypatch.delenv("RANK", raising=False)
        with pytest.raises(SystemExit) as ended:
            process._stop_after_body(number, None)
        assert ended.value.code == code and written == [(2, line)]


class TestNativeLogs:
    """Issue 65, mechanism 13: c10d's native log (socket retries, each with its C++ frames)
    stays off stderr when a rendezvous never forms or a peer dies mid-run: the tool's one line
    only. c10's level is set for the tool's processes unless the user set one."""

    @pytest.mark.parametrize("given, kept", ((None, "FATAL"), ("", "FATAL"), ("INFO", "INFO"),
                                             ("WARNING", "WARNING")))
    def test_the_level_is_set_unless_the_user_set_one(self, given, kept):
        environ = {} if given is None else {process.NATIVE_LOG_VARIABLE: given}
        process.quiet_native_logs(environ)
        assert environ[process.NATIVE_LOG_VARIABLE] == kept

    @staticmethod
    def _rank(rank: int, port: int, timeout_s: int, *argv: str) -> subprocess.Popen:
        environ = {key: value for key, value in os.environ.items()
                   if key != process.NATIVE_LOG_VARIABLE}       # the tool's default
        return child([*RUN, "--dist-timeout", str(timeout_s), *argv],
                     env={**environ, "RANK": str(rank), "WORLD_SIZE": "2",
                          "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
                          "MASTER_PORT": str(port)})

    @staticmethod
    def _no_native_log(stderr: str) -> None:
        for said in ("frame #", "Exception raised from", "socket.cpp", "TCPStore.cpp", "[c10d]"):
            assert said not in stderr, stderr

    @pytest.mark.slow
    def test_a_peer_that_never_joins_is_one_line(self, tmp_path):
        """Rank 1 started alone: its client socket retries the absent rank 0 (41 lines of
        c10d's log and frames before; now none)."""
        proc = self._rank(1, free_port(), 1, "--output-dir", str(tmp_path))
        stdout, stderr = proc.communicate(timeout=120)
        ran = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        assert_one_line_error(ran, 1, "[rank 1] error: rendezvous failed")
        self._no_native_log(stderr)
        assert snapshot(tmp_path) == {}

    @pytest.mark.slow
    @pytest.mark.parametrize("killed", (0, 1), ids=["rank 0 (the store) killed",
                                                    "rank 1 killed"])
    def test_a_peer_killed_mid_run_leaves_one_line(self, tmp_path, killed):
        """Both ranks time a long run; the python process of one is killed (SIGKILL: no line of
        its own) once rank 0 says it is timing; the other ends with one line, exit 1."""
        port = free_port()
        procs = [self._rank(rank, port, 60, "--batch-size", "4", "--iterations", str(10**6),
                            "--output-dir", str(tmp_path)) for rank in (0, 1)]
        deadline = time.monotonic() + 180
        for line in procs[0].stdout:          # rank 0 prints (the others do not); no sleeps
            if line.startswith("Timing") or time.monotonic() > deadline:
                break
        procs[killed].kill()
        procs[killed].communicate(timeout=60)
        survivor = procs[1 - killed]
        stdout, stderr = survivor.communicate(timeout=120)
        ran = subprocess.CompletedProcess(survivor.args, survivor.returncode, stdout, stderr)
        assert_one_line_error(ran, 1, f"[rank {1 - killed}] error: lost the other ranks")
        self._no_native_log(stderr)
