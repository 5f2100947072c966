"""What to install after a torch and a torchvision that do not work together (issues 56, 64).

pip leaves such a pair when the two come from different sources: a ``+cpu`` torch from
PyTorch's CPU index (or a local wheel folder) beside the package index's default torchvision,
or a torchvision of another release. The advice names what differs and gives one command that
installs both from the one source that matches torch's build, with torch pinned to exactly that
build: repeating the installed pair (as an unqualified ``pip install torch==X torchvision==Y``
does, even from another index) brings the same error back. Where PyTorch's index cannot be
reached, it names a second command, the package index's build of the same release, which a
local wheel folder's ``+cpu`` torch cannot stand in for (issue 64).
tests/platform/test_install_pair_pip.py runs both with pip against wheel folders.

A leaf: strings in, strings out, so each kind of mismatch is tested without installing one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# PyTorch's own index, one folder per build (https://pytorch.org/get-started/locally/); its
# pre-releases in folders of their own: nightlies (``2.15.0.dev20261101``) under nightly/,
# release candidates (``2.14.0rc2``) under test/ ("Previous versions" and the release notes).
PYTORCH_INDEX = "https://download.pytorch.org/whl"
# The build suffixes PyTorch's index serves; a suffix like ``a0+git1234`` (a ROCm or NGC
# container's own build) is served by no index.
_INDEXED_BUILD = re.compile(r"^(cpu|cu\d{2,3}|rocm\d+(\.\d+)*|xpu)$")
_RELEASE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")
# PEP 440's pre-release and development parts: ``2.14.0rc2``, ``2.15.0.dev20261101``, and the
# ``a0`` that PyTorch's setup.py gives a build from source of its main branch.
_PRE_RELEASE = re.compile(r"(a|b|rc)\d*|\.?dev\d*")
# torchvision 0.N is released with torch 2.(N-15): 0.15 with 2.0, 0.18 with 2.3, 0.22 with 2.7,
# 0.26 with 2.11, 0.29 with 2.14; and 0.5 to 0.14 with torch 1.(N-1): 0.5 with 1.4, 0.14 with
# 1.13 (torchvision's README, "Installation" table). Older ones have no rule (0.4 went with
# 1.2 and 1.3): their torch is not named rather than guessed.
_VISION_MINOR_OFFSET = 15
_ONE_X_VISION = range(5, 15)


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

    def pre_release(self) -> str | None:
        """``dev`` (a nightly), ``rc`` (a release candidate), ``a``/``b`` (a build from
        source), or None for a final release."""
        match = _RELEASE.match(self.release)
        found = _PRE_RELEASE.search(self.release, match.end()) if match else None
        return found[0].lstrip(".").rstrip("0123456789") if found else None

    def described(self) -> str:
        """The build in words: where it came from and what it runs on. Only the suffixes
        PyTorch's index serves are named by what they run on (``+custom`` is no CUDA build)."""
        if not self.build:
            return "the package index's default build (CUDA on Linux)"
        named = {"cpu": "a CPU build", "cu": "a CUDA build", "rocm": "a ROCm build",
                 "xpu": "an Intel XPU build"}
        kind = re.match(r"[a-z]+", self.build)
        if _INDEXED_BUILD.match(self.build) and kind and kind[0] in named:
            return f"{named[kind[0]]} (+{self.build})"
        return f"a local build (+{self.build})"


def vision_minor_for(torch: Build) -> int | None:
    """The torchvision minor released with this torch, or None where the table has no rule
    (torch 3, a torch 1 before 1.4)."""
    minor = torch.minor()
    if minor is not None and minor[0] == 2:
        return minor[1] + _VISION_MINOR_OFFSET
    if minor is not None and minor[0] == 1 and minor[1] + 1 in _ONE_X_VISION:
        return minor[1] + 1
    return None


def torch_for(vision: Build) -> str | None:
    """The torch release (``2.14``) this torchvision was released with, or None where no rule
    says (a torchvision before 0.5, or not 0.x)."""
    minor = vision.minor()
    if minor is None or minor[0] != 0:
        return None
    if minor[1] >= _VISION_MINOR_OFFSET:
        return f"2.{minor[1] - _VISION_MINOR_OFFSET}"
    return f"1.{minor[1] - 1}" if minor[1] in _ONE_X_VISION else None


def differences(torch: Build, vision: Build, cause: str) -> list[str]:
    """What differs between the two, in words; every kind found, in the order a reader checks."""
    found = []
    wanted, theirs = vision_minor_for(torch), torch_for(vision)
    if wanted is not None and vision.minor() not in (None, (0, wanted)):
        found.append(f"torchvision {vision.release} is released with torch {theirs}, not "
                     f"{torch.release}" if theirs else
                     f"torchvision {vision.release} is not the one released with torch "
                     f"{torch.release} (0.{wanted})")
    if torch.build != vision.build:
        found.append(f"torch is {torch.described()}, torchvision {vision.described()}")
    operator = re.search(r"operator (\w+::\w+) does not exist", cause)
    if operator:
        found.append(f"torchvision's compiled operators do not load ({operator[1]} missing)")
    return found or [f"the two were built apart ({cause[:200]})"]


