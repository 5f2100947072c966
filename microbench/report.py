"""One writer for results: the console summary, the JSON result and the CSV summary row.

The summary keeps the older tool's lines verbatim in their labels (scripts grep them):
``Microbenchmark for network :``, ``Num devices:``, ``Dtype:``, ``Mini batch size [img] :``,
``Time per mini-batch :`` (seconds) and ``Throughput [img/sec] :``. The JSON keeps the older keys
beside the richer fields. Files are written whole or not at all; CSV rows are appended under an
exclusive lock, so concurrent runs never interleave, and a file with another header is refused.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import tempfile
from typing import TextIO

from . import __version__
from .benchmark import RunResult
from .device import runtime_version
from .errors import UsageError
from .timing import NOISY_CV_THRESHOLD, clock_name

try:
    import fcntl
except ImportError:                      # not POSIX: appends are still single writes
    fcntl = None

SCHEMA_VERSION = 1
CSV_NAME = "benchmark_summary.csv"
CSV_COLUMNS = (
    "time_utc", "network", "mode", "precision", "nhwc", "compile", "batch_size",
    "global_batch_size", "world_size", "image_size", "iterations", "warmup", "device_name",
    "throughput_img_s", "mean_ms", "median_ms", "std_ms", "min_ms", "max_ms", "p90_ms", "p95_ms",
    "p99_ms", "cv", "peak_allocated_mb", "peak_reserved_mb", "warmup_s", "compile_s",
    "gflops_per_iteration", "achieved_tflops", "mfu", "torch",
    "gpu_runtime", "host", "json_file", "status", "error",
)
RULE = "=" * 60


# ---------------------------------------------------------------- console

def print_config(config, precision, spec, image_size: int, launch, env: dict,
                 notes: list[str], out: TextIO) -> None:
    compile_text = "off"
    if config.compile:
        compile_text = f"on {config.compile_options}" if config.compile_options else "on (default)"
    lines = [
        ("Network", f"{spec.name} ({spec.family}, input {spec.describe_input(image_size)}, "
                    f"{spec.num_classes} classes)"),
        ("Mode", config.mode + (f" (optimizer step every {config.opt_step} iterations)"
                                if config.opt_step > 1 else "")),
        ("Batch size", _batch_text(launch)),
        ("Iterations", f"{config.iterations} timed after {config.warmup} warm-up"),
        ("Precision", f"{precision.label} (TF32 {'allowed' if precision.tf32 else 'off'})"),
        ("Memory format", "channels-last (NHWC)" if config.nhwc else "contiguous (NCHW)"),
        ("Compile", compile_text),
        ("Device", f"{env['device']} {env['device_name']} ({env['architecture']})"),
        ("PyTorch", f"{env['torch']}, torchvision {env['torchvision']}, {runtime_version(env)}"),
    ]
    if launch.distributed:
        lines.append(("Distributed", f"{launch.launcher}, world size {launch.world_size}"))
    print(f"micro_benchmarking_pytorch {__version__}", file=out)
    for label, value in lines:
        print(f"  {label:<14}: {value}", file=out)
    for note in notes:
        print(f"Note: {note}", file=out)


def _batch_text(launch) -> str:
    if not launch.distributed:
        return str(launch.local_batch)
    return f"{launch.local_batch} per rank, {launch.global_batch} global"


def print_iterations(result: RunResult, out: TextIO) -> None:
    losses, skipped = result.losses, result.profiled_iteration
    for sample, time_ms in enumerate(result.times.samples_ms):
        index = sample + 1 if skipped is not None and sample >= skipped else sample
        if skipped is not None and sample == skipped:
            print(f"Iteration {skipped}: profiled by DeepSpeed, not in the statistics", file=out)
        loss = f"Loss = {losses[sample]:.4f}, " if sample < len(losses) else ""
        print(f"Iteration {index}: {loss}Time = {time_ms:.3f} ms", file=out)


def print_warmup(result: RunResult, out: TextIO) -> None:
    config = result.config
    if config.warmup == 0:
        print("Warm-up: none", file=out)
        return
    first = ("compile + first iteration" if config.compile else "first iteration")
    print(f"Warm-up: {config.warmup} iterations in {result.warmup_s:.2f} s "
          f"({first} {result.first_iteration_s:.2f} s)", file=out)


def _mb(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "n/a (not tracked on the CPU)"


def print_legacy_block(devices: int, dtype: str, batch_size: int, time_per_batch_s: float,
                       throughput: float, out: TextIO) -> None:
    print(f"Num devices: {devices}", file=out)
    print(f"Dtype: {dtype}", file=out)
    print(f"Mini batch size [img] : {batch_size}", file=out)
    print(f"Time per mini-batch : {time_per_batch_s:.6f}", file=out)
    print(f"Throughput [img/sec] : {throughput:.2f}", file=out)


def _max_known(values) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def print_summary(result: RunResult, out: TextIO, aggregate=None) -> None:
    """The older tool's lines, then the performance summary (over all ranks under DDP)."""
    dtype = result.precision.label
    print("--------------------SUMMARY--------------------------", file=out)
    print(f"Microbenchmark for network : {result.config.network}", file=out)
    if aggregate is None:
        print_legacy_block(1, dtype, result.batch_size, result.times.mean / 1e3,
                           result.throughput, out)
        times, throughput, batch = result.times, result.throughput, result.batch_size
        allocated, reserved = result.peak_allocated_mb, result.peak_reserved_mb
    else:
        print(f"--------This process: rank {aggregate.launch.rank}--------", file=out)
        print_legacy_block(1, dtype, result.batch_size, result.times.mean / 1e3,
                           result.throughput, out)
        print("", file=out)
        print("--------Overall (all ranks; time of the slowest rank)--------", file=out)
        print_legacy_block(aggregate.world_size, dtype, aggregate.global_batch,
                           aggregate.time_per_batch_s, aggregate.throughput, out)
        print_rank_table(aggregate, out)
        times, throughput, batch = aggregate.all_times, aggregate.throughput, aggregate.global_batch
        allocated = _max_known(r.peak_allocated_mb for r in aggregate.records)
        reserved = _max_known(r.peak_reserved_mb for r in aggregate.records)
    t = times
    rows = [
        ("Iteration time [ms]", f"mean {t.mean:.3f}  median {t.median:.3f}  std {t.std:.3f}  "
                                f"min {t.min:.3f}  max {t.max:.3f}"),
        ("Percentiles [ms]", f"p90 {t.p90:.3f}  p95 {t.p95:.3f}  p99 {t.p99:.3f}"),
        ("Coefficient of variation", f"{t.cv:.2%}"),
        ("Throughput [img/sec]", f"{throughput:.2f}"),
        ("Time per batch [ms]", f"{t.mean:.3f}"),
        ("Time per sample [us]", f"{t.mean * 1e3 / batch:.2f}"),
        ("Peak memory allocated [MB]", _mb(allocated)),
        ("Peak memory reserved [MB]", _mb(reserved)),
        ("Warm-up [s]", f"{result.warmup_s:.2f} ({result.config.warmup} iterations)"),
    ]
    if aggregate is not None:
        rows[0:0] = [("Samples", f"all {aggregate.world_size} ranks, {t.count} in all")]
    if result.compile_s is not None:
        rows.append(("Compile + first iteration [s]", f"{result.compile_s:.2f}"))
    rows += _flops_rows(result, times, aggregate is not None)
    per_rank = " per rank" if aggregate is not None else ""
    rows.append(("Timed with", f"{clock_name(result.device)}, {result.times.count} samples"
                               f"{per_rank}"))
    print(RULE, file=out)
    print("Performance summary", file=out)
    for label, value in rows:
        print(f"{label:<30}: {value}", file=out)
    print(RULE, file=out)
    for warning in warnings_for(result):
        print(f"WARNING: {warning}", file=out)


