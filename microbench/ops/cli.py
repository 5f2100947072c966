"""Time single PyTorch operators and say how close each comes to the hardware.

The op bench's command line: ``microbench-ops`` once installed, ``python3 -m microbench.ops``,
or the older entry point ``TorchTensorOpsBench/torch_tensor_ops_bench.py``. Examples::

    microbench-ops --op add --dtype fp16
    microbench-ops --op matmul --dtype bf16 --input1-dim 8192-8192 --input2-dim 8192-8192
    microbench-ops --op add --op-type sparse            # DLRM embedding update
    microbench-ops --run-predefined --input1-dim 16-256-256 --output-json ops.json
    microbench-ops --run-model-ops --dtype bf16 --no-flush-l2   # warm caches, rows marked
    microbench-ops --run-compute-ops --dtype bf16 --output-csv compute.csv

On a GPU the cache is flushed before each timed call by default (``--no-flush-l2`` keeps it
warm and marks the rows that fit in it); either the flush or a short spin is queued ahead of each
call so that host dispatch is not timed (``runner`` says why). Rows above 100% of the datasheet
peak are marked ``>peak``.

Exit codes: 0 all measured, 2 bad input (unknown op, malformed or incompatible shapes, a dtype an
op does not support on the device; a list run goes on and exits 2 at the end), 3 out of memory,
4 no GPU where one was asked for or no space to write the results, 130 Ctrl-C, 143 SIGTERM,
1 anything unexpected. Output paths are checked before anything runs; files are written whole.
"""
from __future__ import annotations

import argparse
import os

from microbench.ops import choices
from microbench.platform import process, writing
from microbench.settings.argtypes import (MAX_ITERATIONS, MAX_PEAK_TFLOPS, MAX_WARMUP,
                                          OneLineParser, bounded_int, finite_float, path_text)
from microbench.platform.errors import UsageError

# The parser reads only choices.py: --help and a refused flag answer without torch (issue 45).
# The run (ops/command.py: the catalog, the runner, the device) is imported once the flags hold.

