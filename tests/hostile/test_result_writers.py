"""The writers of the run's own files under faults: runs that get to the end beside files
already there, CSV appends cut short or failing (cut back, repaired, never interleaved), JSON
and CSV written together or not at all, stale temporaries swept, the umask honoured.

(Part of the hostile-input tests, split from one file by what is attacked.)"""
from __future__ import annotations

import csv
import errno
import json
import os
import sys
import threading
from pathlib import Path

import pytest

from conftest import assert_one_line_error, run_main, spawn
from microbench.platform.errors import CannotWrite
from microbench.output import files
from microbench.platform import writing
from support.hostile import HEADER, RUN, assert_disk_unchanged, row, snapshot, temporaries
from support.hostile import no_launcher_environment  # noqa: F401 (autouse: this module's)


# ---------------------------------------------------------------- runs that get to the end

def run_ok(capfd, *argv):
    ran = run_main(capfd, *RUN, *argv)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return ran


def test_compare_with_this_runs_own_file_reads_the_old_content_first(tmp_path, capfd,
                                                                      steady_clock):
    """X is the file this run writes: the gate reads X before the run, so a drop fails (on a
    steady fake clock, both runs measure the same: only the stored 10x can differ)."""
    out = tmp_path / "out"
    run_ok(capfd, "--mode", "inference", "--output-dir", str(out), "--output-file", "x")
    target = out / "x.json"
    baseline = json.loads(target.read_text())
    baseline["Throughput [img/sec]"] *= 10          # the stored run was 10x faster
    target.write_text(json.dumps(baseline))
    ran = run_main(capfd, *RUN, "--mode", "inference", "--output-dir", str(out),
                   "--output-file", "x", "--compare", str(target))
    assert_one_line_error(ran, 5, "throughput regressed")
    assert "is also this run's result file" in ran.stdout
    [line] = [line for line in ran.stdout.splitlines()
              if line.strip().startswith("Throughput [img/sec]") and line.endswith("%")]
    assert float(line.split()[-1].rstrip("%")) < -50, ran.stdout   # not +0.0% against itself
    stored = json.loads(target.read_text())["Throughput [img/sec]"]
    assert stored == baseline["Throughput [img/sec]"], ran.stdout  # a failed gate keeps it
    assert (out / "x.regressed.json").exists()
    assert temporaries(tmp_path) == []


def test_a_csv_with_unix_line_ends_takes_our_rows_with_its_own_line_ends(tmp_path, capfd):
    csv_path = tmp_path / "lf.csv"
    csv_path.write_bytes(HEADER.replace(b"\r\n", b"\n"))
    run_ok(capfd, "--mode", "inference", "--output-dir", str(tmp_path / "out"),
           "--csv-file", str(csv_path))
    data = csv_path.read_bytes()
    assert b"\r" not in data and data.count(b"\n") == 2
    [row] = list(csv.DictReader(data.decode().splitlines()))
    assert row["status"] == "ok"


def test_links_a_csv_appends_through_and_a_json_is_replaced(tmp_path, capfd):
    """The rule for symlinks (README, "Guarantees"): an append adds to the link's target (a
    shared summary CSV linked into several places), a whole file replaces the link itself, so
    no link makes the tool overwrite the file it points to."""
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "shared.csv").write_bytes(HEADER)
    (tmp_path / "elsewhere.json").write_bytes(b"precious")
    (tmp_path / "s.csv").symlink_to(tmp_path / "shared.csv")
    (out / "r.json").symlink_to(tmp_path / "elsewhere.json")
    run_ok(capfd, "--mode", "inference", "--output-dir", str(out), "--output-file", "r",
           "--csv-file", str(tmp_path / "s.csv"))
    assert (tmp_path / "s.csv").is_symlink()
    [row] = list(csv.DictReader((tmp_path / "shared.csv").open()))
    assert row["status"] == "ok"
    assert not (out / "r.json").is_symlink() and json.loads((out / "r.json").read_text())
    assert (tmp_path / "elsewhere.json").read_bytes() == b"precious"


def test_every_row_of_a_sweep_failing_is_not_a_success(tmp_path, capfd):
    # inception_v3 refuses 32 px inputs: each row is a usage error (2).
    ran = run_main(capfd, *RUN, "--network", "inception_v3", "--batch-size", "2,4",
                   "--output-dir", str(tmp_path))
    assert_one_line_error(ran, 2, "every configuration of the sweep failed (2 of 2)")
    rows = list(csv.DictReader((tmp_path / "benchmark_summary.csv").open()))
    assert [row["status"] for row in rows] == ["error", "error"]   # still recorded


