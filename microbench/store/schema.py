"""The published schema of the tool's JSON documents, and validation of a document read back.

``result.schema.json`` beside this module (shipped in the package) describes every document the
tool writes: a run's result, a sweep, an A/B summary, the op bench's results, a node check
(``microbench-node``) and its baseline (``--save-baseline``), and the older tool's result (its six
keys, no ``schema_version``), which is read but never written. Its version is the
``schema_version`` key of every document; :func:`validate_result` refuses a document of another
version, or one that does not match, with one line (:class:`~microbench.platform.errors.UsageError`,
exit 2), through ``jsonschema`` rather than checks written by hand.

This module imports neither torch nor the rest of the benchmark (only the settings' names of the
kinds of run, strategies, quantizations and FP8 recipes, which fill the schema's ``x-enum-of``
enums: :func:`enums`), so readers of results (the ``microbench-report`` command) start in a
fraction of a second.

Example::

    document = json.loads(text)
    validate_result(document, "results/resnet50_training_fp32_b64.json")
    kind = document_kind(document)   # "result", "sweep", "A/B", "op bench", "node check" or
                                     # "older tool"
"""
from __future__ import annotations

import functools
import json
import math
from importlib import resources
from typing import Any, Iterable, overload

from microbench.platform.errors import MissingEnvironment, UsageError
from microbench.settings import config, precision, quantization
from microbench.store import figures, ranges

SCHEMA_FILE = "result.schema.json"
# The longest validation message quoted in the one line (jsonschema quotes the offending value,
# which can be a whole list of samples).
_MESSAGE_CHARS = 160

RESULT, SWEEP, OP_BENCH, OLDER_TOOL, AB = "result", "sweep", "op bench", "older tool", "A/B"
DATA_CACHE = "data cache manifest"
NODE = "node check"
NODE_BASELINE = "node baseline"       # microbench-node --save-baseline: per-model figures
OP_BENCH_TOOL = "TorchTensorOpsBench"


def published() -> dict:
    """The schema document as shipped in the package, with the enums it leaves to the
    settings (``x-enum-of``) filled in."""
    text = resources.files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    return _with_enums(json.loads(text))


def enums() -> dict[str, tuple]:
    """The closed sets of values the schema takes from the settings, which the command line's
    choices read too: a new kind of run, strategy, quantization or FP8 recipe is named once
    (microbench.settings.config, microbench.settings.precision)."""
    return {"MODES": config.MODES, "PARALLEL": config.PARALLEL,
            "STRATEGIES": (config.ONE_PROCESS, *config.PARALLEL),
            "QUANTIZE": tuple(quantization.FORMATS),
            "QUANT_LAYOUTS": tuple(quantization.LAYOUTS),
            "FP8_RECIPES": precision.FP8_RECIPES}


def _with_enums(node: Any) -> Any:          # JSON
    """``node`` with every ``{"x-enum-of": NAME}`` given the enum of that name."""
    if isinstance(node, list):
        return [_with_enums(item) for item in node]
    if not isinstance(node, dict):
        return node
    filled = {key: _with_enums(value) for key, value in node.items()}
    if "x-enum-of" in filled:
        filled["enum"] = list(enums()[filled["x-enum-of"]])
    return filled


@functools.lru_cache(maxsize=1)
def schema() -> dict:
    """The schema documents are validated against: the published one, with every figure's path
    of a run's result (store/figures.py) declared, as a number or null, where the published
    file does not name it: a figure added to the registry is checked as a number without an
    edit of the file (tests/store/test_figures.py checks the paths the file names)."""
    document = published()
    for path in figures.result_paths():
        _declare(document, path)
    return document


def declared(document: dict, node: dict) -> dict:
    """A schema node with its ``$ref`` followed and, where it is a choice (``anyOf``,
    ``oneOf``), its first branch that describes an object."""
    while True:
        if "$ref" in node:
            node = document["$defs"][node["$ref"].removeprefix("#/$defs/")]
            continue
        branches = node.get("anyOf") or node.get("oneOf")
        if not branches:
            return node
        node = next((b for b in branches if "$ref" in b or "properties" in b), branches[0])


