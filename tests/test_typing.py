"""The package stays typed where its layers meet (issue 63): few parameters without an
annotation, so that mypy (``python3 -m mypy``, run by ``.ci/run``; ``[tool.mypy]`` in
pyproject.toml) checks what flows between them, and the checker's settings stay those the issue
asked for. Read with ``ast``: nothing is imported."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "microbench"

# At most this many parameters of the package's functions may go without an annotation (self
# and cls do not count): issue 63 brought them from 416 to below it. Lower it as more are typed.
MAX_UNANNOTATED = 40


def unannotated(source: str, where: str = "") -> list[str]:
    """``where:line function(parameter)`` of each parameter without an annotation."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        args = node.args
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs,
                 *([args.vararg] if args.vararg else []), *([args.kwarg] if args.kwarg else [])]
        for index, arg in enumerate(every):
            if index == 0 and arg.arg in ("self", "cls"):
                continue
            if arg.annotation is None:
                found.append(f"{where}:{node.lineno} {node.name}({arg.arg})")
    return found


def package_unannotated() -> list[str]:
    return [hit for path in sorted(PACKAGE.rglob("*.py"))
            for hit in unannotated(path.read_text(), str(path.relative_to(ROOT)))]


def test_few_parameters_of_the_package_go_without_an_annotation():
    missing = package_unannotated()
    assert len(missing) <= MAX_UNANNOTATED, (
        f"{len(missing)} parameters without an annotation (at most {MAX_UNANNOTATED}):\n  "
        + "\n  ".join(missing))


def test_the_count_reads_every_kind_of_parameter():
    source = ("def f(a, b: int, /, c=1, *d, e, f: int = 2, **g): ...\n"
              "class C:\n"
              "    def m(self, x): ...\n"
              "    @classmethod\n"
              "    def n(cls, y: int): ...\n"
              "    @staticmethod\n"
              "    def s(z): ...\n")
    assert [hit.split(" ")[1] for hit in unannotated(source)] == [
        "f(a)", "f(c)", "f(e)", "f(d)", "f(g)", "m(x)", "s(z)"]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is Python 3.11's")
def test_mypy_checks_the_whole_package_with_the_bodies_of_untyped_functions():
    import tomllib
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mypy = settings["tool"]["mypy"]
    assert mypy["packages"] == ["microbench"] and mypy["check_untyped_defs"] is True
    assert "ignore_missing_imports" not in mypy         # only per library, where it has no types
    assert all(override.get("ignore_missing_imports") for override in mypy["overrides"])
    assert any(dependency.startswith("mypy>=")
               for dependency in settings["project"]["optional-dependencies"]["dev"])
