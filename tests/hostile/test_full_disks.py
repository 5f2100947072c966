"""Full disks (issue 38): a token corpus, an image set and the report's outputs on a disk
that fills: exit 4, refused first where the size is known, and nothing half-written left.
And output paths checked whole before the run (issue 57): a path beyond PATH_MAX or a name whose
claim file would be too long is refused, and a name too long is never advised as a full disk.

(Part of the hostile-input tests, split from one file by what is attacked.)"""
from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path

import pytest

from conftest import assert_one_line_error, run_main
from microbench.platform.errors import CannotWrite, UsageError
from microbench.data import cache
from microbench.platform import writing
from support.hostile import DATA_RUN, RUN, hostile_result, report_of, write_results
from support.hostile import no_launcher_environment  # noqa: F401 (autouse: this module's)


# ---------------------------------------------------------------- issue 38: full disks

@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (root can mount one; skipped where that is not allowed), and a way to
    fill it up to ``left`` free bytes."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                          capture_output=True)
    if made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")

    def fill(left: int = 0) -> None:
        free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
        with open(mount / "filler", "wb") as stream:
            with contextlib.suppress(OSError):
                stream.write(b"\0" * max(0, free - left))
    try:
        yield mount, fill
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def leftovers(root: Path) -> list[str]:
    return [name for name in os.listdir(root) if name.startswith((cache.BUILDING_PREFIX,
                                                                   writing.TEMPORARY_PREFIX))]


@pytest.mark.parametrize("defence", ["checked-first", "reserved", "written"])
def test_a_token_corpus_on_a_full_disk_is_exit_4_and_leaves_nothing(small_disk, monkeypatch,
                                                                    defence):
    root, fill = small_disk
    if defence != "checked-first":                   # each later defence alone
        monkeypatch.setattr(cache, "check_room", lambda *a: None)
    if defence == "written":
        monkeypatch.setattr(cache, "_reserve", lambda *a: None)
    with pytest.raises(CannotWrite) as refused:
        cache.ensure_token_corpus(str(root), vocab_size=50, tokens=400_000)   # 1.6 MB
    assert refused.value.exit_code == 4
    assert ("GB are free" if defence == "checked-first" else "No space left") in str(refused.value)
    assert leftovers(root) == []


@pytest.mark.slow
def test_a_language_run_whose_corpus_does_not_fit_is_one_line(small_disk, tmp_path, capfd):
    root, fill = small_disk
    # 4,096 sequences of 256 tokens: a 4 MB corpus against a 1 MiB disk (a longer sequence
    # only made the model-alone warm-up before it minutes longer on 2 cores).
    ran = run_main(capfd, "--network", "llama_tiny", "--batch-size", "2", "--seq-len", "256",
                   "--iterations", "1", "--warmup", "1", "--device", "cpu", "--data", "loader",
                   "--data-cache", str(root), "--output-dir", str(tmp_path / "out"))
    assert_one_line_error(ran, 4, "cannot make a corpus of")
    assert leftovers(root) == []


def test_an_image_set_larger_than_the_free_space_is_refused_first(small_disk, tmp_path, capfd):
    root, _ = small_disk
    ran = run_main(capfd, *DATA_RUN[:-1], "100000", "--data-cache", str(root),
                   "--output-dir", str(tmp_path / "out"))
    assert_one_line_error(ran, 4, "cannot make 100,000 jpeg images")
    assert "--data-images" in ran.stderr and leftovers(root) == []


def test_an_image_set_that_fills_the_disk_midway_is_exit_4(small_disk, monkeypatch):
    root, fill = small_disk
    monkeypatch.setattr(cache, "check_room", lambda *a: None)
    with pytest.raises(CannotWrite, match="No space left"):
        cache.ensure_image_set(str(root), "png", count=400, side=64)
    assert leftovers(root) == []


@pytest.mark.parametrize("output", ["--html", "--plot", "json", "csv"])
def test_report_outputs_on_a_full_disk_are_exit_4_with_no_temporary(small_disk, tmp_path, capfd,
                                                                    output):
    root, fill = small_disk
    results = write_results(tmp_path / "r", {"a.json": hostile_result("resnet18"),
                                             "b.json": hostile_result("resnet50")})
    fill(left=0)
    target = str(root / ("out.html" if output == "--html" else "out.png"))
    if output in ("--html", "--plot"):
        ran = report_of(capfd, str(results), output, target)
        assert_error_line = "cannot write"
    else:                                                # a run's own JSON or CSV
        ran = run_main(capfd, *RUN, "--output-dir", str(root / "o"),
                       *(["--csv-file", str(root / "runs.csv")] if output == "csv" else []))
        assert_error_line = "cannot write"
    assert ran.returncode == 4, ran.stderr
    assert [line for line in ran.stderr.splitlines() if line.startswith("error")] \
        and assert_error_line in ran.stderr and "Traceback" not in ran.stderr
    assert leftovers(root) == [] and sorted(os.listdir(root)) == ["filler"]   # no empty dir


# ---------------------------------------------------------------- issue 57: whole paths

class TestWholePaths:
    """Mechanism 3: every output path is checked whole before the run; a name too long is
    never reported as a full disk."""

    def test_beyond_path_max_in_names_within_name_max(self, tmp_path):
        deep = os.path.join(str(tmp_path), *["d" * 200] * 25, "r.json")
        with pytest.raises(UsageError, match="bytes"):
            writing.check_target(deep, "--output-file", directory_made=True)

    @pytest.mark.parametrize("length", (249, 255, 300))
    def test_a_name_whose_claim_file_is_too_long(self, tmp_path, length):
        with pytest.raises(UsageError, match="longer than"):
            writing.check_target(str(tmp_path / ("n" * length)), "--csv-file")

    def test_advice_follows_the_errno(self):
        too_long = str(writing._cannot_write("x", OSError(errno.ENAMETOOLONG, "too long")))
        full = str(writing._cannot_write("x", OSError(errno.ENOSPC, "no space")))
        assert "free space" not in too_long and "shorter" in too_long
        assert "free space" in full and "--output-dir" not in full
