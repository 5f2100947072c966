"""A library that fails to import or refuses its environment (issue 46): an optional library
(torchao, matplotlib) whose import fails in any way, and torch refusing its environment at
import, are one line and exit 4, never a traceback.

(Part of the hostile-input tests, split from one file by what is attacked.)"""
from __future__ import annotations

import importlib.abc
import importlib.util
import json
import sys

import pytest

from conftest import assert_one_line_error, run_cli, run_main
from support.hostile import report_of, result_named
from support.hostile import no_launcher_environment  # noqa: F401 (autouse: this module's)


class FailingImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Importing ``name`` (or a module of it) raises ``error``: a broken install. The package is
    found (as an installed one is) and fails when it is loaded, as a C++ extension that cannot
    be opened does; a missing package (ModuleNotFoundError) is not even found."""

    def __init__(self, name: str, error: BaseException):
        self.name, self.error = name, error

    def find_spec(self, fullname, path=None, target=None):
        if not (fullname == self.name or fullname.startswith(self.name + ".")):
            return None
        if isinstance(self.error, ModuleNotFoundError):
            raise self.error
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise self.error


def broken(monkeypatch, name: str, error: BaseException) -> None:
    for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        monkeypatch.delitem(sys.modules, loaded)
    monkeypatch.setattr(sys, "meta_path", [FailingImport(name, error), *sys.meta_path])


@pytest.mark.slow
@pytest.mark.parametrize("error", [OSError("libtorchao.so: cannot open shared object file"),
                                   RuntimeError("torchao built for another torch"),
                                   AttributeError("module 'torch' has no attribute 'x'"),
                                   ModuleNotFoundError("No module named 'torchao'",
                                                       name="torchao")])
def test_an_optional_library_that_fails_to_import_is_one_line_exit_4(error, monkeypatch, capfd):
    broken(monkeypatch, "torchao", error)
    ran = run_main(capfd, "--network", "llama_tiny", "--seq-len", "16", "--mode", "inference",
                   "--quantize", "int8wo", "--device", "cpu", "--no-files")
    assert_one_line_error(ran, 4, "torchao")


def test_a_plot_library_that_fails_to_import_is_one_line_exit_4(monkeypatch, tmp_path, capfd):
    broken(monkeypatch, "matplotlib", OSError("libfreetype.so.6: cannot open shared object"))
    (tmp_path / "a.json").write_text(json.dumps(result_named("n")))
    ran = report_of(capfd, str(tmp_path / "a.json"), "--plot", str(tmp_path / "c.png"))
    assert_one_line_error(ran, 4, "matplotlib")


def test_torch_refusing_its_environment_at_import_is_one_line_exit_4():
    ran = run_cli("--network", "resnet18", "--no-files", env={"TORCH_LOGS": "nonsense"},
                  timeout=120)
    assert_one_line_error(ran, 4, "TORCH_LOGS=nonsense")
