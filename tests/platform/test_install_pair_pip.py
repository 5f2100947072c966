"""The README's first install line and the broken-pair advice, run with pip (issue 64).

Issue 64's machine: PyTorch's CPU index (download.pytorch.org) could not be reached, and pip's
configuration named a local wheel folder (``find-links``) holding a lone ``torch 2.13.0+cpu``.
The README's CPU line gave that torch beside the package index's torchvision 0.28.0, a CUDA
build (``operator torchvision::nms does not exist``), and the advice's ``torch==2.13.0``, "both
from your mirror", installed the same pair again: PEP 440's ``==2.13.0`` matches ``2.13.0+cpu``,
which sorts above ``2.13.0``.

Here that machine is three folders of tiny wheels built by hand, each package's ``__init__``
and its dist-info: the local folder (pip's ``find-links``, as the configuration named it), the
package index (a ``file://`` simple index, pip's ``index-url``: the mirror pip is set up with)
with two released pairs, and PyTorch's CPU folder (a second simple index, which the advice's
``--index-url`` is pointed at, or at a folder that does not exist where it "cannot be reached").
A fake torchvision imports only beside the torch build it was built for, and raises the issue's
error otherwise, as a real one's compiled operators do. No network: pip sees the folders alone
(``PIP_CONFIG_FILE`` is the null device, so no configuration of this machine takes part).

Each case runs in a fresh virtual environment (``--without-pip``: the suite's own pip installs
into it through ``pip --python``, in a fraction of a second where ``ensurepip`` takes five). The
README's line is one pip run (about 1 s on 2 cores); the advice's case, five, is marked slow.
"""
from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from conftest import ROOT
from microbench.platform import install_pair

LOCAL_TORCH = "2.13.0+cpu"
NMS = "operator torchvision::nms does not exist"
# The wheels of each folder: (name, version, the torch it requires, the torch it was built for).
PACKAGE_INDEX = [("torch", "2.13.0", None, None), ("torch", "2.14.1", None, None),
                 ("torchvision", "0.28.0", "2.13.0", "2.13.0"),
                 ("torchvision", "0.29.1", "2.14.1", "2.14.1")]
# torchvision's +cpu wheel asks for its torch release without the label (the weaker of the two
# ways it could; a local +cpu torch satisfies it either way).
PYTORCH_CPU = [("torch", "2.13.0+cpu", None, None),
               ("torchvision", "0.28.0+cpu", "2.13.0", "2.13.0+cpu")]
# The pair as the venv has it: both versions and torchvision's import error, if any.
_PAIR = """import importlib.metadata as metadata, json
try:
    import torchvision
    error = None
except RuntimeError as raised:
    error = str(raised)
print(json.dumps([metadata.version("torch"), metadata.version("torchvision"), error]))
"""


def _wheel(folder: Path, name: str, version: str, requires: str | None,
           built_for: str | None) -> Path:
    """A pure-Python wheel: the package's __init__ and its dist-info (METADATA, WHEEL and a
    RECORD with each file's hash, as the wheel format asks)."""
    body = f"__version__ = {version!r}\n"
    if built_for:
        body += ("import torch\n"
                 f"if torch.__version__ != {built_for!r}:\n"
                 f"    raise RuntimeError({NMS!r})\n")
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": body,
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                 + (f"Requires-Dist: torch=={requires}\n" if requires else ""),
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: microbench-tests\n"
                              "Root-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest())
        record.append(f"{path},sha256={digest.rstrip(b'=').decode()},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def _simple_index(root: Path, wheels: list[tuple]) -> str:
    """A PEP 503 simple index of these wheels as a file:// URL: a page a project, linking its
    wheels (pip reads a folder's index.html)."""
    for spec in wheels:
        wheel = _wheel(root / "files", *spec)
        page = root / "simple" / spec[0] / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        with page.open("a") as links:
            links.write(f'<a href="{wheel.as_uri()}">{wheel.name}</a>\n')
    return (root / "simple").as_uri()


@dataclass
class Machine:
    """Issue 64's machine: a fresh venv, pip set up with the package index and a local folder."""

    python: Path
    environment: dict
    pytorch_cpu: str            # the simple index standing for download.pytorch.org/whl/cpu
    unreachable: str            # where an index that cannot be reached is pointed

    def pip(self, *words: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pip", "--python", str(self.python),
                               *words], capture_output=True, text=True, env=self.environment,
                              timeout=120)

    def pair(self) -> tuple[str, str, str | None]:
        shown = subprocess.run([str(self.python), "-c", _PAIR], capture_output=True, text=True,
                               env=self.environment, timeout=60)
        assert shown.returncode == 0, shown.stderr
        return tuple(json.loads(shown.stdout))

    def run(self, command: str, index_reachable: bool = True) -> subprocess.CompletedProcess:
        """A command as printed (``pip install ...``), PyTorch's index in it replaced by its
        stand-in: the CPU folder, or a folder that does not exist."""
        words = shlex.split(command)
        assert words[:2] == ["pip", "install"], command
        stand_in = self.pytorch_cpu if index_reachable else self.unreachable
        words = [stand_in if word == f"{install_pair.PYTORCH_INDEX}/cpu" else word
                 for word in words]
        assert not any("download.pytorch.org" in word for word in words), words
        return self.pip(*words[1:])


