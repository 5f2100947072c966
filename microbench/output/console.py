"""The console writer: config echo, warm-up, per-iteration lines and the summary.

The summary keeps the older tool's lines verbatim in their labels (scripts grep them):
``Microbenchmark for network :``, ``Num devices:``, ``Dtype:``, ``Mini batch size [img] :``,
``Time per mini-batch :`` (seconds) and ``Throughput [img/sec] :``.
"""
from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from typing import Sequence, TextIO, cast

from microbench import __version__
from microbench.platform.devices import clock_name, conv_autotuner_name
from microbench.output.summary import Summary
from microbench.plan.spec import RunSpec
from microbench.platform import safe_text, units
from microbench.store import figures
from microbench.measure.flops import Utilization
from microbench.measure.measured_peaks import ProbeRow
from microbench.platform.environment import DeviceInfo
from microbench.settings.config import BenchConfig

RULE = "=" * 60


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


@dataclass
class Console:
    """Where this process writes: plain lines on rank 0, rank-prefixed lines elsewhere."""

    out: TextIO
    err: TextIO

    @classmethod
    def for_spec(cls, spec: RunSpec) -> "Console":
        launch = spec.launch
        if not launch.distributed:
            return cls(sys.stdout, sys.stderr)
        prefix = f"[rank {launch.rank}] "
        # A PrefixedLines is written and flushed, all that its readers (print, rich) call of
        # a text stream: a TextIO to them.
        out = sys.stdout if launch.is_main else cast(TextIO, PrefixedLines(sys.stdout, prefix))
        return cls(out, cast(TextIO, PrefixedLines(sys.stderr, prefix)))


# ---------------------------------------------------------------- before the run

def print_config(spec: RunSpec, env: DeviceInfo, out: TextIO, notes: Sequence[str] | None = None
                ) -> None:
    """The configuration echo (``spec``: the RunSpec; ``env``: the DeviceInfo)."""
    config, model, launch = spec.config, spec.model, spec.launch
    tf32 = "allowed" if spec.precision.tf32 else "off"
    lines = [
        ("Network", model.describe()),
        ("Mode", spec.scenario.mode_text()),
        ("Batch size", _batch_text(spec)),
        ("Iterations", f"{config.iterations} timed after {config.warmup} warm-up"),
        ("Precision", f"{spec.precision.label} (TF32 {tf32})"),
    ]
    if model.channels_last is not None:            # image models; token ids have no layout
        lines.append(("Memory format",
                      "channels-last (NHWC)" if config.nhwc else "contiguous (NCHW)"))
    lines += [
        ("Compile", compile_text(config)),
        ("Optimizer", _optimizer_text(spec)),
        ("Device", f"{env.device} {env.device_name} ({env.architecture})"),
        ("PyTorch", f"{env.torch}, torchvision {env.torchvision}, {env.runtime}"),
        ("System", f"{env.os}, Python {env.python}"),
    ]
    if launch.distributed:
        lines.append(("Distributed", f"{launch.launcher}, world size {launch.world_size}"))
    print(f"micro_benchmarking_pytorch {__version__}", file=out)
    for label, value in lines:
        print(f"  {label:<14}: {value}", file=out)
    for note in spec.notes if notes is None else notes:
        print(safe_text.terminal(f"Note: {note}"), file=out)


def compile_text(config: BenchConfig) -> str:
    """``off``, ``on (default)``, ``on (mode reduce-overhead)``, ``on (mode max-autotune,
    fullgraph True)``: what was asked of torch.compile, in words, not a Python dict."""
    if not config.compile:
        return "off"
    if not config.compile_options:
        return "on (default)"
    parts = []
    for key, value in config.compile_options.items():
        if isinstance(value, dict):
            value = ", ".join(f"{name}={setting}" for name, setting in value.items())
        parts.append(f"{key} {value}")
    return f"on ({', '.join(parts)})"


def _optimizer_text(spec: RunSpec) -> str:
    config = spec.config
    autotune = f"{conv_autotuner_name()} {'on' if config.cudnn_benchmark else 'off'}"
    if not spec.scenario.updates_weights:
        return f"none ({config.mode}); {autotune}"
    name = {"sgd": "SGD", "adamw": "AdamW"}.get(config.optimizer, config.optimizer)
    return f"{name}, {config.optimizer_impl}; {autotune}"


def _batch_text(spec: RunSpec) -> str:
    launch = spec.launch
    if not launch.distributed:
        return str(launch.local_batch)
    return f"{launch.local_batch} per rank, {launch.global_batch} global"


