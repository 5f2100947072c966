"""Results on disk read back: ``--compare BASELINE.json`` and ``--scaling-baseline FILE.json``.

``--compare`` is a gate for CI pipelines: every metric is printed with its change, and a
throughput below the baseline by more than ``--tolerance`` percent raises
:class:`~microbench.errors.Regression` (exit 5). A baseline of another configuration is refused:
comparing resnet50 with resnet18, or batch 64 with batch 128, measures nothing
(:mod:`microbench.identity` says which settings must agree). Both baselines are read by the
runner right after the run is resolved, before anything runs or is written.
"""
from __future__ import annotations

from typing import TextIO

from .. import identity
from ..errors import Regression, UsageError
from ..spec import Gate
from ..stored import load_result
from .files import result_document


def read_gate(path: str, tolerance_pct: float, spec) -> Gate:
    """``--compare``'s baseline, read before the run, refusing another configuration now so
    that it does not cost the user the run."""
    gate = Gate(path, tolerance_pct, load_result(path, "--compare"))
    check_same_configuration(identity.of_spec(spec), gate.baseline, path)
    return gate


def check_same_configuration(ours: dict, baseline: dict, path: str) -> None:
    differ = identity.differences(ours, identity.of_document(baseline), identity.GATE)
    if differ:
        raise UsageError(f"--compare {path} is another configuration: {'; '.join(differ)}")


def scaling_baseline(path: str, spec) -> float:
    """Single-device throughput from a result JSON, refusing another configuration (the same
    work per device: network, mode, precision, per-device batch, input size, layout, compile
    setting, device model...), or the efficiency would compare different work."""
    document = load_result(path, "--scaling-baseline")
    if document.get("GPUs") != 1:
        raise UsageError(f"--scaling-baseline {path} is a {document.get('GPUs')}-device result; "
                         f"give a single-device run of the same configuration")
    differ = identity.differences(identity.of_spec(spec), identity.of_document(document),
                                  identity.WORK)
    if differ:
        raise UsageError(f"--scaling-baseline {path} differs in {'; '.join(differ)}")
    return float(document["Throughput [img/sec]"])


def _metric(document: dict, *keys: str) -> float | None:
    value = document
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, (int, float)) else None


CV_METRIC = "Coefficient of variation"


def _metrics(document: dict) -> dict[str, float | None]:
    return {
        "Throughput [img/sec]": _metric(document, "Throughput [img/sec]"),
        "Median iteration [ms]": _metric(document, "timing", "stats", "median_ms"),
        "p99 iteration [ms]": _metric(document, "timing", "stats", "p99_ms"),
        CV_METRIC: _metric(document, "timing", "stats", "cv"),
        "Peak memory allocated [MB]": _metric(document, "memory", "peak_allocated_mb"),
    }


def compare(summary, gate, out: TextIO) -> None:
    """Print this run against ``gate.baseline``; raise Regression past the tolerance."""
    current, baseline = result_document(summary), gate.baseline
    check_same_configuration(identity.of_document(current), baseline, gate.path)
    ours, theirs = _metrics(current), _metrics(baseline)
    print(f"Comparison with {gate.path} (tolerance {gate.tolerance_pct:g}% on throughput)",
          file=out)
    print(f"  {'metric':<28} {'baseline':>12} {'this run':>12} {'change':>9}", file=out)
    for name, value in ours.items():
        before = theirs[name]
        show = _percent if name == CV_METRIC else _show
        print(f"  {name:<28} {show(before):>12} {show(value):>12} "
              f"{_change(name, before, value):>9}", file=out)
    now, before = ours["Throughput [img/sec]"], theirs["Throughput [img/sec]"]
    drop_pct = (1 - now / before) * 100
    if drop_pct > gate.tolerance_pct:
        raise Regression(f"throughput regressed {drop_pct:.1f}% against {gate.path} "
                         f"({now:.2f} vs {before:.2f} img/s; tolerance {gate.tolerance_pct:g}%)")
    print(f"  Throughput within tolerance ({-drop_pct:+.1f}%)", file=out)


def _show(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2%}"


def _change(name: str, before: float | None, value: float | None) -> str:
    """Relative change; for the CV, already a ratio, the difference in percentage points."""
    if value is None or not before:
        return "n/a"
    if name == CV_METRIC:
        return f"{(value - before) * 100:+.2f} pt"
    return f"{(value / before - 1):+.1%}"