def node_at(document: dict, path: tuple[str, ...]) -> dict | None:
    """The schema a run's result gives the value at ``path``; None where it names none."""
    node = document["$defs"]["result"]
    for key in path:
        node = declared(document, node)
        inner = node.get("properties", {}).get(key)
        if inner is None and isinstance(node.get("additionalProperties"), dict):
            inner = node["additionalProperties"]
        if inner is None:
            return None
        node = inner
    return declared(document, node)


def _declare(document: dict, path: tuple[str, ...]) -> None:
    """``path`` declared in a run's result: the blocks it passes through as objects (or null),
    its figure as a number or null, where the schema does not name them already."""
    node = document["$defs"]["result"]
    for index, key in enumerate(path):
        node = declared(document, node)
        named = node.get("properties", {}).get(key)
        if named is None and isinstance(node.get("additionalProperties"), dict):
            named = node["additionalProperties"]
        if named is None:
            last = index == len(path) - 1
            named = node.setdefault("properties", {})[key] = (
                {"$ref": "#/$defs/number_or_null"} if last
                else {"type": ["object", "null"], "properties": {}})
        node = named


# The version this tool writes: the schema file says which it describes.
SCHEMA_VERSION: int = schema()["x-schema-version"]
# Every version this tool has written, all described by the schema file. Version 1 (until
# 2026-11-22) stored the older precision flags (fp16, amp, amp_dtype) in its config instead of
# one precision name, and had no env.device_type, model.item or model.image_size.
READABLE_VERSIONS = (1, 2)


def document_kind(document: object) -> str | None:
    """What a parsed JSON document is, by the keys each kind always has; None when it is none
    of the tool's documents."""
    if not isinstance(document, dict):
        return None
    if "ab" in document and "schema_version" in document:
        return AB
    if "wanted" in document and "files" in document and "schema_version" in document:
        return DATA_CACHE
    if "rows" in document and "schema_version" in document:
        return SWEEP
    if document.get("tool") == OP_BENCH_TOOL and "results" in document:
        return OP_BENCH
    if "node_check" in document and "schema_version" in document:
        return NODE
    if "node_baseline" in document and "schema_version" in document:
        return NODE_BASELINE
    if "schema_version" in document:
        return RESULT
    if "Throughput [img/sec]" in document and "Name" in document:
        return OLDER_TOOL
    return None


def check_version(document: dict, source: str) -> None:
    """Refuse a document of a schema version this tool never wrote (a newer one included)."""
    version = document.get("schema_version", SCHEMA_VERSION)
    if isinstance(version, bool) or not isinstance(version, int):
        raise UsageError(f"{source}: schema_version {json.dumps(version)[:40]} is not a "
                         f"version number; not a result of this tool")
    if version > SCHEMA_VERSION:
        raise UsageError(f"{source}: schema version {version} is newer than this tool reads "
                         f"({SCHEMA_VERSION}); upgrade micro_benchmarking_pytorch to read it")
    if version not in READABLE_VERSIONS:
        raise UsageError(f"{source}: schema version {version} was never written by this tool "
                         f"(it reads versions {', '.join(map(str, READABLE_VERSIONS))})")


@functools.lru_cache(maxsize=1)
def _validator():
    try:
        import jsonschema
    except ImportError:
        raise MissingEnvironment("reading result files needs jsonschema: "
                                 "pip install jsonschema") from None
    return jsonschema.Draft202012Validator(schema())


@overload
def _as_draft7(node: dict) -> dict: ...
@overload
def _as_draft7(node: object) -> object: ...


