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
from microbench.platform import process
from microbench.models import names
from microbench.platform.errors import BenchmarkError

# What --help, --version, --list-networks and a refused flag need is imported above, and none of
# it imports torch: they answer in a fraction of a second, where torch's imports take seconds
# (tens on a loaded machine; issue 45). The run's modules are imported once the plan is made.
_DISTRIBUTED = "microbench.platform.distributed"


def main(argv: list[str] | None = None) -> int:
    if _DISTRIBUTED in sys.modules:       # a new invocation in this process (tests, scripts)
        sys.modules[_DISTRIBUTED].forget()
    return process.command(lambda: _run(argv), prefix=_rank_prefix)


def _rank_prefix() -> str:
    """'[rank N] ' for an error line: the detected launch's once the run has imported the
    distributed layer (which imports torch), the launcher's variables before."""
    if _DISTRIBUTED in sys.modules:
        return sys.modules[_DISTRIBUTED].rank_prefix()
    return process.env_rank_prefix()


def _run(argv: list[str] | None) -> int:
    """Parse, plan, run. The expected failures go to process.command, which reports them in one
    line; anything else is a bug, shown whole."""
    try:
        args = cli.parse_args(argv)
        with process.imports_checked():             # torch and torchvision, from here on
            if args.list_networks:
                print("\n".join(names.listing()))
                return 0
            cli.refuse_fp8_without_gpu(args)        # before torch: it can see no GPU
            plan = cli.to_plan(args)
            from microbench.drivers import runner
        return runner.run_plan(plan)
    except (BenchmarkError, BrokenPipeError):
        raise
    except Exception as error:                      # noqa: BLE001 (a bug: show everything)
        limit = process.limit_reached(error)        # not a bug: the system's limit
        if limit is not None:
            raise limit from None
        traceback.print_exc()
        process.error_line(f"{_rank_prefix()}error: unexpected {type(error).__name__}: {error}")
        return 1
