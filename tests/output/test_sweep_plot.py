"""--plot: the figure's own objects (ticks, subtitle, error bars, panels, failed rows), from rows
with known samples, and once from a real sweep on the CPU.

The figure is inspected before it is saved (``plot.build_figure``); tick labels, texts and the
error bars' segments are matplotlib's objects, so no image is compared.
"""
import pytest
import torch
from matplotlib.container import BarContainer, ErrorbarContainer

from conftest import run_main
from microbench.platform import devices
from microbench.settings.config import BenchConfig
from microbench.plan.spec import resolve
from microbench.output import sweep_plot
from microbench.drivers.sweep import Row
from support.canvas import texts_outside
from support.rows import GPU_ENV, measured_row



def failed_row(batch, precision="fp32", status="out of memory"):
    spec = resolve(BenchConfig(network="resnet18", batch_size=batch, precision=precision,
                               image_size=32, write_files=False), check=False)
    return Row(spec, status=status, error="tried to allocate 2.00 GiB")


def error_bars(axis):
    """(x, low end, high end) of each error bar of the axis' one series."""
    [container] = [c for c in axis.containers if isinstance(c, ErrorbarContainer)]
    [bars] = container.lines[2]
    return [(x0, low, high) for (x0, low), (_, high) in bars.get_segments()]


def points(axis):
    """The data line of the first series drawn with error bars (caps are lines too)."""
    container = next(c for c in axis.containers if isinstance(c, ErrorbarContainer))
    return container.lines[0]


def texts(figure):
    """The figure's own texts (subtitle, footnote), unwrapped."""
    return " ".join(" ".join(text.get_text().split()) for text in figure.texts)


# ---------------------------------------------------------------- against batch size

def test_batch_ticks_are_plain_integers_of_the_batches_that_ran():
    figure = sweep_plot.build_figure([measured_row(batch) for batch in (1, 2, 4)])
    [axis] = figure.axes
    assert [label.get_text() for label in axis.get_xticklabels()] == ["1", "2", "4"]
    assert axis.get_xticklabels(minor=True) == []          # no 3x10^0 between them
    assert axis.get_xscale() == "log"


def test_subtitle_names_the_device_precisions_and_versions():
    rows = [measured_row(b, precision=p, env=GPU_ENV, memory_mb=100.0 * b)
            for p in ("fp32", "amp-bf16") for b in (2, 4)]
    title = sweep_plot.build_figure(rows)._suptitle.get_text()
    assert "AMD Instinct MI300X (cuda:0)" in title and "fp32, amp-bf16" in title
    assert "PyTorch 2.99.0+rocm9.9" in title and "torchvision 0.99.0" in title
    assert "ROCm/HIP 9.9.1" in title
    cpu_title = sweep_plot.build_figure([measured_row(b) for b in (2, 4)])._suptitle.get_text()
    assert "Test CPU 9000 (CPU, 2 threads)" in cpu_title and "CUDA" not in cpu_title


def test_one_trial_bars_span_p10_to_p90_of_per_iteration_throughput():
    # 2 images per iteration in 10..50 ms: p10 of time 14 ms, p90 46 ms (linear interpolation).
    figure = sweep_plot.build_figure([measured_row(2), measured_row(4)])
    [axis] = figure.axes
    (x0, low, high), (x1, _, _) = error_bars(axis)
    assert (x0, x1) == (2, 4)
    assert low == pytest.approx(2 / 0.046) and high == pytest.approx(2 / 0.014)
    # The point is the headline (items over the summed time), not a median rate.
    assert points(axis).get_ydata()[0] == pytest.approx(2 * 5 / 0.150)
    assert "10th to 90th percentile of the per-iteration rate" in texts(figure)
    assert "5 timed iterations, one trial" in texts(figure)


def test_repeated_trials_bars_span_the_lowest_and_highest_trial():
    # Trials of 2 images in 10, 20 and 40 ms per iteration: 200, 100 and 50 images/s.
    trials = [[10.0, 10.0], [20.0, 20.0], [40.0, 40.0]]
    figure = sweep_plot.build_figure([measured_row(2, trials=trials), measured_row(4)])
    (_, low, high), _ = error_bars(figure.axes[0])
    assert (low, high) == pytest.approx((50.0, 200.0))
    assert points(figure.axes[0]).get_ydata()[0] == pytest.approx(100.0)
    assert "geometric mean of 3 trials" in texts(figure) and "lowest and the highest trial" in texts(figure)