def _flops_rows(result: RunResult, times, per_gpu: bool) -> list[tuple[str, str]]:
    use = result.utilization(times)
    if use is None:
        return []
    counted = "forward + backward" if result.config.mode == "training" else "forward"
    per = " per GPU" if per_gpu else ""
    gflops = use.flops_per_iteration / 1e9
    mfu = (f"{use.mfu:.1%} of {use.peak.tflops:g} TFLOP/s ({use.peak.source})"
           if use.mfu is not None else f"unknown ({use.peak.source})")
    return [("FLOPs per iteration" + per, f"{gflops:.2f} GFLOP ({counted}; "
                                          f"{gflops / result.batch_size:.3f} per image)"),
            ("Achieved [TFLOP/s]" + per, f"{use.achieved_tflops:.2f} (median iteration)"),
            ("MFU", mfu)]


def print_profiles(result: RunResult, out: TextIO) -> None:
    for text in result.profile_reports:
        print(text, file=out)


def print_rank_table(aggregate, out: TextIO) -> None:
    print("", file=out)
    print(f"{'rank':>5} {'local':>5}  {'host':<20} {'median ms':>10} {'p99 ms':>10} "
          f"{'img/s':>10}", file=out)
    for r in aggregate.records:
        t = r.times
        print(f"{r.rank:>5} {r.local_rank:>5}  {r.host[:20]:<20} {t.median:>10.3f} "
              f"{t.p99:>10.3f} {r.throughput:>10.2f}", file=out)
    print(f"Skew between ranks : {aggregate.skew:.2%} (slowest rank {aggregate.slowest.rank}, "
          f"fastest rank {aggregate.fastest.rank}, by timed wall time)", file=out)
    print(f"Per-GPU throughput [img/sec] : {aggregate.per_gpu_throughput:.2f}", file=out)
    if aggregate.scaling_efficiency is not None:
        print(f"Scaling efficiency : {aggregate.scaling_efficiency:.1%} of {aggregate.world_size}"
              f" x {aggregate.baseline_throughput:.2f} img/s (single-device baseline)", file=out)
    for note in aggregate.notes:
        print(f"Note: {note}", file=out)


