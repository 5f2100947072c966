"""The advice after a broken torch/torchvision pair (issues 56, 64): every kind of mismatch is
named, and the command installs a consistent pair from one source, never the broken pair again:
torch is pinned to its own build, never by a pin that a local ``+cpu`` wheel also matches.
(tests/platform/test_install_pair_pip.py runs the commands with pip.)"""
import re

import pytest
from packaging.specifiers import SpecifierSet

from microbench.platform import install_pair

NMS = "operator torchvision::nms does not exist"
COMMAND = re.compile(r"pip install --force-reinstall \"torch(?P<pin>===?[^\"\s]+)\" "
                     r"\"torchvision==0\.(?P<vision>\d+)\.\*\"(?: --index-url (?P<index>\S+))?")


def suggested(line: str) -> dict:
    match = COMMAND.search(line)
    assert match, line
    return match.groupdict()


@pytest.mark.parametrize("torch_minor, vision_minor", [(0, 15), (3, 18), (7, 22), (11, 26),
                                                        (14, 29)])
def test_torchvision_minor_is_torch_minor_plus_15_on_known_releases(torch_minor, vision_minor):
    """Pairs from torchvision's installation table."""
    assert install_pair.vision_minor_for(install_pair.Build.of(f"2.{torch_minor}.1")) == vision_minor


# (torch, torchvision, cause, what the line must name, the index the command must use)
MISMATCHES = [
    ("2.13.0+cpu", "0.28.0", NMS, ["a CPU build (+cpu)", "default build (CUDA on Linux)",
                                   "torchvision::nms missing"], "https://download.pytorch.org/whl/cpu"),
    ("2.13.0", "0.29.1", "undefined symbol", ["0.29.1 is released with torch 2.14, not 2.13.0"],
     None),
    ("2.14.1+cu130", "0.29.1+cpu", NMS, ["a CUDA build (+cu130)", "a CPU build (+cpu)"],
     "https://download.pytorch.org/whl/cu130"),
    ("2.9.0+rocm6.4", "0.23.0+rocm6.3", "x", ["released with torch 2.8", "(+rocm6.4)",
                                              "(+rocm6.3)"], "https://download.pytorch.org/whl/rocm6.4"),
    ("2.4.1+rocm6.1", "0.19.1+rocm6.1", NMS, ["torchvision::nms missing"],
     "https://download.pytorch.org/whl/rocm6.1"),
]


@pytest.mark.parametrize("torch_version, vision_version, cause, named, index", MISMATCHES)
def test_each_mismatch_is_named_and_the_pair_suggested_is_consistent(torch_version,
                                                                      vision_version, cause,
                                                                      named, index):
    line = install_pair.advice(torch_version, vision_version, cause)
    for words in named:
        assert words in line
    pair = suggested(line)
    torch = install_pair.Build.of(torch_version)
    pin = SpecifierSet(pair["pin"])
    assert pin.contains(torch_version), "the command replaces this torch by another build"
    for other in (torch.release, *(f"{torch.release}+{build}" for build in ("cpu", "cu130",
                                                                            "rocm6.4"))):
        assert other == torch_version or not pin.contains(other), \
            f"{pair['pin']} also admits {other}, which a local wheel folder may hold"
    assert int(pair["vision"]) == torch.minor()[1] + 15
    assert pair["index"] == index
    vision = install_pair.Build.of(vision_version)
    repeated = (vision.minor()[1] == int(pair["vision"])
                and vision.build == (index or "").rpartition("/")[2])
    assert not repeated or cause == NMS and torch.build == vision.build, \
        "the command installs the broken pair again"


def test_an_index_served_build_names_the_mirror_and_a_local_build_names_no_command():
    assert "mirror" in install_pair.advice("2.13.0+cpu", "0.28.0", NMS)
    assert "your mirror of that folder" in install_pair.advice("2.9.0+rocm6.4", "0.23.0", NMS)
    local = install_pair.advice("2.6.0a0+ecf3bae40a.nv25.01", "0.20.0a0", NMS)
    assert "pip install" not in local and "where this torch" in local and "mirror" not in local


def _commands(line: str) -> list[str]:
    return [found.strip() for found in re.findall(r"pip install [^();]+", line)]


@pytest.mark.parametrize("torch_version", ["2.13.0+cpu", "2.14.1+cu130"])
def test_where_pytorchs_index_is_unreachable_the_package_index_build_is_pinned_exactly(
        torch_version):
    """Issue 64: "both from your mirror" with torch==2.13.0 took a local folder's 2.13.0+cpu
    again, beside the index's CUDA torchvision. The second command pins the package index's
    unlabelled build, which no local-label wheel matches."""
    line = install_pair.advice(torch_version, "0.28.0", NMS)
    first, second = _commands(line)
    assert "--index-url" in first and "--index-url" not in second
    release = torch_version.partition("+")[0]
    pair = suggested(second)
    assert pair["pin"] == f"==={release}"
    pin = SpecifierSet(pair["pin"])
    assert pin.contains(release) and not pin.contains(torch_version)
    assert not pin.contains(f"{release}+cpu")


@pytest.mark.parametrize("torch_version", ["2.9.0+rocm6.4", "2.14.1+xpu",
                                           "2.15.0.dev20261101+cpu"])
def test_a_build_the_package_index_lacks_gets_no_package_index_command(torch_version):
    """A ROCm or XPU build, or a nightly, has no build on the package index: its own folder's
    mirror, never a CUDA build in its place."""
    line = install_pair.advice(torch_version, "0.20.0", NMS)
    assert len(_commands(line)) == 1
    assert "your mirror of that folder as --index-url" in line
