"""A kind of run and a parallel strategy are their code and their name (issue 43): a scratch
scenario registered beside the real ones is taken by ``--mode``, runs, writes a result the
schema takes, and the report reads it; a scratch strategy is taken by ``--parallel``, chosen
by resolve, and named in a result the schema takes."""
from __future__ import annotations

import json

import pytest

from conftest import TINY, run_main, stored_result
from microbench import scenarios
from microbench.platform.errors import UsageError
from microbench.report import command
from microbench.scenarios import parallel
from microbench.scenarios.inference import Inference
from microbench.settings import config
from microbench.store import schema

SCRATCH = "scratch"


class Scratch(Inference):
    """A kind of run written for this test: inference's work under a name of its own."""

    mode = SCRATCH


class Spread(parallel.Strategy):
    """A strategy written for this test: one process's work under a name of its own."""

    name = SCRATCH


@pytest.fixture
def fresh_schema():
    """The schema read again after the names change, and again once they are restored."""
    schema.schema.cache_clear()
    schema._validator.cache_clear()
    yield
    schema.schema.cache_clear()
    schema._validator.cache_clear()


@pytest.fixture
def scratch_mode(monkeypatch, fresh_schema):
    """The two places a new kind of run is written: its name in the settings, its scenario."""
    monkeypatch.setattr(config, "MODES", (*config.MODES, SCRATCH))
    monkeypatch.setitem(scenarios.SCENARIOS, SCRATCH, Scratch)


@pytest.fixture
def scratch_strategy(monkeypatch, fresh_schema):
    monkeypatch.setattr(config, "PARALLEL", (*config.PARALLEL, SCRATCH))
    monkeypatch.setitem(parallel.STRATEGIES, SCRATCH, Spread())


def test_a_result_of_an_unknown_mode_is_refused(fresh_schema):
    with pytest.raises(UsageError, match="scratch"):
        schema.validate_result(stored_result({"mode": SCRATCH}), "scratch.json")


def test_a_registered_scenario_runs_and_the_report_reads_its_result(scratch_mode, tmp_path,
                                                                    capfd):
    ran = run_main(capfd, "--network", "resnet18", "--mode", SCRATCH, *TINY, "--quiet",
                   "--output-dir", str(tmp_path))
    assert ran.returncode == 0, ran.stderr
    [path] = tmp_path.glob("*_scratch_*.json")
    document = json.loads(path.read_text())
    assert document["config"]["mode"] == SCRATCH
    schema.validate_result(document, str(path))
    read = run_main(capfd, str(path), "--format", "json", main=command.main)
    assert read.returncode == 0, read.stderr
    assert SCRATCH in read.stdout


def test_a_registered_strategy_is_taken_resolved_and_stored(scratch_strategy, tmp_path,
                                                           capfd):
    ran = run_main(capfd, "--network", "resnet18", "--parallel", SCRATCH, *TINY, "--quiet",
                   "--output-dir", str(tmp_path))
    assert ran.returncode == 0, ran.stderr
    [path] = tmp_path.glob("*.json")
    document = json.loads(path.read_text())
    assert (document["config"]["parallel"], document["parallel"]["mode"]) == (SCRATCH, SCRATCH)
    schema.validate_result(document, str(path))
