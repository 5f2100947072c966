"""``--ab FLAGS``: the command as given (A) against the same command with FLAGS added or
replacing (B), measured in alternating rounds, and the ratio B/A with its interval and verdict.

Round ``i`` measures trial ``i`` of A and trial ``i`` of B (the sweep's interleaving,
:func:`microbench.drivers.sweep.run_sweep`), A first in even rounds and B first in odd ones (A B, B A,
A B...: with a fixed order, whatever favours the first or the second of a pair, such as caches,
a clock governor ramping up or another process waking, would pose as a difference), each in a
fresh worker process by default, so that a drift of the device hits both sides alike and pairs
cancel it: the ratio is
:func:`microbench.measure.stats.paired_ab` over the rounds' B/A ratios (Student t on log ratios), and
the verdict is :class:`microbench.measure.stats.Comparison`'s (``faster``, ``slower``, ``same
within N%`` at ``--tolerance`` or ``no difference detected``), as ``--compare`` and the report
word it. Each side's result is
written as any run's (JSON and CSV row), and one more file, ``ab_<A's name>_vs_<B's
name>.json``, holds the
verdict (``ab.ratio``, ``ab.ci95``, ``ab.verdict``), both sides' trials and their result files.
``--fail-if slower`` exits 5 when the verdict is ``slower`` (for CI).

Example::

    microbench --network resnet50 --amp --ab "--nhwc"         # B: A with --nhwc
    microbench --network resnet50 --ab "--seed 2" --repeat 7   # 7 rounds of A then B
"""
from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING, Sequence, TextIO

from microbench.measure import stats
from microbench.settings.config import ABPlan
from microbench.platform.errors import Regression, UsageError
from microbench.output import files
from microbench.platform import units, writing
from microbench.store import iteration_noise
from microbench.store.entry import Entry
from microbench.output.summary import Summary

if TYPE_CHECKING:
    from microbench.drivers.sweep import Row
    from microbench.plan.spec import RunSpec


def unit_of(spec: RunSpec) -> str:
    """What one side's trial throughputs count, per second: its items (images, sequences,
    clips), each of ``units_per_item`` units of work (tokens of a sequence)."""
    scenario = spec.scenario
    if scenario.unit == spec.model.item:
        return f"{spec.model.item}s/s"
    return f"{spec.model.item}s/s of {scenario.units_per_item} {scenario.unit}s"


def check_same_unit(specs: Sequence[RunSpec]) -> None:
    """Refuse, before anything is built, an A/B whose sides measure different things: images/s
    against sequences/s (``--ab "--network llama_tiny"`` from an image model), tokens against
    generated tokens, or sequences of different lengths: their ratio is of no quantity, and
    "B is faster (2.088)" would be a lie."""
    a, b = (unit_of(spec) for spec in specs)
    if a != b:
        raise UsageError(f"--ab: A measures {a} and B {b}: a ratio of different units says "
                         f"nothing; compare runs that measure the same unit of work (run them "
                         f"apart and read both with microbench-report)")


def verdict_of(rows: Sequence[Row], tolerance_pct: float = stats.DEFAULT_TOLERANCE_PCT
              ) -> stats.ABResult:
    """The paired verdict of two measured rows (A first), by round, in the words of
    :class:`microbench.measure.stats.Comparison` at ``tolerance_pct`` (--tolerance)."""
    a, b = ([trial.throughput for trial in row.trials] for row in rows)
    return stats.paired_ab(a, b, tolerance_pct)


def print_verdict(result: stats.ABResult, plan: ABPlan, rows: Sequence[Row], out: TextIO) -> None:
    for side, row in zip("AB", rows):
        spread = _recorded(row)[0].trial_spread
        ci = spread.ci95
        interval = (f", 95% CI {units.rate(ci[0])} to {units.rate(ci[1])}" if ci else
                    f" ({stats.ONE_TRIAL})")
        print(f"  {side}: {units.rate(spread.headline)} {unit_of(row.spec)} (geometric "
              f"mean of {spread.count} trials{interval})", file=out)
    print(f"A/B: B ({plan.flags}) / A = {stats.ratio_text(result.ratio)}: "
          f"{iteration_noise.words(result.comparison, _entries(rows))} "
          f"[{result.method}]", file=out, flush=True)


