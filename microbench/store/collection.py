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
  (:mod:`.schema`; from :data:`FAST_VALIDATION_FROM` files on, fastjsonschema first). A file that is not JSON, not a result of this tool, of a schema version
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

import errno
import json
import os
import re
import stat
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from microbench.platform.inputs import MAX_RESULT_BYTES, check_input
from microbench.platform.errors import UsageError
from microbench.store import schema, stored
from microbench.store.entry import AB_SIDE, MODEL, NODE, OP, Entry, ab_entries, entries_of

MAX_INPUT_BYTES = MAX_RESULT_BYTES
_TRACE_NAME = re.compile(r"trace\d+(_rank\d+)?\.json$")
_TEMPORARY_PREFIX = ".tmp-"           # report.writing.TEMPORARY_PREFIX


# ---------------------------------------------------------------- found and checked

def _directory_files(directory: str, lines: list[str]) -> tuple[list[str], int]:
    """The *.json files under ``directory`` (sorted), and how many traces were left out; a
    folder that cannot be read, or a link to a folder (not followed: it may loop, or lead out),
    is a line in ``lines``, and the rest is read."""
    found, traces = [], 0

    def unreadable(error: OSError) -> None:
        lines.append(f"skipped {error.filename}: cannot read this folder "
                     f"({error.strerror or error})")
    for root, subdirectories, names in os.walk(directory, onerror=unreadable):
        subdirectories.sort()
        for name in [name for name in subdirectories if os.path.islink(os.path.join(root, name))]:
            lines.append(f"skipped {os.path.join(root, name)}: a link to a folder (not "
                         f"followed; name the folder itself to read it)")
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


def input_files(arguments: Sequence[str]) -> Inputs:
    """Every argument checked, directories expanded; raises UsageError on the first path that
    is not a readable regular file or directory of results. Nothing is opened."""
    inputs = Inputs()
    for argument in arguments:
        if not argument:
            raise UsageError("an empty path was given: name result files or directories")
        status = check_input(argument, argument, MAX_INPUT_BYTES, directory_ok=True)
        if not stat.S_ISDIR(status.st_mode):
            inputs.add(argument)
            continue
        lines_before = len(inputs.lines)
        files, traces = _directory_files(argument, inputs.lines)
        skipped = len(inputs.lines) > lines_before         # a folder or link it could not read
        if traces:
            inputs.lines.append(f"left out {traces} Kineto trace(s) (*trace<N>.json) in "
                                f"{argument}")
        if not files and not skipped:
            raise UsageError(f"{argument}: no *.json result files in this directory")
        for path in files:
            # One file of a folder that cannot be read (a dangling link, a link loop, a name
            # that is not text, one too large) is skipped with its line; the others are read.
            try:
                check_input(path, path, MAX_INPUT_BYTES)
            except UsageError as error:
                inputs.lines.append(f"skipped {error}")
                continue
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


# fastjsonschema's compiled validator costs about half a second to build and then checks a
# result in about 0.15 ms against jsonschema's 3 ms (2-core EPYC): from this many files it pays.
FAST_VALIDATION_FROM = 200


def read(inputs: Inputs) -> Found:
    found = Found(lines=list(inputs.lines))
    fast = len(inputs.files) >= FAST_VALIDATION_FROM
    seen: set[str] = set()
    duplicates = 0
    for path in inputs.files:
        try:
            document = schema.validate_result(                     # checked again once open
                stored.parse(path, path, MAX_INPUT_BYTES), path, fast)
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
            if error.errno in (errno.EMFILE, errno.ENFILE):
                raise                   # a limit of the process, not of this file: exit 4
            found.lines.append(f"skipped {path}: cannot read ({error.strerror or error})")
            continue
        if schema.document_kind(document) == schema.DATA_CACHE:
            found.lines.append(f"skipped {path}: a data cache manifest (--data), not a result")
            continue
        if schema.document_kind(document) == schema.NODE_BASELINE:
            found.lines.append(f"skipped {path}: a node check's baseline (--save-baseline), "
                               f"not a result")
            continue
        note = _version_note(document, path)
        if note:
            found.lines.append(note)
        found.files_read.append(path)
        rows = (_ab_rows(document, path, found) if schema.document_kind(document) == schema.AB
                else entries_of(document, path))
        for entry in rows:
            if entry.identity in seen:
                duplicates += 1
                _keep_the_ab_side(found.entries, entry)
                continue
            seen.add(entry.identity)
            found.entries.append(entry)
    if duplicates:
        found.lines.append(f"counted once: {duplicates} result(s) found in two files (a sweep "
                           f"or A/B file and its rows' own files)")
    return found