def test_without_memory_numbers_there_is_one_panel_and_with_them_two():
    assert len(sweep_plot.build_figure([measured_row(b) for b in (2, 4)]).axes) == 1
    gpu = sweep_plot.build_figure([measured_row(b, env=GPU_ENV, memory_mb=10.0 * b) for b in (2, 4)])
    speed, memory = gpu.axes
    assert list(memory.get_lines()[0].get_ydata()) == [20.0, 40.0]
    assert [label.get_text() for label in memory.get_xticklabels()] == ["2", "4"]


def test_a_failed_row_gets_no_point_and_the_footnote_names_it():
    rows = [measured_row(2), measured_row(4), failed_row(8)]
    figure = sweep_plot.build_figure(rows)
    [axis] = figure.axes
    assert list(points(axis).get_xdata()) == [2, 4]
    assert [x for x, _, _ in error_bars(axis)] == [2, 4]
    assert [label.get_text() for label in axis.get_xticklabels()] == ["2", "4", "8"]
    assert "Not measured (no point): resnet18 training fp32 b8 (out of memory)" in texts(figure)


def test_series_differ_by_what_varies_and_share_the_rest_in_the_title():
    rows = [measured_row(b, precision=p) for p in ("fp32", "amp-bf16") for b in (2, 4)]
    [axis] = sweep_plot.build_figure(rows).axes
    assert [text.get_text() for text in axis.get_legend().get_texts()] == ["fp32", "amp-bf16"]
    assert axis.get_title() == "Throughput: resnet18 training"


@pytest.mark.parametrize("memory_mb", [None, 100.0])
@pytest.mark.parametrize("batches", [(2, 4), (2,)])
def test_every_text_lies_inside_the_canvas_with_one_panel_or_two(memory_mb, batches):
    """Lines or bars, with the memory panel or without, under a long title (issue 56)."""
    rows = [measured_row(batch, precision=precision, network="resnext101_32x8d",
                         memory_mb=memory_mb, compile=True, nhwc=True)
            for precision in ("fp32", "amp-bf16", "amp-fp16") for batch in batches]
    figure = sweep_plot.build_figure(rows)
    assert len(figure.axes) == (2 if memory_mb else 1)
    assert texts_outside(figure) == []


# ---------------------------------------------------------------- one batch size: bars

def test_bars_per_configuration_with_error_bars_and_no_bar_for_a_failure():
    rows = [measured_row(8, precision="fp32"), measured_row(8, precision="amp-bf16"),
            failed_row(8, precision="fp16")]
    figure = sweep_plot.build_figure(rows)
    [axis] = figure.axes
    assert [label.get_text() for label in axis.get_xticklabels()] == ["fp32", "amp-bf16", "fp16"]
    [bars] = [c for c in axis.containers if isinstance(c, BarContainer)]
    assert [patch.get_x() + patch.get_width() / 2 for patch in bars] == [0, 1]
    assert [x for x, _, _ in error_bars(axis)] == [0, 1]
    assert "out of memory" in [text.get_text().strip() for text in axis.texts]
    assert axis.get_title() == "Throughput: resnet18 training batch 8"
    assert "Bar heights:" in texts(figure) and "(no bar)" in texts(figure)


def test_the_file_is_written_in_the_format_its_suffix_names(tmp_path):
    rows = [measured_row(b) for b in (2, 4)]
    sweep_plot.plot_rows(rows, str(tmp_path / "sweep.png"))
    sweep_plot.plot_rows(rows, str(tmp_path / "sweep.svg"))
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (tmp_path / "sweep.svg").read_bytes()[:1000]


# ---------------------------------------------------------------- a real sweep

@pytest.mark.slow
def test_a_cpu_sweep_draws_one_panel_with_integer_ticks_and_its_environment(
        tmp_path, capfd, monkeypatch):
    drawn = []

    def keep(rows):
        drawn.append(build(rows))
        return drawn[-1]
    build = sweep_plot.build_figure
    monkeypatch.setattr(sweep_plot, "build_figure", keep)
    path = tmp_path / "sweep.png"
    process = run_main(capfd, "--network", "resnet18", "--mode", "inference", "--batch-size",
                       "1,2,4", "--image-size", "32", "--iterations", "3", "--warmup", "1",
                       "--no-files", "--plot", str(path))
    assert process.returncode == 0, process.stderr
    [figure] = drawn
    [axis] = figure.axes                                     # no empty memory panel on the CPU
    assert [label.get_text() for label in axis.get_xticklabels()] == ["1", "2", "4"]
    title = figure._suptitle.get_text()
    assert devices.device_name(torch.device("cpu")) in title
    assert f"PyTorch {torch.__version__}" in title and "fp32" in title
    assert [x for x, _, _ in error_bars(axis)] == [1, 2, 4]
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
