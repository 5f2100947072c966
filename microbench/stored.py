"""Result files on disk, read back: baselines (``--compare``, ``--scaling-baseline``), ``--rerun``,
and the result a run is about to replace.

This module only reads; the writers live in :mod:`microbench.report`. It sits below both the
settings (``--rerun`` reads a stored configuration) and the report (the gate reads a baseline), so
neither has to import the other.

Example::

    document = load_result("results/resnet50_training_fp32_b64.json", "--compare")
    document["Throughput [img/sec]"], document["config"]["batch_size"]
"""
from __future__ import annotations

import json
import math

from .errors import UsageError


def load_result(path: str, flag: str = "--compare") -> dict:
    """A result JSON named by ``flag``; unreadable, or not a result of this tool, is a usage
    error."""
    try:
        with open(path) as stream:
            document = json.load(stream)
    except (OSError, ValueError, RecursionError) as error:
        raise UsageError(f"{flag} {path}: cannot read a result JSON ({error})") from None
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
        with open(path) as stream:
            document = json.load(stream)
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(document, dict) or not isinstance(document.get("config"), dict):
        return None
    return document
