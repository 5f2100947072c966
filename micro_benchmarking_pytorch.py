#!/usr/bin/env python3
"""Benchmark PyTorch training and inference on a GPU (ROCm or CUDA) or the CPU.

    python3 micro_benchmarking_pytorch.py --network resnet50 --batch-size 64 --iterations 20
    python3 micro_benchmarking_pytorch.py --network resnet50 --amp --nhwc --mode inference

This script only wires: arguments -> config -> run -> report, and maps expected failures to
exit codes (2 usage, 3 out of memory, 4 missing GPU or dependency, 1 anything unexpected).
"""
from __future__ import annotations

import sys

from microbench import benchmark, cli, device as device_mod, models, precision as precision_mod
from microbench import report
from microbench.errors import BenchmarkError


def run(config: cli.BenchConfig) -> int:
    out = sys.stdout
    spec = models.resolve(config.network)
    precision, notes = precision_mod.resolve(config.fp16, config.amp, config.amp_dtype,
                                             config.amp_opt_level, config.tf32)
    report.prepare_output(config)
    device, notice = device_mod.select_device(config.device)
    if notice:
        print(notice, file=out)
    env = device_mod.describe(device)
    image_size = config.image_size or spec.image_size
    notes += list(config.compile_notes)
    report.print_config(config, precision, spec, image_size, config.batch_size, env, notes, out)
    print(f"Building {spec.name}...", file=out, flush=True)
    result = benchmark.run(config, device, env, precision, config.batch_size,
                           on_phase=lambda phase: print(f"{phase.capitalize()}...", file=out,
                                                        flush=True))
    result.notes.extend(notes)
    report.print_warmup(result, out)
    if not config.quiet:
        report.print_iterations(result, out)
    report.print_summary(result, out)
    report.write_files(result, out)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = cli.parse_args(argv)
    try:
        if args.list_networks:
            print("\n".join(models.available_names()))
            return 0
        return run(cli.to_config(args))
    except BenchmarkError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
