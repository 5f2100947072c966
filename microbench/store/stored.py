"""Result files on disk, read back: baselines (``--compare``, ``--scaling-baseline``), ``--rerun``,
and the result a run is about to replace.

This module only reads; the writers live in :mod:`microbench.output`. It sits below the settings
(``--rerun`` reads a stored configuration), the baselines (:mod:`.baseline`) and the report
command's collection, so none of them imports another to read a file.

Example::

    document = load_result("results/resnet50_training_fp32_b64.json", "--compare")
    document["Throughput [img/sec]"], document["config"]["batch_size"]
"""
from __future__ import annotations

import json
import math
import os

from microbench.platform import safe_text
from microbench.platform.errors import UsageError
from microbench.platform.inputs import InputRefused, read_bounded
from microbench.store import schema


def parse(path: str, label: str, limit: int | None = None) -> object:
    """The JSON document at ``path``, read through the input checks (a regular file of at most
    ``limit`` bytes, opened without blocking); InputRefused or ValueError otherwise. The one
    place a stored result's text becomes a document (the report's collection reads here too),
    and so the one place its strings are made safe (:func:`safe_text.neutralised`: no control
    character of a file reaches a terminal, a CSV, a page or a suggested command)."""
    text = read_bounded(path, label, limit).decode("utf-8")
    document = json.loads(text)
    return document if safe_text.plain_json(text) else safe_text.neutralised(document)


def load_document(path: str, flag: str) -> dict:
    """Any of the tool's documents named by ``flag``, matching the published schema;
    unreadable or malformed is a usage error (one line naming the file and, for a schema
    mismatch, the path of the problem in the document)."""
    label = f"{flag} {path}"
    try:
        document = parse(path, label)
    except InputRefused as refused:
        message = f"{refused.label}: cannot read a result JSON ({refused.reason})"
        raise UsageError(message) from None
    except (ValueError, RecursionError) as error:
        raise UsageError(f"{label}: cannot read a result JSON ({error})") from None
    return schema.validate_result(document, label)


def ab_side(path: str, named: object) -> str | None:
    """Where an A/B summary's side result is: beside the summary, under the base name the
    summary gives (where --ab writes both), and nowhere else. A summary is a stranger's file
    like any other: an absolute or ``../`` name must not make a reader open, show or replay a
    file the user did not name. None where it names no file."""
    if not isinstance(named, str) or not named:
        return None
    base = os.path.basename(named.replace("\\", "/"))
    if base in ("", ".", "..") or "\x00" in base:
        return None
    return os.path.join(os.path.dirname(path), base)


def load_result(path: str, flag: str = "--compare") -> dict:
    """A run's result JSON named by ``flag`` (:func:`load_document`); any other document of the
    tool is a usage error."""
    label = f"{flag} {path}"
    document = load_document(path, flag)
    kind = schema.document_kind(document)
    if kind not in (schema.RESULT, schema.OLDER_TOOL):
        raise UsageError(f"{label}: is a {kind} document, not one run's result: name one of "
                         f"the result files beside it")
    throughput = document.get("Throughput [img/sec]") if isinstance(document, dict) else None
    if (not isinstance(throughput, (int, float)) or isinstance(throughput, bool)
            or not math.isfinite(throughput) or throughput <= 0):
        raise UsageError(f"{flag} {path}: not a result of this tool (no positive "
                         f"'Throughput [img/sec]')")
    return document


def result_at(path: str) -> dict | None:
    """The result document at ``path``, or None when there is none (no file, unreadable, or not
    a result of this tool: nothing of ours to protect)."""
    try:
        document = parse(path, path)
    except (UsageError, ValueError, RecursionError):
        return None
    if not isinstance(document, dict) or not isinstance(document.get("config"), dict):
        return None
    return document
