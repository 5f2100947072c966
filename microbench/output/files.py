"""The file writers: the JSON result and the CSV summary row, both read from a Summary.

The JSON keeps the older tool's keys (``Name``, ``GPUs``, ``Mini batch size [img]``,
``Mini batch size [img/gpu]``, ``Throughput [img/sec]``, ``Time per mini-batch``) beside the
richer fields. Files are written whole or not at all; CSV rows are appended under an exclusive
lock, so concurrent runs never interleave, a failed append is cut back, and a file with another
header is refused before the run (:mod:`microbench.platform.writing`).
"""
from __future__ import annotations

import dataclasses
import os
import tempfile

from microbench.measure.results import Trial
from microbench.platform.environment import DeviceInfo
from microbench.plan.spec import RunSpec

from microbench import __version__
from microbench.settings import identity
from microbench.measure import stats
from microbench.store import figures, stored
from microbench.platform import safe_text
from microbench.platform.devices import clock_name
from microbench.platform.errors import UsageError
from microbench.models.language import LanguageModelSpec
from microbench.models.registry import ModelSpec
from microbench.output.summary import Summary
from microbench.platform import writing

SCHEMA_VERSION = 2
# The run's CSV header as the tool first wrote it: its order is the file format (files of it are
# appended to), so it never changes. Its figure columns are cells of figures.FIGURES; the
# others say what ran (_identity_cells) and how the row ended.
CSV_COLUMNS_BEFORE_PEAKS = (
    "time_utc", "network", "mode", "precision", "nhwc", "compile", "batch_size",
    "global_batch_size", "world_size", "image_size", "seq_len", "attention", "iterations", "warmup",
    "device_name", "throughput_img_s", "throughput_tokens_s", "mean_ms", "median_ms", "std_ms",
    "min_ms", "max_ms", "p90_ms", "p95_ms", "p99_ms", "cv", "forward_ms", "backward_ms",
    "optimizer_ms", "ttft_median_ms", "itl_median_ms", "itl_p99_ms", "peak_allocated_mb",
    "peak_reserved_mb", "warmup_s", "compile_s", "gflops_per_iteration", "achieved_tflops", "mfu",
    "trials", "trial_cv", "ci95_low", "ci95_high", "sm_clock_mhz_median", "power_w_median",
    "energy_j", "j_per_item", "throttled", "device_type", "torch", "gpu_runtime", "host",
    "json_file", "status", "error",
)
_ENDING = CSV_COLUMNS_BEFORE_PEAKS[-2:]          # status and error stay last
# Figure columns added since (--measure-peaks' first, issue 35), in the registry's order, just
# before status and error: a figure's row in figures.FIGURES with a ``csv`` column adds it.
NEWER_COLUMNS = tuple(figure.csv for figure in figures.csv_figures()
                      if figure.csv is not None and figure.csv not in CSV_COLUMNS_BEFORE_PEAKS)
CSV_COLUMNS = CSV_COLUMNS_BEFORE_PEAKS[:-2] + NEWER_COLUMNS + _ENDING
# Every header this tool may have written, newest first; a new file gets the first. A file
# with an older one keeps it and takes rows in its own columns (append_csv), so adding a
# figure's column never refuses or mixes a file.
CSV_HEADERS = tuple(CSV_COLUMNS_BEFORE_PEAKS[:-2] + NEWER_COLUMNS[:count] + _ENDING
                    for count in range(len(NEWER_COLUMNS), -1, -1))


# ---------------------------------------------------------------- the JSON result

