"""``microbench-node --plot``: one panel per figure, a bar per GPU as a share of its peers'
median, the tolerance drawn and labelled, flagged GPUs marked; titled with the device and the
verdict; drawn through ``output/chart.py``'s frame (the one module that imports matplotlib)."""
from __future__ import annotations

from microbench.node.parts import GPU_FIGURES, judged
from microbench.node.verdict import Verdict
from microbench.output import chart


def title(verdict: Verdict) -> str:
    """The chart's title: the verdict, the device(s) and what the GPUs were judged against."""
    models = sorted({g.record.device_name for g in verdict.gpus})
    flagged = [g.record.label for g in verdict.gpus if g.flagged]
    links = sum(1 for link in verdict.links if link.flagged)
    if verdict.flagged:
        outcome = (f"FLAGGED: {', '.join(flagged) or 'no GPU'}"
                   + (f", {links} link{'s' if links != 1 else ''}" if links else ""))
    else:
        outcome = "PASS, nothing flagged"
    against = (f"against its peers and the baseline {verdict.baseline_source}"
               if verdict.baseline_source else "against its peers only (no --baseline)")
    return (f"Node check of {len(verdict.gpus)} x {', '.join(models)}: {outcome}; each GPU "
            f"{against}")


def write(verdict: Verdict, path: str) -> None:
    shown = [f for f in GPU_FIGURES
             if any(g.figures.get(f.key) and g.figures[f.key].diff_pct is not None
                    for g in verdict.gpus)]
    names = [g.record.labelled("\n") for g in verdict.gpus]
    notes = [f"Bars: each GPU's figure (median of its samples) as a share of its peers' median; "
             f"red: flagged; dashed: the tolerance, {verdict.tolerance_pct:g}% below the median "
             f"(a figure below it flags its GPU only beyond its noise, and when measured "
             f"again)."]
    if any(not judged(f.key) for f in shown):
        notes.append("(shown, not judged): bound by the host's kernel launches; never flags "
                     "a GPU.")

    def build():
        drawn = chart.frame(max(1, len(shown)), max(5.0, 1.0 + 0.6 * len(names)), 2.2,
                            title(verdict), notes)
        for axis, fig in zip(drawn.axes, shown):
            shares, colours = [], []
            for gpu in verdict.gpus:
                judged_ = gpu.figures.get(fig.key)
                diff = judged_.diff_pct if judged_ is not None and judged_.diff_pct is not None \
                    else 0.0
                shares.append(100 + diff)
                colours.append("tab:red" if gpu.flagged and judged(fig.key) and (
                    (judged_ is not None and judged_.flagged)
                    or (gpu.baseline.get(fig.key) and gpu.baseline[fig.key].flagged))
                    else "tab:blue")
            axis.bar(range(len(names)), shares, color=colours)
            axis.axhline(100, color="black", linewidth=0.8)
            axis.axhline(100 - verdict.tolerance_pct, color="grey", linestyle="--",
                         linewidth=0.8)
            # Each line named at its right end, outside the bars (a legend would cover one).
            for level, text in ((100, "median"),
                                (100 - verdict.tolerance_pct,
                                 f"tolerance -{verdict.tolerance_pct:g}%")):
                axis.text(1.01, level, text, transform=axis.get_yaxis_transform(),
                          va="center", ha="left", fontsize="x-small", color="0.25")
            axis.set_ylabel("% of median")
            axis.set_title(f"{fig.console} [{fig.unit}]"
                           + ("" if judged(fig.key) else " (shown, not judged)"),
                           fontsize="small")
            axis.set_xticks(range(len(names)))
            axis.set_xticklabels(names, fontsize="x-small")
            chart.from_zero(axis)
        return chart.finish(drawn)

    chart.write_figure(build, path)
