"""``--plot FILE.png`` for sweeps.

When the batch size varies: throughput (and, on a GPU, peak memory) against batch size, one line
per configuration, the batch-size axis in powers of two but labelled with the batch sizes that
ran (1, 2, 4, ..., not 2^0, 2^1). Otherwise: bars, one per configuration. The file's suffix names
its format (any matplotlib writes: png, svg, pdf...); it is checked before the sweep runs and
written whole or not at all.

What the figure says about itself:

* its subtitle names the device, the precisions and the software (PyTorch, torchvision, the
  CUDA or ROCm runtime), from the ``env`` the rows were measured with;
* every point carries an error bar, and a footnote says what the bars are: with ``--repeat N``
  (N >= 2), the lowest and highest of the N trials' throughputs around their median (the
  headline; spread between runs); with one trial, the 10th to 90th percentile of per-iteration
  throughput (batch / iteration time; spread within a run) around the headline, which is the
  batch times the iterations over their summed time;
* a configuration that failed gets no point and no bar (nothing was measured), and the footnote
  names it and why;
* the memory panel is drawn only when some row knows its peak memory (not on the CPU).

A sweep over the loader's workers (``--data loader|folder --workers 0,2,4,8``) gets its own
figure (:func:`build_workers_figure`): the pipeline's throughput (the run's headline, per device)
against the number of workers on the left axis, one line per ``--decode``; the share of the run
spent waiting for data on the right axis, dashed (the whole run's share, not a step's median:
when batches arrive in bursts most steps wait nothing while a few wait long, and only the run's
share agrees with the throughput beside it); and the model alone on synthetic input, measured in
each row's own invocation, as a dotted line at the median of the rows' figures. A row that
failed gets no point; the footnote names it.

Drawn with the parts of the one chart stack (:mod:`microbench.output.chart`), which imports
matplotlib; the report's chart of stored results lives there.

Example::

    python3 micro_benchmarking_pytorch.py --network resnet50 --batch-size 16,32,64,128 \\
        --precision fp32,amp-bf16 --plot batch.png
"""
from __future__ import annotations

import statistics

from typing import TYPE_CHECKING, Iterable, Sequence

from microbench.output import chart
from microbench.output.sweep_table import SweptRow
from microbench.settings.config import BenchConfig
from microbench.store.entry import Entry

if TYPE_CHECKING:
    from microbench.output.chart import Axes, Figure
from microbench.plan import naming
from microbench.store.entry import accuracy_reference, is_accuracy_reference
from microbench.output.chart import (HIGH_PERCENTILE, LOW_PERCENTILE, SUBTITLE_CHARS_PER_INCH,
                                     Point, fixed_ticks, write_figure)


# ---------------------------------------------------------------- what a point and its bar are

def point_of(entry: Entry, per_token: bool = False) -> Point:
    """A row's headline and its bar, read from its result (the row's ``entry``, a
    :class:`microbench.store.entry.Entry`) as the report's chart reads a stored one
    (:func:`microbench.output.chart.point_of`), in items/s unless ``per_token``: between
    trials when there are two or more, else between the iterations of the one trial."""
    point = chart.measured_point(entry)
    # The entry counts a language model's tokens; one item is batch / work of an iteration.
    scale = 1.0 if per_token or not entry.work_per_iteration else \
        entry.settings["batch"] / entry.work_per_iteration
    return Point(point.value * scale, None if point.low is None else point.low * scale,
                 None if point.high is None else point.high * scale)


def _entries(rows: Sequence[SweptRow]) -> list[Entry]:
    """The entries of the rows that measured something, in the rows' order."""
    return [row.entry for row in rows if row.entry is not None]


def _per_token(rows: Sequence[SweptRow]) -> bool:
    """Every measured row counted tokens (language models): the plot says tokens/s."""
    entries = _entries(rows)
    return bool(entries) and all(entry.unit.endswith("tokens/s") for entry in entries)