def result_document(summary: Summary) -> dict:
    spec, result, t = summary.spec, summary.result, summary.times
    document = {
        # The older tool's keys, unchanged in meaning: the job's figures.
        "Name": spec.config.network,
        "GPUs": summary.world_size,
        "Mini batch size [img]": summary.global_batch,
        "Mini batch size [img/gpu]": spec.batch_size,
        "Throughput [img/sec]": summary.throughput,
        "Time per mini-batch": summary.time_per_batch_ms / 1e3,
        # Richer fields.
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "config": dataclasses.asdict(spec.config),
        "env": summary.env.to_dict(),
        "model": _model_document(summary),
        "precision": {"name": spec.precision.name, "label": spec.precision.label,
                      "tf32": spec.precision.tf32},
        "timing": {"clock": clock_name(spec.device), "basis": _basis(summary),
                   "warmup_iterations": spec.config.warmup, "warmup_s": summary.first.warmup_s,
                   "first_iteration_s": summary.first.first_iteration_s,
                   "compile_s": summary.compile_s,
                   "samples_ms": list(t.samples_ms), "stats": t.stats(), "noisy": t.is_noisy},
        "throughput": {"images_per_s": summary.throughput,
                       "ms_per_batch": summary.time_per_batch_ms,
                       "us_per_sample": summary.time_per_sample_us},
        "memory": {"peak_allocated_mb": summary.peak_allocated_mb,
                   "peak_reserved_mb": summary.peak_reserved_mb,
                   "allocated_excludes_cuda_graph_pool": summary.graph_pools_hidden},
        "losses": result.losses,
        "notes": summary.notes,
        "flops": _flops_document(summary),
        "peaks": _peaks_document(summary),
        "compiler": summary.compiler.to_dict() if summary.compiler is not None else None,
        "library_log": summary.library_log.to_dict(),
    }
    reduced = summary.lowp
    if reduced is not None:         # --precision fp8, --quantize: what changed, how far it moved
        document["low_precision"] = reduced.to_dict()
        document["accuracy"] = reduced.drift.to_dict()
    if summary.token_throughput is not None:
        document["Throughput [tokens/sec]"] = summary.token_throughput
        document["throughput"]["tokens_per_s"] = summary.token_throughput
    document.update(spec.scenario.document(summary))
    document["trials"] = {**summary.trial_spread.to_dict(), "unit": f"{spec.model.item}s/s",
                          "where": ("worker processes" if spec.config.trials_in_workers
                                    else "this process"),
                          "within_trial_cv": t.cv,
                          "per_trial": [_trial_document(trial) for trial in summary.trials],
                          "stopped_by": summary.stopped_by,
                          "discarded": [{"index": d.index, "reason": d.reason,
                                         **_trial_document(d.trial)}
                                        for d in summary.discarded]}
    report = summary.telemetry
    document["telemetry"] = report.to_dict() if report is not None else None
    document["host_load"] = _host_load(summary.host_load)
    if summary.distributed:
        document["distributed"] = _distributed_document(summary)
    for figure in figures.written_by_summary():         # each has its path and property
        if (figure.path is not None and figure.of_summary is not None
                and figure.applies_to(summary.spec.scenario.mode)):
            _place(document, figure.path, figure.of_summary(summary))
    return document


def _place(document: dict, path: tuple[str, ...], value: object) -> None:
    """A figure of the registry at its path, the blocks above it made where missing; a block
    that is null (not measured: no FLOP count, no telemetry) stays null, its figures unknown."""
    *blocks, key = path
    for block in blocks:
        document = document.setdefault(block, {})
        if not isinstance(document, dict):
            return
    document[key] = value


def _trial_document(trial: Trial) -> dict:
    times, result = trial.slowest.times, trial.result
    telemetry = result.telemetry.to_dict() if result.telemetry is not None else None
    return {"throughput": trial.throughput, "samples_ms": list(times.samples_ms),
            "stats": times.stats(), "warmup_s": result.warmup_s,
            "first_iteration_s": result.first_iteration_s, "pid": result.pid,
            "seed": result.seed, "throttled": stats.throttle_reason(result.telemetry),
            "telemetry": telemetry, "host_load": _host_load(result.host_load)}


def _host_load(load) -> dict | None:
    """The host's load around a timed region (measure/host_load.py); null where not read."""
    return load.to_dict() if load is not None else None


def _model_document(summary: Summary) -> dict:
    spec, model = summary.spec, summary.spec.model
    document = {"name": model.name, "family": model.family,
                "parameters": summary.result.parameters, "item": model.item,
                "input_shape": list(model.input_shape(spec.batch_size))}
    if isinstance(model, LanguageModelSpec):            # tokens_per_item: its seq_len
        document.update(seq_len=model.seq_len, vocab_size=model.vocab_size,
                        attention=model.attention)
    elif isinstance(model, ModelSpec):
        document.update(num_classes=model.num_classes, image_size=model.image_size)
    return document


