"""Whether the installed torch can see no GPU at all, answered without importing it (issue 64).

torch's import takes seconds (tens on a loaded machine); a refusal that only depends on the run
being on the CPU (``--precision fp8`` with ``--device auto``) should not wait for it. The answer
is True only where it is certain; otherwise torch's own probe decides, after its import:

* a CPU-only build (``2.14.1+cpu``) sees no GPU;
* a CUDA build on Linux (the package index's default build, or ``+cuNNN``) finds GPUs through
  the driver's ``libcuda.so.1``, which the CUDA runtime loads by that name: where it cannot be
  loaded, ``torch.cuda.is_available()`` is False.

ROCm builds carry their runtime in the wheel (no such test), local builds (``a0+git...``) may
be either: not known. Strings in, booleans out, so each case is tested without installing it.
"""
from __future__ import annotations

from typing import Callable

import ctypes
import importlib.metadata
import re
import sys

from microbench.platform import install_pair

# The CUDA driver API's library as the CUDA runtime loads it on Linux.
CUDA_DRIVER = "libcuda.so.1"
_CUDA_BUILD = re.compile(r"^(cu\d{2,3})?$")


def none_visible() -> bool:
    """True when no GPU can be visible to the installed torch; False when unsure."""
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return False                 # its import fails later, with its own line
    return none_visible_for(version, sys.platform, _loadable)


def none_visible_for(torch_version: str, platform: str, loadable: Callable[[str], bool]) -> bool:
    build = install_pair.Build.of(torch_version).build
    if build == "cpu":
        return True
    if platform.startswith("linux") and _CUDA_BUILD.match(build):
        return not loadable(CUDA_DRIVER)
    return False


def _loadable(library: str) -> bool:
    try:
        ctypes.CDLL(library)
    except OSError:
        return False
    return True