def bars_note(rows: Sequence[SweptRow], subject: str, noun: str) -> str:
    """What the points (or bar heights) and their error bars are, for the footnote."""
    measured = _entries(rows)
    if not measured:
        return ""
    trials = len(measured[0].trial_values)
    if trials >= 2:
        return (f"{subject}: the geometric mean of {trials} trials' throughputs (--repeat {trials}; the "
                f"headline); error bars: the lowest and the highest trial.")
    counts = sorted({len(entry.samples_ms) for entry in measured})
    iterations = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return (f"{subject}: {noun} over the summed time of the timed iterations (the headline); "
            f"error bars: {LOW_PERCENTILE}th to {HIGH_PERCENTILE}th percentile of the "
            f"per-iteration rate ({noun} of one iteration / its time; {iterations} timed "
            f"iterations, one trial).")


# ---------------------------------------------------------------- labels

# Facet values that go unsaid when every row has them.
_DEFAULTS = {"nchw", "eager mode"}


def _facets(row: SweptRow) -> dict[str, str]:
    """The facets that tell configurations apart, in the order labels list them."""
    return naming.facets(naming.Described.of(row.spec))


def _all_facets(rows: Sequence[SweptRow]) -> list[str]:
    return list(_facets(rows[0]))


def _varying(rows: Sequence[SweptRow], facets: Iterable[str]) -> list[str]:
    return [name for name in facets if len({_facets(row)[name] for row in rows}) > 1]


def _row_label(row: SweptRow, names: Iterable[str]) -> str:
    facets = _facets(row)
    return " ".join(facets[name] for name in names if facets[name])


def _common_label(rows: Sequence[SweptRow], excluded: Iterable[str]) -> str:
    facets = _facets(rows[0])
    varying = set(_varying(rows, facets)) | set(excluded)
    return " ".join(facets[name] for name in facets
                    if name not in varying and facets[name] and facets[name] not in _DEFAULTS)


def _unit(rows: Sequence[SweptRow], per_token: bool) -> str:
    if per_token:
        return "tokens/s"
    items = {row.spec.model.item for row in rows}
    return f"{min(items)}s/s" if len(items) == 1 else "items/s"


# Settings that do not change what was measured (the title's facets show the others it leaves
# out: naming.shown_settings).
_NOT_MEASURED = {"device", "preset"}


def changed_settings(rows: Sequence[SweptRow]) -> list[str]:
    """Every replayed setting all rows share that differs from its default (``image size 64``),
    so that a 64-pixel run is not read as a 224-pixel one."""
    from microbench.settings.config import SCHEMA
    configs = [row.spec.config for row in rows]
    hidden = naming.shown_settings() | _NOT_MEASURED
    shown = []
    for name, item in SCHEMA.items():
        values = {repr(getattr(config, name)) for config in configs}
        value = getattr(configs[0], name)
        if (item.replayed and name not in hidden and len(values) == 1
                and value != item.default):
            shown.append(f"{name.replace('_', ' ')} {_as_text(value)}")
    return shown