@pytest.fixture
def machine(tmp_path) -> Machine:
    if Version(importlib.metadata.version("pip")) < Version("22.3"):
        pytest.skip("pip --python (a fresh venv without pip of its own) needs pip 22.3")
    local = tmp_path / "find-links"
    _wheel(local, "torch", LOCAL_TORCH, None, None)
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("PIP_", "PYTHON"))}
    environment.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1",
                       PIP_NO_INPUT="1", PIP_NO_CACHE_DIR="1", PIP_FIND_LINKS=str(local),
                       PIP_INDEX_URL=_simple_index(tmp_path / "package-index", PACKAGE_INDEX))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return Machine(venv / "bin" / "python", environment,
                   _simple_index(tmp_path / "pytorch-cpu", PYTORCH_CPU),
                   (tmp_path / "unreachable" / "simple").as_uri())


def _installed(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def _promised(command: str, pair: tuple) -> None:
    """The pair installed is one the command asked for, and it works."""
    torch, vision, error = pair
    assert error is None, f"torch {torch}, torchvision {vision}: {error}"
    asked = {requirement.name: requirement.specifier
             for requirement in (Requirement(word) for word in shlex.split(command)
                                 if word.startswith(("torch=", "torchvision=")))}
    assert set(asked) == {"torch", "torchvision"}, command
    assert asked["torch"].contains(torch, prereleases=True), (command, torch)
    assert asked["torchvision"].contains(vision, prereleases=True), (command, vision)


def _readme_first_install() -> list[str]:
    install = (ROOT / "README.md").read_text().partition("\n## Install\n")[2].partition("\n## ")[0]
    return shlex.split(next(line for line in install.splitlines()
                            if line.startswith("pip install")))


def test_the_readmes_first_line_gives_a_working_pair_beside_a_lone_cpu_torch(machine):
    """The first line names no index: its pair comes from the package index, which has a
    release newer than the local folder's, so the folder's +cpu torch takes no part."""
    tomllib = pytest.importorskip("tomllib")                  # Python 3.11 and newer
    words = _readme_first_install()
    assert "--index-url" not in words and words[:2] == ["pip", "install"], words
    # The checkout (".[dev]") brings the pair as the project asks for it; its other
    # dependencies are not in these folders and not what is tested.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pair = [requirement for requirement in project["dependencies"]
            if Requirement(requirement).name in ("torch", "torchvision")]
    assert len(pair) == 2, project["dependencies"]
    adapted = [argument for word in words[2:]
               for argument in (pair if word.startswith(".") else [word])]
    _installed(machine.pip("install", *adapted))
    assert machine.pair() == ("2.14.1", "0.29.1", None)


@pytest.mark.slow
def test_the_advice_gives_a_working_pair_whether_pytorchs_index_is_reachable_or_not(machine):
    # The pair, as the earlier advice's "both from your mirror" installed it again.
    earlier = 'pip install --force-reinstall "torch==2.13.0" "torchvision==0.28.*"'
    _installed(machine.run(earlier))
    broken = machine.pair()
    assert broken == (LOCAL_TORCH, "0.28.0", NMS), "these folders do not reproduce issue 64"
    line = install_pair.advice(*broken)
    first, where_unreachable = (found.strip() for found in re.findall(r"pip install [^();]+",
                                                                       line))

    # PyTorch's CPU index reachable: its +cpu pair.
    _installed(machine.run(first))
    assert machine.pair() == (LOCAL_TORCH, "0.28.0+cpu", None)
    _promised(first, machine.pair())

    # Not reachable: the first command finds no torchvision and changes nothing; the second
    # gives the package index's pair of the same release, never the local folder's torch.
    _installed(machine.run(earlier))
    assert machine.pair() == broken
    refused = machine.run(first, index_reachable=False)
    assert refused.returncode != 0 and "torchvision" in refused.stderr
    assert machine.pair() == broken
    _installed(machine.run(where_unreachable))
    assert machine.pair() == ("2.13.0", "0.28.0", None)
    _promised(where_unreachable, machine.pair())
