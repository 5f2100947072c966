"""What one stored result says: its settings and its figures, whatever version wrote it.

An :class:`Entry` is one row of the report: a run's result (from its own file or from a sweep),
a sweep's failed configuration, the older tool's result, or one op of the op bench. Its settings
are what ran (network, precision, batch, device, PyTorch, ...: the columns a report may show when
they differ); its figures are what was measured, each on the basis the document names, and None
where the document does not know it (MFU without a datasheet peak, energy on the CPU, anything
the older tool did not record). Nothing is estimated here. A result's figures, and an op's, are
the registry's (:mod:`microbench.store.figures`), each read where it says the document holds
it.

Every version the tool has written is read (``schema.READABLE_VERSIONS``): version 1 stored the
precision flags instead of a precision name and had no ``model.item`` or ``model.image_size``;
later versions added trials, telemetry, generation and token throughput. Each figure falls back
to the older field where one holds it, and to None where none does.

Example::

    entries = entries_of(document, "results/resnet50_training_fp32_b64.json")
    entries[0].settings["precision"], entries[0].figures["throughput"], entries[0].unit
"""
from __future__ import annotations

from typing import Any, Iterable

import dataclasses
import functools
import json
from dataclasses import dataclass, field

from microbench.settings import identity
from microbench.settings.config import SCHEMA
from microbench.store import schema
from microbench.store.provenance import environment_of
from microbench.store.figures import (MODEL, NODE, OP, number, read_all, tokens_per_item,
                                      value_at)

# Config keys that are not settings of the measurement: those --rerun does not replay (where
# results went, how the job was launched: config.SCHEMA says which), the device *request* (the
# device that ran is a setting of its own), and keys shown under a setting of their own below,
# older versions' precision flags among them.
NOT_SETTINGS = frozenset(
    {name for name, item in SCHEMA.items() if not item.replayed}
    | {"device", "network", "batch_size", "image_size", "seq_len", "attention", "mode",
       "prompt_len", "gen_len", "precision", "fp16", "amp", "amp_dtype", "amp_opt_level", "nhwc",
       "compile", "compile_options", "compile_notes"})


@dataclass(frozen=True)
class Entry:
    """One row of a report."""

    table: str                          # MODEL, OP or NODE: which table the row belongs to
    source: str                         # the file, and the row of a sweep
    settings: dict                      # setting -> value; None: does not apply or unknown
    figures: dict                       # figure -> number; None: unknown or not recorded
    unit: str                           # unit of the throughput: images/s, tokens/s, ...
    status: str = "ok"                  # ok, or why nothing was measured (out of memory, ...)
    error: str = ""
    trial_values: tuple[float, ...] = ()      # each trial's throughput, in ``unit``
    samples_ms: tuple[float, ...] = ()        # per-iteration times (the basis samples)
    work_per_iteration: float | None = None   # units of ``unit`` done by one iteration
    time_utc: str | None = None
    identity: str = ""                  # equal for one measurement read twice
    flags: tuple[str, ...] = field(default=())  # marks for the table: noisy, estimated energy
    file: str = ""                      # the file it was read from
    note: str = ""                      # a footnote of its own (an A/B side B: the verdict)
    accuracy_kind: str = ""             # logits | loss: what figures["accuracy"] measures;
                                        # "" where the run measured none (BF16, the reference)
    accuracy_reference: str = ""        # what figures["accuracy"] is measured against, as the
                                        # run names it (BF16, FP16, AMP-BF16); "" without one
    data_unit: str = ""                 # the input pipeline's unit (--data loader|folder);
                                        # "" for synthetic input
    data_verdict: str = ""              # input-bound, compute-bound, ... ("" without a pipeline)
    label: str = ""                     # --label: the user's name for the run ("" without)
    configuration: str = ""             # the gate's identity (settings.identity.GATE) as one
                                        # string: equal for results --compare would compare;
                                        # "" where the document records none (the older tool)
    environment: dict = field(default_factory=dict)   # what it ran on (store.provenance)

    @property
    def measured(self) -> bool:
        return self.status == "ok"