def _basis(summary: Summary) -> str:
    whose = "the slowest rank's samples" if summary.distributed else "this process's samples"
    if len(summary.trials) > 1:
        return (f"{whose} of all {len(summary.trials)} trials; the headline throughput is the "
                f"geometric mean of the trials'")
    return whose


def _peaks_document(summary: Summary) -> dict:
    """Both denominators of every utilisation: the datasheet's (cited) and this run's probe
    (--measure-peaks; null when off)."""
    spec, measured = summary.spec, summary.measured_peaks
    return {"datasheet": {"tflops": spec.peak.tflops, "tflops_source": spec.peak.source,
                          "column": spec.precision.peak_key,
                          "gb_per_s": spec.bandwidth.gbs,
                          "gb_per_s_source": spec.bandwidth.source},
            "measured": measured.to_dict() if measured is not None else None,
            "warnings": summary.peak_warnings}


def _flops_document(summary: Summary) -> dict | None:
    use = summary.utilization
    if use is None:
        return None
    measured = summary.measured_utilization
    document = {**use.to_dict(),
                "mfu_measured": measured.mfu if measured is not None else None,
                "peak_tflops_measured": measured.peak.tflops if measured is not None else None}
    second = summary.second_utilization
    if second is not None:
        document["second_peak"] = {"peak_tflops": second.peak.tflops,
                                   "peak_source": second.peak.source, "mfu": second.mfu}
        if summary.lowp is not None:
            document["fp8_flops_share"] = summary.lowp.fp8_flops_share
    return {**document,
            "counted": summary.spec.scenario.flops_counted.replace(" + ", "+"),
            "counter": "torch.utils.flop_counter.FlopCounterMode",
            "per": "device", "deepspeed_profiled_iteration": summary.spec.config.flops_prof_step}


def _distributed_document(summary: Summary) -> dict:
    launch = summary.spec.launch
    return {
        "launcher": launch.launcher, "world_size": summary.world_size,
        "backend": summary.backend or launch.backend,
        "local_batch_size": launch.local_batch, "global_batch_size": summary.global_batch,
        "throughput_img_s": summary.throughput,
        "per_gpu_throughput_img_s": summary.per_device_throughput,
        "slowest_rank": summary.slowest.rank, "fastest_rank": summary.fastest.rank,
        "skew": summary.skew, "baseline_throughput_img_s": summary.spec.scaling_baseline_img_s,
        "scaling_efficiency": summary.scaling_efficiency,
        "all_ranks_stats": summary.all_times.stats(),
        "per_rank": [{"rank": r.rank, "local_rank": r.local_rank, "node_rank": r.node_rank,
                      "host": r.host,
                      "device_name": r.device_name, "batch_size": r.batch_size,
                      "throughput_img_s": r.throughput, "stats": r.times.stats(),
                      "samples_ms": list(r.samples_ms), "peak_allocated_mb": r.peak_allocated_mb,
                      "peak_reserved_mb": r.peak_reserved_mb,
                      "host_load": _host_load(r.host_load)} for r in summary.ranks],
    }


# ---------------------------------------------------------------- the CSV row

def figure_cells(document: dict) -> dict:
    """The CSV row's figure cells, each read from the result document where the registry says
    it is (figures.FIGURES), in its format; empty where the run did not measure it (a phase
    of another kind of run, MFU without a peak, energy on the CPU)."""
    return {figure.csv: figure.csv_cell(document) for figure in figures.csv_figures()}