# ---------------------------------------------------------------- after the run

def print_iterations(summary: Summary, out: TextIO) -> None:
    """This process's iterations (rank 0's under DDP), with the profiled one marked; with
    several trials, a line first says which trial's they are."""
    if len(summary.trials) > 1:
        number = summary.trials.index(summary.representative) + 1
        print(f"Iterations of trial {number} of {len(summary.trials)} (the median trial by "
              f"throughput; every trial's samples are in the result JSON):", file=out)
    losses, skipped = summary.result.losses, summary.spec.config.flops_prof_step
    for sample, time_ms in enumerate(summary.result.times.samples_ms):
        index = sample + 1 if skipped is not None and sample >= skipped else sample
        if skipped is not None and sample == skipped:
            print(f"Iteration {skipped}: profiled by DeepSpeed, not in the statistics", file=out)
        loss = f"Loss = {losses[sample]:.4f}, " if sample < len(losses) else ""
        print(f"Iteration {index}: {loss}Time = {time_ms:.3f} ms", file=out)


def legacy_unit(summary: Summary) -> str:
    """What the older tool's batch and throughput lines count: ``img`` for every model but a
    language model, whose batch counts sequences (``seq``). Scripts grep ``[img]`` for image
    models, which keep it verbatim; a language model's batch was never images, and a script
    that read its ``[img/sec]`` as images per second read sequences per second unawares (its
    tokens per second follow on their own line)."""
    return "seq" if summary.spec.scenario.counts_tokens else "img"


def print_legacy_block(devices: int, dtype: str | None, batch_size: int,
                       time_per_batch_s: float, throughput: float, out: TextIO,
                       unit: str = "img") -> None:
    """The older tool's lines; ``dtype`` None leaves ``Dtype:`` out (said once per run)."""
    print(f"Num devices: {devices}", file=out)
    if dtype is not None:
        print(f"Dtype: {dtype}", file=out)
    print(f"Mini batch size [{unit}] : {batch_size}", file=out)
    print(f"Time per mini-batch : {time_per_batch_s:.6f}", file=out)
    print(f"Throughput [{unit}/sec] : {throughput:.2f}", file=out)


def print_summary(summary: Summary, out: TextIO) -> None:
    """The older tool's lines (scripts grep them), the headline set apart, then the details."""
    dtype = summary.spec.precision.label
    print("--------------------SUMMARY--------------------------", file=out)
    print(f"Microbenchmark for network : {summary.spec.config.network}", file=out)
    if summary.distributed:
        own = summary.own
        print(f"--------This process: rank {own.rank}--------", file=out)
        # Every rank runs the same precision (ranks agree on their settings): ``Dtype:`` is
        # printed once, in the overall block, so a script reading it gets one value (issue 58).
        print_legacy_block(1, None, own.batch_size, own.times.mean / 1e3, own.throughput, out,
                           legacy_unit(summary))
        print("", file=out)
        print("--------Overall (all ranks; time of the slowest rank)--------", file=out)
    print_legacy_block(summary.world_size, dtype, summary.global_batch,
                       summary.time_per_batch_ms / 1e3, summary.throughput, out,
                       legacy_unit(summary))
    if summary.token_throughput is not None:
        print(f"Throughput [tokens/sec] : {summary.token_throughput:.2f}", file=out)
    if summary.distributed:
        print_rank_table(summary, out)
    print(RULE, file=out)
    print(headline(summary), file=out)
    print(RULE, file=out)
    for label, value in _summary_rows(summary):
        print(f"  {label:<22}: {value}", file=out)
    for warning in summary.warnings():
        print(f"WARNING: {warning}", file=out)


def headline(summary: Summary) -> str:
    """One line: the throughput, how far it spreads, and what produced it."""
    config = summary.spec.config
    return (f"{config.network} {config.mode}: {_headline_rate(summary)}  "
            f"{_headline_spread(summary)}  on {_where(summary)}")


def _headline_rate(summary: Summary) -> str:
    """Units of work per second, and items per second beside them where they differ
    (``2,345 tokens/s (4.58 sequences/s)``)."""
    scenario = summary.scenario
    rate = f"{units.rate(summary.unit_throughput)} {scenario.unit}s/s"
    if scenario.unit == scenario.item:
        return rate
    return f"{rate} ({units.rate(summary.throughput)} {scenario.item}s/s)"


