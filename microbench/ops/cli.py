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
import datetime
import os
import sys

import torch

from microbench import __version__
from microbench.platform import device as device_layer, process
from microbench.measure import flops
from microbench.platform import progress, text_table as tables, units
from microbench.settings.argtypes import (MAX_ITERATIONS, MAX_PEAK_TFLOPS, MAX_WARMUP,
                                          OneLineParser, bounded_int, finite_float, path_text)
from microbench.platform.device import clock_name
from microbench.platform.errors import UsageError
from microbench.platform import writing
from microbench.store.schema import SCHEMA_VERSION
from microbench.ops import catalog as ops, report, runner

DEFAULT_NUM_ITERS = 50
DEFAULT_NUM_WARMUP_ITERS = 10
MAX_PEAK_GBS = 10**7
MAX_QUEUED_DELAY_MS = 100.0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        description="Time PyTorch operators with device events and report achieved GB/s, "
                    "TFLOP/s and their share of the device's dense datasheet peak.",
        epilog=f"Known ops: {', '.join(ops.known_op_names())}.")
    what = parser.add_argument_group("what to run")
    what.add_argument("--op", default=None,
                      help="operator to time; a trailing '_' runs it in place (default: add)")
    what.add_argument("--op-type", choices=ops.OP_TYPES, default=None,
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
    shapes.add_argument("--dtype", choices=tuple(ops.DTYPES), default="fp32",
                        help="element type (default: fp32)")
    shapes.add_argument("--input1-dim", default=None, metavar="SHAPE",
                        help=f"first input's shape, dash-separated (default: the op's own, "
                             f"{ops.GENERIC_SHAPE} for elementwise ops and reductions)")
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
                             f"{runner.FLUSH_FLOOR_BYTES // runner.MIB} MiB) before each timed "
                             f"call, outside its interval, so no op reads its inputs from "
                             f"cache; --no-flush-l2 keeps caches warm and marks the rows that "
                             f"fit in them (default: on for GPUs, off on the CPU)")
    timing.add_argument("--queued-delay-ms", type=finite_float(0, MAX_QUEUED_DELAY_MS,
                                                               low_inclusive=True),
                        default=runner.DEFAULT_QUEUED_DELAY_MS,
                        help=f"with --no-flush-l2 on a GPU: spin this long on the device before "
                             f"each timed call, so the call is queued before its start event "
                             f"fires and host dispatch stays out of the interval (the flush "
                             f"does this when on); 0 turns it off (default: "
                             f"{runner.DEFAULT_QUEUED_DELAY_MS:g}, at most "
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


def requests_from_args(args: argparse.Namespace) -> list[runner.CaseRequest]:
    if args.run_predefined:
        return runner.predefined_requests(args.input1_dim, args.input2_dim, args.inplace,
                                          args.op_type)
    if args.run_model_ops:
        return runner.model_requests(args.op_type)
    if args.run_compute_ops:
        return runner.compute_requests()
    request = runner.CaseRequest(args.op or "add", args.op_type, args.input1_dim,
                                 args.input2_dim, args.inplace)
    # One op: bad input stops here, before anything is allocated.
    runner.make_case(request, args.dtype, args.append_dtype)
    return [request]


def flush_wanted(args: argparse.Namespace, device: torch.device) -> bool:
    """On by default on GPUs. Off on the CPU: torch reports no CPU cache size to size a buffer
    from, zeroing hundreds of MiB before every call would make a list run many times longer,
    and a CPU call runs synchronously, so there is no queue for the flush to fill."""
    if not device_layer.is_gpu(device):
        return False
    return True if args.flush_l2 is None else args.flush_l2


def config_from_args(args: argparse.Namespace, device: torch.device,
                     timing: runner.TimingPlan) -> runner.RunConfig:
    return runner.RunConfig(device=device, dtype_name=args.dtype, num_iters=args.num_iters,
                            num_warmup_iters=args.num_warmup_iters, flush_l2=timing.flushes,
                            cache_bytes=timing.cache.size_bytes,
                            enable_profiling=args.enable_profiling,
                            append_dtype=args.append_dtype, peak_tflops=args.peak_tflops,
                            peak_gbs=args.peak_gbs)


# ---------------------------------------------------------------------------------------------
# run -> table and files
# ---------------------------------------------------------------------------------------------

def device_name(device: torch.device) -> str:
    return device_layer.device_name(device) if device_layer.is_gpu(device) else "cpu"


def run_info(config: runner.RunConfig, peaks: runner.Peaks, timing: runner.TimingPlan) -> dict:
    return {
        "tool": "TorchTensorOpsBench", "version": __version__, "schema_version": SCHEMA_VERSION,
        "command": sys.argv, "time": datetime.datetime.now().astimezone().isoformat(),
        **device_layer.build_versions(),
        "device": str(config.device), "device_name": device_name(config.device),
        "clock": clock_name(config.device), "dtype": config.dtype_name,
        "num_iters": config.num_iters, "num_warmup_iters": config.num_warmup_iters,
        **timing.info(),                    # l2_flush_bytes (as before) and the added keys
        "peak_source": peaks.describe(device_name(config.device)),
        "peak_gbs": peaks.gbs(), "bytes_convention": report.BYTES_NOTE,
    }


def print_header(config: runner.RunConfig, peaks: runner.Peaks, count: int,
                 timing: runner.TimingPlan, flush_asked: bool | None) -> None:
    name = device_name(config.device)
    flush = (f"L2 flush {timing.flusher.bytes / runner.MIB:.0f} MiB" if timing.flusher
             else "no L2 flush")
    print(f"TorchTensorOpsBench: {count} op(s), dtype {config.dtype_name}, "
          f"device {config.device} ({name})")
    print(f"timing: {clock_name(config.device)}, {config.num_warmup_iters} warm-up calls apart, "
          f"median of {config.num_iters} calls, {timing.calls_per_interval} call per timed "
          f"interval, {flush}")
    for line in timing.describe():
        print(line)
    print(f"peak: {peaks.describe(name)}")
    print(report.BYTES_NOTE)
    if flush_asked and not device_layer.is_gpu(config.device):
        print("note: --flush-l2 has no effect on the CPU")
    if device_layer.free_memory_bytes(config.device) is None:
        print("note: free memory unknown (no /proc/meminfo); shapes are not checked against it")
    print()


def run(args: argparse.Namespace) -> int:
    validate(args)
    # The package's device choice: an indexed cuda:N (made current, so events record on its
    # stream), the CPU with a notice when there is no GPU, exit 4 for --device cuda without one.
    device, notice = device_layer.select(args.device or "auto")
    device_layer.activate(device)
    if notice:
        print(notice)
    if args.peaks:
        return run_peaks(args, device)
    requests = requests_from_args(args)
    # The flush buffer is allocated (and the spin calibrated) before the first op's memory check.
    timing = runner.TimingPlan.build(device, flush_wanted(args, device), args.queued_delay_ms)
    config = config_from_args(args, device, timing)
    peaks = runner.Peaks(flops.peak_for_device(device), args.peak_tflops, args.peak_gbs)
    print_header(config, peaks, len(requests), timing, args.flush_l2)

    printer = report.TablePrinter(runner.preview_labels(requests, config), config.dtype_name,
                                  terminal=progress.is_terminal(sys.stdout))
    printer.header()
    # On a terminal the op being measured shows until its row replaces it. The line is drawn
    # once (tick=False): an op's phase holds its timed calls, when no thread may wake to redraw.
    activity = progress.Activity(sys.stdout)

    def row_done(row) -> None:
        activity.clear()
        printer(row)

    def row_started(label: str) -> None:
        activity.start(label, announce=False, tick=False)

    outcome = runner.run_requests(requests, config, peaks, row_done, between=timing,
                                  on_start=row_started)
    print()
    for line in report.summary_lines(outcome.results):
        print(line)
    info = run_info(config, peaks, timing)
    if args.output_json:
        writing.ensure_directory(args.output_json)     # made as microbench makes its own
        report.write_json(args.output_json, info, outcome.results)
        print(f"Results JSON : {args.output_json}")
    if args.output_csv:
        writing.ensure_directory(args.output_csv)
        report.write_csv(args.output_csv, outcome.results)
        print(f"Results CSV  : {args.output_csv}")
    return outcome.exit_code


PEAK_DTYPES = ("fp32", "fp16", "bf16")   # and fp8 once the catalog has its GEMM


def run_peaks(args: argparse.Namespace, device: torch.device) -> int:
    """--peaks: the probe alone, as a table; one row per dtype and the bandwidth row."""
    from microbench.ops import peaks
    from microbench.measure import telemetry
    source, note = (telemetry.open_source(device) if device_layer.is_gpu(device)
                    else (None, "no telemetry on the CPU"))
    try:
        dtypes = [dtype for dtype in PEAK_DTYPES if dtype in ops.DTYPES]
        rows, clocks, seconds = peaks.probe_table(device, dtypes, source)
    finally:
        if source is not None:
            source.close()
    name = device_name(device)
    datasheet = flops.peak_for_device(device)
    size = peaks.default_size(device)
    print(f"Peak probe on {device} ({name}): torch.matmul {size.gemm_n}^3 per dtype and a "
          f"device copy, {size.warmup} warm-up calls apart, median of {size.iterations} calls "
          f"timed one by one with {clock_name(device)}")
    print("datasheet: " + (f"{datasheet.name} ({datasheet.source})" if datasheet
                           else f"no row for {name}: measured rates only"))
    print(peaks_table(rows, progress.is_terminal(sys.stdout)), end="")
    tf32 = "allowed" if runner.tf32_allowed("matmul") else "off"
    print(f"GB/s counts bytes read + bytes written; fp32 GEMMs with TF32 {tf32}")
    print(f"during the probe: {clocks.describe() if source is not None else note}")
    print(f"the probe took {seconds:.2f} s")
    if args.output_json:
        info = {**_probe_info(device), "dtype": ",".join(dtypes), "peaks_probe": True,
                "probe_clocks": clocks.to_dict(), "probe_seconds": seconds}
        report.write_json(args.output_json, info, rows)
    if args.output_csv:
        report.write_csv(args.output_csv, rows)
    return runner.RunOutcome(rows).exit_code if len(rows) > 1 else 0


def _probe_info(device: torch.device) -> dict:
    return {"tool": "TorchTensorOpsBench", "version": __version__,
            "schema_version": SCHEMA_VERSION, "command": sys.argv,
            "time": datetime.datetime.now().astimezone().isoformat(),
            **device_layer.build_versions(), "device": str(device),
            "device_name": device_name(device), "clock": clock_name(device),
            "bytes_convention": report.BYTES_NOTE}


def peaks_table(rows, terminal: bool) -> str:
    """The probe's rows: measured rate beside the datasheet's peak and the share."""
    columns = [tables.Column("probe"), tables.Column("dtype"), tables.Column("shape"),
               tables.Column("median [ms]", numeric=True), tables.Column("measured", numeric=True),
               tables.Column("datasheet", numeric=True), tables.Column("% of datasheet",
                                                                       numeric=True)]
    cells = []
    for row in rows:
        copy = row.op == "copy"
        show = units.gbs_rate if copy else units.tflops_rate
        rate = row.gbs if copy else row.tflops
        median = row.measurement.median if row.measurement else None
        cells.append((
            "bandwidth (copy)" if copy else "GEMM", row.dtype, row.shapes,
            f"{median:.3f}" if median is not None else row.status,
            show(rate) if row.status == "ok" and rate else (row.message or "-"),
            (f"{show(row.peak_value)} ({row.peak_label})" if row.peak_value
             else "no datasheet row"),
            f"{row.pct_of_peak:.1f}%" if row.pct_of_peak is not None else "-"))
    return tables.render(columns, cells, terminal=terminal)


def main(argv: list[str] | None = None) -> int:
    return process.command(lambda: run(build_parser().parse_args(argv)))