def _identity_cells(spec: RunSpec, env: DeviceInfo) -> dict:
    """The columns that say what ran, for measured and failed rows alike (``spec``: a RunSpec;
    ``env``: the DeviceInfo)."""
    config = spec.config
    return {
        "time_utc": env.time_utc, "network": spec.model.name, "mode": config.mode,
        "precision": spec.precision.name, "nhwc": int(config.nhwc),
        "compile": int(config.compile), "batch_size": spec.batch_size,
        "global_batch_size": spec.launch.global_batch, "world_size": spec.launch.world_size,
        # input_size: an image model's image size, a language model's sequence length
        "image_size": "" if spec.model.reads_tokens else spec.model.input_size,
        "seq_len": spec.model.input_size if spec.model.reads_tokens else "",
        "attention": spec.model.attention if spec.model.reads_tokens else "",
        "iterations": config.iterations, "warmup": config.warmup,
        "device_name": env.device_name, "device_type": env.device_type, "torch": env.torch,
        "gpu_runtime": env.runtime, "host": env.host,
    }


def csv_row(summary: Summary) -> dict:
    """One row; under DDP the timing, batch and throughput cells describe the job. Its figures
    are the result document's, so the row and the JSON never disagree."""
    return {
        **_identity_cells(summary.spec, summary.env),
        **figure_cells(result_document(summary)),
        "json_file": summary.spec.json_path or "",
        "status": "ok", "error": "",
    }


def failed_csv_row(spec: RunSpec, env: DeviceInfo, status: str, error: str) -> dict:
    """A sweep row that did not run to the end: what it was, and why it stopped."""
    row = {column: "" for column in CSV_COLUMNS}
    row.update({**_identity_cells(spec, env), "status": status, "error": error})
    return row


def check_csv(path: str, directory_made: bool = False) -> None:
    """Refuse, before any time is spent benchmarking, a CSV that cannot take our row: one that
    cannot be written (report.writing.check_target), a binary file, or another header."""
    writing.check_target(path, "--csv-file", directory_made)
    if not os.path.exists(path):
        return
    try:
        head = writing.read_head(path)
    except OSError as error:
        raise UsageError(f"cannot read --csv-file {path}: {error.strerror}") from None
    problem = writing.header_problem(head, CSV_COLUMNS, older=CSV_HEADERS[1:])
    if problem:
        raise UsageError(f"--csv-file {path} {problem} (an older or foreign file): name "
                         f"another --csv-file or move that one away")


def append_csv(row: dict, path: str) -> None:
    """Append one row (and the header to a new file): one write under an exclusive lock, cut
    back if it fails (platform.writing.append_csv_rows). A file with an older header of ours
    takes the row in its own columns (the newer columns left out)."""
    writing.append_csv_rows(path, CSV_COLUMNS,
                            [[_guarded(row.get(column, "")) for column in CSV_COLUMNS]],
                            older=CSV_HEADERS[1:])


def _guarded(value: object) -> object:
    """Text a spreadsheet would run as a formula (a network or error named from outside)
    guarded; numbers as they are."""
    return safe_text.csv_cell(value) if isinstance(value, str) else value


# ---------------------------------------------------------------- before and after the run

def prepare_output(spec: RunSpec, plot_path: str | None = None) -> None:
    """Every output path of this process checked before the model is built, so no problem with
    them costs the user a run: the result directory, the JSON and the CSV (on rank 0, which
    writes them), the --plot file, and the --kineto trace directory (every rank writes its own)."""
    if spec.config.kineto:
        from microbench.measure.profilers import prepare_trace_output
        prepare_trace_output(spec.config)
    if not spec.launch.is_main:
        return
    if plot_path is not None:
        from microbench.output.chart import check_path
        check_path(plot_path)
    if spec.json_path is None or spec.csv_path is None:     # --no-files: neither
        return
    output_dir = spec.config.output_dir
    _check_output_dir(output_dir)
    writing.check_target(spec.json_path, "--output-file", directory_made=True)
    if os.path.abspath(spec.csv_path) == os.path.abspath(spec.json_path):
        raise UsageError(f"--csv-file {spec.csv_path} is also the JSON result file: name "
                         f"another")
    in_output_dir = os.path.dirname(os.path.abspath(spec.csv_path)) == os.path.abspath(output_dir)
    check_csv(spec.csv_path, directory_made=in_output_dir)


