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

The links are kept too (issue 62: with every GPU of a host busy its peer links fell by half and
the baseline flagged none): per device model, the pair copies' samples pooled over the pairs
that flagged nothing, and each all-reduce by its :class:`LinkShape` (inside a node or across
the nodes, how many ranks and nodes, the message size), since a bus bandwidth is comparable
only with one measured over as many GPUs the same way. A link touching a flagged GPU is no
reference either.

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


# A link's figures (``parts.LINK_KEYS``) and the scopes an all-reduce is measured over.
P2P, ALLREDUCE = "p2p_gbs", "allreduce_busbw_gbs"
PAIR, NODE, ALL_NODES = "pair", "node", "all nodes"


@dataclass(frozen=True)
class LinkShape:
    """What a link's figure can be compared with: a pair's copy (any pair of the model), or an
    all-reduce over ``ranks`` GPUs of ``nodes`` nodes (``scope`` NODE: inside one node;
    ALL_NODES: the job's) at ``size`` bytes."""

    figure: str
    scope: str = PAIR
    ranks: int = 2
    nodes: int = 1
    size: int = 0

    def words(self) -> str:
        """The shape in words, for the note on what a baseline lacks."""
        if self.figure == P2P:
            return "pair copies"
        where = "inside a node" if self.scope == NODE else f"across {self.nodes} nodes"
        size = (f"{self.size >> 20} MiB" if self.size >= 1 << 20 else
                f"{self.size >> 10} KiB" if self.size >= 1 << 10 else f"{self.size} bytes")
        return f"all-reduce of {self.ranks} ranks {where} at {size}"


def collective_shape(scope: str, ranks: int, nodes: int, size: int) -> LinkShape:
    """The shape of an all-reduce whose scope is a node's ("node <name>") or the job's."""
    return LinkShape(ALLREDUCE, NODE if scope.startswith("node ") else ALL_NODES, ranks,
                     1 if scope.startswith("node ") else nodes, size)


@dataclass(frozen=True)
class Baseline:
    """Per device model, per judged figure: the reference samples (pooled over its GPUs), and
    per link shape the links' samples."""

    source: str                                          # the file it was read from
    models: dict = field(default_factory=dict)           # device name -> {key: samples}
    gpus: dict = field(default_factory=dict)             # device name -> GPUs it pooled
    links: dict = field(default_factory=dict)            # device name -> {LinkShape: samples}

    def samples(self, device_name: str, key: str) -> tuple[float, ...]:
        return tuple(self.models.get(device_name, {}).get(key, ()))

    def link_samples(self, device_name: str | None, shape: LinkShape) -> tuple[float, ...]:
        if device_name is None:
            return ()
        return tuple(self.links.get(device_name, {}).get(shape, ()))


def _judged_keys() -> tuple[str, ...]:
    return tuple(figure.key for figure in GPU_FIGURES if judged(figure.key))


def of_node_check(check: dict, source: str) -> Baseline:
    """The GPUs a node check did not flag, their judged figures' samples pooled per model, and
    the links that flagged nothing and touch no flagged GPU."""
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
                             for name, figures in models.items()}, gpus,
                    _links_of_check(check))


def _links_of_check(check: dict) -> dict:
    """Per device model, per link shape: the samples of the check's healthy links."""
    model = {gpu["rank"]: gpu["device_name"] for gpu in check["gpus"]}
    flagged_gpus = {gpu["rank"] for gpu in check["gpus"] if gpu.get("flagged")}
    flagged = [link for link in check.get("links", ()) if link.get("flagged")]
    flagged_pairs = {tuple(sorted(link.get("ranks") or ())) for link in flagged}
    flagged_scopes = {link.get("scope") for link in flagged if link.get("scope")}
    links: dict[str, dict[LinkShape, list[float]]] = {}
    for copy in check.get("p2p", ()):
        ranks = (copy["source_rank"], copy["target_rank"])
        name = model.get(copy["target_rank"])
        if (name is None or tuple(sorted(ranks)) in flagged_pairs
                or flagged_gpus.intersection(ranks) or not copy["gbs"]):
            continue
        links.setdefault(name, {}).setdefault(LinkShape(P2P), []).extend(copy["gbs"])
    collectives = check.get("allreduce", ())
    nodes = sum(1 for c in collectives if c["scope"].startswith("node "))
    for collective in collectives:
        names = {model.get(rank) for rank in collective["ranks"]}
        name = names.pop() if len(names) == 1 else None
        if (name is None or collective["scope"] in flagged_scopes
                or flagged_gpus.intersection(collective["ranks"])):
            continue                # of two models, or not healthy: no reference
        for size in collective["sizes"]:
            if size["busbw_gbs"]:
                shape = collective_shape(collective["scope"], len(collective["ranks"]), nodes,
                                         size["bytes"])
                links.setdefault(name, {}).setdefault(shape, []).extend(size["busbw_gbs"])
    return {name: {shape: tuple(values) for shape, values in shapes.items()}
            for name, shapes in links.items()}


def of_baseline_document(document: dict, source: str) -> Baseline:
    """A saved baseline; one naming a device model twice is refused (one line, exit 2): which
    of its two sets of samples to judge by is not for the tool to guess."""
    models, gpus, links = {}, {}, {}
    for model in document["node_baseline"]["models"]:
        if model["device_name"] in models:
            raise UsageError(f"--baseline {source}: names {model['device_name']!r} twice: "
                             f"keep one entry per device model (save it again with "
                             f"--save-baseline)")
        models[model["device_name"]] = {key: tuple(figure["samples"])
                                        for key, figure in model["figures"].items()
                                        if judged(key)}
        gpus[model["device_name"]] = model["gpus"]
        shapes = {LinkShape(link["figure"], link["scope"], link["ranks"], link["nodes"],
                            link["bytes"]): tuple(link["samples"])
                  for link in model.get("links", ())}
        if shapes:
            links[model["device_name"]] = shapes
    return Baseline(source, models, gpus, links)


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
                           for key, samples in figures.items()},
               "links": [{"figure": shape.figure, "scope": shape.scope, "ranks": shape.ranks,
                          "nodes": shape.nodes, "bytes": shape.size,
                          "median": statistics.median(samples), "samples": list(samples)}
                         for shape, samples in sorted(baseline.links.get(name, {}).items(),
                                                      key=lambda item: _order(item[0]))]}
              for name, figures in baseline.models.items() if figures]
    return {"schema_version": schema.SCHEMA_VERSION, "node_baseline": {
        "version": __version__,
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "from": {"time": check.get("time"), "command": check.get("command", []),
                 "quick": check.get("quick"), "samples": check.get("samples")},
        "models": models}}


def _order(shape: LinkShape) -> tuple:
    return (shape.figure != P2P, shape.scope, shape.nodes, shape.ranks, shape.size)


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
                       f"{'processes' if m['device_name'] == 'cpu' else 'GPUs'}"
                       f"{' and their links' if m['links'] else ''})"
                       for m in written["node_baseline"]["models"])
    return f"Baseline: {path} ({models})"
