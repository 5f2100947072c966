"""The node check on the console: one row per GPU, each figure beside the median with its
difference (and the baseline's, given one), the columns shown but not judged marked, then the
links (and, where the job's all-reduce across nodes flagged, what its pairs of nodes say), then
one line of verdict."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence, TextIO

from microbench.node.parts import (FIGURES, GPU_FIGURES, NOT_JUDGED_MARK, judged,
                                   not_judged_note, shown)
from microbench.node.links import Collective
from microbench.node.verdict import AcrossNodes, Judged, Verdict
from microbench.platform import text_table
from microbench.platform.safe_text import terminal

if TYPE_CHECKING:
    from microbench.store.figures import Figure


def _cell(figure: Figure, judged_: Judged | None, base: Judged | None = None) -> str:
    if judged_ is None or judged_.value is None:
        return "-"
    diffs = [] if judged_.diff_pct is None else [f"{judged_.diff_pct:+.0f}%"]
    if base is not None and base.diff_pct is not None:
        diffs.append(f"{base.diff_pct:+.0f}% vs baseline")
    flagged = judged_.flagged or (base is not None and base.flagged)
    diff = f" ({', '.join(diffs)})" if diffs else ""
    return f"{shown(figure, judged_.value)}{diff}{' !' if flagged else ''}"


def gpu_table(verdict: Verdict) -> tuple[list[str], list[list[str]], str | None]:
    known = [f for f in GPU_FIGURES
             if any(g.figures.get(f.key) and g.figures[f.key].value is not None
                    for g in verdict.gpus)]
    # Ranks headed by what they measure: a check on the CPU (CI, a laptop) has no GPU.
    on_gpus = any(g.record.device != "cpu" for g in verdict.gpus)
    header = ["GPU" if on_gpus else "rank", "device"] + [f"{f.console}{'' if judged(f.key) else NOT_JUDGED_MARK} "
                                  f"[{f.unit}]" for f in known] + ["verdict"]
    rows = []
    for gpu in verdict.gpus:
        rows.append([gpu.record.label, gpu.record.device_name]
                    + [_cell(f, gpu.figures.get(f.key), gpu.baseline.get(f.key))
                       for f in known]
                    + ["FLAGGED" if gpu.flagged else "ok"])
    medians = []
    for figure in known:
        values = [g.figures[figure.key].median for g in verdict.gpus
                  if g.figures.get(figure.key) and g.figures[figure.key].median is not None]
        medians.append(shown(figure, values[0]) if values else "-")
    rows.append(["median", ""] + medians + [""])
    if any(g.baseline for g in verdict.gpus):
        references = []
        for figure in known:
            values = [g.baseline[figure.key].median for g in verdict.gpus
                      if g.baseline.get(figure.key) and g.baseline[figure.key].median]
            references.append(shown(figure, values[0]) if values else "-")
        rows.append(["baseline", ""] + references + [""])
    return header, rows, not_judged_note(f.key for f in known)


def _print_across(across: AcrossNodes, out: TextIO) -> None:
    """Each pair of nodes' all-reduce against the fastest pair's, then what they name."""
    figure = FIGURES["allreduce_busbw_gbs"]
    for pair in across.pairs:
        print(terminal(f"{pair.name}: {_cell(figure, pair.judged)} GB/s"
                       f"{' slow: ' + pair.judged.why if pair.judged.flagged else ''}"),
              file=out)
    print(terminal(f"all-reduce across nodes: {across.finding}"), file=out)


def print_verdict(verdict: Verdict, collectives: Sequence[Collective], p2p_note: str | None,
                  out: TextIO) -> None:
    header, rows, not_judged = gpu_table(verdict)
    columns = [text_table.Column(h, numeric=2 <= i < len(header) - 1)
               for i, h in enumerate(header)]
    rows = [[terminal(cell) for cell in row] for row in rows]
    print(text_table.render(columns, rows, terminal=out.isatty()), end="", file=out)
    if not_judged:
        print(terminal(not_judged), file=out)
    for gpu in verdict.gpus:
        for finding in gpu.findings:
            print(terminal(f"  {gpu.record.label}: {finding}"), file=out)
    bus = FIGURES["allreduce_busbw_gbs"]
    for collective in collectives:
        if collective.busbw_gbs:
            sizes = ", ".join(f"{size >> 20 or size >> 10}{' MiB' if size >> 20 else ' KiB'} "
                              f"{shown(bus, sorted(v)[len(v) // 2])}"
                              for size, v in collective.busbw_gbs.items() if v)
            print(terminal(f"{bus.console} [{bus.unit}], {collective.scope} "
                           f"({len(collective.ranks)} ranks): {sizes}"), file=out)
    for link in verdict.links:
        # A pair's copy always; an all-reduce (its figures are above) where it flagged or has
        # a baseline to be shown beside.
        if link.kind == "p2p" or link.flagged or link.baseline is not None:
            figure = FIGURES["p2p_gbs" if link.kind == "p2p" else "allreduce_busbw_gbs"]
            print(terminal(f"{link.name}: {_cell(figure, link.judged, link.baseline)} GB/s"
                           f"{' FLAGGED ' + link.why if link.flagged else ''}"), file=out)
    if verdict.across is not None:
        _print_across(verdict.across, out)
    if p2p_note:
        print(terminal(p2p_note), file=out)
    for note in verdict.notes:
        print(terminal(f"note: {note}"), file=out)
    flagged = [g for g in verdict.gpus if g.flagged]
    links = [l for l in verdict.links if l.flagged]
    if not flagged and not links:
        on_gpus = any(not g.record.device.startswith("cpu") for g in verdict.gpus)
        measured = f"{len(verdict.gpus)} {'GPUs' if on_gpus else 'processes on the CPU'}"
        print(f"Node check: PASS, {measured}, nothing flagged (tolerance "
              f"{verdict.tolerance_pct:g}% and each figure's noise)", file=out)
        return
    names = ", ".join(g.record.label for g in flagged) or "none"
    print(terminal(f"Node check: FLAGGED GPUs: {names}; links: {len(links)}; hosts: "
                   f"{', '.join(verdict.flagged_hosts()) or 'none'}; flagged by: "
                   f"{', '.join(verdict.flagged_by())}"), file=out)
