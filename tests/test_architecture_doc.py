"""docs/architecture.md names only what the code defines.

The page names modules, classes, functions, attributes and constants in code font; a rename or a
removal that leaves the page behind fails here, with the line of every name that is gone. The
package's names are read from its source with ``ast`` (nothing is imported, so no torch): every
module and package by its dotted path under ``microbench/``, and every class, function, method,
module-level and class-level assignment (``self.x`` in a method too) by its qualified name. The
tests' shared helpers (``conftest.py``, ``tests/support/``) are read the same way, since the
page's Tests section names them.

A span is a name of the package unless a rule says otherwise: a flag (``-``), anything that is
not one identifier or dotted path (commands, phrases, JSON keys with spaces, keyword arguments,
placeholders such as ``<name>``), a file that is not Python, a name under another library
(``EXTERNAL``, or right after that library's possessive: "torchvision's ``find_classes``"), a
Python builtin or keyword, and a bare word the package spells as a string literal (a mode, a
layout, a JSON key, a CSV column). ``ALLOWED`` holds the few no rule decides.

A dotted name must resolve: its last part is defined in a module or class whose dotted path ends
with the earlier parts (``process.entry``: ``platform.process.entry``); a path
(``store/figures.py``, ``settings/config.PARALLEL``) is read as the dotted name it spells, and
one outside the package must exist on disk.
"""
from __future__ import annotations

import ast
import builtins
import configparser
import keyword
import re
from pathlib import Path

# The checkout: the first folder above this file with the project file.
ROOT = next(folder for folder in Path(__file__).resolve().parents
            if (folder / "pyproject.toml").is_file())
PACKAGE = ROOT / "microbench"
TESTS = ROOT / "tests"
DOC = ROOT / "docs" / "architecture.md"
# Where a path the page gives outside the package may be: the checkout's root, the tests, and
# the older op bench's folder (`torch_tensor_ops_bench.py`). Not build/ or scratch/: a copy
# left there must not keep a name alive.
BESIDE = (ROOT, TESTS, ROOT / "TorchTensorOpsBench")

# Top-level names of other libraries and tools the page cites: a span starting with one, or
# right after its possessive ("rich's `Live`"), is theirs.
EXTERNAL = frozenset({
    "torch", "torchao", "torchvision", "torchtitan", "transformers", "mslk", "triton", "aten",
    "inductor", "dynamo", "scipy", "numpy", "ruptures", "rich", "deepspeed", "pyperf", "os",
    "fcntl", "pytest",
})
# Files that are not Python: named, never defined in the package.
OTHER_FILES = re.compile(r"\.(json|md|sh|csv|png|toml|ini|txt|html)$")

# Spans no rule above decides, each with why it is not a name of the package.
ALLOWED = {
    "pids.max": "the cgroup's file of the process limit, not a module attribute",
    "O_NONBLOCK": "the open(2) flag, os.O_NONBLOCK",
    "flock": "the lock(2) call, fcntl.flock",
    "N": "a metavariable: the axis's place in a sweep's nesting",
    "optimizer.step": "torch's optimizer method, on whichever optimizer the run built",
    "DistributedDataParallel": "torch's DDP wrapper, which the DDP strategy's wrapper builds",
    "has_file_allowed_extension": "torchvision's, named after its find_classes",
    "make_dataset": "torchvision's, named after its find_classes",
    "post_optimizer_hook": "torchtitan's model converters' hook, named as the model",
}


def _markers() -> set[str]:
    """pytest's markers (pytest.ini): the page names them (`gpu`, `slow`)."""
    ini = configparser.ConfigParser()
    ini.read(ROOT / "pytest.ini")
    lines = ini.get("pytest", "markers", fallback="").splitlines()
    return {line.split(":")[0].strip() for line in lines if line.strip()}


MARKERS = _markers()

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"`([^`]+)`")
CALL = re.compile(r"^([\w./]+)\(.*\)$")             # compile_extras(phase), main()
PATH_AND_NAME = re.compile(r"^([\w/]+\.py): (\w+)$")  # tests/test_structure.py: LAYERS
NAME = re.compile(r"^[A-Za-z_][\w./]*$")
POSSESSIVE = re.compile(r"(\w+)(?:'s|')\s+$")


