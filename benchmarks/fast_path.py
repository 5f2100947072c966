#!/usr/bin/env python3
"""The fast path against the older tool and this tool's own defaults, on one GPU.

Each configuration runs as its own process (what a user types), in rounds that alternate the
configurations (A B C ... A B C ...), so that drift of clocks and temperature hits all alike; a
configuration's number is the median of its rounds. The older ROCm tool
(ROCm/pytorch-micro-benchmarking, a copy of its files in OLDTOOL_DIR, never part of this
repository) runs its best flag combination. Compiled configurations pay compilation in their
first round only: later rounds find inductor's caches. A deadline stops starting new runs, so
what finished is always reported.

    OLDTOOL_DIR=.gl/oldtool python3 -m benchmarks.fast_path --rounds 2 --output fast.json
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from microbench.platform import writing

ROOT = Path(__file__).resolve().parent.parent
RESNET = ["--network", "resnet50", "--batch-size", "128"]
# name: (tool, flags); "old" runs the older tool, "new" this one.
CONFIGS = {
    "older tool --amp --nhwc --compile": ("old", RESNET + ["--amp", "--nhwc", "--compile"]),
    "this tool --amp --nhwc": ("new", RESNET + ["--amp", "--nhwc"]),
    "this tool --preset fast": ("new", RESNET + ["--preset", "fast"]),
    "older tool --amp --nhwc inference": ("old", RESNET + ["--amp", "--nhwc", "--mode",
                                                           "inference"]),
    "this tool --preset fast inference": ("new", RESNET + ["--preset", "fast", "--mode",
                                                           "inference"]),
}
# Asked once each, in the first round: is cudnn.benchmark what separates compile from eager?
PROBES = {
    "this tool --amp --nhwc --compile": ("new", RESNET + ["--amp", "--nhwc", "--compile"]),
}
THROUGHPUT = re.compile(r"^Throughput \[img/sec\] : ([0-9.]+)", re.MULTILINE)


def command(tool: str, flags: list[str], iterations: int, oldtool: Path) -> tuple[list, Path]:
    if tool == "old":
        return ([sys.executable, str(oldtool / "micro_benchmarking_pytorch.py"), *flags,
                 "--iterations", str(iterations)], oldtool)
    return ([sys.executable, str(ROOT / "micro_benchmarking_pytorch.py"), *flags,
             "--iterations", str(iterations), "--warmup", "10", "--quiet", "--no-files"], ROOT)


def run_one(name: str, tool: str, flags: list[str], iterations: int, oldtool: Path,
            log: Path) -> float | None:
    argv, cwd = command(tool, flags, iterations, oldtool)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    with log.open("a") as handle:
        handle.write(f"\n===== {name}: {' '.join(argv)}\n{done.stdout}\n{done.stderr[-4000:]}\n")
    match = THROUGHPUT.search(done.stdout)
    value = float(match.group(1)) if done.returncode == 0 and match else None
    print(f"  {name:<52} {value if value is None else round(value, 1)} img/s "
          f"({time.perf_counter() - start:.0f} s, exit {done.returncode})", flush=True)
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--deadline-s", type=float, default=540.0)
    parser.add_argument("--output", default="fast_path.json")
    parser.add_argument("--log", default="fast_path.log")
    args = parser.parse_args()
    oldtool = Path(os.environ.get("OLDTOOL_DIR", ROOT / ".gl" / "oldtool")).resolve()
    configs = {name: c for name, c in CONFIGS.items() if c[0] == "new" or oldtool.exists()}
    results: dict[str, list[float]] = {name: [] for name in {**configs, **PROBES}}
    start, log = time.perf_counter(), Path(args.log)
    for round_index in range(args.rounds):
        print(f"round {round_index + 1}", flush=True)
        todo = {**configs, **(PROBES if round_index == 0 else {})}
        for name, (tool, flags) in todo.items():
            if time.perf_counter() - start > args.deadline_s:
                print("  deadline reached: no more runs", flush=True)
                break
            value = run_one(name, tool, flags, args.iterations, oldtool, log)
            if value is not None:
                results[name].append(value)
    medians = {name: statistics.median(v) for name, v in results.items() if v}
    print("\nmedian img/s over rounds:")
    for name, value in medians.items():
        print(f"  {name:<52} {value:9.1f}  {results[name]}")
    ratios = _ratios(medians)
    for label, value in ratios.items():
        print(f"{label}: {value:.3f}")
    writing.write_json(args.output, {"rounds": results, "medians": medians, "ratios": ratios})
    return 0


def _ratios(medians: dict[str, float]) -> dict[str, float]:
    pairs = {
        "preset fast / older tool best (training)": ("this tool --preset fast",
                                                     "older tool --amp --nhwc --compile"),
        "preset fast / this tool --amp --nhwc (training)": ("this tool --preset fast",
                                                           "this tool --amp --nhwc"),
        "compile / eager, this tool": ("this tool --amp --nhwc --compile",
                                       "this tool --amp --nhwc"),
        "preset fast / older tool --amp --nhwc (inference)": (
            "this tool --preset fast inference", "older tool --amp --nhwc inference"),
    }
    return {label: medians[a] / medians[b] for label, (a, b) in pairs.items()
            if a in medians and b in medians}


if __name__ == "__main__":
    sys.exit(main())
