#!/usr/bin/env python3
"""GPU check of the measured peaks (issue 35): is the probe as fast as a hand-written loop, is it
short, and does it leave the timed run alone?

In one job, on one GPU:

1. **The probe** (``microbench.ops.peaks.measure``, what ``--measure-peaks 1`` runs before a model's
   timed region): bf16 GEMM 8192^3 and a 1 GiB device copy, with the clocks and power limit read
   by the telemetry source meanwhile; its wall time, inputs and warm-up included.
2. **A tight loop** written here, not the tool's code: ``torch.matmul`` of two 8192 x 8192 bf16
   matrices, 50 calls back to back between two CUDA events after 10 warm-up calls, and a 1 GiB
   fp32 ``copy_`` likewise (bytes = read + written, the probe's basis).
3. **resnet50 training with the probe on and off**: the tool's ``--ab "--measure-peaks 0"``
   (A: the default, probe on; B: off), alternating fresh processes, paired verdict at 95%.

Targets (issue 35): probe GEMM and bandwidth >= 0.95x the tight loop's; probe <= 5 s; the A/B
finds no difference ("no difference detected", or "same within N%": the ratio's interval inside
the tolerance, which says it more strongly). Prints PASS or FAIL for each and writes everything
as JSON.

Usage (from the repository root)::

    python3 -m benchmarks.peaks_vs_loop --output results/peaks_vs_loop.json

Exit codes: 0 measured (whatever the verdicts), 4 no GPU, 2 bad flags.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
import time

import torch

from microbench.ops import peaks
from microbench.measure import stats, telemetry
from microbench.platform.devices import device_name, synchronize
from microbench.platform.errors import BenchmarkError, MissingEnvironment
from microbench.platform import writing

N = 8192
COPY_ELEMENTS = 1 << 28            # fp32: 1 GiB, as the probe's copy
LOOP_CALLS, LOOP_WARMUP = 50, 10
RATIO_TARGET = 0.95
PROBE_SECONDS_TARGET = 5.0
AB_FLAGS = ["--network", "resnet50", "--batch-size", "128", "--amp", "--iterations", "30",
            "--warmup", "10", "--repeat", "5"]


def tight_loop_ms(call, calls: int = LOOP_CALLS, warmup: int = LOOP_WARMUP) -> float:
    """Milliseconds per call of ``calls`` back-to-back calls between two CUDA events."""
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def loop_rates(device: torch.device) -> dict:
    a = torch.randn(N, N, dtype=torch.bfloat16, device=device)
    b = torch.randn(N, N, dtype=torch.bfloat16, device=device)
    gemm_ms = tight_loop_ms(lambda: torch.matmul(a, b))
    del a, b
    source = torch.rand(COPY_ELEMENTS, device=device)
    destination = torch.empty_like(source)
    copy_ms = tight_loop_ms(lambda: destination.copy_(source))
    del source, destination
    torch.cuda.empty_cache()
    return {"gemm_ms": gemm_ms, "tflops": 2 * N**3 / (gemm_ms / 1e3) / 1e12,
            "copy_ms": copy_ms, "gb_per_s": 2 * COPY_ELEMENTS * 4 / (copy_ms / 1e3) / 1e9}


def ab_run(output_dir: str) -> dict:
    """The tool's own A/B in a child process: probe on (A) against probe off (B)."""
    command = [sys.executable, "micro_benchmarking_pytorch.py", *AB_FLAGS,
               "--ab", "--measure-peaks 0", "--output-dir", output_dir]
    started = time.perf_counter()
    ran = subprocess.run(command, capture_output=True, text=True, timeout=540)
    text = ran.stdout + ran.stderr
    print(text[-6000:])
    return {"command": " ".join(command[1:]), "returncode": ran.returncode,
            "seconds": time.perf_counter() - started,
            "verdict": ab_verdict(text), "output_tail": text[-4000:]}


def ab_verdict(text: str) -> str | None:
    """The verdict of the tool's ``A/B:`` line, in the shared words (stats.VERDICTS): faster,
    slower, "same within N%" or "no difference detected"; None where there is no such line."""
    found = re.search(r"^A/B: .*?: (no difference detected|same within [\d.]+%|faster|slower)",
                      text, re.M)
    return found.group(1) if found else None


def probe_left_alone(verdict_text: str | None) -> bool:
    """The target: turning the probe off changes nothing that can be seen. "same within N%"
    (the interval inside the tolerance) says it more strongly than "no difference detected"."""
    return verdict_text == stats.NO_DIFFERENCE or (verdict_text or "").startswith("same within")


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True, metavar="PATH", help="JSON file to write")
    parser.add_argument("--skip-ab", action="store_true", help="leave out the resnet50 A/B")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise MissingEnvironment("no GPU: this check needs one")
    device = torch.device("cuda", torch.cuda.current_device())
    source, note = telemetry.open_source(device)

    started = time.perf_counter()
    measured = peaks.measure(device, torch.bfloat16, "bf16", source)
    probe_wall = time.perf_counter() - started
    loop = loop_rates(device)
    gemm_ratio = measured.tflops / loop["tflops"] if measured.tflops else 0.0
    copy_ratio = measured.gbs / loop["gb_per_s"] if measured.gbs else 0.0
    if source is not None:
        source.close()

    print(f"device: {device_name(device)}; torch {torch.__version__}; "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"during the probe: {measured.clocks.describe() if source else note}")
    print(f"probe GEMM  {measured.tflops:8.1f} TFLOP/s   tight loop {loop['tflops']:8.1f}   "
          f"ratio {gemm_ratio:.3f}  {verdict(gemm_ratio >= RATIO_TARGET)} (>= {RATIO_TARGET})")
    print(f"probe copy  {measured.gbs:8.1f} GB/s      tight loop {loop['gb_per_s']:8.1f}   "
          f"ratio {copy_ratio:.3f}  {verdict(copy_ratio >= RATIO_TARGET)} (>= {RATIO_TARGET})")
    print(f"probe time  {probe_wall:.2f} s (its own count {measured.seconds:.2f} s)  "
          f"{verdict(probe_wall <= PROBE_SECONDS_TARGET)} (<= {PROBE_SECONDS_TARGET:g} s)")
    result = {"time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "device_name": device_name(device), "torch": torch.__version__,
              "probe": measured.to_dict(), "probe_wall_s": probe_wall, "tight_loop": loop,
              "gemm_ratio": gemm_ratio, "copy_ratio": copy_ratio,
              "verdicts": {"gemm": gemm_ratio >= RATIO_TARGET,
                           "bandwidth": copy_ratio >= RATIO_TARGET,
                           "probe_seconds": probe_wall <= PROBE_SECONDS_TARGET}}
    if not args.skip_ab:
        ab = ab_run(os.path.join(os.path.dirname(os.path.abspath(args.output)), "ab_results"))
        same = ab["returncode"] == 0 and probe_left_alone(ab["verdict"])
        print(f"resnet50 A/B (probe on vs --measure-peaks 0): {ab['verdict']}  {verdict(same)}")
        result["ab"], result["verdicts"]["ab"] = ab, same
    writing.write_json(args.output, result)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchmarkError as error:
        print(error, file=sys.stderr)
        sys.exit(error.exit_code)
