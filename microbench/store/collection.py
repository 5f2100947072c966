"""Result files found, checked, read and grouped for ``microbench-report``.

* **Found:** each argument is a result JSON or a directory, searched (with its subdirectories) for
  ``*.json``; Kineto traces (``*trace<step>.json``) and the atomic writer's temporary files
  (``.tmp-*``) in a directory are left out.
* **Checked before they are opened** (:mod:`microbench.platform.inputs`, the one check of every file
  the tools read): every path must be valid text naming a regular file (or a directory) of at
  most :data:`MAX_INPUT_BYTES`; a missing path, a FIFO, a device (``/dev/zero``) or a directory
  without a result is one line and exit 2 (:class:`~microbench.platform.errors.UsageError`), before any
  file is read.
* **Read:** each file is parsed and validated against the published schema
  (:mod:`.schema`). A file that is not JSON, not a result of this tool, of a schema version
  this tool never wrote, or not matching the schema is named on one line and skipped; a file of
  the older schema version or of the older tool is read, with one line saying so. A result that
  appears twice (a sweep file and its rows' own files) counts once.
* **Grouped:** rows of the same kind (model results, op bench ops) share a :class:`Group`, whose
  settings are split into those every row shares and those that vary; rows are ordered by the
  varying ones, so rows of one configuration stand together.

Example::

    found = read(input_files(["results/", "old/baseline.json"]))
    for line in found.lines:
        print(line, file=sys.stderr)
    for group in group_entries(found.entries):
        group.varying, group.common, group.entries
"""
from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field

from microbench.platform import inputs as checked
from microbench.platform.errors import UsageError
from microbench.store import schema, stored
from microbench.store.entry import MODEL, OP, Entry, entries_of

MAX_INPUT_BYTES = checked.MAX_RESULT_BYTES
_TRACE_NAME = re.compile(r"trace\d+(_rank\d+)?\.json$")
_TEMPORARY_PREFIX = ".tmp-"           # report.writing.TEMPORARY_PREFIX


# ---------------------------------------------------------------- found and checked

def _directory_files(directory: str) -> tuple[list[str], int]:
    """The *.json files under ``directory`` (sorted), and how many traces were left out."""
    found, traces = [], 0
    for root, subdirectories, names in os.walk(directory):
        subdirectories.sort()
        for name in sorted(names):
            if not name.endswith(".json") or name.startswith(_TEMPORARY_PREFIX):
                continue
            if _TRACE_NAME.search(name):
                traces += 1
                continue
            found.append(os.path.join(root, name))
    return found, traces


@dataclass
class Inputs:
    """The files to read, in order, and what was left out while finding them."""

    files: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    _seen: set[str] = field(default_factory=set, repr=False)

    def add(self, path: str) -> None:
        """A file named twice (itself and through its directory) is read once."""
        real = os.path.realpath(path)
        if real not in self._seen:
            self._seen.add(real)
            self.files.append(path)


def input_files(arguments) -> Inputs:
    """Every argument checked, directories expanded; raises UsageError on the first path that
    is not a readable regular file or directory of results. Nothing is opened."""
    inputs = Inputs()
    for argument in arguments:
        if not argument:
            raise UsageError("an empty path was given: name result files or directories")
        status = checked.check_input(argument, argument, MAX_INPUT_BYTES, directory_ok=True)
        if not stat.S_ISDIR(status.st_mode):
            inputs.add(argument)
            continue
        files, traces = _directory_files(argument)
        if traces:
            inputs.lines.append(f"left out {traces} Kineto trace(s) (*trace<N>.json) in "
                                f"{argument}")
        if not files:
            raise UsageError(f"{argument}: no *.json result files in this directory")
        for path in files:
            checked.check_input(path, path, MAX_INPUT_BYTES)
            inputs.add(path)
    return inputs


# ---------------------------------------------------------------- read

def _version_note(document: dict, path: str) -> str | None:
    kind = schema.document_kind(document)
    if kind == schema.OLDER_TOOL:
        return (f"read {path}: a result of the older tool (network, devices, batch and "
                f"throughput only)")
    version = document.get("schema_version")
    if version is not None and version != schema.SCHEMA_VERSION:
        return f"read {path}: schema version {version} (this tool writes {schema.SCHEMA_VERSION})"
    return None


@dataclass
class Found:
    """The entries read, and one line per file read with a note, skipped or counted once."""

    entries: list[Entry] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)


