"""A kind of run and a parallel strategy are their code and their name (issue 43): a scratch
scenario registered beside the real ones is taken by ``--mode``, runs, writes a result the
schema takes, and the report reads it; a scratch strategy is taken by ``--parallel``, chosen
by resolve, and named in a result the schema takes; one whose ranks share a batch in pairs (a
data-parallel degree of half the world, as tensor parallel would have) gets the batch split by
that degree, and the global batch and per-device FLOPs follow (issue 62)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from conftest import TINY, run_main, stored_result
from microbench.measure.flops import PeakChoice
from microbench.measure.results import ProcessResult, RankRecord, Trial
from microbench.measure.timing import Measurement
from microbench.output.summary import Summary
from microbench.plan import spec as spec_mod
from microbench.settings.config import BenchConfig
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


class Paired(parallel.Strategy):
    """A strategy written for this test: ranks work in pairs on one share of the batch."""

    name = SCRATCH

    def data_parallel(self, config, launch):
        return launch.world_size // 2


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


@pytest.fixture
def paired_strategy(monkeypatch, fresh_schema):
    monkeypatch.setattr(config, "PARALLEL", (*config.PARALLEL, SCRATCH))
    monkeypatch.setitem(parallel.STRATEGIES, SCRATCH, Paired())


FOUR_RANKS = {"TORCHELASTIC_RUN_ID": "x", "RANK": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "4",
              "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


def test_a_strategy_whose_ranks_share_a_batch_splits_it_by_its_degree(paired_strategy):
    ran = spec_mod.resolve(BenchConfig(network="resnet18", parallel=SCRATCH, batch_size=4,
                                       device="cpu"), FOUR_RANKS)
    launch = ran.launch
    assert (launch.world_size, launch.data_parallel, launch.sharing_a_batch) == (4, 2, 2)
    assert (ran.batch_size, launch.global_batch) == (2, 4)        # not 1 a rank over 4
    with pytest.raises(UsageError, match="--batch-size 3 does not split evenly across 2 "
                                         "data-parallel groups of ranks"):
        spec_mod.resolve(BenchConfig(network="resnet18", parallel=SCRATCH, batch_size=3,
                                     device="cpu"), FOUR_RANKS)
    # Under DDP the same launch splits over every rank.
    ddp = spec_mod.resolve(BenchConfig(network="resnet18", batch_size=4, device="cpu"),
                           FOUR_RANKS)
    assert (ddp.batch_size, ddp.launch.data_parallel) == (1, 4)


def test_ranks_sharing_a_batch_count_it_once_and_share_its_flops():
    result = ProcessResult(times=Measurement([10.0, 10.0]), losses=[], warmup_s=0.0,
                           first_iteration_s=None, peak_allocated_mb=None,
                           peak_reserved_mb=None, parameters=1, flops_per_iteration=8 * 10**9)
    records = [RankRecord(rank, rank % 2, "h", "cpu", 2, (10.0, 10.0), None, None)
               for rank in range(4)]
    spec = SimpleNamespace(launch=SimpleNamespace(distributed=True, rank=0),
                           scaling_baseline_img_s=None, notes=(), peak=PeakChoice(None, "test"),
                           scenario=SimpleNamespace(units_per_item=1, counts_tokens=False))
    summary = Summary(spec, {}, [Trial.of_ranks(result, records, sharing_a_batch=2)])
    assert (summary.global_batch, summary.data_parallel, summary.world_size) == (4, 2, 4)
    assert summary.throughput == pytest.approx(4 * 2 / 0.020)     # 4 items an iteration
    assert summary.per_device_throughput == pytest.approx(summary.throughput / 4)
    # A rank counted the model at its share; the pair split that work.
    assert summary.utilization.flops_per_iteration == 4 * 10**9
