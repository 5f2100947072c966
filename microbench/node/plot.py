"""``microbench-node --plot``: one panel per figure, a bar per GPU as a share of the median,
the tolerance drawn, flagged GPUs marked; drawn through ``output/chart.py`` (the one module
that imports matplotlib)."""
from __future__ import annotations

from microbench.node.parts import GPU_FIGURES
from microbench.node.verdict import Verdict
from microbench.output import chart


def write(verdict: Verdict, path: str) -> None:
    shown = [f for f in GPU_FIGURES
             if any(g.figures.get(f.key) and g.figures[f.key].diff_pct is not None
                    for g in verdict.gpus)]
    names = [f"{g.record.host}\nrank {g.record.rank}" for g in verdict.gpus]

    def build():
        figure = chart.new_figure(max(4.0, 1.0 + 0.5 * len(names)), 1.0 + 2.2 * max(1, len(shown)))
        for row, fig in enumerate(shown, 1):
            axis = figure.add_subplot(max(1, len(shown)), 1, row)
            shares, colours = [], []
            for gpu in verdict.gpus:
                judged = gpu.figures.get(fig.key)
                diff = judged.diff_pct if judged is not None and judged.diff_pct is not None \
                    else 0.0
                shares.append(100 + diff)
                colours.append("tab:red" if judged is not None and judged.flagged
                               else "tab:blue")
            axis.bar(range(len(names)), shares, color=colours)
            axis.axhline(100, color="black", linewidth=0.8)
            axis.axhline(100 - verdict.tolerance_pct, color="grey", linestyle="--",
                         linewidth=0.8)
            axis.set_ylabel("% of median")
            axis.set_title(f"{fig.console} [{fig.unit}]", fontsize="small")
            axis.set_xticks(range(len(names)))
            axis.set_xticklabels(names if row == len(shown) else [""] * len(names),
                                 fontsize="x-small")
            chart.from_zero(axis)
        figure.tight_layout()
        return figure

    chart.write_figure(build, path)