def read(inputs: Inputs) -> Found:
    found = Found(lines=list(inputs.lines))
    seen: set[str] = set()
    duplicates = 0
    for path in inputs.files:
        try:
            document = stored.parse(path, path, MAX_INPUT_BYTES)   # checked again once open
            schema.validate_result(document, path)
        except UsageError as error:
            found.lines.append(f"skipped {error}")
            continue
        except (UnicodeDecodeError, ValueError, RecursionError) as error:
            if path.lower().endswith(".csv"):
                found.lines.append(f"skipped {path}: a CSV; the report reads the JSON results "
                                   f"(each CSV row has its JSON beside it)")
                continue
            reason = str(error).splitlines()[0][:120] if str(error) else type(error).__name__
            found.lines.append(f"skipped {path}: not JSON ({reason})")
            continue
        except OSError as error:
            found.lines.append(f"skipped {path}: cannot read ({error.strerror or error})")
            continue
        note = _version_note(document, path)
        if note:
            found.lines.append(note)
        found.files_read.append(path)
        for entry in entries_of(document, path):
            if entry.identity in seen:
                duplicates += 1
                continue
            seen.add(entry.identity)
            found.entries.append(entry)
    if duplicates:
        found.lines.append(f"counted once: {duplicates} result(s) found in two files (a sweep "
                           f"file and its rows' own files)")
    return found


# ---------------------------------------------------------------- grouped

# Settings a reader wants named above the table when every row shares them; the others
# (iterations, seed, ...) are shown only where they differ, and all are in --format json.
HEADLINE_SETTINGS = ("network", "mode", "precision", "batch", "devices", "image size", "seq len",
                     "attention", "prompt", "generated", "layout", "compile", "op", "op type",
                     "shapes", "dtype", "device", "torch")
RUN_AT, FILE = "run at", "file"


def setting_value(entry: Entry, name: str):
    """A setting of an entry, including the two that only tell duplicates apart."""
    if name == RUN_AT:
        return entry.time_utc.replace("T", " ")[:19] if entry.time_utc else None
    if name == FILE:
        return entry.source
    return entry.settings.get(name)


def _key(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _recorded(entry: Entry, name: str) -> bool:
    """Whether an entry's value of a setting counts when comparing rows. A headline setting
    always does for a measured row: one the document does not record (the older tool's mode)
    shows as unknown. Any other setting an older version did not store does not count (it did
    not exist yet), nor does a failed row's unknown value (a sweep's failed row keeps what was
    asked, not what the model would have resolved)."""
    if name in (RUN_AT, FILE):
        return True
    if not entry.measured:
        return entry.settings.get(name) is not None
    return name in HEADLINE_SETTINGS or name in entry.settings


def _known_values(entries, name: str) -> set[str]:
    return {_key(setting_value(entry, name)) for entry in entries if _recorded(entry, name)}


def _sort_key(entry: Entry, names) -> tuple:
    key = []
    for name in names:
        value = setting_value(entry, name)
        if value is None:
            key.append((2, 0, ""))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            key.append((0, value, ""))
        else:
            key.append((1, 0, str(value)))
    return tuple(key)


@dataclass
class Group:
    """The rows of one kind, ordered, with the settings they share and those that vary."""

    table: str                        # entry.MODEL or entry.OP
    entries: list[Entry]
    varying: list[str]                # settings that differ, in column order
    common: dict                      # setting -> the value every row shares


def _group(table: str, entries: list[Entry]) -> Group:
    names = list(dict.fromkeys(name for entry in entries for name in entry.settings))
    varying = [name for name in names if len(_known_values(entries, name)) > 1]
    common = {}
    for name in names:
        every_row = all(_recorded(entry, name) for entry in entries if entry.measured)
        values = [setting_value(e, name) for e in entries if _recorded(e, name)]
        if name not in varying and every_row and values and values[0] is not None:
            common[name] = values[0]
    # Rows still alike in every varying setting: tell them apart by when they ran, then by file.
    for extra in (RUN_AT, FILE):
        keys = [tuple(_key(setting_value(e, name)) for name in varying) for e in entries]
        if len(set(keys)) == len(keys):
            break
        varying.append(extra)
    ordered = sorted(entries, key=lambda entry: _sort_key(entry, varying))
    return Group(table, ordered, varying, common)


def group_entries(entries: list[Entry]) -> list[Group]:
    """One group per kind present: model results first, then ops."""
    groups = []
    for table in (MODEL, OP):
        members = [entry for entry in entries if entry.table == table]
        if members:
            groups.append(_group(table, members))
    return groups
