"""Distributed runs and the node check (issue 57): the test hooks refuse before the run what
cannot work (a scale, a failing rank outside the job), a sample that is no measurement makes a
failed part, a node document naming one rank twice is refused, a --dist-timeout below what a
rendezvous takes is refused, and c10d's frames stay off the error line. In-process.

(Part of the hostile-input tests, split from one file by what is attacked.)"""
from __future__ import annotations

import argparse

import pytest

from microbench.node import program
from microbench.node.program import Part
from microbench.plan import cli
from microbench.platform import distributed
from microbench.platform.errors import UsageError
from microbench.settings.argtypes import MAX_DIST_TIMEOUT_S, MIN_DIST_TIMEOUT_S, finite_float
from microbench.store import schema
from support.hostile import SUBNORMAL
from support.hostile import no_launcher_environment  # noqa: F401 (autouse: this module's)


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


class TestNodeDocuments:
    """A node document that names one rank twice is refused."""

    def test_a_rank_named_twice(self):
        gpus = [{"rank": 0}, {"rank": 1}, {"rank": 1}]
        assert "rank 1" in schema.node_problem({"node_check": {"gpus": gpus}})
