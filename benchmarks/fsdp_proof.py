"""Summary of benchmarks/fsdp_proof.sh: FSDP with one rank against plain training, and llama_1b's
MFU on torchtitan's basis beside the counted one.

    python3 -m benchmarks.fsdp_proof OUTPUT_DIR

Reads one result JSON per run directory (OUTPUT_DIR/<run>/*.json): ``plain_N`` and ``fsdp_N``
(alternated, N = 1, 2, 3) give the ratio of the median tokens/s, checked against issue 24's
target (>= 0.97); every run also gets its MFU on torchtitan's basis, computed here from its
tokens/s per GPU, its sequence length and the peak the run divided by, and checked against the
figure the run stored (``parallel.torchtitan_flops.mfu``): a difference is printed as a mismatch.
The multi-GPU script (benchmarks/fsdp_multi_gpu.sh) uses the same table (``--table-only``).
"""
from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

from microbench.models.archs import llama
from microbench.measure.flops import PeakChoice
from microbench.measure.token_flops import TokenUtilization, llama_flops

TARGET = 0.97


def load(run_dir: Path) -> dict | None:
    paths = sorted(run_dir.glob("*.json"))
    return json.loads(paths[-1].read_text()) if paths else None


def tokens_per_gpu(doc: dict) -> float:
    return doc["Throughput [tokens/sec]"] / doc["GPUs"]


def torchtitan_mfu(doc: dict) -> float | None:
    model = doc["model"]
    config = llama.PRESETS[model["name"]].with_overrides(seq_len=model["seq_len"],
                                                          vocab_size=model["vocab_size"])
    flops = doc.get("flops") or {}
    peak = PeakChoice(flops.get("peak_tflops"), flops.get("peak_source", "unknown"))
    return TokenUtilization(llama_flops(config), tokens_per_gpu(doc), peak).mfu


def stored_mfu(doc: dict) -> float | None:
    return ((doc.get("parallel") or {}).get("torchtitan_flops") or {}).get("mfu")


def percent(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.1%}"


def main(out: Path, table_only: bool = False) -> int:
    runs = {path.name: doc for path in sorted(out.iterdir()) if path.is_dir()
            for doc in [load(path)] if doc is not None}
    print(f"{'run':<22} {'network':<10} {'parallel':<8} {'GPUs':>4} {'tokens/s/GPU':>12} "
          f"{'peak GB':>8} {'MFU counted':>11} {'MFU titan':>10}")
    for name, doc in runs.items():
        counted = (doc.get("flops") or {}).get("mfu")
        peak_gb = (doc["memory"].get("peak_allocated_mb") or 0) / 1e3     # the JSON's MB: 1e6 B
        titan, stored = torchtitan_mfu(doc), stored_mfu(doc)
        mismatch = ("" if titan is None or stored is None or abs(titan - stored) < 1e-6
                    else f"  MISMATCH: the run stored {percent(stored)}")
        print(f"{name:<22} {doc['model']['name']:<10} "
              f"{(doc.get('parallel') or {}).get('mode', '?'):<8} {doc['GPUs']:>4} "
              f"{tokens_per_gpu(doc):>12.0f} {peak_gb:>8.1f} {percent(counted):>11} "
              f"{percent(titan):>10}{mismatch}")
    if table_only:
        return 0
    plain = [tokens_per_gpu(doc) for name, doc in runs.items() if re.fullmatch(r"plain_\d+", name)]
    fsdp = [tokens_per_gpu(doc) for name, doc in runs.items() if re.fullmatch(r"fsdp_\d+", name)]
    if not plain or not fsdp:
        print("no plain/fsdp pair finished: see the logs")
        return 1
    ratio = statistics.median(fsdp) / statistics.median(plain)
    verdict = "meets" if ratio >= TARGET else "MISSES"
    print(f"FSDP (1 rank) / plain, median of {len(fsdp)} and {len(plain)} alternated runs: "
          f"{ratio:.3f} ({verdict} the {TARGET} target)")
    return 0 if ratio >= TARGET else 5


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), "--table-only" in sys.argv[2:]))
