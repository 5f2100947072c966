"""The node check's parts and their figures: the figures are rows of the registry
(``store/figures.py``, table ``NODE``: key, unit, label, direction, format); this module says
which of them a GPU measures, which the links, which ``--quick`` keeps, and how the verdict
table shows a value. All are rates: higher is better, and a GPU (or a link) is judged by how
far it falls below its peers' median. A new figure is its registry row and its measurement in
``program.py``.
"""
from __future__ import annotations

from typing import Iterable

from microbench.platform import units
from microbench.store.figures import NODE, Figure, of_table

# Between GPUs: a collective's bus bandwidth per message size, and a copy per pair of GPUs.
LINK_KEYS = ("allreduce_busbw_gbs", "p2p_gbs")
# Per GPU, in the order the program measures them.
GPU_FIGURES = tuple(figure for figure in of_table(NODE) if figure.key not in LINK_KEYS)
LINK_FIGURES = tuple(figure for figure in of_table(NODE) if figure.key in LINK_KEYS)
FIGURES = {figure.key: figure for figure in GPU_FIGURES + LINK_FIGURES}
# The one rule of what decides a verdict: a part is judged only where the GPU decides its time.
# A part bound by the host's kernel launches measures the CPU cores its process runs on, not
# the GPU: it is shown beside its peers (and the baseline) but never flags a GPU. Both model
# steps are: a small model's eager decode step (on a healthy host of 2 H200s the two
# processes' decode steps differed by 26%, every GPU figure by 2% or less) and resnet50's
# eager training step at 64 images (4 healthy H200s: 2,038-2,810 img/s, one GPU's samples
# spanning 1,912-2,914, while GEMM and copy agreed within 1%; issue 52). A GPU kept busy by
# another process is still caught by the parts that are judged (GEMM, FP8 GEMM, memory copy,
# host copies) and by the links.
HOST_BOUND = {
    "train_items_per_s": "an eager training step at this batch is bound by the host's "
                         "kernel launches",
    "decode_tokens_per_s": "an eager decode step is bound by the host's kernel launches",
}
NOT_JUDGED_MARK = "*"


def judged(key: str) -> bool:
    """Whether a figure decides the verdict (the rule above, for every part and link)."""
    return key not in HOST_BOUND


def not_judged_note(keys: Iterable[str]) -> str | None:
    """The line under the verdict table that says which columns are shown, not judged."""
    named = [FIGURES[key].console or key for key in keys if not judged(key)]   # labelled
    if not named:
        return None
    return (f"{NOT_JUDGED_MARK} shown, not judged: {', '.join(named)} (bound by the host's "
            f"kernel launches, not by the GPU)")

def shown(figure: Figure, value: float | None) -> str:
    """A value as the verdict table shows it: the figure's format from 100 up, three significant
    digits below (a CPU's 0.0123 TFLOP/s)."""
    if value is None:
        return "-"
    return units.formatted(value, figure.console_format) if abs(value) >= 100 else \
        f"{value:.3g}"


# How far below its peers' median a figure may fall before it flags its GPU (and beyond its
# noise): gpu-fryer's 10%, a data-parallel job's cost of one slow GPU made visible.
DEFAULT_TOLERANCE_PCT = 10.0
# --quick (a scheduler's prolog): GEMM, bandwidths and the all-reduce only.
QUICK_PARTS = ("gemm_tflops", "gemm_fp8_tflops", "memory_gbs", "h2d_gbs", "d2h_gbs")