def _as_text(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def subtitle(rows: Sequence[SweptRow]) -> str:
    """Device, precisions, the settings that differ from the defaults, and software, from the
    environment the rows were measured in."""
    precisions = ", ".join(dict.fromkeys(row.spec.precision.name for row in rows))
    changed = changed_settings(rows)
    if changed:
        precisions += " · " + ", ".join(changed)
    env = next((row.env for row in rows if row.env is not None), None)
    if env is None:
        return f"{rows[0].spec.device} · {precisions} · no configuration was measured"
    if not env.on_gpu:
        device = f"{env.device_name} (CPU, {env.cpu_threads} threads)"
        software = f"PyTorch {env.torch}, torchvision {env.torchvision}"
    else:
        device = f"{env.device_name} ({env.device})"
        software = f"PyTorch {env.torch}, torchvision {env.torchvision}, {env.runtime}"
    return f"{device} · {precisions} · {software}"


def _failures_note(rows: Sequence[SweptRow], mark: str) -> str:
    failed = [f"{row.label()} ({row.status})" for row in rows if row.failed]
    return f"Not measured (no {mark}): {'; '.join(failed)}." if failed else ""


# ---------------------------------------------------------------- the figure

def build_figure(rows: Sequence[SweptRow]) -> Figure:
    """The sweep's figure (a matplotlib Figure, not yet saved). ``rows``: sweep rows
    (microbench.drivers.sweep.Row): .spec, .entry and .env (None when the row failed), .status,
    .label()."""
    measured = _entries(rows)
    per_token = _per_token(rows)
    with_memory = any(_memory(row) is not None for row in rows)
    by_batch = len({row.spec.batch_size for row in rows}) > 1
    panels = 2 if with_memory else 1
    heading = subtitle(rows)
    # Wide enough for the subtitle on one line.
    width = max((6.5 if by_batch else max(5.0, 1.0 + 0.9 * len(rows))) * panels + 0.5,
                len(heading) / SUBTITLE_CHARS_PER_INCH + 0.5)
    unit = _unit(rows, per_token)
    notes = [bars_note(rows, "Points" if by_batch else "Bar heights", unit.split("/")[0]),
             _failures_note(rows, "point" if by_batch else "bar")]
    drawn = chart.frame(panels, width, 4.6, heading, notes, side_by_side=True)
    speed, memory = drawn.axes[0], (drawn.axes[1] if with_memory else None)
    if by_batch:
        _lines_by_batch(rows, speed, memory, per_token)
    else:
        _bars_by_configuration(rows, speed, memory, per_token)

    speed.set_ylabel(f"throughput [{unit}]")
    speed.set_ylim(bottom=0)
    if not measured:            # the sweep fails; the figure says so instead of empty ticks
        speed.set_yticks([])
        speed.text(0.5, 0.5, "no configuration was measured", ha="center",
                   transform=speed.transAxes)
    what = _common_label(rows, excluded=("batch",) if by_batch else ())
    speed.set_title(f"Throughput{': ' + what if what else ''}", fontsize="medium")
    if memory is not None:
        memory.set_ylabel("peak memory allocated [MB]")
        memory.set_ylim(bottom=0)
        memory.set_title("Peak memory allocated", fontsize="medium")
    return chart.finish(drawn)


def _lines_by_batch(rows: Sequence[SweptRow], speed: Axes, memory: Axes | None,
                    per_token: bool) -> None:
    series: dict[str, list[SweptRow]] = {}
    names = [name for name in _varying(rows, _all_facets(rows)) if name != "batch"]
    for row in rows:
        series.setdefault(_row_label(row, names), []).append(row)
    for label, members in series.items():
        done = [(row, row.entry) for row in members if row.entry is not None]
        points = [point_of(entry, per_token) for _, entry in done]
        batches = [row.spec.batch_size for row, _ in done]
        drawn = speed.errorbar(batches, [p.value for p in points],
                               yerr=[[p.below for p in points], [p.above for p in points]],
                               marker="o", capsize=3, label=label or None)
        if memory is not None:
            known = [(row.spec.batch_size, megabytes) for row, _ in done
                     if (megabytes := _memory(row)) is not None]
            memory.plot([batch for batch, _ in known], [megabytes for _, megabytes in known],
                        marker="o", color=drawn.lines[0].get_color(), label=label or None)
    batches = sorted({row.spec.batch_size for row in rows})
    items = {row.spec.model.item for row in rows}
    unit = f"{min(items)}s" if len(items) == 1 else "items"
    for axis in filter(None, (speed, memory)):
        _batch_axis(axis, batches, unit)
        if len(series) > 1:
            axis.legend(fontsize="small")


def _batch_axis(axis: Axes, batches: Sequence[int], items: str) -> None:
    """A log2 axis whose ticks are the batch sizes that ran, written as plain integers."""
    fixed_ticks(axis, batches, lambda value: f"{round(value):d}", log2=True)
    axis.set_xlabel(f"batch size [{items}]")
    if len(batches) > 10:
        axis.tick_params(axis="x", labelrotation=45)


def _bars_by_configuration(rows: Sequence[SweptRow], speed: Axes, memory: Axes | None,
                           per_token: bool) -> None:
    names = _varying(rows, _all_facets(rows))
    labels = [_row_label(row, names) or _row_label(row, _all_facets(rows)) for row in rows]
    positions = list(range(len(rows)))
    done = [(position, row.entry) for position, row in zip(positions, rows)
            if row.entry is not None]
    # A failed row gets no bar (not a zero bar): nothing was measured. Its place says why.
    points = [point_of(entry, per_token) for _, entry in done]
    speed.bar([position for position, _ in done], [p.value for p in points],
              yerr=[[p.below for p in points], [p.above for p in points]], capsize=4,
              color="tab:blue")
    known = [(position, megabytes) for position, row in zip(positions, rows)
             if row.entry is not None and (megabytes := _memory(row)) is not None]
    if memory is not None:
        memory.bar([position for position, _ in known],
                   [megabytes for _, megabytes in known], color="tab:orange")
    for axis in filter(None, (speed, memory)):
        axis.set_xticks(positions, labels, rotation=30 if len(rows) > 3 else 0,
                        ha="right" if len(rows) > 3 else "center", fontsize="small")
        axis.set_xlim(-0.6, len(rows) - 0.4)
        for position, row in zip(positions, rows):
            if row.failed:
                axis.text(position, 0, f" {row.status}", rotation=90, ha="center",
                          va="bottom", fontsize="small", color="tab:red",
                          transform=axis.get_xaxis_transform())


def _memory(row: SweptRow) -> float | None:
    """The row's peak memory allocated [MB]; None when it failed or on the CPU."""
    return row.entry.figures.get("peak_allocated_mb") if row.entry is not None else None


def _measures_accuracy(rows: Sequence[SweptRow]) -> bool:
    """A precision or quantization sweep: some row measured its distance from BF16."""
    return any(entry.accuracy_kind for entry in _entries(rows))


def accuracy_figure(rows: Sequence[SweptRow]) -> Figure:
    """Throughput against the accuracy figure of --precision fp8 or --quantize: the logits'
    relative error (inference, generate) or the largest difference of the first losses
    (training) from BF16, measured in each run; the BF16 rows sit at 0 (the reference itself).
    One point per row, labelled with what tells the rows apart."""
    measured = [(row, row.entry) for row in rows if row.entry is not None]
    per_token = _per_token(rows)
    unit = _unit(rows, per_token)
    names = _varying(rows, _all_facets(rows)) or ["precision"]
    kinds = {entry.accuracy_kind for _, entry in measured} - {""}
    # Against what the rows measured it (BF16, or FP16 for FP16 weights quantized); a row of
    # no reduced precision stands at 0 only where it is that reference (an FP16 row beside
    # BF16-based ones is not: it has no distance to show, so no point).
    reference = accuracy_reference([entry for _, entry in measured])
    versus = reference or "each row's reference"
    axis_label = (f"logits' relative error vs {versus} [%]" if kinds == {"logits"} else
                  f"largest difference of the first losses vs {versus} [%]"
                  if kinds == {"loss"} else f"distance from {versus} [%]")
    measured = [(row, entry) for row, entry in measured if entry.accuracy_kind
                or is_accuracy_reference(entry, reference)]
    drawn = chart.frame(1, 7.5, 4.4, subtitle(rows))
    speed = drawn.axes[0]
    labelled = []
    for row, entry in measured:
        reduced = bool(entry.accuracy_kind)     # no figure of its own: the reference
        figure_value = entry.figures.get("accuracy") if reduced else 0.0
        if figure_value is None:
            continue
        point = point_of(entry, per_token)
        speed.errorbar([100 * figure_value], [point.value], yerr=[[point.below], [point.above]],
                       marker="o", capsize=3)
        labelled.append((_row_label(row, names) + ("" if reduced else " (reference)"),
                         100 * figure_value, point.value))
    speed.set_xlabel(axis_label)
    speed.set_ylabel(f"throughput [{unit}]")
    chart.from_zero(speed, headroom=0.12)
    right = max((x for _, x, _ in labelled), default=0.0)
    speed.set_xlim(0, right * 1.15 if right > 0 else 1)
    _label_points(speed, labelled)
    speed.set_title(f"Throughput against accuracy: {_common_label(rows, tuple(names))}",
                    fontsize="medium")
    return chart.finish(drawn)


def _is_generation(rows: Sequence[SweptRow]) -> bool:
    return all(row.spec.scenario.decodes_tokens for row in rows) and bool(_entries(rows))


def build_generation_figure(rows: Sequence[SweptRow]) -> Figure:
    """Aggregate decode tokens/s against the inter-token latency (p50), one labelled point per
    batch size, joined in batch order: the throughput-latency curve serving engines report. Rows
    that differ in more than the batch (a quantization, a precision, an attention kernel) get a
    curve each, named in the legend."""
    drawn = chart.frame(1, 7.5, 4.4, subtitle(rows), [_failures_note(rows, "point")])
    axis = drawn.axes[0]
    done = [row for row in rows
            if row.entry is not None and row.entry.figures.get("itl_ms") is not None]
    names = [name for name in _varying(done or rows, _all_facets(rows)) if name != "batch"]
    series: dict[str, list[SweptRow]] = {}
    for row in sorted(done, key=lambda row: row.spec.batch_size):
        series.setdefault(_row_label(row, names), []).append(row)
    for label, members in series.items():
        axis.plot([_itl(row) for row in members],
                  [_decode_rate(row) for row in members], marker="o", label=label or None)
    axis.set_xlabel("inter-token latency p50 [ms]")
    axis.set_ylabel("decode throughput, whole batch [tokens/s]")
    chart.from_zero(axis, headroom=0.12)
    right = max((_itl(row) for row in done), default=1.0)
    axis.set_xlim(0, right * 1.12 if right > 0 else 1)
    _label_points(axis, [(f"batch {row.spec.batch_size}", _itl(row), _decode_rate(row))
                         for members in series.values() for row in members])
    if len(series) > 1:
        axis.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0),
                    borderaxespad=0)
    axis.set_title(f"Generation: {_common_label(rows, excluded=('batch', *names))}",
                   fontsize="medium")
    return chart.finish(drawn)


