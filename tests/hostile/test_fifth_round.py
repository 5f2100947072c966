"""The fifth hostile round (issue 57): one class per mechanism, each trying many instances of
its class in-process (no interpreter started but one, for the closed stream's inheritance).

(Part of the hostile-input tests, split from one file by what is attacked.)"""
from __future__ import annotations

import argparse
import copy
import errno
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import assume, given, settings, strategies as st

from conftest import stored_result
from microbench.node import program
from microbench.node.program import Part
from microbench.plan import cli
from microbench.platform import distributed, process, workers, writing
from microbench.platform.errors import UsageError
from microbench.settings.argtypes import MAX_DIST_TIMEOUT_S, MIN_DIST_TIMEOUT_S, finite_float
from microbench.store import figures, ranges, schema, stored

# Every value no figure may hold, whatever it is: not finite, negative, beyond any measurement,
# an integer beyond 64 bits; and those that depend on what it is (zero; a subnormal).
NEVER = (float("nan"), float("inf"), float("-inf"), -1.0, -1e308, 1e308, 2**70, -(2**70))
SUBNORMAL = 5e-324
PATHED = tuple(f for f in figures.of_table(figures.MODEL) if f.path is not None)
FEW = settings(max_examples=25, deadline=None)


def _set(document: dict, path: tuple[str, ...], value) -> dict:
    document = copy.deepcopy(document)
    node = document
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value
    return document


def _refused(document: dict) -> bool:
    """The numbers' check every reader's validation runs (schema.validate_result): whether it
    finds a number out of range (the schema's own rules aside)."""
    return schema.number_problem(document) is not None


class TestFiguresByWhatTheyAre:
    """Mechanism 1: every figure of the registry is range-checked by its nature, wherever it is
    read (the readers' validation, --compare's baseline, node documents and their samples)."""

    @FEW
    @given(figure=st.sampled_from(PATHED), value=st.sampled_from(NEVER))
    def test_no_figure_takes_a_value_no_run_measures(self, figure, value):
        assume(not (ranges.nature(figure) == ranges.BOUND and value == -1.0))
        assert _refused(_set(stored_result(), figure.path, value))

    def test_a_pipeline_faster_than_its_model_alone_is_read(self):
        """data.verdict.kept is the pipeline's rate over the model alone's, 1.19 in a CPU sweep
        whose model-alone pass was disturbed: a ratio, not a share of a whole."""
        assert not _refused(_set(stored_result(), ("data", "verdict", "kept"), 1.19))

    def test_an_older_files_arithmetic_interval_below_zero_is_read(self):
        """Versions before the log-scale interval stored the arithmetic mean's: with two trials
        of 100 and 50 items/s its low end is about -243, and the file must stay readable."""
        document = _set(stored_result(), ("trials", "ci95_low"), -243.0)
        assert not _refused(_set(document, ("trials", "ci95_high"), 393.0))
        assert _refused(_set(document, ("trials", "ci95_high"), 1e308))

    @FEW
    @given(figure=st.sampled_from(PATHED))
    def test_subnormal_and_zero_by_nature(self, figure):
        kind = ranges.nature(figure)
        assert _refused(_set(stored_result(), figure.path, SUBNORMAL))
        assert _refused(_set(stored_result(), figure.path, 0)) == (kind == ranges.RATE)

    def test_a_share_of_a_whole_is_at_most_one(self):
        shares = [f for f in PATHED if ranges.nature(f) == ranges.SHARE]
        assert shares
        for figure in shares:
            assert _refused(_set(stored_result(), figure.path, 1.5))
            assert not _refused(_set(stored_result(), figure.path, 0.5))

    @pytest.mark.parametrize("value", NEVER + (0, SUBNORMAL))
    def test_node_figures_and_samples(self, value):
        for key in ("value", "median", "samples"):
            keys = ("node_check", "gpus", "figures", "gemm_tflops", key)
            number = float(value)
            assert (not (number == number and abs(number) != float("inf"))
                    or ranges.problem(keys, number) is not None)

    @pytest.mark.parametrize("value", (1e308, -1e308, SUBNORMAL, 0.0))
    def test_a_tampered_compare_baseline_is_refused(self, tmp_path, value):
        for path in (("Throughput [img/sec]",), ("memory", "peak_allocated_mb"),
                     ("timing", "stats", "p99_ms")):
            if value == 0.0 and path[0] != "Throughput [img/sec]":
                continue                                       # zero: a time or an amount
            baseline = tmp_path / "base.json"
            baseline.write_text(json.dumps(_set(stored_result(), path, value)))
            with pytest.raises(UsageError, match="base.json"):
                stored.load_result(str(baseline), "--compare")

    def test_a_figure_a_reader_derives_is_checked_too(self):
        document = stored_result()
        document["Throughput [img/sec]"], document["Throughput [tokens/sec]"] = 1e-300, 1e14
        document = _set(document, ("trials", "ci95_low"), 1e14)
        document = _set(document, ("trials", "ci95_high"), 1e14)
        assert _refused(document)