# ---------------------------------------------------------------- the names the code defines

def _dotted(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(node: ast.AST) -> list[str]:
    """The names an assignment binds (``a, b = ...`` binds both)."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        return [name for element in node.elts for name in _targets(element)]
    return []


def _assigned(statement: ast.stmt) -> list[str]:
    if isinstance(statement, ast.Assign):
        return [name for target in statement.targets for name in _targets(target)]
    if isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
        return _targets(statement.target)
    return []


def _self_attributes(function: ast.AST) -> set[str]:
    """``self.x = ...`` in a method: an attribute of its class."""
    found = set()
    for node in ast.walk(function):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        found |= {t.attr for t in targets if isinstance(t, ast.Attribute)
                  and isinstance(t.value, ast.Name) and t.value.id == "self"}
    return found


def _function(function: ast.FunctionDef, prefix: str) -> set[str]:
    """A function, its parameters (the page names keywords: ``run_rounds``' ``until``) and, for a
    method, the attributes it sets on ``self`` (which belong to its class, ``prefix``)."""
    arguments = function.args
    parameters = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    names = {f"{prefix}.{function.name}"}
    names |= {f"{prefix}.{function.name}.{parameter.arg}" for parameter in parameters}
    if arguments.args and arguments.args[0].arg == "self":
        names |= {f"{prefix}.{attribute}" for attribute in _self_attributes(function)}
    return names


def _defined(body: list[ast.stmt], prefix: str) -> set[str]:
    """Qualified names a module's or class's body defines, through its ``if`` and ``try``."""
    names = set()
    for statement in body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names |= _function(statement, prefix)
        elif isinstance(statement, ast.ClassDef):
            names.add(f"{prefix}.{statement.name}")
            names |= _defined(statement.body, f"{prefix}.{statement.name}")
        elif isinstance(statement, (ast.If, ast.Try)):
            nested = statement.body + statement.orelse + getattr(statement, "finalbody", [])
            nested += [s for handler in getattr(statement, "handlers", []) for s in handler.body]
            names |= _defined(nested, prefix)
        else:
            names |= {f"{prefix}.{name}" for name in _assigned(statement)}
    return names


def _strings(tree: ast.AST) -> set[str]:
    """The one-word string literals of a module: its modes, layouts, JSON keys, CSV columns."""
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value.isidentifier()}


def index(sources: dict[str, str]) -> tuple[set[str], set[str]]:
    """(every qualified name, every one-word literal) of modules given by dotted path."""
    names, literals = {""}, set()
    for module, text in sources.items():
        tree = ast.parse(text)
        parts = module.split(".") if module else []
        names |= {".".join(parts[:end]) for end in range(1, len(parts) + 1)}
        names |= {name.lstrip(".") for name in _defined(tree.body, module)}
        literals |= _strings(tree)
    return names, literals


def _sources() -> dict[str, str]:
    package = {_dotted(path, PACKAGE): path.read_text() for path in PACKAGE.rglob("*.py")}
    helpers = [TESTS / "conftest.py", *(TESTS / "support").rglob("*.py")]
    return {**package, **{_dotted(path, TESTS): path.read_text() for path in helpers}}


def suffixes(names: set[str]) -> set[str]:
    """Every dotted tail of every name: a span resolves when it is one of them."""
    return {".".join(name.split(".")[start:]) for name in names
            for start in range(name.count(".") + 1)}


# ---------------------------------------------------------------- the spans of the page

def spans(text: str) -> list[tuple[int, str, str]]:
    """(line, span, the text before it on the page) of every code span outside code blocks."""
    prose = FENCE.sub(lambda block: "\n" * block.group(0).count("\n"), text)
    return [(prose.count("\n", 0, found.start()) + 1, " ".join(found.group(1).split()),
             prose[max(0, found.start() - 40):found.start()])
            for found in CODE_SPAN.finditer(prose)]


def _external(span: str, before: str) -> bool:
    owner = POSSESSIVE.search(before)
    return re.split(r"[./]", span)[0] in EXTERNAL or bool(owner and owner.group(1) in EXTERNAL)


def _not_a_name(span: str, before: str) -> bool:
    return (span in ALLOWED or span in MARKERS or span.startswith("-") or not NAME.match(span)
            or bool(OTHER_FILES.search(span)) or keyword.iskeyword(span)
            or span in vars(builtins) or _external(span, before))


def _on_disk(path: str) -> bool:
    """A file or folder beside the package (``tests/e2e/``, ``fp16util.py``)."""
    return any((folder / path.rstrip("/")).exists() for folder in BESIDE)


def _defined_in_file(path: str, name: str) -> bool:
    """A name a file beside the package defines (``tests/test_structure.py: LAYERS``)."""
    file = next((folder / path for folder in BESIDE if (folder / path).is_file()), None)
    return file is not None and f".{name}" in _defined(ast.parse(file.read_text()).body, "")


def _is_path(span: str) -> bool:
    return "/" in span or span.endswith(".py")


def _as_dotted(path: str) -> str:
    """store/figures.py -> store.figures; settings/config.PARALLEL -> settings.config.PARALLEL."""
    path = re.sub(r"\.py$", "", path.rstrip("/"))
    return re.sub(r"^microbench(?=$|[./])[./]?", "", path.replace("/", "."))


def resolves(span: str, known: set[str], literals: set[str]) -> bool:
    """Whether a name of the page is one the code defines (``known``: every dotted tail)."""
    pair = PATH_AND_NAME.match(span)
    if pair:
        path, name = pair.groups()
        return f"{_as_dotted(path)}.{name}" in known or _defined_in_file(path, name)
    if _is_path(span):
        return _as_dotted(span) in known or _on_disk(span)
    # A bare word may be a value the code spells as a string (`fp8`, `single`); a dotted name
    # never is.
    dotted = re.sub(r"^microbench(?=$|\.)\.?", "", span)
    return dotted in known or ("." not in span and span in literals)


def missing_names(text: str, known: set[str], literals: set[str]) -> list[str]:
    """'line N: `span`' for every name the page gives that the code does not define."""
    missing = []
    for line, span, before in spans(text):
        call = CALL.match(span)
        name = call.group(1) if call else span
        if PATH_AND_NAME.match(span) or not _not_a_name(name, before):
            if not resolves(name, known, literals):
                missing.append(f"line {line}: `{span}`")
    return missing


# ---------------------------------------------------------------- the tests

def test_every_name_on_the_architecture_page_is_defined():
    """A name the page gives in code font is one the package (or the tests' helpers) defines;
    the message lists each that is not, with its line."""
    names, literals = index(_sources())
    missing = missing_names(DOC.read_text(), suffixes(names), literals)
    assert not missing, ("docs/architecture.md names what the code does not define:\n  "
                         + "\n  ".join(missing))


SCRATCH_MODULES = {
    "steps.workload": "class StepSettings:\n    batch: int = 1\n",
    "steps.quant_layers": "class PhaseLinear:\n    def forward(self):\n        self.rows = 1\n",
    "platform.process": "def entry(until=None):\n    pass\nMODE = 'training'\n",
}
SCRATCH_PAGE = """\
`steps.workload.StepSettings`, `StepSettings.batch`, `PhaseLinear.rows` and `process.entry()`;
`microbench/steps/quant_layers.py`, `steps/workload.StepSettings`, `training` (a value),
`--flag`, `torch.cuda`, torchvision's `find_classes`, `python3 -m microbench`, `x.json`,
`getattr`, `until`, `slow`, `tests/test_docs.py`.

```text
`inside_a_block` is not read
```
`made_up`, `workload.PhaseLinear` and `microbench/steps/gone.py`
`steps/workload.py: StepSettings` but not `steps/workload.py: PhaseLinear`
"""


def test_the_checker_finds_made_up_names_and_their_lines():
    """Known names, values, flags and other libraries' names pass; a made-up name, a name in
    the wrong module and a missing module fail, each with its line."""
    names, literals = index(SCRATCH_MODULES)
    assert missing_names(SCRATCH_PAGE, suffixes(names), literals) == [
        "line 9: `made_up`", "line 9: `workload.PhaseLinear`",
        "line 9: `microbench/steps/gone.py`", "line 10: `steps/workload.py: PhaseLinear`"]
