#!/usr/bin/env python3
"""GPU proof for TorchTensorOpsBench: are its bandwidth and FLOP/s numbers close to the hardware?

In one process, on one GPU:

1. **Device copy bandwidth**: ``dst.copy_(src)`` of two 1 GiB fp32 tensors, bytes = read + written
   (2 GiB a call), each call timed with device events; the median gives the copy GB/s. This is
   the practical ceiling of a streaming kernel on this device, measured rather than assumed.
2. **Large fp32 add through the op bench's own code path** (``runner.make_case`` +
   ``runner.measure_case``, exactly what ``microbench-ops --op add`` runs) at
   256-1024-1024 (1 GiB per tensor; bytes = 12 per element: two reads and one write).
   Target: add GB/s >= 85% of the copy GB/s.
3. **bf16 matmul 8192^3** through the same path; TFLOP/s = 2*8192^3 / median time, against the
   dense datasheet peak from ``microbench.measure.flops``. Target: >= 70% of it.

Predicted numbers (datasheets in microbench/measure/flops.py):

* H100 SXM: HBM3 3.35 TB/s datasheet; a device copy typically reaches ~2.9-3.1 TB/s (85-93%);
  the add should be within a few % of the copy (ratio ~0.95-1.0). bf16 dense peak 989.5 TFLOP/s;
  cuBLAS at 8192^3 typically sustains ~650-780 TFLOP/s (66-79%, power and clock bound).
* H200 SXM: HBM3e 4.8 TB/s datasheet; copy ~4.0-4.4 TB/s; add ratio ~0.95-1.0. Same bf16 peak
  989.5 TFLOP/s; 8192^3 bf16 ~700-800 TFLOP/s (the H200's higher power limit helps clocks).

Usage (from the repository root)::

    python3 -m benchmarks.ops_gpu_proof --output results/ops_proof.json

Prints a short table and writes the numbers, targets and verdicts as JSON (written whole).
Exit codes: 0 measured (whatever the verdicts), 4 no GPU, 2 bad flags.
"""
from __future__ import annotations

import argparse
import datetime
import sys

import torch

from microbench.measure import flops
from microbench.platform.devices import clock_name, synchronize
from microbench.platform.errors import BenchmarkError, MissingEnvironment
from microbench.ops import report, runner
from microbench.platform import writing
from microbench.measure.timing import time_calls

COPY_ELEMENTS = 256 * 1024 * 1024  # fp32: 1 GiB per tensor, the same as each add operand
ADD_SHAPE = "256-1024-1024"
MATMUL_SIZE = 8192
MATMUL_SHAPE = f"{MATMUL_SIZE}-{MATMUL_SIZE}"
ADD_TARGET = 0.85     # of the measured copy bandwidth
MATMUL_TARGET = 0.70  # of the datasheet dense bf16 peak


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Check the op bench's GB/s and TFLOP/s "
                                                 "against a device copy and the datasheet.")
    parser.add_argument("--output", required=True, metavar="PATH",
                        help="JSON file for the results")
    parser.add_argument("--device", default="cuda", help="GPU to use (default: cuda)")
    parser.add_argument("--num-iters", type=int, default=100,
                        help="timed calls per measurement (default: 100)")
    parser.add_argument("--num-warmup-iters", type=int, default=20,
                        help="untimed calls before them (default: 20)")
    return parser


def measure_copy_gbs(device: torch.device, num_iters: int, num_warmup_iters: int) -> dict:
    """Median GB/s of a device-to-device copy, counting the bytes read and the bytes written."""
    source = torch.rand(COPY_ELEMENTS, dtype=torch.float32, device=device)
    target = torch.empty_like(source)
    for _ in range(num_warmup_iters):
        target.copy_(source)
    synchronize(device)
    measurement = time_calls(lambda: target.copy_(source), num_iters, device)
    bytes_moved = 2 * source.numel() * source.element_size()
    del source, target
    torch.cuda.empty_cache()
    return {"bytes_moved": bytes_moved, "median_ms": measurement.median, "cv": measurement.cv,
            "gbs": bytes_moved / (measurement.median / 1e3) / 1e9}


def measure_through_op_bench(op: str, dtype: str, shape: str, config: runner.RunConfig,
                             peaks: runner.Peaks) -> report.OpResult:
    request = runner.CaseRequest(op, None, shape, shape)
    case = runner.make_case(request, dtype, append_dtype=False)
    return runner.measure_case(case, config_for(config, dtype), peaks)


def config_for(config: runner.RunConfig, dtype: str) -> runner.RunConfig:
    return runner.RunConfig(config.device, dtype, config.num_iters, config.num_warmup_iters)


def verdict(ratio: float | None, target: float) -> str:
    if ratio is None:
        return "unknown"
    return "PASS" if ratio >= target else "FAIL"


