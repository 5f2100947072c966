"""``microbench-node --baseline FILE`` and ``--save-baseline FILE``: a known-good reference of
each device model, so that a node whose GPUs are all slow (a node-wide power cap, a wrong
driver, a cooling fault) is seen; judged against its own median alone, it passes.

A baseline is read from either of two documents of the published schema
(``store/result.schema.json``):

* a node check's own result document (``node_check``) of a healthy run: the samples of every
  GPU it did not flag, per device model;
* a baseline document (``node_baseline``), which ``--save-baseline`` writes: per device model,
  each judged figure's pooled samples and their median.

Only the figures that decide a verdict (``parts.judged``) are kept: a host-bound figure is not
a property of the GPU model. The samples of several GPUs are pooled, so the spread between
healthy GPUs of the model is part of the noise a GPU is judged against (``verdict.py``).

This module reads and writes documents; it imports no torch (the flags are checked before).
"""
from __future__ import annotations

import datetime
import json
import statistics
from dataclasses import dataclass, field

from microbench import __version__
from microbench.node.parts import GPU_FIGURES, judged
from microbench.platform import writing
from microbench.platform.errors import UsageError
from microbench.store import schema, stored


@dataclass(frozen=True)
class Baseline:
    """Per device model, per judged figure: the reference samples (pooled over its GPUs)."""

    source: str                                          # the file it was read from
    models: dict = field(default_factory=dict)           # device name -> {key: samples}
    gpus: dict = field(default_factory=dict)             # device name -> GPUs it pooled

    def samples(self, device_name: str, key: str) -> tuple[float, ...]:
        return tuple(self.models.get(device_name, {}).get(key, ()))


def _judged_keys() -> tuple[str, ...]:
    return tuple(figure.key for figure in GPU_FIGURES if judged(figure.key))


def of_node_check(check: dict, source: str) -> Baseline:
    """The GPUs a node check did not flag, their judged figures' samples pooled per model."""
    models: dict[str, dict[str, list[float]]] = {}
    gpus: dict[str, int] = {}
    for gpu in check["gpus"]:
        if gpu.get("flagged"):
            continue                # a flagged GPU is no reference of its model
        name = gpu["device_name"]
        gpus[name] = gpus.get(name, 0) + 1
        for key in _judged_keys():
            figure = gpu["figures"].get(key) or {}
            if figure.get("samples") and not figure.get("failure"):
                models.setdefault(name, {}).setdefault(key, []).extend(figure["samples"])
    return Baseline(source, {name: {key: tuple(values) for key, values in figures.items()}
                             for name, figures in models.items()}, gpus)


def of_baseline_document(document: dict, source: str) -> Baseline:
    models, gpus = {}, {}
    for model in document["node_baseline"]["models"]:
        models[model["device_name"]] = {key: tuple(figure["samples"])
                                        for key, figure in model["figures"].items()
                                        if judged(key)}
        gpus[model["device_name"]] = model["gpus"]
    return Baseline(source, models, gpus)


def load(path: str) -> Baseline:
    """``--baseline``'s file, validated against the schema; one line (exit 2) otherwise."""
    document = stored.load_document(path, "--baseline")
    kind = schema.document_kind(document)
    if kind == schema.NODE:
        baseline = of_node_check(document["node_check"], path)
    elif kind == schema.NODE_BASELINE:
        baseline = of_baseline_document(document, path)
    else:
        raise UsageError(f"--baseline {path}: a {kind or 'unknown'} document, not a node "
                         f"check's: give a node check's result (microbench-node --json) or a "
                         f"baseline it saved (--save-baseline)")
    if not any(baseline.models.values()):
        raise UsageError(f"--baseline {path}: no GPU figure to compare with (every GPU of it "
                         f"was flagged, or it measured none): save one from a healthy run")
    return baseline


def document(check: dict) -> dict:
    """The baseline document of a node check's result document (its unflagged GPUs)."""
    baseline = of_node_check(check, "")
    models = [{"device_name": name, "gpus": baseline.gpus[name],
               "figures": {key: {"median": statistics.median(samples),
                                 "samples": list(samples)}
                           for key, samples in figures.items()}}
              for name, figures in baseline.models.items() if figures]
    return {"schema_version": schema.SCHEMA_VERSION, "node_baseline": {
        "version": __version__,
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "from": {"time": check.get("time"), "command": check.get("command", []),
                 "quick": check.get("quick"), "samples": check.get("samples")},
        "models": models}}


def save(check: dict, path: str) -> str | None:
    """Write ``path`` (whole or not at all); the line to print, or None when no GPU was left
    to be a reference (every GPU flagged: nothing is written)."""
    written = document(check)
    if not written["node_baseline"]["models"]:
        return (f"Baseline: not written to {path}: every GPU was flagged, so none is a "
                f"reference")
    schema.validate_result(written, "the node check's own baseline")      # the schema holds
    writing.write_whole(path, json.dumps(written, indent=1) + "\n")
    models = ", ".join(f"{m['device_name']} ({m['gpus']} "
                       f"{'processes' if m['device_name'] == 'cpu' else 'GPUs'})"
                       for m in written["node_baseline"]["models"])
    return f"Baseline: {path} ({models})"