def warnings_for(result: RunResult) -> list[str]:
    found = []
    if result.times.cv > NOISY_CV_THRESHOLD:
        found.append(f"coefficient of variation {result.times.cv:.1%} exceeds "
                     f"{NOISY_CV_THRESHOLD:.0%}: timings are noisy; run more --iterations, make sure "
                     f"nothing else uses the device, and check clocks and temperature")
    if any(not math.isfinite(loss) for loss in result.losses):
        found.append("non-finite loss values: the numbers still time the work, but the model "
                     "diverged (FP16 overflow?)")
    return found


# ---------------------------------------------------------------- files

def default_json_name(result: RunResult) -> str:
    config = result.config
    parts = [result.spec.name, config.mode, result.precision.name]
    if config.nhwc:
        parts.append("nhwc")
    if config.compile:
        parts.append("compile")
    parts.append(f"b{config.batch_size}")
    return "_".join(parts) + ".json"


def json_path(result: RunResult) -> str:
    config = result.config
    return os.path.join(config.output_dir, config.output_file or default_json_name(result))


def csv_path(config) -> str:
    return config.csv_file or os.path.join(config.output_dir, CSV_NAME)


def result_document(result: RunResult, aggregate=None) -> dict:
    t = result.times
    document = {
        # The older tool's keys, unchanged.
        "Name": result.config.network,
        "GPUs": 1,
        "Mini batch size [img]": result.batch_size,
        "Mini batch size [img/gpu]": result.batch_size,
        "Throughput [img/sec]": result.throughput,
        "Time per mini-batch": t.mean / 1e3,
        # Richer fields.
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "config": dataclasses.asdict(result.config),
        "env": result.env,
        "model": {"name": result.spec.name, "family": result.spec.family,
                  "parameters": result.parameters, "num_classes": result.spec.num_classes,
                  "input_shape": list(result.spec.input_shape(result.batch_size,
                                                              result.image_size))},
        "precision": {"name": result.precision.name, "label": result.precision.label,
                      "tf32": result.precision.tf32},
        "timing": {"clock": clock_name(result.device), "warmup_iterations": result.config.warmup,
                   "warmup_s": result.warmup_s, "first_iteration_s": result.first_iteration_s,
                   "compile_s": result.compile_s, "samples_ms": list(t.samples_ms),
                   "stats": t.stats(), "noisy": t.is_noisy},
        "throughput": {"images_per_s": result.throughput, "ms_per_batch": t.mean,
                       "us_per_sample": t.mean * 1e3 / result.batch_size},
        "memory": {"peak_allocated_mb": result.peak_allocated_mb,
                   "peak_reserved_mb": result.peak_reserved_mb},
        "losses": result.losses,
        "notes": result.notes,
        "flops": _flops_document(result, aggregate),
    }
    if aggregate is not None:
        document.update({
            "GPUs": aggregate.world_size,
            "Mini batch size [img]": aggregate.global_batch,
            "Throughput [img/sec]": aggregate.throughput,
            "Time per mini-batch": aggregate.time_per_batch_s,
            "distributed": aggregate.to_dict(),
        })
    return document


