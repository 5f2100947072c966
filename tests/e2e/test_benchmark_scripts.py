"""The GPU proof scripts in benchmarks/ call the tool's own code path; a restructure of that path
must not leave them broken until the next GPU session. Their tool side runs here on the CPU."""
import pytest

from benchmarks import harness_overhead, llama_harness
from microbench.platform import devices, environment


@pytest.fixture(scope="module")
def cpu():
    device, _ = devices.select("cpu")
    return device, environment.describe(device)


def test_harness_overhead_tool_side_runs_the_cli_path(cpu):
    device, env = cpu
    rate = harness_overhead.tool_throughput(["--image-size", "32"], "inference", 2, 1, 1,
                                            device, env)
    assert rate > 0


def test_llama_harness_tool_side_runs_the_cli_path(cpu):
    _, env = cpu
    rate = llama_harness.tool_throughput(
        ["--network", "llama_tiny", "--batch-size", "1", "--seq-len", "16", "--device", "cpu",
         "--iterations", "1", "--warmup", "1"], env)
    assert rate > 0


# The tool's A/B line as an H100 printed it (docs/results.md, 2026-11-25), and its other verdicts.
AB_LINE = ("A/B: B (--measure-peaks 0) / A = 1.000: same within 5% (interval 0.981-1.021) [95% "
           "CI of the ratio B/A paired by round (Student t on log ratios, 5 rounds)]")


@pytest.mark.parametrize("line, verdict, passes", [
    (AB_LINE, "same within 5%", True),
    ("A/B: B (x) / A = 1.004: no difference detected (interval 0.97-1.03)",
     "no difference detected", True),
    ("A/B: B (x) / A = 1.080: faster (interval 1.05-1.11)", "faster", False),
    ("A/B: B (x) / A = 0.900: slower (interval 0.88-0.92)", "slower", False),
    ("no A/B line at all", None, False)])
def test_peaks_script_reads_every_verdict_of_the_ab_line(line, verdict, passes):
    from benchmarks import peaks_vs_loop
    text = f"A: 2,442 images/s\n{line}\n"
    assert peaks_vs_loop.ab_verdict(text) == verdict
    assert peaks_vs_loop.probe_left_alone(peaks_vs_loop.ab_verdict(text)) is passes