def _as_draft7(node: object) -> object:
    """The schema in draft-07 words for fastjsonschema, which knows no later draft: 2020-12's
    ``prefixItems`` (a tuple's items) is draft-07's ``items`` given a list. Every other keyword
    the schema uses means the same in both drafts, and no ``$ref`` has a sibling that
    validates (2020-12 applies such siblings; draft-07 ignores them)."""
    if isinstance(node, list):
        return [_as_draft7(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {("items" if key == "prefixItems" else key): _as_draft7(value)
            for key, value in node.items() if key != "$schema"}


# The root's keywords that do not validate, besides its choice of a definition by the keys a
# document has ("if"/"then"/"else") and its "type".
_ROOT_NOTES = frozenset({"$schema", "$id", "title", "description", "x-schema-version", "$defs"})


@functools.lru_cache(maxsize=1)
def _choices() -> tuple[tuple[tuple[str, ...], str], ...] | None:
    """The root's choice of a definition, read from the schema: (the keys an "if" requires,
    the definition its "then" refers to) in order, the last "else" with no keys. None where
    the root is anything else (then every document is checked against the whole root)."""
    root = schema()
    if set(root) - _ROOT_NOTES != {"type", "if", "then", "else"} or root["type"] != "object":
        return None
    node, choices = {key: root[key] for key in ("if", "then", "else")}, []
    while set(node) == {"if", "then", "else"}:
        test, then = node["if"], node["then"]
        if set(test) != {"required"} or set(then) != {"$ref"}:
            return None
        choices.append((tuple(test["required"]), then["$ref"]))
        node = node["else"]
    if set(node) != {"$ref"}:
        return None
    return (*choices, ((), node["$ref"]))


def _chosen(document: object) -> str | None:
    """The definition the root checks ``document`` against, or None (not an object, or no
    chain of choices: the whole root)."""
    choices = _choices()
    if choices is None or not isinstance(document, dict):
        return None
    return next(ref for keys, ref in choices if all(key in document for key in keys))


@functools.lru_cache(maxsize=None)
def _fast_validator(ref: str | None = None):
    """fastjsonschema's validator compiled from the schema (once per definition), or None
    where fastjsonschema is not installed. It checks a document in about a twentieth of
    jsonschema's time; a document it refuses goes to jsonschema, whose verdict and message
    stand, so it only ever saves time. With ``ref`` (:func:`_chosen`), the definition the
    root's choice leads to alone: the root tries its choices by raising an exception per
    choice passed (six for a run's result), so checking 10,000 results took a third longer,
    and compiling only the definitions met halves the compile."""
    try:
        import fastjsonschema
    except ImportError:
        return None
    whole = _as_draft7(schema())
    if ref is not None:
        whole = {"$id": whole["$id"], "$defs": whole["$defs"], "allOf": [{"$ref": ref}]}
    return fastjsonschema.compile(whole)


def _passes_fast(document: dict) -> bool:
    validate = _fast_validator(_chosen(document))
    if validate is None:
        return False
    from fastjsonschema import JsonSchemaException
    try:
        validate(document)
    except JsonSchemaException:
        return False
    return True


def _first_problem(document: dict, fast: bool) -> str | None:
    if fast and _passes_fast(document):
        return None
    from jsonschema.exceptions import best_match
    error = best_match(_validator().iter_errors(document))
    if error is None:
        return None
    message = " ".join(error.message.split())
    if len(message) > _MESSAGE_CHARS:
        message = message[:_MESSAGE_CHARS - 3] + "..."
    return f"{error.json_path}: {message}"


# No document of the tool is nested half as deep; a deeper one would take validators and
# writers (recursive, as jsonschema and json.dumps with an indent are) past Python's limit.
MAX_DEPTH = 64


# An integer no document of the tool holds: its largest are seeds (below 2**63) and nanosecond
# clocks. A longer one overflows float() in every reader (a 400-digit integer: OverflowError),
# and one beyond 64 bits no other JSON reader (a spreadsheet, jq, numpy) keeps exactly.
MAX_INTEGER = 2**64 - 1


def _value_problem(value: int | float, keys: tuple[str, ...]) -> str | None:
    """Any number: finite, an integer within 64 bits; a figure or a sample: in the range of
    what it is (store/ranges.py)."""
    if isinstance(value, int) and not -MAX_INTEGER <= value <= MAX_INTEGER:
        return "is out of range (an integer beyond 64 bits)"
    value = float(value)
    if not math.isfinite(value):
        return "is not a finite number"
    return ranges.problem(keys, value)


def _shown(value: int | float) -> str:
    """A number as the one line quotes it: a 400-digit integer by its first digits and length."""
    text = json.dumps(value)
    return text if len(text) <= 24 else f"{text[:12]}... ({len(text)} digits)"


# Values with no number or container in them: skipped by their exact type at once.
_PLAIN = (str, bool, type(None))


def _clean(document: object, numbers: bool) -> bool:
    """Whether :func:`number_problem`'s walk surely finds nothing: the same rules in one walk
    that builds no JSON path and stacks only containers (most of the reading time of 10,000
    files was the paths; a list of samples keeps its parent's keys), False sending the
    document to the walk that names one."""
    if not isinstance(document, (dict, list)):
        return False
    stack: list[tuple[dict | list, tuple[str, ...], int]] = [(document, (), 0)]
    while stack:
        container, keys, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        pairs: Iterable[tuple[str | None, Any]]
        if isinstance(container, dict):
            natures = _natures_in(keys) if numbers else None
            pairs = container.items()
        else:
            natures, pairs = None, ((None, item) for item in container)
        for name, item in pairs:
            if item.__class__ in _PLAIN:
                continue
            if ((item.__class__ is float or item.__class__ is int) and natures is not None
                    and name is not None):                  # natures: an object's names
                if not _number_clean(item, keys, name, natures):     # most numbers
                    return False
            elif isinstance(item, (dict, list)):
                stack.append((item, keys if name is None else (*keys, name), depth + 1))
            elif (numbers and isinstance(item, (int, float)) and not isinstance(item, bool)
                  and _value_problem(item, keys if name is None else (*keys, name)) is not None):
                return False
    return True


# keys -> {name: the nature of the number under keys + (name,)} (ranges.nature_at): looked up
# by name, no tuple of keys made per number. Bounded (objects, names in one): a stranger's file
# may hold any keys.
_NATURES: dict[tuple[str, ...], dict[str, str | None]] = {}
_OBJECTS_HELD, _NAMES_HELD = 1024, 256


def _natures_in(keys: tuple[str, ...]) -> dict[str, str | None]:
    natures = _NATURES.get(keys)
    if natures is None:
        natures = {}
        if len(_NATURES) < _OBJECTS_HELD:
            _NATURES[keys] = natures
    return natures


def _number_clean(value: int | float, keys: tuple[str, ...], name: str,
                  natures: dict[str, str | None]) -> bool:
    """Whether the number an object holds under ``name`` (below ``keys``) is one
    :func:`_value_problem` accepts, its nature looked up by name."""
    if value.__class__ is int and not -MAX_INTEGER <= value <= MAX_INTEGER:
        return False
    value = float(value)
    if name in natures:
        kind = natures[name]
    else:
        kind = ranges.nature_at((*keys, name))
        if len(natures) < _NAMES_HELD:
            natures[name] = kind
    return math.isfinite(value) and (kind is None or ranges.problem_of(kind, value) is None)


def number_problem(document: object, numbers: bool = True) -> str | None:
    """The JSON path of the first number a result file must not hold, and why: any non-finite
    number (the tool writes null for those, so ``Infinity`` and ``NaN`` are a stranger's), an
    integer beyond 64 bits, and a figure or a sample out of the range of what it is
    (store/ranges.py), as stored or as a reader derives it; or of a level nested deeper than
    :data:`MAX_DEPTH` (the only check with ``numbers`` False)."""
    if _clean(document, numbers):
        return _read_problem(document) if numbers else None
    stack: list[tuple[object, str, tuple[str, ...], int]] = [(document, "$", (), 0)]
    while stack:                          # iterative: a document nested 900 deep is no crash
        value, path, keys, depth = stack.pop()
        if depth > MAX_DEPTH and isinstance(value, (dict, list)):
            return f"{path[:80]}... is nested deeper than {MAX_DEPTH} levels"
        if isinstance(value, dict):
            stack += [(item, f"{path}.{name}", (*keys, name), depth + 1)
                      for name, item in reversed(list(value.items()))]
        elif isinstance(value, list):
            stack += [(item, f"{path}[{index}]", keys, depth + 1)
                      for index, item in reversed(list(enumerate(value)))]
        elif numbers and isinstance(value, (int, float)) and not isinstance(value, bool):
            problem = _value_problem(value, keys)
            if problem is not None:
                return f"{path} {problem} ({_shown(value)})"
    return _read_problem(document) if numbers else None


def _read_problem(document: object) -> str | None:
    """The first figure a reader derives (a headline in tokens/s, an interval end, MBU) out of
    the range of what it is, though every number it is read from is in range."""
    if not isinstance(document, dict):          # none of the tool's documents
        return None
    kind = document_kind(document)
    if kind == RESULT:
        return ranges.read_problem(document, "$")
    if kind == SWEEP and isinstance(document.get("rows"), list):
        for index, row in enumerate(document["rows"]):
            result = row.get("result") if isinstance(row, dict) else None
            if isinstance(result, dict) and document_kind(result) == RESULT:
                problem = ranges.read_problem(result, f"$.rows[{index}].result")
                if problem is not None:
                    return problem
    return None


def validate_result(document: object, source: str, fast: bool = False) -> dict:
    """``document``, the object it is, or UsageError (one line naming ``source``) unless it is
    one of the tool's documents, of the schema version this tool reads, matching the published
    schema. ``fast``: a reader of many files (:mod:`.collection`) checks each with
    fastjsonschema first, where it is installed (:func:`_fast_validator`: the same verdicts,
    compiled once)."""
    kind = document_kind(document)
    if kind is None or not isinstance(document, dict):      # every kind is an object
        what = type(document).__name__ if not isinstance(document, dict) else "object"
        raise UsageError(f"{source}: not a result of this tool (a JSON {what} without "
                         f"schema_version, or the older tool's 'Name' and "
                         f"'Throughput [img/sec]')")
    check_version(document, source)
    clean = _clean(document, numbers=True)             # nothing to name: both walks skipped
    problem = None if clean else number_problem(document, numbers=False)
    if problem is not None:                            # before the recursive validator
        raise UsageError(f"{source}: not a result of this tool: {problem}")
    problem = _first_problem(document, fast)
    if problem is not None:
        raise UsageError(f"{source}: does not match the result schema (version "
                         f"{SCHEMA_VERSION}) at {problem}")
    problem = _read_problem(document) if clean else number_problem(document)
    if problem is not None:
        raise UsageError(f"{source}: not a result of this tool: {problem}")
    problem = ab_problem(document) if kind == AB else None
    if problem is not None:
        raise UsageError(f"{source}: an A/B summary that contradicts itself: {problem}")
    problem = node_problem(document) if kind == NODE else None
    if problem is not None:
        raise UsageError(f"{source}: a node check that contradicts itself: {problem}")
    return document


def node_problem(document: dict) -> str | None:
    """What in a node check's document cannot be one check, or None: each process measured
    one GPU, so a rank named twice is a file edited or pasted together (its readers key GPUs
    by rank, and one of the two would be lost)."""
    ranks = [gpu.get("rank") for gpu in document["node_check"]["gpus"]]
    twice = sorted({rank for rank in ranks if ranks.count(rank) > 1})
    return f"rank {twice[0]} is named by {ranks.count(twice[0])} GPUs" if twice else None


# How far a stored figure of an A/B summary may be from the same figure computed again from its
# rounds: JSON keeps a float's shortest repr, so a summary the tool wrote agrees to ~1e-15.
_AB_RELATIVE = 1e-6


def _close(stored: object, computed: float) -> bool:
    return (isinstance(stored, (int, float)) and not isinstance(stored, bool)
            and math.isfinite(computed) and math.isclose(stored, computed, rel_tol=_AB_RELATIVE))


def ab_problem(document: dict) -> str | None:
    """What in an A/B summary disagrees with the rest of it, or None: its ratio, interval and
    verdict are computed again from its per-round values (``ab.a``, ``ab.b``; their count is
    ``rounds``) as ``--ab`` computed them (``stats.paired_ab``), and each side's trials block
    must hold the same values. A summary is a stranger's file: a ratio of 5e-324 with an
    interval [1e308, -5] must not be reported as "slower", nor crafted rounds as "infx
    faster"."""
    from microbench.measure import stats          # scipy: only for an A/B summary
    ab = document["ab"]
    a, b, rounds = ab.get("a"), ab.get("b"), ab.get("rounds")
    if not (isinstance(a, list) and isinstance(b, list) and a and len(a) == len(b) == rounds):
        return (f"rounds {json.dumps(rounds)[:24]} but {len(a) if isinstance(a, list) else 0} "
                f"A and {len(b) if isinstance(b, list) else 0} B values")
    values = a + b
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
           or v < ranges.SMALLEST_NORMAL for v in values):
        return "a round's throughput is not a positive normal number"
    tolerance = ab.get("tolerance_pct", stats.DEFAULT_TOLERANCE_PCT)
    if (isinstance(tolerance, bool) or not isinstance(tolerance, (int, float))
            or not 0 <= tolerance < 100):
        return f"tolerance_pct {json.dumps(tolerance)[:24]} is not a percentage below 100"
    computed = stats.paired_ab(a, b, tolerance)
    if not (math.isfinite(computed.ratio) and computed.ratio >= ranges.SMALLEST_NORMAL):
        return (f"its rounds give a ratio B/A out of range ({computed.ratio:g}): not a "
                f"measurement")
    if not _close(ab.get("ratio"), computed.ratio):
        return (f"ratio {json.dumps(ab.get('ratio'))[:24]}, but its {rounds} rounds give "
                f"{computed.ratio:.6g}")
    stored_ci, computed_ci = ab.get("ci95"), computed.ci95
    if computed_ci is None:
        consistent = stored_ci is None
    else:
        consistent = (isinstance(stored_ci, list) and len(stored_ci) == 2
                      and all(_close(s, c) for s, c in zip(stored_ci, computed_ci)))
    if not consistent:
        shown = "none" if computed_ci is None else f"{computed_ci[0]:.6g} to {computed_ci[1]:.6g}"
        return f"ci95 {json.dumps(stored_ci)[:48]}, but its rounds give {shown}"
    if ab.get("verdict") != computed.verdict:
        return (f"verdict {json.dumps(ab.get('verdict'))[:40]}, but its rounds give "
                f"{computed.verdict!r}")
    units = [trials.get("unit") for trials in (ab.get("a_trials"), ab.get("b_trials"))
             if isinstance(trials, dict)]
    if len(units) == 2 and units[0] != units[1]:
        return (f"A measured {json.dumps(units[0])[:40]} and B {json.dumps(units[1])[:40]}: "
                f"a ratio of different units")
    for side, own in (("a", a), ("b", b)):
        trials = ab.get(f"{side}_trials")
        stored_values = trials.get("values") if isinstance(trials, dict) else None
        if stored_values is not None and not (
                isinstance(stored_values, list) and len(stored_values) == len(own)
                and all(_close(s, c) for s, c in zip(stored_values, own))):
            return f"{side}_trials.values are not the rounds' {side.upper()} values"
        headline = trials.get("headline") if isinstance(trials, dict) else None
        if headline is not None and not _close(headline, stats.TrialStats(tuple(own)).headline):
            return f"{side}_trials.headline is not the geometric mean of its rounds"
    return None