def test_a_sweep_where_every_row_runs_out_of_memory_exits_3(tmp_path, capfd):
    ran = run_main(capfd, *RUN, "--batch-size", "500000,1000000", "--image-size", "2048",
                   "--iterations", "1", "--output-dir", str(tmp_path))
    assert_one_line_error(ran, 3, "every configuration of the sweep failed")


# ---------------------------------------------------------------- the writers under faults


def rows_of(path: Path) -> list[list[str]]:
    return list(csv.reader(path.read_bytes().decode().splitlines()))


def fail_after_half(monkeypatch, error: BaseException):
    """The next write of a CSV append writes half its bytes, then fails."""
    real = writing._write_all

    def half_then_fail(fd, data):
        real(fd, data[:len(data) // 2])
        raise error
    monkeypatch.setattr(writing, "_write_all", half_then_fail)


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"),
                                   KeyboardInterrupt()], ids=["disk-full", "ctrl-c"])
def test_a_failed_append_is_cut_back_and_the_next_one_is_clean(tmp_path, monkeypatch, error):
    path = tmp_path / "s.csv"
    files.append_csv(row("first"), str(path))
    before = path.read_bytes()
    fail_after_half(monkeypatch, error)
    with pytest.raises(CannotWrite if isinstance(error, OSError) else KeyboardInterrupt):
        files.append_csv(row("lost"), str(path))
    assert path.read_bytes() == before
    monkeypatch.undo()
    files.append_csv(row("next"), str(path))
    assert [r[0] for r in rows_of(path)] == ["time_utc", "first", "next"]


@pytest.mark.parametrize("tail, kept", [
    (b"half,a,ro", ["time_utc", "first", "next"]),                  # cut off
    (writing.csv_lines([row("whole").values()], "").encode(),      # ended and kept
     ["time_utc", "first", "whole", "next"]),
    (writing.csv_lines([row("whole").values()], "").encode() + b"\r",
     ["time_utc", "first", "whole", "next"]),
], ids=["half-a-row", "a-row-without-line-end", "a-row-without-its-newline"])
def test_an_incomplete_last_line_is_repaired_before_appending(tmp_path, tail, kept):
    path = tmp_path / "s.csv"
    files.append_csv(row("first"), str(path))
    with path.open("ab") as stream:
        stream.write(tail)
    files.append_csv(row("next"), str(path))
    assert [r[0] for r in rows_of(path)] == kept
    assert all(len(r) == len(files.CSV_COLUMNS) for r in rows_of(path))
    assert path.read_bytes().endswith(b"\r\n") and b"\r\r" not in path.read_bytes()


def test_a_header_cut_short_by_a_crash_is_written_again(tmp_path):
    path = tmp_path / "s.csv"
    path.write_bytes(HEADER[:20])
    files.check_csv(str(path))                       # accepted before the run
    files.append_csv(row("first"), str(path))
    assert [r[0] for r in rows_of(path)] == ["time_utc", "first"]


def test_an_error_message_with_line_breaks_stays_on_its_row(tmp_path):
    path = tmp_path / "s.csv"
    files.append_csv({**row("x"), "error": "line one\nline two\r\nthree"}, str(path))
    assert path.read_bytes().count(b"\n") == 2
    assert rows_of(path)[1][-1] == "line one line two three"


def test_json_and_csv_row_are_written_together_or_not_at_all(tmp_path, monkeypatch):
    """The CSV append fails after the JSON is ready: the JSON stays as it was too."""
    json_path, csv_path = tmp_path / "r.json", tmp_path / "s.csv"
    json_path.write_text('{"previous": true}')
    files.append_csv(row("first"), str(csv_path))
    before = snapshot(tmp_path)
    summary = type("S", (), {})()
    summary.spec = type("Spec", (), {"json_path": str(json_path), "csv_path": str(csv_path)})()
    monkeypatch.setattr(files, "result_document", lambda s: {"new": 1})
    monkeypatch.setattr(files, "csv_row", lambda s: row("lost"))
    fail_after_half(monkeypatch, OSError(errno.EDQUOT, "Disk quota exceeded"))
    with pytest.raises(CannotWrite, match="Disk quota exceeded"):
        files.write_files(summary)
    assert_disk_unchanged(tmp_path, before)