def _flops_document(result: RunResult, aggregate) -> dict | None:
    use = result.utilization(aggregate.all_times if aggregate is not None else None)
    if use is None:
        return None
    return {**use.to_dict(), "counted": "forward+backward" if result.config.mode == "training"
            else "forward", "counter": "torch.utils.flop_counter.FlopCounterMode",
            "per": "GPU" if aggregate is not None else "device",
            "deepspeed_profiled_iteration": result.profiled_iteration}


def write_json(document: dict, path: str) -> None:
    """Write whole or not at all: a temporary file in the same directory, then a rename."""
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=directory)
    try:
        with os.fdopen(handle, "w") as stream:
            json.dump(document, stream, indent=2, allow_nan=True, default=str)
            stream.write("\n")
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _timing_cells(times) -> dict:
    return {"mean_ms": f"{times.mean:.4f}", "median_ms": f"{times.median:.4f}",
            "std_ms": f"{times.std:.4f}", "min_ms": f"{times.min:.4f}",
            "max_ms": f"{times.max:.4f}", "p90_ms": f"{times.p90:.4f}",
            "p95_ms": f"{times.p95:.4f}", "p99_ms": f"{times.p99:.4f}", "cv": f"{times.cv:.5f}"}


def csv_row(result: RunResult, json_file: str, aggregate=None) -> dict:
    """One row; under DDP the timing, batch and throughput cells describe all ranks."""
    config, env = result.config, result.env
    if aggregate is None:
        times, throughput = result.times, result.throughput
        world_size, global_batch = 1, result.batch_size
    else:
        times, throughput = aggregate.all_times, aggregate.throughput
        world_size, global_batch = aggregate.world_size, aggregate.global_batch
    return {
        "time_utc": env["time_utc"], "network": result.spec.name, "mode": config.mode,
        "precision": result.precision.name, "nhwc": int(config.nhwc),
        "compile": int(config.compile), "batch_size": result.batch_size,
        "global_batch_size": global_batch, "world_size": world_size,
        "image_size": result.image_size, "iterations": config.iterations,
        "warmup": config.warmup, "device_name": env["device_name"],
        "throughput_img_s": f"{throughput:.3f}",
        **_timing_cells(times),
        "peak_allocated_mb": _optional(result.peak_allocated_mb),
        "peak_reserved_mb": _optional(result.peak_reserved_mb),
        "warmup_s": f"{result.warmup_s:.3f}", "compile_s": _optional(result.compile_s),
        "torch": env["torch"], "gpu_runtime": runtime_version(env), "host": env["host"],
        "json_file": json_file,
        **_flops_cells(result, aggregate),
        "status": "ok", "error": "",
    }