def row_summary(row: report.OpResult) -> dict:
    summary = row.as_dict(with_samples=False)
    summary["samples_ms"] = list(row.measurement.samples_ms) if row.measurement else []
    return summary


def collect(device: torch.device, num_iters: int, num_warmup_iters: int) -> dict:
    properties = torch.cuda.get_device_properties(device)
    device_peak = flops.lookup_peak(properties.name, properties.multi_processor_count)
    peaks = runner.Peaks(device_peak)
    config = runner.RunConfig(device, "fp32", num_iters, num_warmup_iters)

    copy = measure_copy_gbs(device, num_iters, num_warmup_iters)
    add = measure_through_op_bench("add", "fp32", ADD_SHAPE, config, peaks)
    matmul = measure_through_op_bench("matmul", "bf16", MATMUL_SHAPE, config, peaks)

    add_ratio = add.gbs / copy["gbs"] if add.gbs else None
    matmul_peak = flops.peak_tflops(device_peak, "bf16")
    matmul_ratio = matmul.tflops / matmul_peak if matmul.tflops and matmul_peak else None
    datasheet_gbs = device_peak.memory_gbs if device_peak else None
    return {
        "tool": "ops_gpu_proof", "time": datetime.datetime.now().astimezone().isoformat(),
        "device_name": properties.name, "compute_units": properties.multi_processor_count,
        "torch": torch.__version__, "hip": torch.version.hip, "cuda": torch.version.cuda,
        "clock": clock_name(device), "num_iters": num_iters,
        "num_warmup_iters": num_warmup_iters,
        "peak_source": peaks.describe(properties.name),
        "datasheet_memory_gbs": datasheet_gbs, "datasheet_bf16_tflops": matmul_peak,
        "copy": copy,
        "copy_fraction_of_datasheet": copy["gbs"] / datasheet_gbs if datasheet_gbs else None,
        "add_fp32": row_summary(add),
        "matmul_bf16": row_summary(matmul),
        "checks": {
            "add_vs_copy": {"ratio": add_ratio, "target": ADD_TARGET,
                            "verdict": verdict(add_ratio, ADD_TARGET)},
            "matmul_vs_peak": {"ratio": matmul_ratio, "target": MATMUL_TARGET,
                               "verdict": verdict(matmul_ratio, MATMUL_TARGET)},
        },
    }


def _fmt(value: float | None, spec: str) -> str:
    return "unknown" if value is None else format(value, spec)


def print_table(result: dict) -> None:
    copy, add, matmul = result["copy"], result["add_fp32"], result["matmul_bf16"]
    checks = result["checks"]
    print(f"device: {result['device_name']} ({result['clock']}); peak: {result['peak_source']}")
    lines = [
        ("measurement", "median ms", "achieved", "reference", "ratio", "target", "verdict"),
        ("device copy fp32 2x1 GiB", f"{copy['median_ms']:.3f}", f"{copy['gbs']:.0f} GB/s",
         f"{_fmt(result['datasheet_memory_gbs'], '.0f')} GB/s datasheet",
         _fmt(result["copy_fraction_of_datasheet"], ".3f"), "-", "-"),
        (f"add fp32 {ADD_SHAPE}", _fmt(add["median_ms"], ".3f"), f"{_fmt(add['gbs'], '.0f')} GB/s",
         f"{copy['gbs']:.0f} GB/s copy", _fmt(checks["add_vs_copy"]["ratio"], ".3f"),
         f">= {ADD_TARGET}", checks["add_vs_copy"]["verdict"]),
        (f"matmul bf16 {MATMUL_SIZE}^3",
         _fmt(matmul["median_ms"], ".3f"), f"{_fmt(matmul['tflops'], '.1f')} TFLOP/s",
         f"{_fmt(result['datasheet_bf16_tflops'], '.1f')} TFLOP/s dense",
         _fmt(checks["matmul_vs_peak"]["ratio"], ".3f"), f">= {MATMUL_TARGET}",
         checks["matmul_vs_peak"]["verdict"]),
    ]
    widths = [max(len(line[column]) for line in lines) for column in range(len(lines[0]))]
    for line in lines:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())


def run(args: argparse.Namespace) -> int:
    writing.check_writable(args.output, "--output")
    device = torch.device(args.device)
    if device.type != "cuda" or not torch.cuda.is_available():
        raise MissingEnvironment("ops_gpu_proof needs a GPU (torch.cuda.is_available() is "
                                 "False or --device is not a GPU)")
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(device)
    result = collect(device, args.num_iters, args.num_warmup_iters)
    print_table(result)
    writing.write_json(args.output, result)
    print(f"wrote {args.output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except BenchmarkError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code


if __name__ == "__main__":
    sys.exit(main())
