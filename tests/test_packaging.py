"""``pip install .`` gives working ``microbench``, ``microbench-ops`` and ``microbench-report``
commands.

The package is installed (without dependencies, which the environment under test already has)
into a fresh virtual environment, from a copy of the checkout, and its commands run from a
directory where the checkout is not importable. That venv sees the site-packages of the
environment under test (a ``.pth`` file lists them) and nothing else: ``--system-site-packages``
would show it the *base* interpreter's packages when the suite runs in a venv (issue 37: a base
Python with setuptools 65.5 and no ``wheel`` failed ``bdist_wheel`` though the user's venv had
the setuptools the project asks for).
"""
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import ROOT


def _environment_under_test() -> list[str]:
    """The site-packages folders of the interpreter running the suite, in its order."""
    folders = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        folders.append(site.getusersitepackages())
    folders += [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    return [f for f in dict.fromkeys(folders) if Path(f).is_dir()]


def _venv_seeing(venv: Path, folders: list[str]) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    own = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                          "['purelib'])"], capture_output=True, text=True, check=True)
    Path(own.stdout.strip(), "environment_under_test.pth").write_text("\n".join(folders) + "\n")
    return python


@pytest.mark.slow
def test_pip_install_gives_both_commands(tmp_path):
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "results", "__pycache__", "logs", "*.egg-info", "build", ".venv*"))
    folders = _environment_under_test()
    python = _venv_seeing(tmp_path / "venv", folders)
    venv = tmp_path / "venv"
    # The build tools come from the environment under test (requirements-dev.txt, .[dev]), not
    # from the base interpreter this venv was made from.
    tools = subprocess.run([str(python), "-c", "import setuptools; print(setuptools.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert tools.returncode == 0, "setuptools is not installed in this environment " \
        "(pip install -r requirements-dev.txt)"
    assert any(tools.stdout.startswith(f) for f in folders), tools.stdout
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps",
                              "--no-build-isolation", str(source)], capture_output=True,
                             text=True, cwd=tmp_path, timeout=300)
    assert install.returncode == 0, install.stderr[-3000:]

    def command(name, *args):
        return subprocess.run([str(venv / "bin" / name), *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=300)

    where = subprocess.run([str(python), "-c", "import microbench, fp16util; "
                            "print(microbench.__file__)"], capture_output=True, text=True,
                           cwd=tmp_path)
    assert str(venv) in where.stdout, where.stderr
    version = command("microbench", "--version")
    assert version.returncode == 0 and version.stdout.startswith("microbench "), version.stderr
    networks = command("microbench", "--list-networks")
    assert networks.returncode == 0 and "resnet50" in networks.stdout.split()
    ops = command("microbench-ops", "--op", "add", "--input1-dim", "8", "--device", "cpu",
                  "--num-iters", "2", "--num-warmup-iters", "0")
    assert ops.returncode == 0, ops.stderr
    assert any(line.startswith("add ") for line in ops.stdout.splitlines())
    # The report reads the installed schema (package data) to validate what it reads.
    (tmp_path / "ops").mkdir()
    ops = command("microbench-ops", "--op", "add", "--input1-dim", "8", "--device", "cpu",
                  "--num-iters", "2", "--num-warmup-iters", "0", "--output-json", "ops/a.json")
    assert ops.returncode == 0, ops.stderr
    report = command("microbench-report", "ops", "--format", "csv")
    assert report.returncode == 0, report.stderr
    assert report.stdout.startswith("index,table,") and ",add," in report.stdout
