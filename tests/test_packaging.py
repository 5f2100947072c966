"""``pip install .`` gives working ``microbench``, ``microbench-ops`` and ``microbench-report``
commands.

The package is installed (without dependencies, which this interpreter already has) into a fresh
virtual environment that sees this interpreter's site-packages, from a copy of the checkout, and
its commands run from a directory where the checkout is not importable.
"""
import shutil
import subprocess
import sys

from conftest import ROOT


def test_pip_install_gives_both_commands(tmp_path):
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "results", "__pycache__", "logs", "*.egg-info", "build"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages",
                    str(venv)], check=True)
    python = venv / "bin" / "python"
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
