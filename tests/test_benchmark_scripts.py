"""The GPU proof scripts in benchmarks/ call the tool's own code path; a restructure of that path
must not leave them broken until the next GPU session. Their tool side runs here on the CPU."""
import pytest

from benchmarks import harness_overhead, llama_harness
from microbench.platform import device as device_layer, environment


@pytest.fixture(scope="module")
def cpu():
    device, _ = device_layer.select("cpu")
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
