"""Summary of benchmarks/fp8_fsdp.sh: FP8 training under FSDP2 against BF16, issue 58's targets.

    python3 -m benchmarks.fp8_fsdp OUTPUT_DIR

Reads one result JSON per run directory, OUTPUT_DIR/<case>_<side>_<round>/*.json, where a case
is ``3b`` or ``8b`` (llama3_3b at seq 4096, llama3_8b at seq 8192, FSDP over every GPU) with
the sides ``bf16``, ``tensorwise`` and ``rowwise``, or ``1gpu`` with the sides ``plain`` (FP8
on one GPU without FSDP) and ``fsdp`` (FP8 under --parallel fsdp with one rank, the same batch).
Rounds alternate the sides in fresh processes (A B C A B C). Prints a line per run (tokens/s
per GPU, the FP8 share of the FLOPs, whether weights were gathered in FP8, compile time), the
median of each side, and one PASS/FAIL line per target of issue 58 whose runs finished (a
target whose runs were not asked for is left out; one asked for that left no result FAILs).
Exit 5 when a target fails.
"""
from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

# (case, side, reference side, least ratio, what issue 58 asks)
TARGETS = (
    ("8b", "tensorwise", "bf16", 1.20, "llama3_8b seq 8192 FSDP, FP8 tensorwise vs BF16"),
    ("8b", "rowwise", "bf16", 1.05, "llama3_8b seq 8192 FSDP, FP8 rowwise vs BF16"),
    ("3b", "tensorwise", "bf16", 1.10, "llama3_3b seq 4096 FSDP, FP8 tensorwise vs BF16"),
    ("1gpu", "fsdp", "plain", 0.95, "one GPU FP8: --parallel fsdp vs no FSDP, same batch"),
)
RUN = re.compile(r"(?P<case>[a-z0-9]+)_(?P<side>[a-z0-9]+)_(?P<round>\d+)")


def load(run_dir: Path) -> dict | None:
    paths = sorted(p for p in run_dir.glob("*.json") if not p.name.startswith(("sweep_", "ab_")))
    return json.loads(paths[-1].read_text()) if paths else None


def tokens_per_gpu(doc: dict) -> float:
    return doc["Throughput [tokens/sec]"] / doc["GPUs"]


def describe(name: str, doc: dict | None) -> str:
    if doc is None:
        return f"{name:<20} no result (see {name}.log)"
    lowp = doc.get("low_precision") or {}
    share = lowp.get("fp8_flops_share")
    fp8 = ("" if not lowp.get("fp8_recipe") else
           f"  FP8 share {'unknown' if share is None else f'{share:.1%}'}"
           f"{', FP8 all-gather' if lowp.get('fp8_all_gather') else ''}")
    compile_s = (doc.get("timing") or {}).get("compile_s")
    compiled = "" if compile_s is None else f"  compile + first step {compile_s:.0f} s"
    return (f"{name:<20} {tokens_per_gpu(doc):>10,.0f} tokens/s per GPU on {doc['GPUs']} "
            f"GPU{'s' if doc['GPUs'] > 1 else ''}{fp8}{compiled}")


def medians(runs: dict[str, dict | None]) -> dict[tuple[str, str], float]:
    sides: dict[tuple[str, str], list[float]] = {}
    for name, doc in runs.items():
        match = RUN.fullmatch(name)
        if match and doc is not None:
            sides.setdefault((match["case"], match["side"]), []).append(tokens_per_gpu(doc))
    return {key: statistics.median(values) for key, values in sides.items()}


def verdicts(runs: dict[str, dict | None]) -> list[tuple[bool, str]]:
    """(passed, line) for every target whose case was run."""
    asked = {RUN.fullmatch(name)["case"] for name in runs if RUN.fullmatch(name)}
    median = medians(runs)
    lines = []
    for case, side, reference, least, what in TARGETS:
        if case not in asked:
            continue
        if (case, side) not in median or (case, reference) not in median:
            lines.append((False, f"FAIL {what}: no finished run of "
                                 f"{side if (case, side) not in median else reference}"))
            continue
        ratio = median[(case, side)] / median[(case, reference)]
        passed = ratio >= least
        lines.append((passed, f"{'PASS' if passed else 'FAIL'} {what}: {ratio:.3f}x "
                              f"(target >= {least:.2f}x; medians {median[(case, side)]:,.0f} / "
                              f"{median[(case, reference)]:,.0f} tokens/s per GPU)"))
    return lines


def main(out: Path) -> int:
    runs = {path.name: load(path) for path in sorted(out.iterdir()) if path.is_dir()}
    for name, doc in runs.items():
        print(describe(name, doc))
    results = verdicts(runs)
    for _, line in results:
        print(line)
    if not results:
        print("no run of a known case finished: see the logs")
        return 1
    return 0 if all(passed for passed, _ in results) else 5


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