def _itl(row: SweptRow) -> float:
    """A generate row's inter-token latency (p50, ms); rows drawn have it."""
    return row.entry.figures["itl_ms"] if row.entry is not None else 0.0


def _decode_rate(row: SweptRow) -> float:
    return (row.entry.figures.get("decode_tokens_per_s") if row.entry is not None
            else None) or 0.0


def _label_points(axis: Axes, points: Sequence[tuple[str, float, float]]) -> None:
    """Each (text, x, y) beside its point, on the side that faces the middle of the axes: a
    label of the rightmost point written to its right ran past the axes ('batch 2')."""
    (left, right), (bottom, top) = axis.get_xlim(), axis.get_ylim()
    for text, x, y in points:
        east = x <= (left + right) / 2
        north = y <= (bottom + top) / 2
        axis.annotate(text, (x, y), textcoords="offset points",
                      xytext=(6 if east else -6, 6 if north else -12),
                      ha="left" if east else "right", fontsize="small")


def plot_rows(rows: Sequence[SweptRow], path: str) -> None:
    """Draw the sweep and write it to ``path`` (whole or not at all): a sweep over the loader's
    workers gets the input pipeline's figure (:func:`build_workers_figure`), a precision or
    quantization sweep throughput against accuracy, a generate sweep the throughput-latency
    curve."""
    if workers_sweep(rows):
        write_figure(lambda: build_workers_figure(rows, subtitle(rows)), path)
    elif _measures_accuracy(rows):
        write_figure(lambda: accuracy_figure(rows), path)
    elif _is_generation(rows):
        write_figure(lambda: build_generation_figure(rows), path)
    else:
        write_figure(lambda: build_figure(rows), path)


