"""Every figure (metric) the tool records, declared once: what it is, where a result holds it,
and how each reader and writer shows it.

A :class:`Figure` row says, for one figure: its key (its name in a stored result's
``Entry.figures`` and in the report's CSV and JSON), its unit and which direction is better,
how it is read from a result document (a JSON path, or a reader where the document needs more
than one look), which kinds of run have it, its column in the run's CSV row and that cell's
format, its column in the report's table (heading, cell style, why none is known), its line in
``--compare``'s table and its chart in ``microbench-report --plot``. The readers and writers
take their figures from :data:`FIGURES` and nothing else:

* ``output/files.py``: the CSV row's figure cells (each read from the result document at its
  path) and the header's newer columns; and, for a figure with ``of_summary``, its value in the
  result document at its path;
* ``store/entry.py``: a result's ``Entry.figures`` (:func:`read_all`);
* ``store/schema.py``: each path is declared in the schema (:func:`schema.schema` adds a path
  the published file does not name, as a number or null);
* ``output/table.py``: the report's figure columns (``heading``, ``style``, ``unknown``) and its
  raw CSV and JSON figures;
* ``store/baseline.py``: ``--compare``'s metrics (``gate``);
* ``output/chart.py``: the report chart's ``--metric`` choices beyond throughput and latency
  (``chart``);
* ``output/console.py``: a row of the summary for a figure with ``of_summary`` and ``console``;
* ``output/sweep_table.py``: a column of a sweep's comparison table (``sweep``).

A new figure is a row here and the code that measures it (a ``Summary`` property, given as
``of_summary``): the result document then holds it at ``path``, and the CSV row, the stored
``Entry``, the report's table, the ``--compare`` table and the chart follow from the row
(docs/architecture.md, "Where to add things"). The figures the tool wrote before this table
existed are placed in the document by ``output/files.result_document`` (their blocks and key
order are part of the published format) and have no ``of_summary``.

This module imports nothing of the benchmark: it sits low in ``store/`` so that every reader
and writer above can read it, as pyperf's ``_metadata.py`` is the one table its parser and its
printer read.

Example::

    figure = by_key()["p99_ms"]
    figure.read(document), figure.csv_cell(document), figure.heading
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

MODEL, OP, NODE = "model", "op", "node"    # the table a figure belongs to (store.entry's; NODE:
                                           # one GPU or link of a node check, microbench-node)
HIGHER, LOWER = "higher", "lower"          # which direction is better
FRACTION = "fraction"                      # the unit of a share (MFU, CV): 0.5 is 50%
# Kinds of run a figure belongs to alone (scenarios.SCENARIOS' modes; a test keeps them in
# step); a figure of every kind names none, so a new kind of run needs no edit here.
TRAINING, GENERATE = "training", "generate"

# How the report's table shows a figure's cell (output/table.py reads these).
RATE = "rate"              # a number scaled for reading (1.23k): platform.units.rate
PERCENT = "percent"        # a fraction shown as a percentage: units.percent
PERCENT_POINTS = "pct"     # already in percent: 12.3%
DURATION = "duration"      # milliseconds in the unit that reads best: units.duration_ms
FLOP_RATE = "flop rate"    # TFLOP/s in the unit that reads best: units.flops
COUNT = "count"            # a whole number; shown only where some row has more than one
INTERVAL = "interval"      # the low end of an interval whose high end is the next figure
STYLES = (RATE, PERCENT, PERCENT_POINTS, DURATION, FLOP_RATE, COUNT, INTERVAL)

# How the chart draws a figure's error bars (output/chart.py): none, the throughput's scaled to
# the figure (a figure proportional to throughput, MFU), or the call times' inverted (an op's
# work over its median call time).
NO_BARS, THROUGHPUT_BARS, CALL_TIME_BARS = "none", "throughput", "call time"

Reader = Callable[[dict], object]


def value_at(document: object, path: tuple[str, ...]) -> Any:
    """document[k1][k2]...; None where any level is missing or not an object."""
    for key in path:
        if not isinstance(document, dict):
            return None
        document = document.get(key)
    return document


def number(value: object) -> float | None:
    """A stored number as a float; None for anything else (a flag, a string, a missing key)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


