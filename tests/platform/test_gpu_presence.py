"""Whether torch can see no GPU, told without importing it (microbench.platform.gpu_presence,
issue 64): certain where it says so, unsure (False) everywhere else."""
import pytest

from microbench.platform import gpu_presence


def _loads(found: bool):
    return lambda library: found


@pytest.mark.parametrize("version, platform, driver, none", [
    ("2.14.1+cpu", "linux", True, True),            # a CPU build sees no GPU, driver or not
    ("2.14.1", "linux", False, True),               # the index's CUDA build, no libcuda.so.1
    ("2.14.1+cu126", "linux", False, True),
    ("2.14.1", "linux", True, False),               # a driver: torch's probe decides
    ("2.14.1+rocm6.4", "linux", False, False),      # ROCm carries its runtime: unsure
    ("2.5.0a0+git1234", "linux", False, False),     # a local build: CUDA or ROCm, unsure
    ("2.14.1", "darwin", False, False),
])
def test_no_gpu_is_claimed_only_where_it_is_certain(version, platform, driver, none):
    assert gpu_presence.none_visible_for(version, platform, _loads(driver)) is none


def test_the_driver_library_asked_for_is_the_one_the_cuda_runtime_loads():
    asked = []
    gpu_presence.none_visible_for("2.14.1", "linux", lambda name: asked.append(name) or True)
    assert asked == ["libcuda.so.1"]
