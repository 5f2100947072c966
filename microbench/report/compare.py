"""Results on disk read back: ``--compare BASELINE.json`` and ``--scaling-baseline FILE.json``.

``--compare`` is a gate for CI pipelines: every metric is printed with its change, and a
throughput below the baseline by more than ``--tolerance`` percent raises
:class:`~microbench.errors.Regression` (exit 5). A baseline of another configuration is refused:
comparing resnet50 with resnet18, or batch 64 with batch 128, measures nothing. Both baselines
are read when the run is resolved, before anything runs or is written.
"""
from __future__ import annotations

import json
import math
from typing import TextIO

from ..errors import Regression, UsageError
from .files import result_document

# Fields that must agree for two results to be comparable.
IDENTITY = (("config", "network"), ("config", "mode"), ("precision", "name"), ("config", "nhwc"),
            ("config", "compile"), ("Mini batch size [img]", None), ("GPUs", None))


def _field(document: dict, key: str, sub: str | None):
    value = document.get(key)
    return value.get(sub) if sub is not None and isinstance(value, dict) else value


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


def scaling_baseline(path: str, spec) -> float:
    """Single-device throughput from a result JSON, refusing another configuration: the same
    network, mode, precision, per-device batch, input size, layout, compile setting and device
    model, or the efficiency would compare different work."""
    document = load_result(path, "--scaling-baseline")
    if document.get("GPUs") != 1:
        raise UsageError(f"--scaling-baseline {path} is a {document.get('GPUs')}-device result; "
                         f"give a single-device run of the same configuration")
    mismatched = [f"{name} ({theirs!r} there, {ours!r} here)"
                  for name, theirs, ours in _scaling_identity(document, spec) if theirs != ours]
    if mismatched:
        raise UsageError(f"--scaling-baseline {path} differs in {'; '.join(mismatched)}")
    return float(document["Throughput [img/sec]"])


def _scaling_identity(document: dict, spec) -> list[tuple[str, object, object]]:
    from ..device import device_name
    model = spec.model
    input_size = (model.seq_len if model.tokens_per_item is not None else model.image_size)
    theirs_model = document.get("model") if isinstance(document.get("model"), dict) else {}
    theirs_input = theirs_model.get("seq_len", theirs_model.get("image_size"))
    return [
        ("network", _field(document, "config", "network"), spec.config.network),
        ("mode", _field(document, "config", "mode"), spec.config.mode),
        ("precision", _field(document, "precision", "name"), spec.precision.name),
        ("per-device batch", document.get("Mini batch size [img/gpu]"), spec.batch_size),
        ("input size", theirs_input, input_size),
        ("layout (nhwc)", _field(document, "config", "nhwc"), spec.config.nhwc),
        ("compile", (_field(document, "config", "compile"),
                     _field(document, "config", "compile_options")),
         (spec.config.compile, spec.config.compile_options)),
        ("device", _field(document, "env", "device_name"), device_name(spec.device)),
    ]


def planned_identity(spec) -> dict:
    """The identity fields a result of ``spec`` will have, known before the run, so a baseline
    of another configuration is refused before it costs the user the run."""
    config = spec.config
    return {"config": {"network": config.network, "mode": config.mode, "nhwc": config.nhwc,
                       "compile": config.compile},
            "precision": {"name": spec.precision.name},
            "Mini batch size [img]": spec.launch.global_batch, "GPUs": spec.launch.world_size}


def check_same_configuration(current: dict, baseline: dict, path: str) -> None:
    differ = []
    for key, sub in IDENTITY:
        ours, theirs = _field(current, key, sub), _field(baseline, key, sub)
        if ours != theirs:
            differ.append(f"{sub or key} {theirs!r} there, {ours!r} here")
    if differ:
        raise UsageError(f"--compare {path} is another configuration: {'; '.join(differ)}")


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
    check_same_configuration(current, baseline, gate.path)
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
