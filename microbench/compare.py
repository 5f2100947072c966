"""``--compare BASELINE.json``: this run against an earlier result of the same configuration.

A gate for CI pipelines: every metric is printed with its change, and a throughput below the
baseline by more than ``--tolerance`` percent raises :class:`~microbench.errors.Regression`
(exit 5). A baseline of another configuration is refused: comparing resnet50 with resnet18, or
batch 64 with batch 128, measures nothing.
"""
from __future__ import annotations

import json
from typing import TextIO

from .errors import Regression, UsageError

# Fields that must agree for two results to be comparable.
IDENTITY = (("config", "network"), ("config", "mode"), ("precision", "name"), ("config", "nhwc"),
            ("config", "compile"), ("Mini batch size [img]", None), ("GPUs", None))


def _field(document: dict, key: str, sub: str | None):
    value = document.get(key)
    return value.get(sub) if sub is not None and isinstance(value, dict) else value


def load_result(path: str, flag: str = "--compare") -> dict:
    """A result JSON named by ``flag``; unreadable is a usage error."""
    try:
        with open(path) as stream:
            return json.load(stream)
    except (OSError, ValueError) as error:
        raise UsageError(f"{flag} {path}: cannot read a result JSON ({error})") from None


def check_same_configuration(current: dict, baseline: dict, path: str) -> None:
    differ = []
    for key, sub in IDENTITY:
        ours, theirs = _field(current, key, sub), _field(baseline, key, sub)
        if ours != theirs:
            differ.append(f"{sub or key} {theirs!r} there, {ours!r} here")
    if differ:
        raise UsageError(f"--compare {path} is another configuration: {'; '.join(differ)}")


def _metrics(document: dict) -> dict[str, tuple[float | None, bool]]:
    """Metric name -> (value, higher is better)."""
    stats = document["timing"]["stats"]
    return {
        "Throughput [img/sec]": (document["Throughput [img/sec]"], True),
        "Median iteration [ms]": (stats["median_ms"], False),
        "p99 iteration [ms]": (stats["p99_ms"], False),
        "Coefficient of variation": (stats["cv"], False),
        "Peak memory allocated [MB]": (document["memory"]["peak_allocated_mb"], False),
    }


def compare(current: dict, baseline: dict, path: str, tolerance_pct: float, out: TextIO) -> None:
    check_same_configuration(current, baseline, path)
    ours, theirs = _metrics(current), _metrics(baseline)
    print(f"Comparison with {path} (tolerance {tolerance_pct:g}% on throughput)", file=out)
    print(f"  {'metric':<28} {'baseline':>12} {'this run':>12} {'change':>9}", file=out)
    for name, (value, _) in ours.items():
        before = theirs[name][0]
        if value is None or before is None:
            change = "n/a"
        else:
            change = f"{(value / before - 1):+.1%}" if before else "n/a"
        print(f"  {name:<28} {_show(before):>12} {_show(value):>12} {change:>9}", file=out)
    now, before = ours["Throughput [img/sec]"][0], theirs["Throughput [img/sec]"][0]
    drop_pct = (1 - now / before) * 100
    if drop_pct > tolerance_pct:
        raise Regression(f"throughput regressed {drop_pct:.1f}% against {path} "
                         f"({now:.2f} vs {before:.2f} img/s; tolerance {tolerance_pct:g}%)")
    print(f"  Throughput within tolerance ({-drop_pct:+.1f}%)", file=out)


def _show(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"