def _check_output_dir(output_dir: str) -> None:
    """--output-dir can be written: it, or the nearest of its parents that exists (the
    directory itself is created only when the first result is written, so a run refused or
    failed leaves none behind)."""
    existing = writing.existing_ancestor(output_dir)
    problem = None if os.path.isdir(existing) else f"{existing} is not a directory"
    if problem is None:
        try:
            with tempfile.TemporaryFile(dir=existing):
                pass
        except OSError as error:
            problem = error.strerror
    if problem:
        raise UsageError(f"cannot write results to --output-dir {output_dir}: {problem}; "
                         f"choose another directory or pass --no-files")


# ---------------------------------------------------------------- result names that never collide

def _differences(ours: dict, theirs: dict) -> str:
    names = identity.differing_names(ours, theirs, identity.naming_fields())
    return ", ".join(names[:4]) + (" ..." if len(names) > 4 else "")


def _identity_on_disk(path: str) -> dict | None:
    """The identity of the result at ``path``; None when there is none (nothing to protect)."""
    document = stored.result_at(path)
    return identity.of_document(document) if document is not None else None


def claim_result_path(spec: RunSpec, taken: set[str] | None = None) -> tuple[RunSpec, str | None]:
    """The JSON path this run may write, and a note when it is not the one asked for.

    A result of the same configuration is replaced (a re-run refreshes it). A result of another
    configuration is never replaced silently: under a default name this run takes the next free
    one (``NAME-2.json``, ...); under an explicit ``--output-file`` it replaces the file, as
    the older tool did, with a note. Every name, ``--output-file``'s too, is claimed atomically
    (``writing.claim``: an exclusive create beside it), so that of runs started at once into
    one directory no two take one name, whatever they differ in: a name another live run
    claimed sends this run to the next free one, with a note (else both would write one JSON,
    and two CSV rows would name it). ``taken``: paths earlier rows of this invocation claimed
    (added to), which are never shared even before they are written."""
    path = spec.json_path
    if path is None or not spec.launch.is_main:
        return spec, None
    taken = set() if taken is None else taken
    ours, fields = identity.of_spec(spec), identity.naming_fields()
    named = bool(spec.config.output_file)       # the user's name replaces another's result

    def same(theirs: dict | None) -> bool:
        return theirs is None or identity.same(ours, theirs, fields)

    def free(candidate: str, replacing: bool = False) -> bool:
        return (os.path.abspath(candidate) not in taken
                and (replacing or same(_identity_on_disk(candidate)))
                and writing.claim(candidate))

    if free(path, replacing=named):
        taken.add(os.path.abspath(path))
        theirs = _identity_on_disk(path)
        if same(theirs):
            return spec, None
        return spec, (f"{path} held a result of another configuration (differing in "
                      f"{_differences(ours, theirs or {})}); --output-file names it, so this "
                      f"run's "
                      f"result replaces it")
    stem, number = path[:-len(".json")], 2
    while not free(f"{stem}-{number}.json"):
        number += 1
    candidate = f"{stem}-{number}.json"
    taken.add(os.path.abspath(candidate))
    theirs = _identity_on_disk(path)
    if os.path.abspath(path) in taken:
        why = "is another row's of this invocation"
    elif not same(theirs) and not named:
        why = (f"holds a result of another configuration (differing in "
               f"{_differences(ours, theirs or {})})")
    else:
        why = "is claimed by another run writing into this directory now"
    name = os.path.basename(candidate).removesuffix(".json")
    return dataclasses.replace(spec, json_path=candidate, result_name=name), (
        f"{path} {why}; this run's result goes to {candidate}")


def write_files(summary: Summary, document: dict | None = None) -> None:
    """The JSON result (``document``, where the caller built it already) and the CSV row of a
    finished run (nothing with --no-files): both are written or neither. The JSON goes first
    and the row after it (writing.write_then: a failed append puts the previous JSON back), so a
    row in the CSV always has its JSON, even when the process is killed between the two
    writes."""
    spec = summary.spec
    if spec.json_path is None:
        return
    text = writing.json_text(document or result_document(summary)).encode("utf-8")
    csv_path = spec.csv_path
    writing.write_then(spec.json_path, text,
                       lambda: append_csv(csv_row(summary), csv_path) if csv_path else None)
