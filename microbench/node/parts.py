"""The node check's parts and their figures: the figures are rows of the registry
(``store/figures.py``, table ``NODE``: key, unit, label, direction, format); this module says
which of them a GPU measures, which the links, which ``--quick`` keeps, and how the verdict
table shows a value. All are rates: higher is better, and a GPU (or a link) is judged by how
far it falls below its peers' median. A new figure is its registry row and its measurement in
``program.py``.
"""
from __future__ import annotations

from microbench.store.figures import NODE, Figure, of_table

# Between GPUs: a collective's bus bandwidth per message size, and a copy per pair of GPUs.
LINK_KEYS = ("allreduce_busbw_gbs", "p2p_gbs")
# Per GPU, in the order the program measures them.
GPU_FIGURES = tuple(figure for figure in of_table(NODE) if figure.key not in LINK_KEYS)
LINK_FIGURES = tuple(figure for figure in of_table(NODE) if figure.key in LINK_KEYS)
FIGURES = {figure.key: figure for figure in GPU_FIGURES + LINK_FIGURES}
# Shown beside their peers but never flagging a GPU: a small model's eager decode step is bound
# by the host launching its kernels, so it measures the CPU cores a process runs on (on a
# healthy host of 2 H200s the two processes' decode steps differed by 26%, every GPU figure by
# 2% or less).
HOST_BOUND = ("decode_tokens_per_s",)


def shown(figure: Figure, value: float | None) -> str:
    """A value as the verdict table shows it: the figure's format from 100 up, three significant
    digits below (a CPU's 0.0123 TFLOP/s)."""
    if value is None:
        return "-"
    return format(value, figure.console_format) if abs(value) >= 100 else f"{value:.3g}"


# How far below its peers' median a figure may fall before it flags its GPU (and beyond its
# noise): gpu-fryer's 10%, a data-parallel job's cost of one slow GPU made visible.
DEFAULT_TOLERANCE_PCT = 10.0
# --quick (a scheduler's prolog): GEMM, bandwidths and the all-reduce only.
QUICK_PARTS = ("gemm_tflops", "gemm_fp8_tflops", "memory_gbs", "h2d_gbs", "d2h_gbs")