class TestNodeHooks:
    """Mechanism 2: the test hooks refuse before the run what cannot work; a sample that is no
    measurement makes a failed part."""

    @pytest.mark.parametrize("text", ("0:1e-7", "0:1e7", "*:1e300", "1:5e-324", "3:0.5"))
    def test_refused_before_the_run(self, text):
        with pytest.raises(UsageError, match=program.SCALE_VARIABLE):
            program.scale_of({program.SCALE_VARIABLE: text}, world_size=2)

    @pytest.mark.parametrize("rank", ("2", "7"))
    def test_fail_rank_outside_the_job(self, rank):
        with pytest.raises(UsageError, match="not a rank of this job"):
            distributed.check_fail_rank(2, {distributed.FAIL_RANK_VARIABLE: rank})

    @pytest.mark.parametrize("sample", (float("nan"), float("inf"), 0.0, -3.0, SUBNORMAL, 1e308))
    def test_a_bad_sample_is_a_failed_part(self, sample):
        part = program.sound(Part("gemm_tflops", (10.0, sample, 11.0)))
        assert part.failure and part.samples == () and part.value is None


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


class TestDurationsNoRunCanUse:
    """Mechanism 5: a timeout below what a rendezvous takes is refused; c10d's frames stay off
    the line."""

    @pytest.mark.parametrize("text", ("1e-300", "1e-9", "0.001", "0.5"))
    def test_refused(self, text):
        with pytest.raises(argparse.ArgumentTypeError):
            finite_float(MIN_DIST_TIMEOUT_S, MAX_DIST_TIMEOUT_S, low_inclusive=True)(text)

    def test_node_check_and_benchmark_refuse_it(self):
        from microbench.node.arguments import build_parser
        with pytest.raises(SystemExit) as ended:
            build_parser().parse_args(["--dist-timeout", "1e-6"])
        assert ended.value.code == 2
        with pytest.raises(SystemExit):
            cli.parse_args(["--dist-timeout", "1e-6"])

    def test_frames_dropped(self):
        text = "timed out\nException raised from x at y.cpp:1 (most recent call first):\n" + \
            "".join(f"frame #{i}: f{i}\n" for i in range(41))
        assert distributed._without_frames(text) == "timed out"


class TestABMeasuresSomething:
    """Mechanism 6: only flags that change what is measured make a B."""

    @pytest.mark.parametrize("flags", ("--quiet", "--csv-file other.csv", "--no-files",
                                       "--output-dir elsewhere", "--peak-tflops 5",
                                       "--peak-bandwidth 900", "--dist-timeout 60",
                                       "--quiet --csv-file o.csv --output-dir e"))
    def test_output_only_b_is_a(self, flags):
        with pytest.raises(UsageError, match="B would be A"):
            cli.to_plan(cli.parse_args(["--network", "resnet18", "--ab", flags]))

    def test_a_measured_flag_makes_a_b(self):
        assert cli.to_plan(cli.parse_args(["--network", "resnet18", "--ab", "--nhwc --quiet"])).ab


class TestNotes:
    """The issue's notes: a stopped worker, a garbage claim, a node document's ranks."""

    @pytest.mark.parametrize("code, said", ((143, "stopped by SIGTERM"), (130, "stopped by SIGINT"),
                                            (-9, "killed by SIGKILL"), (0, "exit code 0")))
    def test_how_a_worker_ended(self, code, said):
        assert workers.how_it_ended(code) == said

    @pytest.mark.parametrize("content", (b"garbage", b"", b"\xff\xfe", b"99999999999 zz"))
    def test_a_garbage_claim_expires(self, tmp_path, content):
        target = tmp_path / "r.json"
        claim = tmp_path / ".r.json.claim"
        claim.write_bytes(content)
        assert not writing.claim(str(target))              # fresh: maybe being written
        old = time.time() - 60
        os.utime(claim, (old, old))
        assert writing.claim(str(target))
        writing.release_claims()

    def test_a_rank_named_twice(self):
        gpus = [{"rank": 0}, {"rank": 1}, {"rank": 1}]
        assert "rank 1" in schema.node_problem({"node_check": {"gpus": gpus}})

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
