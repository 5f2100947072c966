"""``--rerun RESULT.json``: a stored configuration spelled back as command-line flags.

Every result JSON stores the configuration it ran (its ``config`` object, the
:class:`~microbench.settings.config.BenchConfig` fields). :func:`flags_of` turns that object into the
flags that ask for the same configuration, through the same schema the command line is built from
(:func:`microbench.settings.config.spelled`); the command line then parses them under the flags given
beside ``--rerun``, so a given flag replaces a stored one (``--iterations 100``) and every value
passes the same checks as one typed by hand: a result file is input, and an edited one must not
reach torch with a value the command line would refuse.

What is not replayed (settings declared ``replayed=False``): where results go (``--output-dir``,
``--output-file``, ``--csv-file``, ``--no-files``, ``--quiet``, ``--profiler-output``), the
baselines read from disk, and the launch (ranks, world size, rendezvous): those belong to this
invocation. A result of several ranks says so in a note, with the launch that repeats it.

Example::

    flags, notes = flags_of("results/resnet50_training_amp-bf16_b128.json")
    # ['--network=resnet50', '--batch-size=128', '--precision=amp-bf16', ...]
"""
from __future__ import annotations

import shlex

from microbench.settings.config import SCHEMA, replayed_fields, spelled
from microbench.platform.errors import UsageError
from microbench.store import schema
from microbench.store.stored import ab_side, load_document, load_result


def _replayed(path: str) -> tuple[dict, list[str]]:
    """The result to replay: ``path`` itself, or side A of an A/B summary (with a note on how
    to replay B, or both)."""
    document = load_document(path, "--rerun")
    if schema.document_kind(document) != schema.AB:
        return load_result(path, "--rerun"), []
    ab = document["ab"]
    side_a, side_b = ab_side(path, ab["a_result"]), ab_side(path, ab["b_result"])
    if side_a is None:
        raise UsageError(f"--rerun {path}: an A/B summary that names no result of side A")
    # A command the user may paste: every path and string in it is shell-quoted, since they
    # come from a file (flags_b '"; touch PWNED; echo "' must stay one word of --ab).
    quoted_a, flags_b = shlex.quote(side_a), shlex.quote(str(ab["flags_b"]))
    side_b_text = (f"--rerun {shlex.quote(side_b)}" if side_b is not None
                   else "its result was not named")
    note = (f"--rerun {path}: an A/B summary; replaying side A ({side_a}). Side B "
            f"(--ab {flags_b}): {side_b_text}; both again: --rerun {quoted_a} --ab {flags_b}")
    return load_result(side_a, "--rerun"), [note]


def flags_of(path: str) -> tuple[list[str], list[str]]:
    """The flags that repeat the run stored in ``path`` (side A of an A/B summary), and notes
    for the user."""
    document, notes = _replayed(path)
    stored = document.get("config")
    if not isinstance(stored, dict):
        raise UsageError(f"--rerun {path}: the result stores no configuration (written by an "
                         f"older version?)")
    unknown = sorted(set(stored) - set(SCHEMA))
    notes += [f"--rerun {path}: settings this version does not know were left out: "
              f"{', '.join(unknown)}"] if unknown else []
    devices = document.get("GPUs")
    if isinstance(devices, int) and devices > 1:
        notes.append(f"--rerun {path}: that result ran on {devices} ranks; this invocation's "
                     f"launch decides how many run now (torchrun --nproc-per-node {devices} "
                     f"... --rerun {shlex.quote(path)} repeats it on one node)")
    try:
        return spelled(stored, replayed_fields()), notes
    except UsageError as error:
        raise UsageError(f"--rerun {path}: {error}") from None
