"""What to install after a torch and a torchvision that do not work together (issue 56).

pip leaves such a pair when the two come from different sources: a ``+cpu`` torch from
PyTorch's CPU index (or a local wheel folder) beside the package index's default torchvision,
or a torchvision of another release. The advice names what differs and gives one command that
installs both from the one source that matches torch's build: repeating the installed pair (as
an unqualified ``pip install torch==X torchvision==Y`` does) brings the same error back.

A leaf: strings in, strings out, so each kind of mismatch is tested without installing one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# PyTorch's own index, one folder per build (https://pytorch.org/get-started/locally/).
PYTORCH_INDEX = "https://download.pytorch.org/whl"
# The build suffixes PyTorch's index serves; a suffix like ``a0+git1234`` (a ROCm or NGC
# container's own build) is served by no index.
_INDEXED_BUILD = re.compile(r"^(cpu|cu\d{2,3}|rocm\d+(\.\d+)*)$")
_RELEASE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")
# torchvision 0.N is released with torch 2.(N-15): 0.15 with 2.0, 0.18 with 2.3, 0.22 with 2.7,
# 0.26 with 2.11, 0.29 with 2.14 (torchvision's README, "Installation" table).
_VISION_MINOR_OFFSET = 15


@dataclass(frozen=True)
class Build:
    """One installed package's version, split: ``2.13.0+cpu`` -> release 2.13.0, build cpu."""

    release: str
    build: str

    @classmethod
    def of(cls, version: str) -> "Build":
        release, _, build = version.partition("+")
        return cls(release, build)

    def minor(self) -> tuple[int, int] | None:
        match = _RELEASE.match(self.release)
        return (int(match[1]), int(match[2])) if match else None

    def described(self) -> str:
        """The build in words: where it came from and what it runs on."""
        if not self.build:
            return "the package index's default build (CUDA on Linux)"
        if self.build == "cpu":
            return "a CPU build (+cpu)"
        if self.build.startswith("cu"):
            return f"a CUDA build (+{self.build})"
        if self.build.startswith("rocm"):
            return f"a ROCm build (+{self.build})"
        return f"a local build (+{self.build})"


def vision_minor_for(torch: Build) -> int | None:
    """The torchvision minor released with this torch, or None for a torch that is not 2.x."""
    minor = torch.minor()
    if minor is None or minor[0] != 2:
        return None
    return minor[1] + _VISION_MINOR_OFFSET


def differences(torch: Build, vision: Build, cause: str) -> list[str]:
    """What differs between the two, in words; every kind found, in the order a reader checks."""
    found = []
    wanted = vision_minor_for(torch)
    vision_minor = vision.minor()
    if wanted is not None and vision_minor is not None and vision_minor[1] != wanted:
        found.append(f"torchvision {vision.release} is released with torch "
                     f"2.{vision_minor[1] - _VISION_MINOR_OFFSET}, not {torch.release}")
    if torch.build != vision.build:
        found.append(f"torch is {torch.described()}, torchvision {vision.described()}")
    operator = re.search(r"operator (\w+::\w+) does not exist", cause)
    if operator:
        found.append(f"torchvision's compiled operators do not load ({operator[1]} missing)")
    return found or [f"the two were built apart ({cause[:200]})"]


def source(torch: Build) -> str | None:
    """The pip arguments naming where torch's build comes from: its folder of PyTorch's index,
    nothing for the package index's default build, None where no index serves it."""
    if not torch.build:
        return ""
    if _INDEXED_BUILD.match(torch.build):
        return f" --index-url {PYTORCH_INDEX}/{torch.build}"
    return None


def command(torch: Build) -> str:
    """One command that installs a working pair from one source: this torch's release and the
    torchvision released with it, both from the source of torch's build. --force-reinstall,
    since pip otherwise keeps a torchvision whose version already matches the pin."""
    wanted = vision_minor_for(torch)
    where = source(torch)
    if wanted is None or where is None:
        return (f"install torchvision from where this torch ({torch.release}+{torch.build}) came "
                f"from (its container or its build)" if torch.build
                else "pip install --force-reinstall torch torchvision")
    return (f"pip install --force-reinstall torch=={torch.release} "
            f"torchvision==0.{wanted}.*{where}")


def advice(torch_version: str, vision_version: str, cause: str) -> str:
    """The line after a broken pair: both versions, what differs, the command, and where
    PyTorch's index cannot be reached (many companies and clusters), the mirror."""
    torch = Build.of(torch_version)
    vision = Build.of(vision_version)
    mirror = (" (where that index cannot be reached: both from your mirror, README Install)"
              if source(torch) else "")
    return (f"torchvision {vision_version} does not work with torch {torch_version}: "
            f"{'; '.join(differences(torch, vision, cause))}. Install both from one source: "
            f"{command(torch)}{mirror}")