# ---------------------------------------------------------------- a sweep over loader workers

def workers_sweep(rows: Sequence[SweptRow]) -> bool:
    """Whether the sweep is over the loader's workers, every row with a pipeline."""
    configs = [row.spec.config for row in rows]
    return (all(config.data != "synthetic" and config.workers is not None
                for config in configs)
            and len({config.workers for config in configs}) > 1)


def _workers(row: SweptRow) -> int:
    """A workers sweep's row's --workers (a workers sweep names it in every row)."""
    return row.spec.config.workers or 0


def _series_name(config: BenchConfig) -> str:
    return f"decode {config.decode}"


def _question(rows: Sequence[SweptRow]) -> str:
    """The chart's title, for the device the model ran on (a CPU run has no GPU to wait)."""
    on_gpu = any(row.spec.device.type != "cpu" for row in rows)
    return "Is the GPU waiting for data?" if on_gpu else "Is the model on the CPU waiting for data?"


def build_workers_figure(rows: Sequence[SweptRow], heading: str) -> Figure:
    """The figure (a matplotlib Figure, not yet saved); ``heading``: the sweep's subtitle."""
    measured = [(row, row.entry) for row in rows if row.entry is not None and row.entry.data_unit]
    unit = measured[0][1].data_unit if measured else "images/s"
    drawn = chart.frame(1, max(7.5, len(heading) / SUBTITLE_CHARS_PER_INCH + 0.5), 4.4, heading,
                        [_failures_note(rows, "point")])
    left = drawn.axes[0]
    right = left.twinx()
    series: dict[str, list[tuple[SweptRow, Entry]]] = {}
    highest = 0.0
    for row, entry in measured:
        series.setdefault(_series_name(row.spec.config), []).append((row, entry))
    for index, (name, members) in enumerate(series.items()):
        members.sort(key=lambda pair: _workers(pair[0]))
        workers = [_workers(row) for row, _ in members]
        data = [entry.figures for _, entry in members]
        pipeline = [d["pipeline_per_s"] for d in data]
        left.plot(workers, pipeline, "o-", color=f"C{index}", label=f"pipeline, {name}")
        right.plot(workers, [100 * d["wait_share"] for d in data], "s--",
                   color=f"C{index}", alpha=0.6, label=f"wait for data (share of run), {name}")
        model = [d["model_alone_per_s"] for d in data if d["model_alone_per_s"]]
        highest = max([highest, *pipeline, *model])
        if model:
            left.axhline(statistics.median(model), color=f"C{index}", linestyle=":",
                         label=f"model alone, {name}")
    per_device = any((entry.settings.get("devices") or 1) > 1 for _, entry in measured)
    left.set_xlabel("loader workers per rank")
    left.set_ylabel(f"throughput [{unit}]{' per device' if per_device else ''}")
    right.set_ylabel("wait for data [% of the run]")
    left.set_ylim(0, highest * 1.15 if highest > 0 else 1)
    right.set_ylim(0, 100)
    left.set_xticks(sorted({_workers(row) for row in rows}))
    left.set_title(_question([row for row, _ in measured] or rows), fontsize="medium")
    handles, labels = left.get_legend_handles_labels()
    more_handles, more_labels = right.get_legend_handles_labels()
    if handles:
        # Below the axes: inside them it covered a point (the middle of the right edge is
        # where the last worker count's point is when there are two).
        left.legend(handles + more_handles, labels + more_labels, fontsize="x-small",
                    loc="upper center", bbox_to_anchor=(0.5, -0.13), frameon=False,
                    ncol=min(3, len(handles + more_handles)))
    return chart.finish(drawn)
