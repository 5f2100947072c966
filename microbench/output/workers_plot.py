"""``--plot`` of a sweep over the loader's workers (``--data loader|folder --workers 0,2,4,8``).

Against the number of workers: the pipeline's throughput (the run's headline, per device) on the
left axis, one line per other setting that varies (``--decode cpu,gpu``); the share of the run
spent waiting for data on the right axis, dashed (the whole run's share, not a step's median: when
batches arrive in bursts most steps wait nothing while a few wait long, and only the run's share
agrees with the throughput beside it); and the model alone on synthetic input,
measured in each row's own invocation, as a dotted horizontal line at the median of the rows'
figures, so the gap between the pipeline and what the model could take is read off directly.
A row that failed gets no point; the footnote names it.

Example::

    python3 micro_benchmarking_pytorch.py --network resnet50 --amp --nhwc --batch-size 256 \\
        --data loader --transforms gpu --workers 0,2,4,8,16 --plot workers.png
"""
from __future__ import annotations

import statistics
import textwrap


def applies(rows) -> bool:
    """Whether the sweep is over the loader's workers, every row with a pipeline."""
    configs = [row.spec.config for row in rows]
    return (all(config.data != "synthetic" and config.workers is not None
                for config in configs)
            and len({config.workers for config in configs}) > 1)


def _series_name(config) -> str:
    return f"decode {config.decode}"


def build_figure(rows, heading: str):
    """The figure (a matplotlib Figure, not yet saved); ``heading``: the sweep's subtitle."""
    from matplotlib.figure import Figure

    measured = [row for row in rows if row.summary is not None
                and row.summary.data is not None]
    unit = measured[0].summary.data.unit if measured else "images/s"
    figure = Figure(figsize=(max(7.5, len(heading) / 13 + 0.5), 5.0))
    left = figure.subplots()
    right = left.twinx()
    series: dict[str, list] = {}
    highest = 0.0
    for row in measured:
        series.setdefault(_series_name(row.spec.config), []).append(row)
    for index, (name, members) in enumerate(series.items()):
        members.sort(key=lambda row: row.spec.config.workers)
        workers = [row.spec.config.workers for row in members]
        data = [row.summary.data for row in members]
        left.plot(workers, [d.pipeline.per_s for d in data], "o-", color=f"C{index}",
                  label=f"pipeline, {name}")
        right.plot(workers, [100 * d.pipeline.waits.share_total for d in data], "s--",
                   color=f"C{index}", alpha=0.6, label=f"wait for data (share of run), {name}")
        model = [d.model_alone_per_s for d in data if d.model_alone_per_s]
        highest = max([highest, *(d.pipeline.per_s for d in data), *model])
        if model:
            left.axhline(statistics.median(model), color=f"C{index}", linestyle=":",
                         label=f"model alone, {name}")
    per_device = any(row.summary.data.per_device for row in measured)
    left.set_xlabel("loader workers per rank")
    left.set_ylabel(f"throughput [{unit}]{' per device' if per_device else ''}")
    right.set_ylabel("wait for data [% of the run]")
    left.set_ylim(0, highest * 1.15 if highest > 0 else 1)
    right.set_ylim(0, 100)
    left.set_xticks(sorted({row.spec.config.workers for row in rows}))
    left.set_title("Is the GPU waiting for data?", fontsize="medium")
    handles, labels = left.get_legend_handles_labels()
    more_handles, more_labels = right.get_legend_handles_labels()
    if handles:
        # Throughput climbs to the top right and the wait falls to the bottom right as workers
        # are added: the middle of the right edge is where neither curve usually is.
        left.legend(handles + more_handles, labels + more_labels, fontsize="x-small",
                    loc="center right")
    figure.suptitle(heading, fontsize="small")
    failed = [f"{row.label()} ({row.status})" for row in rows if row.failed]
    bottom = 0.0
    if failed:
        note = textwrap.fill("Not measured (no point): " + "; ".join(failed) + ".", 110)
        figure.text(0.01, 0.01, note, fontsize="x-small", color="0.25", va="bottom")
        bottom = 0.04 + 0.03 * note.count("\n")
    figure.tight_layout(rect=(0, bottom, 1, 0.95))
    return figure
