"""Result files written whole or not at all, for the model benchmark and the op bench alike.

A file is written to a temporary name in its own directory and renamed over the target, so a
reader sees the old file or the new one, never half of one, and a failed write leaves the
previous file as it was. JSON is strict: NaN and infinity become null.
"""
from __future__ import annotations

import json
import math
import os
import tempfile

from ..errors import UsageError


def check_writable(path: str, flag: str) -> None:
    """Fail before the run, not after it, when a result file cannot be written."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError(f"cannot write {flag} {path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK):
        raise UsageError(f"cannot write {flag} {path}: directory {directory} is not writable")


def write_whole(path: str, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (temporary file, then os.replace)."""
    directory = os.path.dirname(os.path.abspath(path))
    handle = tempfile.NamedTemporaryFile("w", dir=directory, prefix=".tmp-",
                                         suffix=os.path.basename(path), delete=False,
                                         encoding="utf-8", newline="")
    try:
        with handle:
            handle.write(text)
        os.replace(handle.name, path)
    except BaseException:
        os.unlink(handle.name)
        raise


def json_safe(value):
    """NaN and infinity are not JSON; they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def write_json(path: str, document: dict) -> None:
    """Strict JSON (non-finite numbers as null), written whole or not at all."""
    text = json.dumps(json_safe(document), indent=2, allow_nan=False, default=str) + "\n"
    write_whole(path, text)