@dataclass(frozen=True)
class Figure:
    """One figure, declared once (see the module docstring for who reads which field)."""

    key: str                                # Entry.figures' key
    unit: str                               # what the number counts ("{unit}": the result's
                                            # throughput unit, images/s or tokens/s)
    better: str | None                      # HIGHER, LOWER, or None (neither: a setting-like
                                            # figure such as a worker count)
    path: tuple[str, ...] | None = None     # where a result document holds it
    reader: Reader | None = None            # where a path is not enough (a scale, a fallback)
    table: str = MODEL                      # MODEL: a run's result; OP: an op bench row
    kinds: frozenset | None = None          # the kinds of run whose results can have it
                                            # (None: every kind)
    csv: str | None = None                  # its column in the run's CSV row
    csv_format: str = ".3f"                 # that cell's format (empty where unknown)
    heading: str | None = None              # its column in the report's table ({unit}, {item})
    style: str = RATE                       # how that column shows it (STYLES)
    always: bool = False                    # a column even where no row knows it
    unknown: str | None = None              # the report's note where no row knows it
    gate: str | None = None                 # its line in --compare's table
    chart: str | None = None                # its axis label as a report chart's --metric
    bars: str = NO_BARS                     # the chart's error bars for it
    of_summary: Callable | None = None      # a Summary's value, written at ``path`` by
                                            # output/files.result_document (figures added
                                            # since this table: see the module docstring)
    console: str | None = None              # its row in the console summary (with
                                            # ``of_summary``; the older figures' rows are
                                            # output/console.py's, verbatim for scripts)
    console_format: str = ".4g"             # that row's number, followed by ``unit`` (and
                                            # the sweep column's number)
    sweep: str | None = None                # its column in a sweep's comparison table (the
                                            # older figures' are output/sweep_table.py's)
    whole: bool = False                     # a FRACTION that is a share of a whole: at most 1
                                            # (store/ranges.py; a CV or MFU can pass 1)
    bound: bool = False                     # an interval's end, not a measurement: files of
                                            # versions before the log-scale interval hold
                                            # arithmetic ones, whose low end can be <= 0

    def applies_to(self, mode: str) -> bool:
        """Whether a run of this kind (its --mode) can have this figure."""
        return self.kinds is None or mode in self.kinds

    def read(self, document: dict):
        """This figure's value in a result document (an op bench row for OP figures); None
        where the document does not know it."""
        if self.reader is not None:
            return self.reader(document)
        return None if self.path is None else number(value_at(document, self.path))

    def csv_cell(self, document: dict) -> str:
        """The CSV row's cell: the stored value in ``csv_format``, empty where unknown."""
        value = self.read(document)
        return "" if value is None else format(value, self.csv_format)


# ---------------------------------------------------------------- readers beyond a path

def tokens_per_item(document: dict) -> float:
    """Tokens per item for language models (generated tokens for generation), as the
    document's two headlines give it; 1 for images and clips (the throughput's unit is items)."""
    tokens = number(document.get("Throughput [tokens/sec]"))
    items = number(document.get("Throughput [img/sec]"))
    return tokens / items if tokens and items else 1.0


def _headline(document: dict) -> float | None:
    """The headline in the result's unit: tokens/s for a language model, items/s otherwise."""
    items = number(document.get("Throughput [img/sec]"))
    return None if items is None else items * tokens_per_item(document)


def _trial_values(document: dict) -> list:
    return [v for v in value_at(document, ("trials", "values")) or () if number(v) is not None]


def _interval_end(name: str) -> Reader:
    """The headline's 95% interval end in the result's unit; None unless both ends are stated."""
    def read(document: dict) -> float | None:
        low = number(value_at(document, ("trials", "ci95_low")))
        high = number(value_at(document, ("trials", "ci95_high")))
        end = high if name == "ci95_high" else low
        if low is None or high is None or end is None:
            return None
        return end * tokens_per_item(document)
    return read


def _trial_count(document: dict) -> int:
    return len(_trial_values(document)) or 1


def _trial_cv(document: dict) -> float | None:
    """The CV between trials, where they give an interval (two trials or more)."""
    if value_at(document, ("trials", "ci95_low")) is None:
        return None
    return number(value_at(document, ("trials", "cv")))


