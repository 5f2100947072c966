"""A terminal that takes no writes (stdout on /dev/full or closed): the files are still
written, a failure is not hidden, and the error says the output was lost; the /dev/null a
closed stream gets is inherited by every child (issue 57).

(Part of the hostile-input tests, split from one file by what is attacked.)"""
from __future__ import annotations

import csv
import errno
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, SCRIPT, assert_one_line_error, run_main
from microbench.platform import process
from support.hostile import CHILD_ENV, OPS_RUN, RUN, temporaries
from support.hostile import no_launcher_environment  # noqa: F401 (autouse: this module's)


# ---------------------------------------------------------------- a terminal that takes no writes

class FullTerminal:
    """Standard output on /dev/full, in-process: every write fails with ENOSPC."""

    def write(self, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self):
        raise OSError(errno.ENOSPC, "No space left on device")

    def isatty(self):
        return False


LOST_OUTPUT = "error: standard output could not be written ({}); the run finished and its " \
              "result files, if any, were written"
TERMINALS = {"dev-full": (FullTerminal, "No space left on device"),
             "closed": (lambda: None, "it is closed")}


@pytest.mark.parametrize("terminal", sorted(TERMINALS))
def test_ops_and_report_finish_their_files_when_stdout_takes_no_writes(tmp_path, capfd,
                                                                      monkeypatch, terminal):
    from microbench.ops.cli import main as ops_main
    from microbench.report.command import main as report_main
    make, reason = TERMINALS[terminal]
    monkeypatch.setattr(sys, "stdout", make())
    ran = run_main(capfd, *OPS_RUN, "--output-json", str(tmp_path / "o.json"), main=ops_main)
    assert_one_line_error(ran, 4, LOST_OUTPUT.format(reason))
    assert json.loads((tmp_path / "o.json").read_text())["results"][0]["op"] == "add"
    ran = run_main(capfd, str(tmp_path / "o.json"), "--html", str(tmp_path / "p.html"),
                   main=report_main)
    # The report names the page it wrote on standard error (its stdout may be CSV or JSON),
    # then the one error line.
    assert ran.returncode == 4
    assert ran.stderr.splitlines() == [f"Page  : {tmp_path / 'p.html'}",
                                       LOST_OUTPUT.format(reason)]
    assert (tmp_path / "p.html").read_text().startswith("<!DOCTYPE html>")
    assert temporaries(tmp_path) == []


def test_a_lost_terminal_does_not_hide_a_failure_nor_a_reader_that_left():
    output = process.GuardedOutput(FullTerminal())
    output.write("lost")
    assert output.lost == "No space left on device" and not output.isatty()
    assert process.ended(5, output) == 5          # a regression still fails the gate as 5
    assert process.ended(0, process.GuardedOutput(None)) == 4

    class GoneReader(FullTerminal):
        def write(self, text):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
    with pytest.raises(BrokenPipeError):          # | head: exit 141, silently, as before
        process.GuardedOutput(GoneReader()).write("x")


def test_the_progress_line_takes_a_closed_stdout():
    from microbench.platform import progress
    activity = progress.Activity(None)
    activity.start("Building")
    activity.finish("done")


@pytest.mark.slow
@pytest.mark.parametrize("terminal", ["dev-full", "closed"])
def test_a_run_whose_stdout_takes_no_writes_still_writes_its_results(tmp_path, terminal):
    """As a process: stdout on /dev/full, or closed by the shell (``>&-``): one line, exit 4,
    the JSON and the CSV row whole."""
    out = tmp_path / "out"
    argv = [sys.executable, str(SCRIPT), *RUN, "--mode", "inference", "--output-dir", str(out)]
    env = {**os.environ, **CHILD_ENV}
    if terminal == "dev-full":
        with open("/dev/full", "w") as full:
            done = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True,
                                  cwd=ROOT, env=env, timeout=240)
    else:
        done = subprocess.run(argv, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env,
                              timeout=240, preexec_fn=lambda: os.close(1))
    reason = TERMINALS[terminal][1]
    assert_one_line_error(subprocess.CompletedProcess(argv, done.returncode, "", done.stderr),
                          4, LOST_OUTPUT.format(reason))
    [result] = out.glob("*.json")
    assert json.loads(result.read_text())["Throughput [img/sec]"] > 0
    [row] = list(csv.DictReader((out / "benchmark_summary.csv").open()))
    assert row["status"] == "ok" and row["json_file"].endswith(result.name)
    assert temporaries(tmp_path) == []


# ---------------------------------------------------------------- issue 57: a closed stream in children

class TestClosedStreamsInChildren:
    """Mechanism 4: the /dev/null a closed stream gets is inherited by every child."""

    def test_a_child_starts_with_the_stream_open(self):
        code = ("from microbench.platform import process; process._fill_closed_descriptors(); "
                "import subprocess, sys; sys.exit(subprocess.run([sys.executable, '-c', "
                "'import os; os.fstat(1); os.fstat(2)']).returncode)")
        result = subprocess.run(["bash", "-c", f'"{sys.executable}" -c "{code}" >&- 2>&-'],
                                cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                                    os.path.abspath(__file__)))))
        assert result.returncode == 0