def test_the_csv_row_is_appended_only_once_its_json_is_in_place(tmp_path, monkeypatch):
    """What a killed run leaves: the JSON is swapped in before the row is appended, so a kill
    between the two leaves a JSON without its row, never a row without its JSON."""
    json_path, csv_path = tmp_path / "r.json", tmp_path / "s.csv"
    json_path.write_text('{"previous": true}')
    summary = type("S", (), {})()
    summary.spec = type("Spec", (), {"json_path": str(json_path), "csv_path": str(csv_path)})()
    monkeypatch.setattr(files, "result_document", lambda s: {"new": 1})
    monkeypatch.setattr(files, "csv_row", lambda s: row("x"))
    seen = []
    real_append = files.append_csv
    monkeypatch.setattr(files, "append_csv", lambda r, path: (
        seen.append(json.loads(json_path.read_text())), real_append(r, path)))
    files.write_files(summary)
    assert seen == [{"new": 1}] and json.loads(json_path.read_text()) == {"new": 1}
    assert [r[0] for r in rows_of(csv_path)] == ["time_utc", "x"] and temporaries(tmp_path) == []


def _dead_pid() -> int:
    child = spawn([sys.executable, "-c", ""])
    child.wait()
    return child.pid


def test_stale_temporaries_of_dead_processes_on_this_host_are_swept(tmp_path):
    host = writing._HOST
    other_host = "0" * 8 if host != "0" * 8 else "1" * 8
    dead, mine = _dead_pid(), os.getpid()
    names = {"dead": f".tmp-{dead}.{host}.0123abcd-r.json",
             "dead-backup": f".tmp-{dead}.{host}.89abcdef-s.json",
             "alive": f".tmp-{os.getppid()}.{host}.0123abcd-r.json",
             "mine": f".tmp-{mine}.{host}.0123abcd-r.json",
             "other-host": f".tmp-{dead}.{other_host}.0123abcd-r.json",
             "older-format": ".tmp-0123abcd-r.json", "not-ours": "notes.txt"}
    for name in names.values():
        (tmp_path / name).write_text("x")
    writing.write_json(str(tmp_path / "r.json"), {"a": 1})
    left = {path.name for path in tmp_path.iterdir()}
    assert left == {"r.json", *(names[key] for key in ("alive", "mine", "other-host",
                                                       "older-format", "not-ours"))}


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"),
                                   KeyboardInterrupt()], ids=["disk-full", "ctrl-c"])
def test_a_failed_whole_write_leaves_the_previous_file(tmp_path, monkeypatch, error):
    target = tmp_path / "r.json"
    target.write_text("previous")
    fail_after_half(monkeypatch, error)
    with pytest.raises(CannotWrite if isinstance(error, OSError) else KeyboardInterrupt):
        writing.write_json(str(target), {"new": 1})
    assert_disk_unchanged(tmp_path, {"r.json": b"previous"})


def test_result_files_honour_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        writing.write_json(str(tmp_path / "r.json"), {"a": 1})
        files.append_csv(row("x"), str(tmp_path / "s.csv"))
        writing.write_via(str(tmp_path / "t.json"),
                          lambda path: Path(path).write_text("{}"))
    finally:
        os.umask(old)
    for name in ("r.json", "s.csv", "t.json"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o640, name


def test_concurrent_appends_with_failures_never_interleave_nor_leave_fragments(tmp_path,
                                                                              monkeypatch):
    """Threads append under the lock (flock locks each open file); every third write fails
    half-way; the file holds exactly the rows that succeeded, each whole."""
    path, real, count = str(tmp_path / "s.csv"), writing._write_all, [0]

    def sometimes_fails(fd, data):
        count[0] += 1
        if count[0] % 3 == 0:
            real(fd, data[:len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, data)
    monkeypatch.setattr(writing, "_write_all", sometimes_fails)
    written, lock = [], threading.Lock()

    def worker(name):
        for index in range(15):
            try:
                files.append_csv(row(f"{name}-{index}"), path)
                with lock:
                    written.append(f"{name}-{index}")
            except CannotWrite:
                pass
    threads = [threading.Thread(target=worker, args=(f"w{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    rows = rows_of(Path(path))
    if written:                                   # the header went with the first row
        assert rows[0] == list(files.CSV_COLUMNS)
    assert sorted(r[0] for r in rows[1:]) == sorted(written)
    assert all(len(r) == len(files.CSV_COLUMNS) and len(set(r)) == 1 for r in rows[1:])
