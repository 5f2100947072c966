#!/usr/bin/env python3
"""How long ``microbench-report --history`` takes over 10,000 result files (issue 55's target:
at most 10 s on the 2-core CPU machine). A benchmark, not a test: it writes the files once into
a folder, then times the whole command in this process (finding, checking, parsing and
validating every file, grouping, change points, what changed, the table) and, apart, the
history's own part over the entries already read.

The files: ``--identities`` run identities (networks x batch sizes) of ``--files / identities``
nights each, every identity 8% slower from its middle night on with a torch version change
there, in 1% noise, and one night a quarter of the way in 20% slow (an outlier, not a change),
so every series has one change to find and name and one night to leave alone.

    python3 -m benchmarks.history_scale --files 10000 --folder /tmp/history_scale

Prints the times in seconds (wall clock and this process's CPU time: on a shared machine the
second is what the command costs), the CPU it ran on (its model name, cores) and the load.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import io
import json
import math
import os
import random
import time
from pathlib import Path

from microbench.report import command
from microbench.store import collection, history

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "history" / \
    "v2_62b9ba6_training.json"
NETWORKS = ("resnet18", "resnet50", "vgg16", "densenet121", "mobilenet_v2")


def _document(base: dict, network: str, batch: int, night: int, value: float,
              torch_version: str) -> dict:
    document = copy.deepcopy(base)
    # Per-iteration times that give the headline, so each point's bar lies around it.
    scale = base["Throughput [img/sec]"] * batch / base["Mini batch size [img]"] / value
    document["timing"]["samples_ms"] = [sample * scale for sample in
                                        base["timing"]["samples_ms"]]
    day = datetime.date(2025, 1, 1) + datetime.timedelta(days=night)
    document.update({"Name": network, "Throughput [img/sec]": value,
                     "Mini batch size [img]": batch, "Mini batch size [img/gpu]": batch})
    document["config"].update(network=network, batch_size=batch, label=f"nightly-{day}")
    document["model"]["name"] = network
    document["env"].update(time_utc=f"{day}T02:00:00+00:00", torch=torch_version)
    return document


def write_files(folder: Path, files: int, identities: int, seed: int = 0) -> None:
    base = json.loads(FIXTURE.read_text())
    rng = random.Random(seed)
    nights = files // identities
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(identities):
        network, batch = NETWORKS[number % len(NETWORKS)], 2 ** (number // len(NETWORKS) + 1)
        for night in range(nights):
            after = night >= nights // 2
            outlier = 0.8 if night == nights // 4 else 1.0
            value = 100.0 * (0.92 if after else 1.0) * outlier * math.exp(rng.gauss(0, 0.01))
            document = _document(base, network, batch, night, value,
                                 "2.15.0" if after else "2.14.1")
            (folder / f"{network}_b{batch}_{night:05d}.json").write_text(json.dumps(document))


def cpu() -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as info:
        model = next((line.split(":", 1)[1].strip() for line in info
                      if line.startswith("model name")), model)
    return f"{model}, {os.cpu_count()} cores"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--identities", type=int, default=20)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/history_scale"))
    args = parser.parse_args(argv)
    if not any(args.folder.glob("*.json")):
        started = time.perf_counter()
        write_files(args.folder, args.files, args.identities)
        print(f"wrote {args.files} files in {time.perf_counter() - started:.1f} s")
    started, cpu_started = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()) as table:
        code = command.main([str(args.folder), "--history", "--format", "markdown"])
    whole, whole_cpu = time.perf_counter() - started, time.process_time() - cpu_started
    found = collection.read(collection.input_files([str(args.folder)]))
    started = time.perf_counter()
    past = history.history(found.entries)
    own = time.perf_counter() - started
    found_changes = sum(len(series.steps) for series in past.series)
    print(f"--history over {len(found.entries)} files: {whole:.2f} s in all, {whole_cpu:.2f} s "
          f"of CPU (exit {code}); "
          f"the history's own part {own:.2f} s; {len(past.series)} series, "
          f"{found_changes} confirmed changes; {len(table.getvalue().splitlines())} lines")
    print(f"CPU: {cpu()}; load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