def _ab_rows(summary: dict, path: str, found: Found) -> list[Entry]:
    """An A/B summary's two sides, each from its own result file where that can be read."""
    results = {}
    for side in ("a", "b"):
        where = stored.ab_side(path, summary["ab"][f"{side}_result"])
        try:
            document = (schema.validate_result(stored.parse(where, where, MAX_INPUT_BYTES), where)
                        if where else None)
        except (UsageError, OSError, UnicodeDecodeError, ValueError, RecursionError):
            document = None
        if document is None or schema.document_kind(document) != schema.RESULT:
            found.lines.append(f"read {path}: side {side.upper()}'s result "
                               f"({where or 'not written'}) was not found; its row shows the "
                               f"summary's trials only")
            document = None
        results[side] = document
    rows = ab_entries(summary, path, results)
    # Both sides read alike (from their results, or both from the summary's trials) must
    # measure one unit (schema.ab_problem checks the summary's own record of them).
    if (results["a"] is None) == (results["b"] is None) and rows[0].unit != rows[1].unit:
        found.lines.append(f"skipped {path}: an A/B summary whose sides measure different "
                           f"units (A {rows[0].unit}, B {rows[1].unit}): their ratio says "
                           f"nothing")
        return []
    return rows


def _keep_the_ab_side(entries: list[Entry], entry: Entry) -> None:
    """A side's result read both on its own and through its A/B summary is one row, the one
    that says which side it was."""
    if AB_SIDE not in entry.settings:
        return
    for index, kept in enumerate(entries):
        if kept.identity == entry.identity and AB_SIDE not in kept.settings:
            entries[index] = entry

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


def _key(value: object) -> str:
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


def rows_split(entries: Sequence[Entry], name: str) -> int:
    """How many rows a setting sets apart: those whose value is not the most common one (a
    setting only one run differs in sets one row apart; precision fp32 vs tf32 half of them)."""
    values = [_key(setting_value(entry, name)) for entry in entries if _recorded(entry, name)]
    if not values:
        return 0
    return len(values) - max(values.count(value) for value in set(values))


def _known_values(entries: Iterable[Entry], name: str) -> set[str]:
    return {_key(setting_value(entry, name)) for entry in entries if _recorded(entry, name)}


def _sort_key(entry: Entry, names: Iterable[str]) -> tuple:
    key: list[tuple[int, float, str]] = []
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

    table: str                        # entry.MODEL, entry.OP or entry.NODE
    entries: list[Entry]
    varying: list[str]                # settings that differ, in column order
    common: dict                      # setting -> the value every row shares


def _group(table: str, entries: list[Entry]) -> Group:
    names = list(dict.fromkeys(name for entry in entries for name in entry.settings))
    varying = [name for name in names if len(_known_values(entries, name)) > 1]
    # The setting that splits the most rows first, as the table's columns are ordered.
    varying.sort(key=lambda name: -rows_split(entries, name))
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
    """One group per kind present: model results first, then ops, then node checks."""
    groups = []
    for table in (MODEL, OP, NODE):
        members = [entry for entry in entries if entry.table == table]
        if members:
            groups.append(_group(table, members))
    return groups