def _get(document: object, *keys: str) -> Any:
    """document[k1][k2]...; None where any level is missing or not an object."""
    return value_at(document, keys)



# ---------------------------------------------------------------- settings

def _v1_precision(config: dict) -> str | None:
    """The precision name version 1 derived from its flags (microbench/settings/precision.py resolve()
    as of schema version 1); None when the flags are not there."""
    if "fp16" not in config and "amp" not in config:
        return None
    opt_level = config.get("amp_opt_level")
    if isinstance(opt_level, int):
        return {0: "fp32", 1: "amp-fp16", 2: "fp16", 3: "fp16"}.get(opt_level)
    if config.get("fp16"):
        return "fp16"
    if config.get("amp"):
        return "amp-bf16" if config.get("amp_dtype") == "bf16" else "amp-fp16"
    return "tf32" if config.get("tf32") else "fp32"


def _compile(config: dict) -> str | None:
    if "compile" not in config:
        return None
    if not config["compile"]:
        return "off"
    options = dict(config.get("compile_options") or {})
    mode = options.pop("mode", None) or "default"
    extra = [f"{key}={json.dumps(value)}" for key, value in sorted(options.items())]
    return ", ".join([mode, *extra])


def _is_language(model: dict, config: dict) -> bool:
    return model.get("family") == "language" or config.get("seq_len") is not None


def _input_size(model: dict, config: dict) -> tuple[int | None, int | None]:
    """(image size, sequence length): the resolved values where the model block has them, the
    requested ones (version 1 stored the resolved image size in the config) otherwise."""
    if _is_language(model, config):
        return None, model.get("seq_len", config.get("seq_len"))
    size = model.get("image_size", config.get("image_size"))
    shape = model.get("input_shape")
    if size is None and isinstance(shape, list) and len(shape) >= 3:
        size = shape[-1]                 # (batch, channels, [frames,] height, width)
    return size, None


@functools.lru_cache(maxsize=1024)     # a config's few dozen keys, in each of 10,000 files
def _setting_name(key: str) -> str:
    """A stored setting under its flag's spelling (opt-step, telemetry-interval); a key this
    version no longer has, with dashes."""
    item = SCHEMA.get(key)
    return item.flag.lstrip("-") if item is not None else key.replace("_", "-")


def _generic_settings(config: dict) -> dict:
    """Every other stored setting (opt-step, iterations, cudnn-benchmark, ...), None where it
    did not apply (identity.ONLY_UNDER: the pipeline's settings of a synthetic run, a data-images
    4096 that did nothing; --fp8-recipe without --precision fp8; ...)."""
    unused = identity.not_in_effect(config)
    return {_setting_name(key): None if key in unused else value
            for key, value in config.items() if key not in NOT_SETTINGS}


def model_settings(document: dict, config: dict | None = None) -> dict:
    """The settings of a result (or, with ``config`` alone, of a sweep's failed row)."""
    config = config if config is not None else (_get(document, "config") or {})
    model, env = _get(document, "model") or {}, _get(document, "env") or {}
    language = _is_language(model, config)
    image_size, seq_len = _input_size(model, config)
    generation = _get(document, "generation") or {}
    return {
        "network": model.get("name") or config.get("network") or document.get("Name"),
        "mode": config.get("mode"),
        "precision": _get(document, "precision", "name") or config.get("precision")
        or _v1_precision(config),
        "batch": document.get("Mini batch size [img]", config.get("batch_size")),
        "devices": document.get("GPUs"),
        "image size": image_size,
        "seq len": seq_len,
        "attention": (model.get("attention") or config.get("attention")) if language else None,
        "prompt": generation.get("prompt_len", config.get("prompt_len")),
        "generated": generation.get("gen_len", config.get("gen_len")),
        "layout": None if language or "nhwc" not in config else
        ("NHWC" if config["nhwc"] else "NCHW"),
        "compile": _compile(config),
        **_generic_settings(config),
        "device": env.get("device_name"),
        "measured peak": measured_peak(document),
        "host": env.get("host"),
        "torch": env.get("torch"),
        "tool": document.get("tool_version"),
    }