def _mbu(document: dict) -> float | None:
    """MBU of the whole step where the FLOPs block has it, else of the decode steps."""
    return number(value_at(document, ("flops", "mbu"))) or \
        number(value_at(document, ("generation", "mbu")))


def _accuracy(document: dict) -> float | None:
    """--precision fp8 or --quantize: the distance from BF16 the run measured (the logits'
    relative error, or the largest difference of the first losses); None for other runs."""
    accuracy = document.get("accuracy")
    if not isinstance(accuracy, dict):
        return None
    key = "relative_error" if accuracy.get("kind") == "logits" else "max_loss_difference"
    return number(accuracy.get(key))


def _gigaflops(document: dict) -> float | None:
    flops = number(value_at(document, ("flops", "flops_per_iteration")))
    return None if flops is None else flops / 1e9


def _throttled(document: dict) -> int | None:
    """1 or 0 where the telemetry source reported throttling, None where it did not say."""
    throttled = value_at(document, ("telemetry", "throttled"))
    return int(throttled) if isinstance(throttled, bool) else None


def _host_load_per_core(document: dict) -> float | None:
    """The host's 1-minute load average over its cores, the higher of the two readings around
    the timed region (measure/host_load.py: ``HostLoad.peak_load`` over ``cores``)."""
    cores = number(value_at(document, ("host_load", "cores")))
    loads = [number(value_at(document, ("host_load", end, "load_1m"))) for end in ("start", "end")]
    known = [load for load in loads if load is not None]
    return max(known) / cores if known and cores else None


def _host_loaded(document: dict) -> int | None:
    """1 or 0: the host-load verdict the noise and drift warnings name; None where unread."""
    loaded = value_at(document, ("host_load", "loaded"))
    return int(loaded) if isinstance(loaded, bool) else None


def _op_tflops(row: dict) -> float | None:
    """An op's TFLOP/s, where it does any FLOPs (a copy does none)."""
    return number(row.get("tflops")) if row.get("flops") else None


# ---------------------------------------------------------------- the table

_STATS = ("timing", "stats")
_GEN = ("generation",)
_DATA = ("data",)
_MFU_UNKNOWN = ("MFU (no datasheet peak for the device, or no FLOP count; --peak-tflops gives "
                "a peak)")

