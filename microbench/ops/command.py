"""The op bench's run: the device chosen, the requests timed, the table printed and the files
written (``microbench-ops``; its flags are ops/cli.py's, which imports this module once they
hold, so that --help needs no torch).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import argparse
import datetime
import sys

import torch

from microbench import __version__
from microbench.platform import devices
from microbench.measure import flops
from microbench.platform import progress, safe_text, text_table, units
from microbench.platform.devices import clock_name
from microbench.platform import writing
from microbench.store.schema import SCHEMA_VERSION
from microbench.ops import catalog, report, runner

if TYPE_CHECKING:
    from microbench.ops.report import OpResult


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
    if not devices.is_gpu(device):
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
    return devices.device_name(device) if devices.is_gpu(device) else "cpu"


def run_info(config: runner.RunConfig, peaks: runner.Peaks, timing: runner.TimingPlan) -> dict:
    return {
        "tool": "TorchTensorOpsBench", "version": __version__, "schema_version": SCHEMA_VERSION,
        "command": sys.argv, "time": datetime.datetime.now().astimezone().isoformat(),
        **devices.build_versions(),
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
    if flush_asked and not devices.is_gpu(config.device):
        print("note: --flush-l2 has no effect on the CPU")
    if devices.free_memory_bytes(config.device) is None:
        print("note: free memory unknown (no /proc/meminfo); shapes are not checked against it")
    print()


def run(args: argparse.Namespace) -> int:
    """The op bench with ``args``, checked (cli.validate)."""
    # The package's device choice: an indexed cuda:N (made current, so events record on its
    # stream), the CPU with a notice when there is no GPU, exit 4 for --device cuda without one.
    device, notice = devices.select(args.device or "auto")
    devices.activate(device)
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

    def row_done(row: OpResult) -> None:
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
        print(f"Results JSON : {safe_text.terminal(args.output_json)}")
    if args.output_csv:
        writing.ensure_directory(args.output_csv)
        report.write_csv(args.output_csv, outcome.results)
        print(f"Results CSV  : {safe_text.terminal(args.output_csv)}")
    return outcome.exit_code


PEAK_DTYPES = ("fp32", "fp16", "bf16")   # and the device's FP8 E4M3 where it has FP8 units


def run_peaks(args: argparse.Namespace, device: torch.device) -> int:
    """--peaks: the probe alone, as a table; one row per dtype and the bandwidth row."""
    from microbench.ops import peaks
    from microbench.measure import telemetry
    source, note = (telemetry.open_source(device) if devices.is_gpu(device)
                    else (None, "no telemetry on the CPU"))
    try:
        dtypes = [dtype for dtype in PEAK_DTYPES if dtype in catalog.DTYPES]
        fp8 = devices.fp8_e4m3_dtype(device)          # torch._scaled_mm's GEMM
        fp8_name = peaks.gemm_dtype(fp8) if fp8 is not None else None
        dtypes += [fp8_name] if fp8_name is not None else []
        rows, clocks, seconds = peaks.probe_table(device, dtypes, source)
    finally:
        if source is not None:
            source.close()
    name = device_name(device)
    datasheet = flops.peak_for_device(device)
    size = peaks.default_size(device)
    print(f"Peak probe on {device} ({name}): torch.matmul {size.gemm_n}^3 per dtype (FP8: torch._scaled_mm) and a "
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
            **devices.build_versions(), "device": str(device),
            "device_name": device_name(device), "clock": clock_name(device),
            "bytes_convention": report.BYTES_NOTE}


def peaks_table(rows: Sequence[OpResult], terminal: bool) -> str:
    """The probe's rows: measured rate beside the datasheet's peak and the share."""
    Column = text_table.Column
    columns = [Column("probe"), Column("dtype"), Column("shape"),
               Column("median [ms]", numeric=True), Column("measured", numeric=True),
               Column("datasheet", numeric=True), Column("% of datasheet", numeric=True)]
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
    return text_table.render(columns, cells, terminal=terminal)