def _headline_spread(summary: Summary) -> str:
    """The headline's spread, in the headline's unit (the unit of work: tokens/s for a
    language model, never its sequences/s)."""
    spread = summary.unit_trial_spread
    interval = spread.ci95                  # None with one trial
    if spread.count > 1 and interval is not None:
        low, high = interval
        return (f"geometric mean of {spread.count} trials, 95% CI {units.rate(low)} to "
                f"{units.rate(high)}")
    times = summary.times
    return f"+/- {units.percent(times.cv)} (CV of {times.count} iterations)"


def _where(summary: Summary) -> str:
    """``NVIDIA H200``, ``2 x NVIDIA H200``, ``the CPU (Intel Xeon ...)``, and the precision."""
    name = summary.env.device_name or summary.spec.device.type.upper()
    if summary.spec.device.type == "cpu":
        ranks = f"{summary.world_size} processes on " if summary.world_size > 1 else ""
        what = f"{ranks}the CPU ({name})"
    else:
        what = f"{summary.world_size} x {name}" if summary.world_size > 1 else name
    return f"{what}, {summary.spec.precision.label}"


def _memory(summary: Summary) -> str:
    if summary.peak_allocated_mb is None or summary.peak_reserved_mb is None:
        return "not tracked on the CPU"
    text = (f"allocated {units.megabytes(summary.peak_allocated_mb)}, reserved "
            f"{units.megabytes(summary.peak_reserved_mb)}")
    if summary.graph_pools_hidden:
        text += " (allocated excludes the CUDA graphs' memory pool: see reserved)"
    return text


def _warmup(summary: Summary) -> str:
    config, result = summary.spec.config, summary.first
    first_s = result.first_iteration_s          # None without warm-up
    if config.warmup == 0 or first_s is None:
        return "none"
    first = "compile + first iteration" if config.compile else "first iteration"
    trials = len(summary.trials)
    which = f" (first of {trials} trials)" if trials > 1 else ""
    seconds = units.duration_ms
    return (f"{config.warmup} iterations in {seconds(result.warmup_s * 1e3)}{which}; {first} "
            f"{seconds(first_s * 1e3)}")


def _summary_rows(summary: Summary) -> list[tuple[str, str]]:
    t, ms = summary.times, units.duration_ms
    basis = " (slowest rank)" if summary.distributed else ""
    item = summary.spec.model.item
    rows = [
        (f"Iteration time{basis}", f"median {ms(t.median)}  mean {ms(t.mean)}  std {ms(t.std)}"
                                   f"  min {ms(t.min)}  max {ms(t.max)}"),
        ("Percentiles", f"p90 {ms(t.p90)}  p95 {ms(t.p95)}  p99 {ms(t.p99)}"),
    ]
    if summary.scenario.items_run_one_by_one:
        rows.append((f"Time per {item}", ms(summary.time_per_sample_us / 1e3)))
    rows += [
        ("Peak memory", _memory(summary)),
        ("Warm-up", _warmup(summary)),
    ]
    rows += _compiler_rows(summary)
    rows += _library_log_rows(summary)
    rows += summary.lowp.rows() if summary.lowp is not None else []
    rows += summary.scenario.console_rows(summary)
    rows += _flops_rows(summary) + _peaks_rows(summary) + _trial_rows(summary)
    rows += _telemetry_rows(summary)
    if summary.host_load is not None:
        rows.append(("Host load", summary.host_load.text()))
    rows += _registry_rows(summary)
    per_rank = " per rank" if summary.distributed else ""
    trials = f" in {len(summary.trials)} trials" if len(summary.trials) > 1 else ""
    rows.append(("Timed with", f"{clock_name(summary.spec.device)}, {t.count} "
                               f"sample{'' if t.count == 1 else 's'}"
                               f"{per_rank}{trials}"))
    return rows


def _registry_rows(summary: Summary) -> list[tuple[str, str]]:
    """A row for each figure the registry gives a console label and a Summary reader
    (store/figures.py), where this kind of run has it."""
    rows = []
    for figure in figures.written_by_summary():
        if (figure.console and figure.of_summary is not None
                and figure.applies_to(summary.spec.scenario.mode)):
            value = figure.of_summary(summary)
            rows.append((figure.console, "unknown" if value is None else
                         f"{format(value, figure.console_format)} {figure.unit}"))
    return rows


def _compiler_rows(summary: Summary) -> list[tuple[str, str]]:
    """What the compiler did, observed (``compile_watch``), beside what was asked of it."""
    report = summary.compiler
    if report is None:
        return []
    rows = [("Compiled", report.summary_text()), ("CUDA graphs", report.cuda_graphs)]
    if report.warnings:
        first = report.warnings[0]
        rows.append(("Compiler warnings", f"{len(report.warnings)} (all in the results JSON, "
                                          f"compiler.warnings); first: "
                                          f"{first[:160]}{'...' if len(first) > 160 else ''}"))
    return rows


