"""``--plot FILE.png`` for sweeps: throughput and memory against batch size when the batch size
varies, grouped bars of throughput (and memory) per configuration otherwise. The file's suffix
names its format (any matplotlib writes: png, svg, pdf...); it is checked before the sweep runs
and written whole or not at all."""
from __future__ import annotations

import io
import os

from ..errors import MissingEnvironment, UsageError
from . import writing


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingEnvironment("--plot needs matplotlib: pip install matplotlib") from None


def check_path(path: str) -> None:
    """Before the sweep: matplotlib is there, the file can be written, its suffix is a format
    matplotlib writes."""
    require_matplotlib()
    from matplotlib.backend_bases import FigureCanvasBase
    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = os.path.splitext(path)[1].lstrip(".").lower()
    if suffix not in formats:
        raise UsageError(f"--plot {path}: the suffix names the format; use one of "
                         f"{', '.join('.' + name for name in sorted(formats))}")
    writing.check_target(path, "--plot")


def _pyplot():
    require_matplotlib()
    import matplotlib
    matplotlib.use("Agg")                    # files only; no display needed
    import matplotlib.pyplot as pyplot
    return pyplot


def _series_label(row) -> str:
    config = row.spec.config
    compiled = f", compile {config.compile_options.get('mode', 'default')}" if config.compile else ""
    layout = " nhwc" if config.nhwc else ""
    return f"{config.network} {config.mode} {row.spec.precision.name}{layout}{compiled}"


def plot_rows(rows, path: str) -> None:
    """``rows``: sweep rows (microbench.sweep.Row): .spec, .throughput, .peak_allocated_mb."""
    pyplot = _pyplot()
    figure, (speed, memory) = pyplot.subplots(1, 2, figsize=(12, 4.5))
    batches = {row.spec.batch_size for row in rows}
    if len(batches) > 1:
        series: dict[str, list] = {}
        for row in rows:
            series.setdefault(_series_label(row), []).append(row)
        for label, members in series.items():
            done = [r for r in members if r.throughput is not None]
            speed.plot([r.spec.batch_size for r in done], [r.throughput for r in done],
                       marker="o", label=label)
            known = [r for r in done if r.peak_allocated_mb is not None]
            memory.plot([r.spec.batch_size for r in known],
                        [r.peak_allocated_mb for r in known], marker="o", label=label)
        for axis in (speed, memory):
            axis.set_xscale("log", base=2)
            axis.set_xlabel("batch size [images]")
            axis.legend(fontsize="small")
    else:
        labels = [f"{_series_label(row)} b{row.spec.batch_size}" for row in rows]
        positions = list(range(len(rows)))
        # A failed row gets no bar (not a zero bar): nothing was measured.
        speed.bar([p for p, r in zip(positions, rows) if r.throughput is not None],
                  [r.throughput for r in rows if r.throughput is not None])
        memory.bar([p for p, r in zip(positions, rows) if r.peak_allocated_mb is not None],
                   [r.peak_allocated_mb for r in rows if r.peak_allocated_mb is not None])
        for axis in (speed, memory):
            axis.set_xticks(positions, labels, rotation=30, ha="right", fontsize="small")
    if all(row.peak_allocated_mb is None for row in rows):
        memory.text(0.5, 0.5, "peak memory not tracked on the CPU", ha="center",
                    transform=memory.transAxes)
    speed.set_ylabel("throughput [images/s]")
    memory.set_ylabel("peak memory allocated [MB]")
    speed.set_title("Throughput")
    memory.set_title("Peak memory")
    figure.tight_layout()
    image = io.BytesIO()
    figure.savefig(image, dpi=120, format=os.path.splitext(path)[1].lstrip(".").lower())
    pyplot.close(figure)
    writing.write_whole(path, image.getvalue())