# In the report's column order (model figures, then the op bench's); the run's CSV keeps its
# own historical order (output/files.py), and columns added later follow in this order.
FIGURES: tuple[Figure, ...] = (
    # The headline, in the result's unit, and the older tool's items per second.
    Figure("throughput", "{unit}", HIGHER, reader=_headline, heading="throughput [{unit}]",
           always=True),
    Figure("items_per_s", "items/s", HIGHER, path=("Throughput [img/sec]",),
           csv="throughput_img_s", gate="Throughput [img/sec]"),
    Figure("tokens_per_s", "tokens/s", HIGHER, path=("Throughput [tokens/sec]",),
           csv="throughput_tokens_s"),
    # Trials: the headline's interval (in the result's unit; the CSV's in items/s).
    Figure("ci95_low", "{unit}", HIGHER, reader=_interval_end("ci95_low"), heading="95% CI",
           style=INTERVAL, bound=True),
    Figure("ci95_high", "{unit}", HIGHER, reader=_interval_end("ci95_high"), bound=True),
    Figure("trial_count", "trials", None, reader=_trial_count, csv="trials", csv_format=".0f",
           heading="trial count", style=COUNT),
    Figure("items_ci95_low", "items/s", HIGHER, path=("trials", "ci95_low"), csv="ci95_low",
           bound=True),
    Figure("items_ci95_high", "items/s", HIGHER, path=("trials", "ci95_high"), csv="ci95_high",
           bound=True),
    Figure("trial_cv", FRACTION, LOWER, reader=_trial_cv, csv="trial_cv", csv_format=".5f"),
    # Iteration times (a whole generation for --mode generate).
    Figure("mean_ms", "ms", LOWER, path=(*_STATS, "mean_ms"), csv="mean_ms", csv_format=".4f"),
    Figure("p50_ms", "ms", LOWER, path=(*_STATS, "median_ms"), csv="median_ms",
           csv_format=".4f", heading="p50 [ms]", gate="Median iteration [ms]"),
    Figure("std_ms", "ms", LOWER, path=(*_STATS, "std_ms"), csv="std_ms", csv_format=".4f"),
    Figure("min_ms", "ms", LOWER, path=(*_STATS, "min_ms"), csv="min_ms", csv_format=".4f"),
    Figure("max_ms", "ms", LOWER, path=(*_STATS, "max_ms"), csv="max_ms", csv_format=".4f"),
    Figure("p90_ms", "ms", LOWER, path=(*_STATS, "p90_ms"), csv="p90_ms", csv_format=".4f",
           heading="p90 [ms]"),
    Figure("p95_ms", "ms", LOWER, path=(*_STATS, "p95_ms"), csv="p95_ms", csv_format=".4f"),
    Figure("p99_ms", "ms", LOWER, path=(*_STATS, "p99_ms"), csv="p99_ms", csv_format=".4f",
           heading="p99 [ms]", gate="p99 iteration [ms]"),
    Figure("cv", FRACTION, LOWER, path=(*_STATS, "cv"), csv="cv", csv_format=".5f",
           gate="Coefficient of variation"),
    # Training's phases (mean per iteration).
    *(Figure(f"{phase}_ms", "ms", LOWER, path=("phases", phase, "mean_ms"),
             kinds=frozenset({TRAINING}), csv=f"{phase}_ms", csv_format=".4f")
      for phase in ("forward", "backward", "optimizer")),
    # Generation: time to first token, inter-token latency, the decode steps' rate and MBU.
    Figure("ttft_ms", "ms", LOWER, path=(*_GEN, "time_to_first_token", "stats", "median_ms"),
           kinds=frozenset({GENERATE}), csv="ttft_median_ms", csv_format=".4f",
           heading="TTFT p50 [ms]"),
    Figure("itl_ms", "ms", LOWER, path=(*_GEN, "inter_token_latency", "stats", "median_ms"),
           kinds=frozenset({GENERATE}), csv="itl_median_ms", csv_format=".4f",
           heading="ITL p50 [ms]"),
    Figure("itl_p99_ms", "ms", LOWER, path=(*_GEN, "inter_token_latency", "stats", "p99_ms"),
           kinds=frozenset({GENERATE}), csv="itl_p99_ms", csv_format=".4f"),
    Figure("decode_tokens_per_s", "tokens/s", HIGHER, path=(*_GEN, "decode_tokens_per_s"),
           kinds=frozenset({GENERATE})),
    Figure("decode_mbu", FRACTION, HIGHER, path=(*_GEN, "mbu"), kinds=frozenset({GENERATE})),
    # Memory, warm-up and compilation.
    Figure("peak_reserved_mb", "MB", LOWER, path=("memory", "peak_reserved_mb"),
           csv="peak_reserved_mb"),
    Figure("warmup_s", "s", LOWER, path=("timing", "warmup_s"), csv="warmup_s"),
    Figure("compile_s", "s", LOWER, path=("timing", "compile_s"), csv="compile_s"),
    # FLOPs and utilisation, against the datasheet's peak and the measured one.
    Figure("gflops_per_iteration", "GFLOP", None, reader=_gigaflops,
           csv="gflops_per_iteration"),
    Figure("achieved_tflops", "TFLOP/s", HIGHER, path=("flops", "achieved_tflops"),
           csv="achieved_tflops", csv_format=".4f"),
    Figure("mfu", FRACTION, HIGHER, path=("flops", "mfu"), csv="mfu", csv_format=".5f",
           heading="MFU", style=PERCENT, unknown=_MFU_UNKNOWN, chart="MFU [%]",
           bars=THROUGHPUT_BARS),
    Figure("mbu", FRACTION, HIGHER, reader=_mbu, heading="MBU", style=PERCENT),
    Figure("measured_peak_tflops", "TFLOP/s", None, path=("peaks", "measured", "tflops"),
           csv="measured_peak_tflops", csv_format=".4f"),
    Figure("measured_peak_gbs", "GB/s", None, path=("peaks", "measured", "gb_per_s"),
           csv="measured_peak_gbs", csv_format=".2f"),
    Figure("mfu_measured", FRACTION, HIGHER, path=("flops", "mfu_measured"),
           csv="mfu_measured", csv_format=".5f", heading="MFU (measured peak)", style=PERCENT),
    Figure("mbu_measured", FRACTION, HIGHER, path=(*_GEN, "mbu_measured"),
           kinds=frozenset({GENERATE}), csv="mbu_measured", csv_format=".4f",
           heading="MBU (measured peak)", style=PERCENT),
    # FP8 and quantized weights: the distance from the reference precision.
    Figure("accuracy", FRACTION, LOWER, reader=_accuracy, heading="vs BF16 (error)",
           style=PERCENT),
    Figure("accuracy_agreement", FRACTION, HIGHER, path=("accuracy", "top1_agreement"),
           whole=True),
    # The profiled decode step (generation).
    Figure("decode_kernel_ms", "ms", LOWER, path=(*_GEN, "decode_attribution", "busy_ms"),
           kinds=frozenset({GENERATE}), heading="decode kernels [ms]"),
    Figure("decode_gap_ms", "ms", LOWER, path=(*_GEN, "decode_attribution", "gap_ms"),
           kinds=frozenset({GENERATE}), heading="decode gaps [ms]"),
    # Telemetry: clocks, power, energy (per unit of the throughput), throttling.
    Figure("sm_clock_mhz_median", "MHz", HIGHER,
           path=("telemetry", "stats", "sm_clock_mhz", "median"), csv="sm_clock_mhz_median",
           csv_format=".4f"),
    Figure("power_w_median", "W", None, path=("telemetry", "stats", "power_w", "median"),
           csv="power_w_median", csv_format=".4f"),
    Figure("energy_j", "J", LOWER, path=("telemetry", "energy_j"), csv="energy_j",
           csv_format=".4f"),
    Figure("energy_per_unit", "J/{item}", LOWER, path=("telemetry", "joules_per_item"),
           csv="j_per_item", csv_format=".4f", heading="J/{item}",
           unknown="energy (no telemetry for these devices)"),
    Figure("throttled", "flag", LOWER, reader=_throttled, csv="throttled", csv_format=".0f"),
    Figure("peak_allocated_mb", "MB", LOWER, path=("memory", "peak_allocated_mb"),
           csv="peak_allocated_mb", heading="peak alloc [MB]",
           gate="Peak memory allocated [MB]"),
    # The host around the timed region (issue 64): not the benchmark's figures, what they ran
    # beside; the run's own processes are not counted as other processes.
    Figure("host_load_per_core", "load/core", None, reader=_host_load_per_core,
           csv="host_load_per_core", csv_format=".2f"),
    Figure("host_others_cpu_pct", "% of a core", None,
           path=("host_load", "others_cpu_percent"), csv="host_others_cpu_pct",
           csv_format=".1f"),
    Figure("host_loaded", "flag", None, reader=_host_loaded, csv="host_loaded",
           csv_format=".0f"),
    # --data loader|folder: the input pipeline's figures (per device on several).
    Figure("pipeline_per_s", "{data unit}", HIGHER, path=(*_DATA, "pipeline_per_s")),
    Figure("loader_alone_per_s", "{data unit}", HIGHER, path=(*_DATA, "loader_alone_per_s")),
    Figure("model_alone_per_s", "{data unit}", HIGHER, path=(*_DATA, "model_alone_per_s")),
    Figure("wait_share", FRACTION, LOWER, path=(*_DATA, "wait", "share_total"),
           whole=True),
    Figure("wait_share_median", FRACTION, LOWER, path=(*_DATA, "wait", "share_median"),
           whole=True),
    Figure("wait_share_p99", FRACTION, LOWER, path=(*_DATA, "wait", "share_p99"),
           whole=True),
    # The pipeline's rate over the model alone's: above 1 where the model-alone pass was
    # disturbed (measure/input_bound.py says so in the verdict), so no share of a whole.
    Figure("data_kept", FRACTION, HIGHER, path=(*_DATA, "verdict", "kept")),
    Figure("data_workers", "workers", None, path=(*_DATA, "workers")),
    # The op bench: one row per op and shape (paths into the op's row).
    Figure("median_ms", "ms", LOWER, path=("median_ms",), table=OP, heading="median",
           style=DURATION, always=True),
    Figure("cv", FRACTION, LOWER, path=("cv",), table=OP, heading="CV", style=PERCENT),
    Figure("gbs", "GB/s", HIGHER, path=("gbs",), table=OP, heading="GB/s", chart="GB/s",
           bars=CALL_TIME_BARS),
    Figure("tflops", "TFLOP/s", HIGHER, reader=_op_tflops, table=OP, heading="FLOP/s",
           style=FLOP_RATE, chart="TFLOP/s", bars=CALL_TIME_BARS),
    Figure("pct_of_peak", "%", HIGHER, path=("pct_of_peak",), table=OP, heading="% of peak",
           style=PERCENT_POINTS, unknown="% of peak (no datasheet peak for the device)"),
    # A node check (microbench-node, node/): each GPU's parts in the order they are measured,
    # then the links between GPUs; the node_check document holds each at figures.<key>.value.
    # ``console`` is the verdict table's column, ``console_format`` a value of 100 or more; a
    # GPU's figure is the report's node table column (``heading``: a GPU row has no link's).
    *(Figure(key, unit, HIGHER, path=("figures", key, "value"), table=NODE, console=label,
             console_format=",.0f",
             heading=None if key in ("allreduce_busbw_gbs", "p2p_gbs") else f"{label} {unit}")
      for key, unit, label in (
          ("gemm_tflops", "TFLOP/s", "GEMM"), ("gemm_fp8_tflops", "TFLOP/s", "GEMM FP8"),
          ("memory_gbs", "GB/s", "memory"), ("h2d_gbs", "GB/s", "host->dev"),
          ("d2h_gbs", "GB/s", "dev->host"), ("train_items_per_s", "img/s", "train step"),
          ("decode_tokens_per_s", "tok/s", "decode step"),
          ("allreduce_busbw_gbs", "GB/s", "all-reduce bus bandwidth"),
          ("p2p_gbs", "GB/s", "peer-to-peer copy"))),
)