DEFAULT_NUM_ITERS = 50
DEFAULT_NUM_WARMUP_ITERS = 10
MAX_PEAK_GBS = 10**7
MAX_QUEUED_DELAY_MS = 100.0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        description="Time PyTorch operators with device events and report achieved GB/s, "
                    "TFLOP/s and their share of the device's dense datasheet peak.",
        epilog=f"Known ops: {', '.join(choices.OP_NAMES)}.")
    what = parser.add_argument_group("what to run")
    what.add_argument("--op", default=None,
                      help="operator to time; a trailing '_' runs it in place (default: add)")
    what.add_argument("--op-type", choices=choices.OP_TYPES, default=None,
                      help="variant of --op ('--op add --op-type sparse' is the embedding "
                           "update); with a --run-* list, run only ops of this type "
                           "(default: the op's own type)")
    lists = what.add_mutually_exclusive_group()
    lists.add_argument("--run-predefined", action="store_true",
                       help="run every binary, unary and reduction op at --input1-dim/"
                            "--input2-dim")
    lists.add_argument("--run-model-ops", action="store_true",
                       help="run the transformer and recommender shapes of the model-ops list")
    lists.add_argument("--run-compute-ops", action="store_true",
                       help="run matmul, bmm, conv2d, sdpa, layer_norm and softmax at their "
                            "default shapes")
    lists.add_argument("--peaks", action="store_true",
                       help="the model benchmark's peak probe alone (--measure-peaks): a dense "
                            "GEMM per dtype (fp32, fp16, bf16; 8192^3 on a GPU) and a device "
                            "copy, each beside the datasheet's peak, with the clocks and power "
                            "limit read meanwhile")

    shapes = parser.add_argument_group("shapes and precision")
    shapes.add_argument("--dtype", choices=choices.DTYPE_NAMES, default="fp32",
                        help="element type (default: fp32)")
    shapes.add_argument("--input1-dim", default=None, metavar="SHAPE",
                        help=f"first input's shape, dash-separated (default: the op's own, "
                             f"{choices.GENERIC_SHAPE} for elementwise ops and reductions)")
    shapes.add_argument("--input2-dim", default=None, metavar="SHAPE",
                        help="second input's shape; for the sparse update the number of rows "
                             "updated (default: the op's own, else --input1-dim)")
    shapes.add_argument("--inplace", action="store_true",
                        help="run binary and unary ops in place (add_, exp_, ...)")
    shapes.add_argument("--append-dtype", action="store_true",
                        help="append the dtype to op names, e.g. add(fp16)")

    device = parser.add_argument_group("device")
    device.add_argument("--device", default=None,
                        help="torch device: cuda, cuda:1, cpu; ROCm GPUs are 'cuda' too "
                             "(default: cuda when a GPU is visible, else cpu)")

    timing = parser.add_argument_group("timing")
    timing.add_argument("--num-iters", type=bounded_int(1, MAX_ITERATIONS),
                        default=DEFAULT_NUM_ITERS,
                        help=f"timed calls per op, each timed alone (default: "
                             f"{DEFAULT_NUM_ITERS}, at most {MAX_ITERATIONS:,})")
    timing.add_argument("--num-warmup-iters", type=bounded_int(0, MAX_WARMUP),
                        default=DEFAULT_NUM_WARMUP_ITERS,
                        help=f"untimed calls before them (default: {DEFAULT_NUM_WARMUP_ITERS})")
    timing.add_argument("--flush-l2", action=argparse.BooleanOptionalAction, default=None,
                        help=f"zero a buffer of twice the device's last-level cache (at least "
                             f"{choices.FLUSH_FLOOR_BYTES // choices.MIB} MiB) before each timed "
                             f"call, outside its interval, so no op reads its inputs from "
                             f"cache; --no-flush-l2 keeps caches warm and marks the rows that "
                             f"fit in them (default: on for GPUs, off on the CPU)")
    timing.add_argument("--queued-delay-ms", type=finite_float(0, MAX_QUEUED_DELAY_MS,
                                                               low_inclusive=True),
                        default=choices.DEFAULT_QUEUED_DELAY_MS,
                        help=f"with --no-flush-l2 on a GPU: spin this long on the device before "
                             f"each timed call, so the call is queued before its start event "
                             f"fires and host dispatch stays out of the interval (the flush "
                             f"does this when on); 0 turns it off (default: "
                             f"{choices.DEFAULT_QUEUED_DELAY_MS:g}, at most "
                             f"{MAX_QUEUED_DELAY_MS:g})")
    timing.add_argument("--enable-profiling", action="store_true",
                        help="after timing, profile a few calls with torch.profiler and print "
                             "its table")

    peaks = parser.add_argument_group("device peak (default: the datasheet table)")
    peaks.add_argument("--peak-tflops", type=finite_float(0, MAX_PEAK_TFLOPS), default=None,
                       help="dense TFLOP/s for this dtype, instead of the table's")
    peaks.add_argument("--peak-gbs", type=finite_float(0, MAX_PEAK_GBS), default=None,
                       help="memory bandwidth in GB/s, instead of the table's")

    output = parser.add_argument_group("output files")
    output.add_argument("--output-json", default=None, type=path_text, metavar="PATH",
                        help="write all results, with raw samples, as JSON")
    output.add_argument("--output-csv", default=None, type=path_text, metavar="PATH",
                        help="write one CSV row per op")
    return parser


# ---------------------------------------------------------------------------------------------
# argv -> config
# ---------------------------------------------------------------------------------------------

def validate(args: argparse.Namespace) -> None:
    if args.peaks and (args.op or args.input1_dim or args.input2_dim or args.inplace):
        raise UsageError("--peaks runs its own GEMMs and copy at fixed shapes; drop --op, "
                         "--input1-dim, --input2-dim and --inplace")
    if args.run_model_ops and args.inplace:
        raise UsageError("--inplace does not apply to --run-model-ops: the list says which "
                         "ops run in place")
    if args.run_compute_ops and (args.input1_dim or args.input2_dim):
        raise UsageError("--run-compute-ops uses each op's own shapes; to choose shapes run "
                         "one op, e.g. --op matmul --input1-dim 4096-4096")
    for flag, path in (("--output-json", args.output_json), ("--output-csv", args.output_csv)):
        if path is not None:
            if not path.strip():
                raise UsageError(f"{flag} must not be empty")
            # A missing folder is made when the file is written, as microbench does.
            writing.check_target(path, flag, directory_made=True)
    if args.output_json and args.output_csv and \
            os.path.abspath(args.output_json) == os.path.abspath(args.output_csv):
        raise UsageError("--output-json and --output-csv name the same file: name two")


def main(argv: list[str] | None = None) -> int:
    return process.command(lambda: _run(build_parser().parse_args(argv)))


def _run(args: argparse.Namespace) -> int:
    validate(args)
    with process.imports_checked():               # torch, from here on
        from microbench.ops import command
    return command.run(args)
