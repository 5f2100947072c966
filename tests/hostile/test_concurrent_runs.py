"""Runs sharing one output directory (issues 46 and 57): of runs claiming one result name at
once exactly one gets it, a live run's claim sends another run to the next name, a dead
process's claim (or a garbage one, once old) is taken over, claims are given back, and new names
never replace a file.

(Part of the hostile-input tests, split from one file by what is attacked.)"""
from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time

import pytest

from conftest import TINY, run_main
from microbench.platform import writing
from support.hostile import no_launcher_environment  # noqa: F401 (autouse: this module's)

RUN = ["--network", "resnet18", *TINY, "--device", "cpu", "--mode", "inference"]


# ---------------------------------------------------------------- one name, one run

def _claim_at_once(path: str, barrier, results) -> None:
    barrier.wait()
    results.put((os.getpid(), writing.claim(path)))


def test_of_processes_claiming_one_name_at_once_exactly_one_gets_it(tmp_path):
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(4), context.Queue()
    path = str(tmp_path / "out" / "resnet18_inference_fp32_b2.json")
    workers = [context.Process(target=_claim_at_once, args=(path, barrier, results))
               for _ in range(4)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=60)[1] for _ in workers]
    for worker in workers:
        worker.join(60)
    assert sorted(outcomes) == [False, False, False, True]


def test_a_live_runs_claim_sends_this_run_to_another_name(tmp_path, capfd):
    out = tmp_path / "out"
    out.mkdir()
    # Another run of this host, alive (this test's parent), holds the default name.
    (out / ".resnet18_inference_fp32_b2.json.claim").write_text(
        f"{os.getppid()} {writing._HOST}")
    ran = run_main(capfd, *RUN, "--output-dir", str(out))
    assert ran.returncode == 0, ran.stderr
    assert (out / "resnet18_inference_fp32_b2-2.json").exists()
    assert not (out / "resnet18_inference_fp32_b2.json").exists()
    assert "claimed by another run" in ran.stdout
    assert not list(out.glob(".resnet18_inference_fp32_b2-2.json.claim"))   # given back


def test_a_claim_of_a_dead_process_is_taken_over_and_claims_are_given_back(tmp_path, capfd):
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    (out / ".resnet18_inference_fp32_b2.json.claim").write_text(f"{dead} {writing._HOST}")
    ran = run_main(capfd, *RUN, "--output-dir", str(out))
    assert ran.returncode == 0, ran.stderr
    assert (out / "resnet18_inference_fp32_b2.json").exists()
    assert not [p for p in os.listdir(out) if p.endswith(".claim")]


def test_new_names_never_replace_and_are_claimed(tmp_path):
    first = writing.claim_new(str(tmp_path / "sweep_20261126T000000Z.json"))
    second = writing.claim_new(str(tmp_path / "sweep_20261126T000000Z.json"))
    assert first != second and second.endswith("-2.json")
    writing.release_claims()
    assert not list(tmp_path.glob(".*.claim"))


class TestClaimsThatExpire:
    """A claim file that holds no live run's (garbage, or empty) is taken once it is old."""

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
