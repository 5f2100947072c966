"""The host's load read around the timed region of a real run (issue 64): before the loop
starts and after it ends, never inside it; into the JSON (the run's, each trial's, each sweep
row's own), the CSV row and the stored entry's figures, and onto the console. The probe is a fake: no dependence on this machine's load."""
from __future__ import annotations

import csv
import json

import pytest

from conftest import TINY, run_main
from microbench.drivers import benchmark
from microbench.measure import host_load
from microbench.measure.host_load import Busy, HostLoad
from microbench.store.entry import entries_of


class FakeProbe:
    """Readings that say when they were taken; each window is a loaded host whose load
    average grows by one a run, so sweep rows can be told apart."""

    def __init__(self, events):
        self.events, self.windows = events, 0

    def read(self):
        self.events.append("read")
        return len(self.events)

    def between(self, start, end):
        self.windows += 1
        return HostLoad(cores=2, usable_cores=2, start=(4.0 + self.windows, 1.0, 1.0),
                        end=(4.8, 1.0, 1.0), window_s=3.0, others_cpu_percent=140.0,
                        busiest=(Busy("python3", 77, 97.0),))


@pytest.fixture
def probe(monkeypatch):
    """The fake probe every run of the test gets, and the order of its readings and of the
    timed regions."""
    events = []
    fake = FakeProbe(events)
    monkeypatch.setattr(host_load.Probe, "for_launcher", classmethod(lambda cls, name: fake))
    real_measure = benchmark.measure

    def timed(*args, **kwargs):
        events.append("timed region")
        return real_measure(*args, **kwargs)

    monkeypatch.setattr(benchmark, "measure", timed)
    return fake


def test_a_run_reads_the_host_around_its_timed_region_and_prints_it(capfd, tmp_path, probe):
    process = run_main(capfd, "--output-dir", str(tmp_path), "--network", "resnet18", *TINY)
    assert process.returncode == 0, process.stderr
    assert probe.events == ["read", "timed region", "read"]
    assert ("\n  Host load             : 5.0 on 2 cores at start, 4.8 at end; other processes "
            "used 140% of a core while timed: python3 97%\n  Timed with") in process.stdout
    [path] = tmp_path.glob("resnet18_*.json")
    document = json.loads(path.read_text())
    assert document["trials"]["per_trial"][0]["host_load"] == document["host_load"] == {
        "cores": 2, "usable_cores": 2, "start": {"load_1m": 5.0, "load_5m": 1.0, "load_15m": 1.0},
        "end": {"load_1m": 4.8, "load_5m": 1.0, "load_15m": 1.0}, "window_s": 3.0,
        "others_cpu_percent": 140.0, "steal_percent": None,
        "busiest": [{"command": "python3", "pid": 77, "cpu_percent": 97.0}],
        "processes_unknown": None, "run_processes": 1, "judged": True, "loaded": True}
    # The CSV row and the stored entry read it through the figures' registry: the higher load
    # average over the cores, the other processes' share of a core, the verdict.
    with open(tmp_path / "benchmark_summary.csv", newline="") as handle:
        [row] = csv.DictReader(handle)
    assert (row["host_load_per_core"], row["host_others_cpu_pct"], row["host_loaded"]) == (
        "2.50", "140.0", "1")
    [entry] = entries_of(document, str(path))
    assert {key: entry.figures[key] for key in ("host_load_per_core", "host_others_cpu_pct",
                                                "host_loaded")} == {
        "host_load_per_core": 2.5, "host_others_cpu_pct": 140.0, "host_loaded": 1}


def test_each_row_of_a_sweep_keeps_its_own_reading(capfd, tmp_path, probe):
    process = run_main(capfd, "--output-dir", str(tmp_path), "--network", "resnet18", *TINY,
                       "--batch-size", "2,4")
    assert process.returncode == 0, process.stderr
    assert probe.events == ["read", "timed region", "read"] * 2
    loads = {}
    for path in tmp_path.glob("resnet18_*.json"):
        document = json.loads(path.read_text())
        loads[document["config"]["batch_size"]] = document["host_load"]["start"]["load_1m"]
    [sweep] = tmp_path.glob("sweep_*.json")
    rows = json.loads(sweep.read_text())["rows"]
    assert loads == {2: 5.0, 4: 6.0}
    assert [row["result"]["host_load"]["start"]["load_1m"] for row in rows] == [5.0, 6.0]
