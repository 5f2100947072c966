"""``--compare BASELINE.json`` printed: this run against the baseline, and the gate's verdict.

The baseline itself is read (and another configuration refused) by
:mod:`microbench.store.baseline`, before the run; both sides' figures are read through
:mod:`microbench.store.entry`, as the report reads them. ``--compare`` is a gate for CI
pipelines: every metric is printed with its change, and the verdict comes from
:func:`microbench.measure.stats.gate` on both sides' trials (Welch's t test on log throughput
where each side has two trials or more; the point ratio, said so, where a side has one, and
``within noise`` where that ratio lies inside the runs' own iteration noise,
:mod:`microbench.store.iteration_noise`): a drop beyond ``--tolerance`` percent that is also
significant raises :class:`~microbench.platform.errors.Regression` (exit 5). A baseline of another
configuration is refused (exit 2): comparing resnet50 with resnet18, or batch 64 with batch 128,
measures nothing (:mod:`microbench.settings.identity` says which settings must agree);
``--compare-any-config`` compares anyway and prints what differs.

Example::

    document = files.result_document(summary)   # built once: judged, written, compared
    verdict = judge(document, gate)           # before the result is written (runner.report)
    compare(document, gate, sys.stdout, verdict)
"""
from __future__ import annotations

from typing import TextIO

from microbench.measure import stats
from microbench.platform import safe_text
from microbench.platform.errors import Regression, UsageError
from microbench.settings import identity
from microbench.store.baseline import Gate, check_same_configuration, metrics, trial_values
from microbench.store.entry import Entry, entries_of
from microbench.store import iteration_noise, ranges
from microbench.store.figures import FRACTION, gate_figures


def _entry(document: dict) -> Entry:
    """This run as the baseline is read: its result document through store.entry."""
    return entries_of(document, "this run")[0]


def judge(current: dict, gate: Gate) -> stats.GateVerdict:
    """The gate's verdict on this run (its result document, ``current``) against
    ``gate.baseline``, known before anything is written (a failed gate must not replace the
    baseline it failed against)."""
    ours = _entry(current)
    verdict = stats.gate(trial_values(gate.entry), trial_values(ours), gate.tolerance_pct)
    # One trial on a side: a ratio inside the runs' own iteration noise fails no gate.
    return iteration_noise.ruled(verdict, (gate.entry, ours))


def compare(current: dict, gate: Gate, out: TextIO, verdict: stats.GateVerdict | None = None
           ) -> None:
    """Print this run (its result document, the one its file holds) against ``gate.baseline``
    and the verdict; raise Regression when the gate finds a significant drop beyond the
    tolerance."""
    check_same_configuration(identity.of_document(current), gate.baseline, gate.path,
                             gate.any_config)
    verdict = verdict or judge(current, gate)
    entries = (gate.entry, _entry(current))
    ours, theirs = metrics(entries[1]), metrics(gate.entry)
    _check_ratio(verdict, gate.path)
    print(f"Comparison with {safe_text.terminal(gate.path)} "
          f"(tolerance {gate.tolerance_pct:g}% on throughput)",
          file=out)
    print(f"  {'metric':<28} {'baseline':>12} {'this run':>12} {'change':>9}", file=out)
    fractions = {figure.gate for figure in gate_figures() if figure.unit == FRACTION}
    for name, value in ours.items():
        before, fraction = theirs[name], name in fractions
        show = _percent if fraction else _show
        print(f"  {name:<28} {show(before):>12} {show(value):>12} "
              f"{_change(fraction, before, value):>9}", file=out)
    print(f"  Gate: {_verdict_line(verdict, entries)}", file=out)
    if verdict.regression and not gate.fail:
        print("  Gate failed; --fail-if never: exit 0", file=out)
    elif verdict.regression:
        now, before = ours["Throughput [img/sec]"], theirs["Throughput [img/sec]"]
        raise Regression(f"throughput regressed {verdict.drop_pct:.1f}% against {gate.path} "
                         f"({now:.2f} vs {before:.2f} img/s; tolerance {gate.tolerance_pct:g}%; "
                         f"{_basis(verdict, entries)})")
    else:
        print("  Gate passed", file=out)


def _check_ratio(verdict: stats.GateVerdict, path: str) -> None:
    """A ratio of this run to the baseline beyond any two runs' (a baseline of 2.3e-308 img/s
    is in range, this run over it is infinity) judges nothing: refused, exit 2, after this
    run's result was written."""
    low, high = verdict.ci95 or (verdict.ratio, verdict.ratio)
    if any(ranges.ratio_problem(value) for value in (verdict.ratio, low, high)):
        raise UsageError(f"--compare {path}: this run's throughput over the baseline's is "
                         f"{ranges.BEYOND_RATIO}: the baseline is no run of this "
                         f"configuration; compare with one that is")


def _basis(verdict: stats.GateVerdict, entries: tuple[Entry, Entry]) -> str:
    """What the verdict rests on, for the one line of a failed gate."""
    if verdict.p_value is None:
        band = iteration_noise.band_of(entries)
        beyond = "" if band is None else f"; beyond their iteration noise {band.text}"
        return f"one sample on a side: a point ratio, noise not tested{beyond}"
    return f"Welch p = {verdict.p_value:.3g}"


def _verdict_line(verdict: stats.GateVerdict, entries: tuple[Entry, Entry]) -> str:
    """``ratio 0.800 (this run / baseline): slower (interval 0.781-0.822) [Welch's ...]``:
    each fact once (the interval or the point-ratio basis in the verdict, the test in the
    brackets); one trial on a side: within noise, or the point ratio beyond it
    (:func:`microbench.store.iteration_noise.words`)."""
    return (f"ratio {stats.ratio_text(verdict.ratio)} (this run / baseline): "
            f"{iteration_noise.words(verdict.comparison, entries)} "
            f"[{verdict.method}]")


def _show(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2%}"


def _change(fraction: bool, before: float | None, value: float | None) -> str:
    """Relative change; for a fraction (the CV), the difference in percentage points."""
    if value is None or not before:
        return "n/a"
    if fraction:
        return f"{(value - before) * 100:+.2f} pt"
    if value == 0:              # all of it gone: -100%, not a ratio beyond any two runs'
        return f"{-1:+.1%}"
    ratio = ranges.ratio_of(value, before)
    return "n/a" if ratio is None else f"{(ratio - 1):+.1%}"