def _library_log_rows(summary: Summary) -> list[tuple[str, str]]:
    """torch's and torchao's log records a user can act on, counted, as the compiler's
    warnings are: every record is in the JSON."""
    kept = summary.library_log
    shown = kept.to_act_on()
    if not shown:
        return []
    first = shown[0]
    return [("Library log", f"{len(shown)} to read of {kept.count} record"
                            f"{'s' * (kept.count != 1)} (all in the JSON, library_log); first: "
                            f"{first[:LIBRARY_LINE_SHOWN]}"
                            f"{'...' if len(first) > LIBRARY_LINE_SHOWN else ''}")]


# Characters of the first library record the summary shows: the row stays about one line wide.
LIBRARY_LINE_SHOWN = 70


def _trial_rows(summary: Summary) -> list[tuple[str, str]]:
    # In the headline's unit (tokens/s for a language model), as the headline's interval.
    spread = summary.unit_trial_spread
    ci, prediction = spread.ci95, spread.prediction95       # None with one trial
    if spread.count < 2 or ci is None or prediction is None:
        return []
    (low, high), (next_low, next_high) = ci, prediction
    unit = f"{summary.scenario.unit}s/s"
    values = "  ".join(units.rate(value) for value in spread.values)
    within = statistics.median(trial.slowest.times.cv for trial in summary.trials)
    return [("Trials", f"{spread.count}: {values} {unit}"),
            ("Across trials", f"geometric mean {units.rate(spread.headline)} {unit}; 95% CI "
                              f"of the geometric mean {units.rate(low)} to {units.rate(high)}; "
                              f"next run likely in {units.rate(next_low)} to "
                              f"{units.rate(next_high)} "
                              f"(95% prediction interval; both Student t on log throughput)"),
            ("Trial CV", f"{units.percent(spread.cv)} between trials; within a trial "
                         f"{units.percent(within)} (median of the trials' own CVs)")]


def _telemetry_rows(summary: Summary) -> list[tuple[str, str]]:
    report = summary.telemetry
    if report is None:
        return []
    if not report.available:
        return [("Telemetry", (report.reason or "").removeprefix("telemetry: "))]
    rows = []
    for label, quantity, digits in (("SM clock [MHz]", "sm_clock_mhz", 0),
                                    ("Memory clock [MHz]", "memory_clock_mhz", 0),
                                    ("Power [W]", "power_w", 1),
                                    ("Temperature [C]", "temperature_c", 0),
                                    ("Utilization [%]", "utilization_pct", 0)):
        stat = report.stat(quantity)
        if stat is not None:
            rows.append((label, f"min {stat.min:.{digits}f}  median {stat.median:.{digits}f}  "
                                f"max {stat.max:.{digits}f}"))
    if report.energy_j is not None:
        item = summary.scenario.unit
        basis = "energy counter" if not report.energy_estimated else "estimated: power x time"
        rows.append(("Energy", f"{report.energy_j:.1f} J ({basis}); "
                               f"{report.joules_per_item:.4g} J per {item}, "
                               f"{report.items_per_joule:.4g} {item}s per J"))
    throttled = {True: "yes: " + ", ".join(report.throttle_reasons_seen), False: "no",
                 None: "not reported"}[report.throttled]
    rows.append(("Throttled", throttled))
    return rows


def _flops_rows(summary: Summary) -> list[tuple[str, str]]:
    use = summary.utilization
    if use is None:
        return []
    scenario = summary.scenario
    per = " per device" if summary.distributed else ""
    count = scenario.units_per_iteration(summary.spec.batch_size)
    return [("FLOPs per iteration" + per,
             f"{units.flops(use.flops_per_iteration)} ({scenario.flops_counted}); "
             f"{units.flops(use.flops_per_iteration / count)} per {scenario.unit}"),
            ("Achieved" + per, f"{units.flops(use.achieved_tflops * 1e12, per_second=True)} "
                               f"(at the headline throughput)"),
            ("MFU", mfu_text(use, summary.measured_utilization))] + _second_mfu_rows(summary)


def mfu_text(use: Utilization, measured: Utilization | None) -> str:
    """MFU against the datasheet peak and, with --measure-peaks, the measured one."""
    return units.two_denominators(
        use.mfu, use.peak.tflops, use.peak.source,
        measured.mfu if measured is not None else None,
        measured.peak.tflops if measured is not None else None,
        measured.peak.source if measured is not None else "", units.tflops_rate)


