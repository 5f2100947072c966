"""What the hostile-input tests share: the run they attack, what is on disk before and after
(the contract: nothing changed, no temporary), the result files they forge, and the child
processes they start. ``no_launcher_environment`` is autouse: a module that imports it runs
without the launcher variables of the shell that started pytest."""
from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from conftest import ROOT, SCRIPT, TINY, run_main, spawn, stored_result
from microbench.measure import stats
from microbench.output import files
from microbench.platform import writing
from microbench.store import schema


RUN = ["--network", "resnet18", *TINY, "--device", "cpu"]
CHILD_ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                      "TORCHELASTIC_RUN_ID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")
HEADER = writing.csv_lines([files.CSV_COLUMNS], "\r\n").encode()


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (directories do not count)."""
    return {str(path.relative_to(root)): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file()}


def directories_under(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_dir())


def temporaries(root: Path) -> list[str]:
    return [str(path) for path in root.rglob(f"{writing.TEMPORARY_PREFIX}*")]


def assert_disk_unchanged(root: Path, before: dict[str, bytes]) -> None:
    after = snapshot(root)
    assert temporaries(root) == []
    assert sorted(after) == sorted(before), "files appeared or vanished"
    for name, data in before.items():
        assert after[name] == data, f"{name} changed"


@pytest.fixture(autouse=True)
def no_launcher_environment(monkeypatch):
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


FOREIGN_CSV = b"a,b,c\n1,2,3\n"


def stored(config: dict | None = None, **keys) -> bytes:
    """A result file's bytes, matching the schema (conftest.stored_result); ``None`` drops a
    key."""
    document = stored_result(config, **keys)
    return json.dumps({key: value for key, value in document.items()
                       if value is not None}).encode()


def bound_socket(path: Path) -> None:
    """A UNIX socket left on disk (closed: stat still sees it)."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))


OPS_RUN = ["--op", "add", "--input1-dim", "8", "--device", "cpu", "--num-iters", "2",
           "--num-warmup-iters", "0"]


def row(tag: str) -> dict:
    return {column: f"{tag}" for column in files.CSV_COLUMNS}


def child(argv, **kwargs) -> subprocess.Popen:
    return spawn([sys.executable, str(SCRIPT), *argv], cwd=ROOT,
                 env={**os.environ, **CHILD_ENV, **kwargs.pop("env", {})},
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def hostile_result(name: str, device: str = "AMD EPYC", **keys) -> dict:
    """A schema-valid result whose model and device are named ``name`` and ``device`` (its
    time of its own, so that two of them are two results)."""
    document = stored_result({"network": name}, **keys)
    document["Name"] = name
    document["model"] = {**document["model"], "name": name}
    second = next(_SECONDS) % 60
    document["env"] = {**document["env"], "device_name": device, "cpu": device,
                       "time_utc": f"2026-11-24T20:35:{second:02d}+00:00"}
    return document


_SECONDS = itertools.count()


def write_results(directory: Path, documents: dict[str, dict]) -> Path:
    directory.mkdir(exist_ok=True)
    for file_name, document in documents.items():
        (directory / file_name).write_text(json.dumps(document))
    return directory


def report_of(capfd, *argv):
    from microbench.report import command
    return run_main(capfd, *argv, main=command.main)


DATA_RUN = [*RUN, "--data", "loader", "--data-images", "8"]
FAST = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
# The smallest positive float (a subnormal): no figure a run measures, whatever its nature.
SUBNORMAL = 5e-324


def refuse_starts_after(monkeypatch, allowed: int, error: BaseException) -> list:
    """Every multiprocessing start after the first ``allowed`` fails with ``error`` (a fork
    refused by a process limit, which root's ``ulimit -u`` cannot show); the started ones."""
    from multiprocessing.process import BaseProcess
    real_start, started = BaseProcess.start, []

    def start(self):
        if len(started) >= allowed:
            raise error
        real_start(self)
        started.append(self.pid)
    monkeypatch.setattr(BaseProcess, "start", start)
    return started


def result_named(name: str, second: int = 0, config: dict | None = None, **keys) -> dict:
    """A schema-valid result whose network is ``name`` (a time of its own: two are two)."""
    document = stored_result({"network": name, **(config or {})}, **keys)
    document["Name"] = name
    document["model"] = {**document["model"], "name": name}
    document["env"] = {**document["env"], "time_utc": f"2026-11-24T20:35:{second:02d}+00:00"}
    return document


def ab_summary(a=(100.0, 110.0, 105.0), b=(200.0, 190.0, 210.0), flags_b="--nhwc",
               a_result="A.json", b_result="B.json", unit="images/s") -> dict:
    """An A/B summary as --ab writes it (drivers/ab.document), from per-round values."""
    result = stats.paired_ab(list(a), list(b))
    return writing.json_safe({"schema_version": schema.SCHEMA_VERSION, "ab": {
        **result.to_dict(), "flags_b": flags_b, "a_result": a_result, "b_result": b_result,
        "a_trials": {**stats.TrialStats(tuple(a)).to_dict(), "unit": unit},
        "b_trials": {**stats.TrialStats(tuple(b)).to_dict(), "unit": unit}}})


def write_ab(folder: Path, summary: dict | None = None, sides: bool = True) -> Path:
    """An A/B summary with its two sides' results beside it; the summary's path."""
    folder.mkdir(parents=True, exist_ok=True)
    summary = summary or ab_summary()
    if sides:
        (folder / "A.json").write_text(json.dumps(result_named("resnet18", 1)))
        (folder / "B.json").write_text(json.dumps(result_named("resnet18", 2,
                                                               config={"nhwc": True})))
    path = folder / "ab_A_vs_B.json"
    path.write_text(json.dumps(summary))
    return path
