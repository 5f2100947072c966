"""The published schema of the tool's JSON documents, and validation of a document read back.

``result.schema.json`` beside this module (shipped in the package) describes every document the
tool writes: a run's result, a sweep, the op bench's results, and the older tool's result (its six
keys, no ``schema_version``), which is read but never written. Its version is the
``schema_version`` key of every document; :func:`validate_result` refuses a document of another
version, or one that does not match, with one line (:class:`~microbench.platform.errors.UsageError`,
exit 2), through ``jsonschema`` rather than checks written by hand.

This module imports neither torch nor the rest of the benchmark, so readers of results (the
``microbench-report`` command) start in a fraction of a second.

Example::

    document = json.loads(text)
    validate_result(document, "results/resnet50_training_fp32_b64.json")
    kind = document_kind(document)          # "result", "sweep", "op bench" or "older tool"
"""
from __future__ import annotations

import functools
import json
from importlib import resources

from microbench.platform.errors import MissingEnvironment, UsageError

SCHEMA_FILE = "result.schema.json"
# The longest validation message quoted in the one line (jsonschema quotes the offending value,
# which can be a whole list of samples).
_MESSAGE_CHARS = 160

RESULT, SWEEP, OP_BENCH, OLDER_TOOL = "result", "sweep", "op bench", "older tool"
OP_BENCH_TOOL = "TorchTensorOpsBench"


@functools.lru_cache(maxsize=1)
def schema() -> dict:
    """The schema document, as shipped in the package."""
    text = resources.files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    return json.loads(text)


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
    if "rows" in document and "schema_version" in document:
        return SWEEP
    if document.get("tool") == OP_BENCH_TOOL and "results" in document:
        return OP_BENCH
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


def _first_problem(document: dict) -> str | None:
    from jsonschema.exceptions import best_match
    error = best_match(_validator().iter_errors(document))
    if error is None:
        return None
    message = " ".join(error.message.split())
    if len(message) > _MESSAGE_CHARS:
        message = message[:_MESSAGE_CHARS - 3] + "..."
    return f"{error.json_path}: {message}"


def validate_result(document: object, source: str) -> None:
    """Raise UsageError (one line naming ``source``) unless ``document`` is one of the tool's
    documents, of the schema version this tool reads, matching the published schema."""
    kind = document_kind(document)
    if kind is None:
        what = type(document).__name__ if not isinstance(document, dict) else "object"
        raise UsageError(f"{source}: not a result of this tool (a JSON {what} without "
                         f"schema_version, or the older tool's 'Name' and "
                         f"'Throughput [img/sec]')")
    check_version(document, source)
    problem = _first_problem(document)
    if problem is not None:
        raise UsageError(f"{source}: does not match the result schema (version "
                         f"{SCHEMA_VERSION}) at {problem}")