def _peaks_rows(summary: Summary) -> list[tuple[str, str]]:
    """The probe's figures, their share of the datasheet, the clocks and power limit read
    meanwhile, its cost, and the warning when it is far below the datasheet."""
    measured = summary.measured_peaks
    if measured is None:
        return []
    spec = summary.spec
    parts = []
    if measured.tflops is not None:
        share = (f" ({measured.tflops / spec.peak.tflops:.1%} of the datasheet's)"
                 if spec.peak.tflops else "")
        parts.append(f"{measured.gemm_label} {units.tflops_rate(measured.tflops)}{share}")
    else:
        parts.append(f"{measured.gemm_label}: {measured.note or _row_problem(measured.gemm)}")
    if measured.gbs is not None:
        share = (f" ({measured.gbs / spec.bandwidth.gbs:.1%} of the datasheet's)"
                 if spec.bandwidth.gbs else "")
        parts.append(f"{measured.copy_label} {units.gbs_rate(measured.gbs)}{share}")
    else:
        parts.append(f"{measured.copy_label}: {_row_problem(measured.copy)}")
    # Trials in this process share its one probe; trials in worker processes have one each.
    probes = len({id(trial.result.peaks) for trial in summary.trials
                  if trial.result.peaks is not None})
    if probes > 1:
        parts.append(f"the probe of median GEMM rate of {probes} trials' processes")
    rows = [("Measured peaks", "; ".join(parts)),
            ("During the probe", f"{measured.clocks.describe()}; the probe took "
                                 f"{units.duration_ms(measured.seconds * 1e3)}, before and "
                                 f"outside the timed "
                                 f"region, once per process")]
    rows += [("Peaks", line) for line in summary.peak_warnings]
    return rows


def _row_problem(row: ProbeRow | None) -> str:
    return "not measured" if row is None else (row.message or row.status)


def _second_mfu_rows(summary: Summary) -> list[tuple[str, str]]:
    """--precision fp8: MFU against the FP8 peak above, and against the BF16 peak here, with
    the share of the FLOPs that ran in FP8 (the rest ran at the BF16 rate)."""
    second, reduced = summary.second_utilization, summary.lowp
    if second is None:
        return []
    share = ("" if reduced is None or reduced.fp8_flops_share is None
             else f"; {reduced.fp8_flops_share:.1%} of the FLOPs ran in FP8")
    if second.mfu is None:
        return [("MFU (BF16 peak)", f"unknown ({second.peak.source}){share}")]
    return [("MFU (BF16 peak)", f"{second.mfu:.1%} of {second.peak.tflops:g} TFLOP/s "
                                f"({second.peak.source}){share}")]


def print_profiles(summary: Summary, out: TextIO) -> None:
    for text in summary.result.profile_reports:
        print(text, file=out)


def print_rank_table(summary: Summary, out: TextIO) -> None:
    print("", file=out)
    # The node column: a host name alone cannot tell two nodes of one name apart (containers,
    # simulated nodes); "-" where the launcher numbers no node.
    print(f"{'rank':>5} {'local':>5} {'node':>5}  {'host':<20} {'median ms':>10} {'p99 ms':>10} "
          f"{'img/s':>10}", file=out)
    for r in summary.ranks:
        t = r.times
        node = "-" if r.node_rank is None else r.node_rank
        print(f"{r.rank:>5} {r.local_rank:>5} {node:>5}  {r.host[:20]:<20} {t.median:>10.3f} "
              f"{t.p99:>10.3f} {r.throughput:>10.2f}", file=out)
    print(f"Skew between ranks : {summary.skew:.2%} (slowest rank {summary.slowest.rank}, "
          f"fastest rank {summary.fastest.rank}, by timed wall time)", file=out)
    print(f"Per-device throughput [img/sec] : {summary.per_device_throughput:.2f}", file=out)
    if summary.scaling_efficiency is not None:
        print(f"Scaling efficiency : {summary.scaling_efficiency:.1%} of {summary.world_size}"
              f" x {summary.spec.scaling_baseline_img_s:.2f} img/s (single-device baseline)",
              file=out)


def print_files(summary: Summary, out: TextIO) -> None:
    spec = summary.spec
    if spec.json_path:
        print(f"Results JSON : {safe_text.terminal(spec.json_path)}", file=out)
        print(f"Results CSV  : {safe_text.terminal(spec.csv_path)}", file=out)
