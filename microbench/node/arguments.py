"""``microbench-node``: its flags, checked before torch is imported (one line, exit 2).

    microbench-node                      # every visible GPU of this node
    microbench-node --quick              # GEMM, bandwidths, all-reduce: a scheduler's prolog
    microbench-node --device cpu         # the same command on the CPU, 2 processes over gloo
    microbench-node --save-baseline h100.json        # a healthy node's figures, kept
    microbench-node --baseline h100.json             # judged against its peers and them
    torchrun --nnodes 4 --nproc-per-node 8 -m microbench.node   # every GPU of a job

Exit 0 when nothing is flagged, 6 when a GPU or a link is (docs/node-check.md), and the
codes of docs/guarantees.md for the rest.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from microbench.node.parts import DEFAULT_TOLERANCE_PCT
from microbench.platform import process, writing
from microbench.platform.errors import UsageError
from microbench.settings.argtypes import (MAX_DIST_TIMEOUT_S, MIN_DIST_TIMEOUT_S,
                                          HelpFormatter, OneLineParser,
                                          bounded_int, finite_float, path_text)

if TYPE_CHECKING:
    from microbench.node.reference import Baseline

DEFAULT_SAMPLES = 8
DEFAULT_CPU_PROCESSES = 2
MAX_SAMPLES = 1000
MAX_PROCESSES = 64
DEFAULT_JSON = "node_check.json"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="microbench-node", formatter_class=HelpFormatter,
        description="Is every GPU of this node (and of this job) as fast as its peers? Runs "
                    "the same short program on every GPU at once (GEMM, memory, host copies, "
                    "a training step, a decode step, with telemetry), then all-reduce and "
                    "peer-to-peer copies between them, and flags the GPUs and links below "
                    "their peers' median by more than the tolerance and their noise, "
                    "throttling, or reporting errors.",
        epilog="Exit codes: 0 nothing flagged, 6 something flagged; 2 usage, 4 missing "
               "environment (docs/guarantees.md).")
    what = parser.add_argument_group("what to check")
    what.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                      help="cuda: every visible GPU; cpu: --processes processes on the CPU "
                           "(default: auto, the GPUs where there are any)")
    what.add_argument("--processes", type=bounded_int(1, MAX_PROCESSES), default=None,
                      metavar="N",
                      help=f"processes to start: on the CPU (default: "
                           f"{DEFAULT_CPU_PROCESSES}), or the first N GPUs (default: all)")
    what.add_argument("--quick", action="store_true",
                      help="GEMM, memory and host bandwidths and the all-reduce only (no "
                           "model steps, no peer-to-peer matrix)")
    what.add_argument("--samples", type=bounded_int(3, MAX_SAMPLES), default=DEFAULT_SAMPLES,
                      metavar="N",
                      help=f"samples of each part, whose spread is each figure's noise "
                           f"(default: {DEFAULT_SAMPLES})")
    what.add_argument("--tolerance", type=finite_float(0, 100, low_inclusive=True),
                      default=DEFAULT_TOLERANCE_PCT, metavar="PCT",
                      help=f"flag a figure this far below its peers' median (or the "
                           f"baseline's), and beyond its noise (default: "
                           f"{DEFAULT_TOLERANCE_PCT:g})")
    what.add_argument("--baseline", type=path_text, default=None, metavar="FILE",
                      help="judge each GPU against this known-good reference of its model "
                           "too: a healthy run's result document (--json) or a file "
                           "--save-baseline wrote; without one a node whose GPUs are all "
                           "slow passes")
    what.add_argument("--dist-timeout", default=600, metavar="S",
                      type=finite_float(MIN_DIST_TIMEOUT_S, MAX_DIST_TIMEOUT_S,
                                        low_inclusive=True),
                      help="seconds the processes wait for each other (default: 600)")
    output = parser.add_argument_group("output")
    output.add_argument("--json", type=path_text, default=DEFAULT_JSON, metavar="PATH",
                        help=f"the result document (default: {DEFAULT_JSON})")
    output.add_argument("--no-files", action="store_true", help="write no result document")
    output.add_argument("--save-baseline", type=path_text, default=None, metavar="FILE",
                        help="write this run's figures of the GPUs it did not flag, per "
                             "device model, as a baseline for --baseline")
    output.add_argument("--plot", type=path_text, default=None, metavar="PATH",
                        help="a chart of every GPU's figures against the median (.png, .svg, "
                             ".pdf; needs matplotlib)")
    return parser


def validate(args: argparse.Namespace) -> Baseline | None:
    """Refuse what the flags alone decide (before torch); the --baseline read here, once, is
    what the check is judged against."""
    if args.json is not None and not args.no_files:
        if not args.json.strip():
            raise UsageError("--json must not be empty")
        writing.check_target(args.json, "--json", directory_made=True)
    if args.plot is not None:
        if not args.plot.strip():
            raise UsageError("--plot must not be empty")
        writing.check_target(args.plot, "--plot", directory_made=True)
        if not args.no_files and os.path.abspath(args.plot) == os.path.abspath(args.json):
            raise UsageError("--plot and --json name the same file: name two")
    if args.save_baseline is not None:
        if not args.save_baseline.strip():
            raise UsageError("--save-baseline must not be empty")
        writing.check_target(args.save_baseline, "--save-baseline", directory_made=True)
        written = [path for path, given in ((args.json, not args.no_files), (args.plot, True))
                   if given and path is not None]
        if any(os.path.abspath(args.save_baseline) == os.path.abspath(p) for p in written):
            raise UsageError("--save-baseline names the file of --json or --plot: name "
                             "another")
        if args.baseline is not None and _same_file(args.save_baseline, args.baseline):
            raise UsageError("--save-baseline names the file of --baseline, which this check "
                             "is judged against: name another (issue 65: it was replaced)")
    if args.baseline is None:
        return None
    if not args.baseline.strip():
        raise UsageError("--baseline must not be empty")
    from microbench.node import reference          # reads with the schema, no torch
    return reference.load(args.baseline)


def _same_file(first: str, second: str) -> bool:
    """Whether two paths name one file: the same path, or links to one file (hard or
    symbolic), where both exist."""
    if os.path.abspath(first) == os.path.abspath(second):
        return True
    try:
        return os.path.samefile(first, second)
    except OSError:                         # one of them does not exist yet
        return False


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return process.command(lambda: _run(build_parser().parse_args(argv), argv),
                           prefix=process.env_rank_prefix)


def _run(args: argparse.Namespace, argv: list[str]) -> int:
    baseline = validate(args)
    with process.imports_checked():               # torch, from here on
        from microbench.node import check
    return check.run(args, argv, baseline)
