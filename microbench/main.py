"""The model benchmark's entry point: argv -> plan -> run, and exit codes.

    microbench --network resnet50 --batch-size 64 --iterations 20
    python3 micro_benchmarking_pytorch.py --network resnet50 --amp --nhwc --mode inference
    torchrun --nproc-per-node 4 micro_benchmarking_pytorch.py --network resnet50 --batch-size 256

Expected failures print one line on stderr and exit with their code (2 usage, 3 out of memory,
4 missing GPU or dependency, 5 regression found by --compare); anything else is a bug and exits 1
with its traceback.
"""
from __future__ import annotations

import sys
import traceback

from . import cli, distributed, models, runner
from .errors import BenchmarkError


def main(argv: list[str] | None = None) -> int:
    args = cli.parse_args(argv)
    try:
        if args.list_networks:
            print("\n".join(models.listing()))
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