def _recorded(row: Row) -> tuple[Summary, dict, Entry]:
    """A measured side's Summary, result document and stored entry (run_ab stops at a failed
    side before any of these is read)."""
    if row.summary is None or row.document is None or row.entry is None:
        raise ValueError(f"--ab: {row.label()} was not measured")
    return row.summary, row.document, row.entry


def _entries(rows: Sequence[Row]) -> list[Entry]:
    """Each side's stored entry: what the noise rule reads (its iteration spread)."""
    entries = [row.entry for row in rows]
    known = [entry for entry in entries if entry is not None]
    if len(known) < len(entries):               # run_ab stops at a failed side first
        raise ValueError("--ab: a side was not measured")
    return known


def document(result: stats.ABResult, plan: ABPlan, rows: Sequence[Row]) -> dict:
    return {"schema_version": files.SCHEMA_VERSION, "ab": {**result.to_dict(), "flags_b": plan.flags,
                   "a_result": rows[0].spec.json_path, "b_result": rows[1].spec.json_path,
                   "a_trials": _recorded(rows[0])[1]["trials"],
                   "b_trials": _recorded(rows[1])[1]["trials"],
                   # the verdict stays the statistics' word (the schema recomputes it); one
                   # round inside the sides' iteration noise says so beside it
                   "within_noise": iteration_noise.within(result.comparison,
                                                          _entries(rows)) is not None}}


# The longest file name most file systems take (NAME_MAX), in bytes.
NAME_MAX = 255


def summary_path(a: RunSpec, b: RunSpec) -> str:
    """``ab_<A's name>_vs_<B's name>.json`` beside A's result: named by both sides, so that an
    A/B with another B never replaces this one, while the same A/B again refreshes it (both
    sides' names are claimed by this run: files.claim_result_path). Two long names are cut to
    fit NAME_MAX, with a digest of the whole name that keeps them apart: a name too long to
    create would lose the summary after both sides had run."""
    name = f"ab_{a.result_name}_vs_{b.result_name}.json"
    if len(name.encode()) > NAME_MAX:
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        keep = (NAME_MAX - len(f"ab__vs___{digest}.json")) // 2
        name = f"ab_{_cut(a.result_name, keep)}_vs_{_cut(b.result_name, keep)}_{digest}.json"
    if a.json_path is None:                 # write() asks only where files are written
        raise ValueError("an A/B summary is written beside A's result")
    return os.path.join(os.path.dirname(a.json_path), name)


def _cut(text: str, size: int) -> str:
    """``text`` cut to at most ``size`` bytes of UTF-8, never inside a character."""
    return text.encode()[:size].decode(errors="ignore")


def write(result: stats.ABResult, plan: ABPlan, rows: Sequence[Row]) -> str | None:
    """Each side's result files, then the A/B file beside A's; its path (None: --no-files)."""
    first = rows[0].spec
    if first.json_path is None:
        return None
    for row in rows:
        summary, written, _ = _recorded(row)
        files.write_files(summary, written)     # built once (sweep.Row.record)
    path = summary_path(first, rows[1].spec)
    text = writing.json_text(document(result, plan, rows)).encode("utf-8")
    with writing.replacing(path) as temporary:
        writing.fill(temporary, text, path)
    return path


def fail_if_slower(result: stats.ABResult, plan: ABPlan, rows: Sequence[Row]) -> None:
    """--fail-if slower: B slower, and not one round inside the sides' own iteration noise
    (issue 64: a one-trial gate failed CI on noise alone)."""
    if plan.fail_if_slower and result.verdict == "slower" and \
            iteration_noise.within(result.comparison, _entries(rows)) is None:
        raise Regression(f"--ab: B ({plan.flags}) is slower than A: ratio "
                         f"{stats.ratio_text(result.ratio)}, "
                         f"{result.comparison.text}")