def source(torch: Build) -> str | None:
    """The pip arguments naming where torch's build comes from: its folder of PyTorch's index
    (nightly/ or test/ for a pre-release), nothing for the package index's default build, None
    where no index is known to serve it (a local build, a build from source, a pre-release
    without a build suffix)."""
    channel = {None: "", "dev": "nightly/", "rc": "test/"}.get(torch.pre_release())
    if channel is None or (channel and not torch.build):
        return None
    if not torch.build:
        return ""
    if _INDEXED_BUILD.match(torch.build):
        return f" --index-url {PYTORCH_INDEX}/{channel}{torch.build}"
    return None


def _requirement(name: str, version: str, operator: str = "==") -> str:
    """``"name==version"``, quoted: zsh takes an unquoted ``0.29.*`` for a file pattern ("no
    matches found"); double quotes keep it one word in every shell, cmd.exe's too."""
    return f'"{name}{operator}{version}"'


def torch_pin(torch: Build) -> str:
    """torch's requirement that admits this build and no other. A pin with a local label
    (``==2.13.0+cpu``) matches that label only. A pin without one cannot be ``==2.13.0``:
    PEP 440 ignores a candidate's local label there, so it admits ``2.13.0+cpu`` too, which
    sorts above ``2.13.0``, and pip takes it from a local wheel folder (``find-links``) beside
    the index: issue 64's advice reinstalled its broken pair that way. PEP 440's arbitrary
    equality (``===2.13.0``) compares the version as a string, so it admits the unlabelled
    build alone (pip and packaging implement it)."""
    if torch.build:
        return _requirement("torch", f"{torch.release}+{torch.build}")
    return _requirement("torch", torch.release, "===")


def _vision_requirement(torch: Build) -> str:
    """The torchvision released with this torch, any patch (``0.28.*``: no rule ties its
    patch number to torch's), or unpinned where the table has no rule: each torchvision wheel
    requires its own torch release exactly, so pip's resolver picks the one released with the
    pinned torch. No local label: PEP 440 allows none in a ``.*`` pin, and the source the
    command names (a folder of PyTorch's index, or the package index) serves torch's build
    alone."""
    wanted = vision_minor_for(torch)
    return _requirement("torchvision", f"0.{wanted}.*") if wanted is not None else "torchvision"


def command(torch: Build) -> str:
    """One command that installs a working pair from one source: exactly this torch build
    (:func:`torch_pin`) and the torchvision released with it, both from the source of torch's
    build. --force-reinstall, since pip otherwise keeps a torchvision whose version already
    matches the pin; --pre for a pre-release torch, whose torchvision is one too (pip matches
    ``==0.30.*`` to no pre-release without it)."""
    where = source(torch)
    if where is None:
        suffix = f"+{torch.build}" if torch.build else ""
        return f"install torchvision from where this torch ({torch.release}{suffix}) came from " \
               f"(its container, its build or its index)"
    if torch.minor() is None:           # its version unknown: nothing to pin
        return f"pip install --force-reinstall torch torchvision{where}"
    pre = " --pre" if torch.pre_release() else ""
    return (f"pip install{pre} --force-reinstall {torch_pin(torch)} "
            f"{_vision_requirement(torch)}{where}")


def unreachable(torch: Build) -> str:
    """What to run where PyTorch's index cannot be reached (many companies and clusters mirror
    only the package index), or "" where the command names no index. A CPU or CUDA build of
    a release: the package index's own build of that release (CUDA on Linux, which runs on
    the CPU too; several GB), pinned with ``===`` so that a local wheel folder's ``+cpu``
    torch, the one whose torchvision is missing, is not taken for it again (issue 64: the
    earlier advice, "both from your mirror" with ``torch==2.13.0``, reinstalled that
    folder's torch beside the index's CUDA torchvision). Not a bare ``pip install torch
    torchvision``: it gives a working pair only while the index has a newer release than the
    folder's torch. A ROCm or XPU build, or a nightly, has no build on the package index: a
    mirror of its folder of PyTorch's index."""
    if not source(torch):
        return ""
    if torch.pre_release() or torch.minor() is None or not re.match(r"(cpu|cu)\d*$", torch.build):
        return " (where that index cannot be reached: the same command with your mirror of " \
               "that folder as --index-url; README Install)"
    index_build = Build(torch.release, "")
    return (" (where that index cannot be reached: the package index's build of the same "
            "release, CUDA, which runs on the CPU too, from it or your mirror: pip install "
            f"--force-reinstall {torch_pin(index_build)} {_vision_requirement(index_build)}; "
            "README Install)")


def advice(torch_version: str, vision_version: str, cause: str) -> str:
    """The line after a broken pair: both versions, what differs, the command, and the command
    where PyTorch's index cannot be reached."""
    torch = Build.of(torch_version)
    vision = Build.of(vision_version)
    return (f"torchvision {vision_version} does not work with torch {torch_version}: "
            f"{'; '.join(differences(torch, vision, cause))}. Install both from one source: "
            f"{command(torch)}{unreachable(torch)}")