def _two_digits(value: float, units: tuple[tuple[float, str], ...]) -> str:
    for scale, unit in units:
        if value >= scale:
            return f"{float(f'{value / scale:.2g}'):g} {unit}"
    return f"{float(f'{value:.2g}'):g} {units[-1][1]}"


def measured_peak(document: dict) -> str | None:
    """What this device measured in its run (--measure-peaks), to two significant digits so that
    results of machines that run alike fall in one group and a power-capped one stands apart:
    ``790 TFLOP/s bf16, 3 TB/s``. None without a probe (files before issue 35 included)."""
    measured = _get(document, "peaks", "measured")
    if not isinstance(measured, dict):
        return None
    parts = []
    tflops, gbs = number(measured.get("tflops")), number(measured.get("gb_per_s"))
    if tflops:
        rate = _two_digits(tflops * 1e12, ((1e12, "TFLOP/s"), (1e9, "GFLOP/s")))
        parts.append(f"{rate} {measured.get('dtype', '')}".rstrip())
    if gbs:
        parts.append(_two_digits(gbs * 1e9, ((1e12, "TB/s"), (1e9, "GB/s"))))
    return ", ".join(parts) or None


# ---------------------------------------------------------------- figures

def _item(document: dict) -> str:
    """What one item of the batch is (image, clip, sequence); version 1 said it by family."""
    model = _get(document, "model") or {}
    if isinstance(model.get("item"), str):
        return model["item"]
    return "clip" if model.get("family") == "video" else "image"


def _trial_values(document: dict, scale: float) -> tuple[float, ...]:
    """Each trial's throughput, in the result's unit."""
    values = _get(document, "trials", "values") or ()
    return tuple(v * scale for v in values if number(v) is not None)


def _identity(document: dict) -> str:
    """The same measurement read twice (a sweep file and the row's own file) has the same time,
    host and exact throughput."""
    return json.dumps([_get(document, "env", "time_utc"), _get(document, "env", "host"),
                       document.get("Throughput [img/sec]"),
                       (_get(document, "timing", "samples_ms") or [])[:4]])


def result_entry(document: dict, source: str, file: str = "") -> Entry:
    """A run's result (version 1 or 2), read from ``file``."""
    scale = tokens_per_item(document)
    unit = f"{_item(document)}s/s"
    if scale != 1.0 or _get(document, "model", "family") == "language":
        # Generation counts the tokens it generates, training and inference those processed:
        # two quantities, never compared with each other.
        unit = "generated tokens/s" if "generation" in document else "tokens/s"
    figures = read_all(document)
    flags = (("noisy",) if _get(document, "timing", "noisy") else ()) + \
        (("estimated energy",) if figures["energy_per_unit"] is not None
         and _get(document, "telemetry", "energy_estimated") else ())
    batch = number(document.get("Mini batch size [img]"))
    return Entry(MODEL, source, model_settings(document), figures, unit,
                 trial_values=_trial_values(document, scale),
                 samples_ms=tuple(_get(document, "timing", "samples_ms") or ()),
                 work_per_iteration=batch * scale if batch else None,
                 time_utc=_get(document, "env", "time_utc"), identity=_identity(document),
                 flags=flags, accuracy_kind=str(_get(document, "accuracy", "kind") or ""),
                 accuracy_reference=str(_get(document, "accuracy", "reference") or ""),
                 data_unit=str(_get(document, "data", "unit") or "") if isinstance(
                     _get(document, "data"), dict) else "",
                 data_verdict=str(_get(document, "data", "verdict", "kind") or ""),
                 label=str(_get(document, "config", "label") or ""),
                 configuration=identity.key(identity.of_document(document), identity.GATE),
                 environment=environment_of(document), file=file)


