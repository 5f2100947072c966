#!/usr/bin/env python3
"""Benchmark PyTorch training and inference on a GPU (ROCm or CUDA) or the CPU.

    python3 micro_benchmarking_pytorch.py --network resnet50 --batch-size 64 --iterations 20
    python3 micro_benchmarking_pytorch.py --network resnet50 --amp --nhwc --mode inference
    torchrun --nproc-per-node 4 micro_benchmarking_pytorch.py --network resnet50 --batch-size 256

This script only wires: arguments -> config -> run, and maps expected failures to exit codes
(2 usage, 3 out of memory, 4 missing GPU or dependency, 1 anything unexpected).
"""
from __future__ import annotations

import sys
import traceback

from microbench import cli, distributed, models, runner
from microbench.errors import BenchmarkError


def main(argv: list[str] | None = None) -> int:
    args = cli.parse_args(argv)
    try:
        if args.list_networks:
            print("\n".join(models.available_names()))
            return 0
        return runner.run_plan(cli.to_plan(args))
    except BenchmarkError as error:
        print(f"{distributed.rank_prefix()}error: {error}", file=sys.stderr, flush=True)
        return error.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as error:                      # noqa: BLE001 (a bug: show everything)
        traceback.print_exc()
        print(f"{distributed.rank_prefix()}error: unexpected {type(error).__name__}: "
              f"{error}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