def of_table(table: str) -> tuple[Figure, ...]:
    """The figures of a model result (MODEL), an op bench row (OP) or a node check (NODE), in
    order."""
    return tuple(figure for figure in FIGURES if figure.table == table)


def read_all(document: dict, table: str = MODEL) -> dict:
    """Every figure of ``table`` a document (a result, or an op bench row) holds, by key; None
    where it does not know one."""
    return {key: number(value_at(document, path)) if reader is None else reader(document)
            for key, path, reader in _readers(table)}


# table -> (the registry it was made from, (key, path, reader) of each of its figures).
_READERS: dict[str, tuple[tuple[Figure, ...], tuple]] = {}


def _readers(table: str) -> tuple:
    """What :meth:`Figure.read` reads for each figure of ``table``, made once per registry (a
    history reads 10,000 documents; a test may extend :data:`FIGURES`)."""
    made = _READERS.get(table)
    if made is None or made[0] is not FIGURES:
        made = _READERS[table] = (FIGURES, tuple((figure.key, figure.path, figure.reader)
                                                 for figure in of_table(table)))
    return made[1]


def csv_figures() -> tuple[Figure, ...]:
    """The figures with a column in the run's CSV row, in order."""
    return tuple(figure for figure in FIGURES if figure.csv)


def gate_figures() -> tuple[Figure, ...]:
    """--compare's metrics, in its table's order."""
    return tuple(figure for figure in FIGURES if figure.gate)


def charted(table: str | None = None) -> tuple[Figure, ...]:
    """The figures a report chart can draw as its --metric (of ``table``, or of either)."""
    return tuple(figure for figure in FIGURES if figure.chart
                 and (table is None or figure.table == table))


def swept() -> tuple[Figure, ...]:
    """The figures with a column of their own in a sweep's comparison table."""
    return tuple(figure for figure in FIGURES if figure.sweep)


def by_key(table: str = MODEL) -> dict[str, Figure]:
    return {figure.key: figure for figure in of_table(table)}


def written_by_summary() -> tuple[Figure, ...]:
    """The figures the result document takes from the Summary through this table."""
    return tuple(figure for figure in FIGURES if figure.of_summary is not None)


def result_paths() -> tuple[tuple[str, ...], ...]:
    """Every JSON path of a run's result that a figure names (for the schema)."""
    return tuple(figure.path for figure in of_table(MODEL) if figure.path is not None)