def _precision_name(name: str) -> str:
    """A precision as a reference of accuracy names it: AMP-BF16 (FP8 training's reference,
    the same BF16 arithmetic under autocast) is BF16; ``bf16``, ``fp16`` upper case."""
    return name.upper().removeprefix("AMP-")


def accuracy_reference(entries: Iterable[Entry]) -> str | None:
    """What every reduced-precision row among ``entries`` measured its distance from (``BF16``,
    ``FP16``), or None when they name different references (then each cell names its own) or
    no row measured one. A label says "vs BF16" only where that is what was measured."""
    references = {_precision_name(entry.accuracy_reference or "BF16") for entry in entries
                  if entry.accuracy_kind}
    return references.pop() if len(references) == 1 else None


def is_accuracy_reference(entry: Entry, reference: str | None) -> bool:
    """Whether a row without a distance of its own is the reference the others were measured
    against (its precision is that reference): only then does it stand at distance 0."""
    precision = entry.settings.get("precision")
    return (not entry.accuracy_kind and reference is not None and isinstance(precision, str)
            and _precision_name(precision) == reference)


def older_tool_entry(document: dict, source: str) -> Entry:
    """The older tool's six keys: the network, the devices, the batch and the throughput (its
    time per mini-batch was a mean, not a percentile, so no latency column takes it)."""
    settings = {"network": document.get("Name"), "devices": document.get("GPUs"),
                "batch": document.get("Mini batch size [img]"), "tool": "older tool"}
    throughput = number(document["Throughput [img/sec]"])
    figures = {"throughput": throughput, "items_per_s": throughput, "trial_count": 1}
    return Entry(MODEL, source, settings, figures, "images/s",
                 identity=json.dumps([source, document.get("Throughput [img/sec]")]))


def failed_row_entry(row: dict, sweep: dict, source: str) -> Entry:
    """A sweep's configuration that did not run to the end: what it was, and why."""
    env = sweep.get("env") or {}
    measured = [r["result"] for r in sweep["rows"] if r.get("status") == "ok"]
    tool = measured[0].get("tool_version") if measured else None
    settings = model_settings({"env": env, "tool_version": tool}, row.get("config") or {})
    settings["devices"] = 1              # a sweep runs its rows on one device (sweep.py)
    return Entry(MODEL, source, settings, {}, "", status=str(row.get("status")),
                 error=str(row.get("error", "")), time_utc=env.get("time_utc"),
                 identity=json.dumps([source]))


def op_entry(run: dict, row: dict, source: str) -> Entry:
    """One op of the op bench: its shapes and dtype, the device and the run's timing settings;
    median time, GB/s, TFLOP/s and the share of the datasheet peak."""
    settings = {"op": row.get("op"), "op type": row.get("op_type"),
                "shapes": row.get("shapes"), "dtype": row.get("dtype"),
                "device": run.get("device_name"), "torch": run.get("torch"),
                "cache flush": run.get("flush_l2"), "iterations": run.get("num_iters"),
                "warmup": run.get("num_warmup_iters"), "tool": run.get("version")}
    figures = read_all(row, OP)
    flags = tuple(str(row.get("flags") or "").split())
    return Entry(OP, source, settings, figures, "ms", status=str(row.get("status")),
                 error=str(row.get("message") or ""),
                 samples_ms=tuple(row.get("samples_ms") or ()), time_utc=run.get("time"),
                 identity=json.dumps([run.get("time"), row.get("op"), row.get("shapes"),
                                      row.get("median_ms")]), flags=flags)


