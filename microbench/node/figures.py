"""The node check's figures, declared once: key, unit, label, which way is better, format.

Every reader (the verdict, the console table, the JSON document and its schema's enum, the
plot, the report) takes a figure's name and unit from :data:`FIGURES`; a new figure is one row
here and its measurement in ``program.py``. All of them are rates: higher is better, and a
GPU (or a link) is judged by how far it falls below its peers' median.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    key: str          # the JSON key and the program's name of the part
    unit: str
    label: str        # the console column and the plot's title
    higher_is_better: bool
    format: str       # how the console shows a value of 100 or more (three significant
                      # digits below: a CPU's 0.0123 TFLOP/s)

    def shown(self, value: float | None) -> str:
        if value is None:
            return "-"
        return format(value, self.format) if abs(value) >= 100 else f"{value:.3g}"


# Per GPU, in the order the program measures them.
GPU_FIGURES = (
    Figure("gemm_tflops", "TFLOP/s", "GEMM", True, ",.0f"),
    Figure("gemm_fp8_tflops", "TFLOP/s", "GEMM FP8", True, ",.0f"),
    Figure("memory_gbs", "GB/s", "memory", True, ",.0f"),
    Figure("h2d_gbs", "GB/s", "host->dev", True, ",.0f"),
    Figure("d2h_gbs", "GB/s", "dev->host", True, ",.0f"),
    Figure("train_items_per_s", "img/s", "train step", True, ",.0f"),
    Figure("decode_tokens_per_s", "tok/s", "decode step", True, ",.0f"),
)
# Between GPUs: a collective's bus bandwidth per message size, and a copy per pair of GPUs.
LINK_FIGURES = (
    Figure("allreduce_busbw_gbs", "GB/s", "all-reduce bus bandwidth", True, ",.0f"),
    Figure("p2p_gbs", "GB/s", "peer-to-peer copy", True, ",.0f"),
)
FIGURES = {figure.key: figure for figure in GPU_FIGURES + LINK_FIGURES}
# How far below its peers' median a figure may fall before it flags its GPU (and beyond its
# noise): gpu-fryer's 10%, a data-parallel job's cost of one slow GPU made visible.
DEFAULT_TOLERANCE_PCT = 10.0
# --quick (a scheduler's prolog): GEMM, bandwidths and the all-reduce only.
QUICK_PARTS = ("gemm_tflops", "gemm_fp8_tflops", "memory_gbs", "h2d_gbs", "d2h_gbs")