def failed_csv_row(config, precision_name: str, env: dict, status: str, error: str) -> dict:
    """A sweep row that did not run to the end: what it was, and why it stopped."""
    row = {column: "" for column in CSV_COLUMNS}
    row.update({
        "time_utc": env["time_utc"], "network": config.network, "mode": config.mode,
        "precision": precision_name, "nhwc": int(config.nhwc), "compile": int(config.compile),
        "batch_size": config.batch_size, "global_batch_size": config.batch_size,
        "world_size": 1, "iterations": config.iterations, "warmup": config.warmup,
        "device_name": env["device_name"], "torch": env["torch"],
        "gpu_runtime": runtime_version(env), "host": env["host"], "status": status,
        "error": error,
    })
    return row


def _flops_cells(result: RunResult, aggregate) -> dict:
    use = result.utilization(aggregate.all_times if aggregate is not None else None)
    if use is None:
        return {"gflops_per_iteration": "", "achieved_tflops": "", "mfu": ""}
    return {"gflops_per_iteration": f"{use.flops_per_iteration / 1e9:.3f}",
            "achieved_tflops": f"{use.achieved_tflops:.4f}", "mfu": _optional(use.mfu, 5)}


def _optional(value: float | None, digits: int = 3) -> str:
    if value is None:
        return ""
    return f"{value:.{digits}f}"


def _header_line() -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerow(CSV_COLUMNS)
    return buffer.getvalue()


def check_csv_header(path: str) -> None:
    """Refuse a CSV whose header is not ours before any time is spent benchmarking."""
    try:
        with open(path, newline="") as stream:
            first = stream.readline()
    except FileNotFoundError:
        return
    except OSError as error:
        raise UsageError(f"cannot read --csv-file {path}: {error.strerror}") from None
    if first and first.rstrip("\r\n") != _header_line().rstrip("\r\n"):
        raise UsageError(f"{path} has a different CSV header (an older or foreign file): "
                         f"name another --csv-file or move that one away")


def append_csv(row: dict, path: str) -> None:
    """Append one row (and the header to a new file) as one write under an exclusive lock."""
    with open(path, "a+", newline="") as stream:
        if fcntl is not None:
            fcntl.flock(stream, fcntl.LOCK_EX)
        stream.seek(0)
        first = stream.readline()
        if first and first != _header_line():
            raise UsageError(f"{path} has a different CSV header: name another --csv-file")
        buffer = io.StringIO()
        if not first:
            buffer.write(_header_line())
        csv.DictWriter(buffer, fieldnames=CSV_COLUMNS).writerow(row)
        stream.write(buffer.getvalue())
        stream.flush()
        os.fsync(stream.fileno())


def prepare_output(config) -> None:
    """Fail before the run, not after it, when results cannot be written."""
    if not config.write_files:
        return
    try:
        os.makedirs(config.output_dir, exist_ok=True)
        with tempfile.TemporaryFile(dir=config.output_dir):
            pass
    except OSError as error:
        raise UsageError(f"cannot write results to --output-dir {config.output_dir}: "
                         f"{error.strerror}; choose another directory or pass --no-files") from None
    csv_dir = os.path.dirname(os.path.abspath(csv_path(config)))
    if not os.access(csv_dir, os.W_OK):
        raise UsageError(f"cannot write --csv-file {csv_path(config)}: directory not writable")
    check_csv_header(csv_path(config))


def write_files(result: RunResult, out: TextIO, aggregate=None) -> None:
    if not result.config.write_files:
        return
    path = json_path(result)
    write_json(result_document(result, aggregate), path)
    append_csv(csv_row(result, path, aggregate), csv_path(result.config))
    print(f"Results JSON : {path}", file=out)
    print(f"Results CSV  : {csv_path(result.config)}", file=out)


class PrefixedLines:
    """A text stream that writes whole lines, each behind a prefix such as ``[rank 3] ``, in one
    write call, so the output of several ranks on one terminal never interleaves mid-line."""

    def __init__(self, stream: TextIO, prefix: str):
        self._stream, self._prefix, self._pending = stream, prefix, ""

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        if lines:
            self._stream.write("".join(f"{self._prefix}{line}\n" for line in lines))
            self._stream.flush()
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self.write("\n")
        self._stream.flush()
