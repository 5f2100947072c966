"""The model benchmark's entry point: argv -> plan -> run, and exit codes.

    microbench --network resnet50 --batch-size 64 --iterations 20
    python3 micro_benchmarking_pytorch.py --network resnet50 --amp --nhwc --mode inference
    torchrun --nproc-per-node 4 micro_benchmarking_pytorch.py --network resnet50 --batch-size 256

Expected failures print one line on stderr and exit with their code (2 usage, 3 out of memory,
4 missing GPU, dependency or disk space, or a standard output that took no writes, 5 regression
found by --compare, 129 SIGHUP, 130 Ctrl-C, 131 SIGQUIT, 143 SIGTERM; 1 with one line when
another rank failed); anything else is a bug and exits 1 with its traceback.
"""
from __future__ import annotations

import sys
import traceback

from microbench.plan import cli
from microbench.platform import distributed, process
from microbench.models import registry as models
from microbench.drivers import runner
from microbench.platform.errors import BenchmarkError


def main(argv: list[str] | None = None) -> int:
    distributed.forget()
    return process.command(lambda: _run(argv), prefix=distributed.rank_prefix)


def _run(argv: list[str] | None) -> int:
    """Parse, plan, run. The expected failures go to process.command, which reports them in one
    line; anything else is a bug, shown whole."""
    try:
        args = cli.parse_args(argv)
        if args.list_networks:
            print("\n".join(models.listing()))
            return 0
        return runner.run_plan(cli.to_plan(args))
    except (BenchmarkError, BrokenPipeError):
        raise
    except Exception as error:                      # noqa: BLE001 (a bug: show everything)
        limit = process.limit_reached(error)        # not a bug: the system's limit
        if limit is not None:
            raise limit from None
        traceback.print_exc()
        print(f"{distributed.rank_prefix()}error: unexpected {type(error).__name__}: "
              f"{error}", file=sys.stderr, flush=True)
        return 1