def node_gpu_entry(check: dict, gpu: dict, source: str) -> Entry:
    """One GPU of a node check (microbench-node), in the node table: its host, rank, device
    and verdict (and which comparison flagged it), and the figures it measured."""
    settings = {"host": gpu.get("host"), "rank": gpu.get("rank"),
                "device": gpu.get("device_name"),
                "verdict": "flagged" if gpu.get("flagged") else "ok",
                "flagged by": ", ".join(gpu.get("flagged_by") or ()) or None,
                "baseline": check.get("baseline"), "tool": check.get("version")}
    return Entry(NODE, source, settings, read_all(gpu, NODE), "", time_utc=check.get("time"),
                 identity=json.dumps([check.get("time"), gpu.get("host"), gpu.get("rank")]),
                 note="; ".join(gpu.get("findings") or ()))


AB_SIDE = "A/B side"


def _ab_side_entry(summary: dict, side: str, result: dict | None, source: str) -> Entry:
    """One side of an A/B summary: its own result where it was found (every setting), else the
    summary's record of its trials (the headline and its interval only)."""
    ab = summary["ab"]
    label = "A" if side == "a" else f"B: {ab['flags_b']}"
    if result is not None:
        entry = result_entry(result, source)
        return dataclasses.replace(entry, settings={**entry.settings, AB_SIDE: label})
    trials = ab.get(f"{side}_trials") or {}
    figures = {"throughput": number(trials.get("headline")),
               "ci95_low": number(trials.get("ci95_low")),
               "ci95_high": number(trials.get("ci95_high")),
               "trial_count": len(ab[side])}
    return Entry(MODEL, source, {AB_SIDE: label}, figures,
                 str(trials.get("unit") or "items/s"), trial_values=tuple(ab[side]),
                 identity=json.dumps([source, side]))


def ab_entries(summary: dict, source: str, results: dict) -> list[Entry]:
    """An A/B summary as a row per side (``results``: each side's result document, or None
    where its file was not found) and the verdict as B's footnote, in the words --ab printed;
    one round whose ratio lies inside the sides' iteration noise: within noise
    (:mod:`microbench.store.iteration_noise`, from the sides' own results)."""
    from microbench.measure import stats
    from microbench.store import iteration_noise
    ab = summary["ab"]
    verdict = stats.compared(ab["ratio"], ab["ci95"], ab.get("tolerance_pct",
                                                             stats.DEFAULT_TOLERANCE_PCT))
    a, b = (_ab_side_entry(summary, side, results.get(side), f"{source} {side.upper()}")
            for side in ("a", "b"))
    note = (f"A/B {source}: B ({ab['flags_b']}) / A = {ab['ratio']:.3f} over {ab['rounds']} "
            f"rounds: {iteration_noise.words(verdict, (a, b))}")
    return [dataclasses.replace(entry, file=source) for entry in
            (a, dataclasses.replace(b, note=note))]


def entries_of(document: dict, source: str) -> list[Entry]:
    """The rows one validated document holds (schema.validate_result first)."""
    # A result's own file is its entry's already: no second Entry made (10,000 in a history).
    return [entry if entry.file == source else dataclasses.replace(entry, file=source)
            for entry in _entries(document, source)]


def _entries(document: dict, source: str) -> list[Entry]:
    kind = schema.document_kind(document)
    if kind == schema.RESULT:
        return [result_entry(document, source, file=source)]
    if kind == schema.OLDER_TOOL:
        return [older_tool_entry(document, source)]
    if kind == schema.OP_BENCH:
        return [op_entry(document, row, f"{source} op {index}")
                for index, row in enumerate(document["results"], 1)]
    if kind == schema.NODE:
        return [node_gpu_entry(document["node_check"], gpu, f"{source} rank {gpu['rank']}")
                for gpu in document["node_check"]["gpus"]]
    if kind == schema.NODE_BASELINE:
        return []                # a reference for microbench-node --baseline, not a result
    entries = []
    for index, row in enumerate(document["rows"], 1):
        where = f"{source} row {index}"
        if row.get("status") == "ok":
            entries.append(result_entry(row["result"], where))
        else:
            entries.append(failed_row_entry(row, document, where))
    return entries
