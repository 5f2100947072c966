"""Which settings make two results the same configuration: one definition for every question.

Four places ask it, and each uses the fields below, adding to them but never dropping one:

* the ``--compare`` gate (:data:`GATE`): the same work on the same number of devices;
* ``--scaling-baseline`` (:data:`WORK`): the same work per device (the world size differs by
  design);
* result naming (:func:`naming_fields`): the gate's fields and every replayed setting (a
  3-iteration check must not refresh a 1000-iteration result);
* rank agreement (:func:`agreement_fields`): the gate's fields and every setting the ranks of one
  job may not differ in.

An identity is a flat dict: the stored configuration's fields by name, and what they resolved to
(``model``, ``per_device_batch``, ``input_size``, ``world_size``, ``device_name``), built the same
way from a run about to start (:func:`of_spec`) and from a result on disk (:func:`of_document`).
It holds the settings that took effect (:func:`took_effect`): a setting that acts only under
another (:data:`ONLY_UNDER`: ``--fp8-recipe`` without ``--precision fp8``) holds its default
where that other is absent, so giving it makes no other configuration (issue 65).

Example::

    problems = differences(of_spec(spec), of_document(baseline), GATE)
    # ['per_device_batch 128 there, 64 here', 'device_name ...']
"""
from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

from microbench.settings.config import SCHEMA

# The work measured: what runs, in which precision and layout, compiled how, on what input and
# batch per device, and on which device model. Iterations, seed and the like change how long it
# is measured, not what.
WORK = ("model", "mode", "precision", "tf32", "nhwc", "compile", "compile_options",
        "per_device_batch", "input_size", "vocab_size", "kv_heads", "attention", "model_kwargs",
        "prompt_len", "gen_len", "opt_step", "device_name",
        # sharded or replicated, recomputed or not, and the optimizer: different work per step
        "parallel", "reshard_after_forward", "hsdp_shard_size", "activation_checkpointing",
        "optimizer",
        # FP8's scaling recipe and the weights' quantization: other kernels, other bytes
        "fp8_recipe", "quantize", "quant_layout")
GATE = WORK + ("world_size",)


def _training(s: dict) -> bool:
    return s.get("mode", "training") == "training"


def _several_trials(s: dict) -> bool:
    repeat = s.get("repeat")
    return s.get("max_noise_pct") is not None or (isinstance(repeat, int) and repeat > 1)


# Settings that act only under another: (the settings, the other as a user spells it, whether
# it holds, read from an identity). Where it does not hold they did nothing, and an identity
# holds their defaults. The command line refuses most of them given alone; this rule also
# covers a sweep's rows (--precision bf16,fp8 --fp8-recipe rowwise: the bf16 row), --ab's B,
# and results stored before a refusal existed. Rows are read in order, each on the identity
# the rows above left (the kind of run first: under inference, --parallel is ddp's default).
ONLY_UNDER = (
    (("opt_step", "parallel", "activation_checkpointing", "optimizer", "optimizer_impl"),
     "--mode training", _training),
    (("prompt_len", "gen_len"), "--mode generate", lambda s: s.get("mode") == "generate"),
    (("fp8_recipe",), "--precision fp8", lambda s: s.get("precision") == "fp8"),
    (("quant_layout",), "--quantize", lambda s: s.get("quantize", "none") != "none"),
    (("compile_options",), "--compile", lambda s: s.get("compile") is True),
    (("reshard_after_forward",), "--parallel fsdp or hsdp",
     lambda s: s.get("parallel") in ("fsdp", "hsdp")),
    (("hsdp_shard_size",), "--parallel hsdp", lambda s: s.get("parallel") == "hsdp"),
    (("ddp_bucket_cap_mb", "ddp_static_graph", "ddp_gradient_as_bucket_view", "ddp_options"),
     "--parallel ddp", lambda s: s.get("parallel", "ddp") == "ddp"),
    (("trials",), "--repeat above 1 or --max-noise", _several_trials),
    (("max_trials", "time_limit_s"), "--max-noise", lambda s: s.get("max_noise_pct") is not None),
    (("profiler_schedule",), "--kineto", lambda s: bool(s.get("kineto"))),
    # microbench.settings.data_settings's PIPELINE_FIELDS and GENERATED_SET_FIELDS
    (("data_format", "data_images", "data_dir", "decode", "transforms", "workers",
      "pin_memory", "prefetch_factor"), "--data loader or folder",
     lambda s: s.get("data", "synthetic") != "synthetic"),
    (("data_format", "data_images"), "--data loader", lambda s: s.get("data") == "loader"),
    (("data_dir",), "--data folder", lambda s: s.get("data") == "folder"),
)


def not_in_effect(settings: dict) -> dict[str, str]:
    """Each setting of :data:`ONLY_UNDER` whose condition does not hold in ``settings`` (an
    identity, or a config's fields), with the other setting it acts under."""
    found: dict[str, str] = {}
    used, defaults = dict(settings), _defaults()
    for names, under, holds in ONLY_UNDER:
        if not holds(used):
            for name in names:
                found.setdefault(name, under)
                used[name] = defaults[name]
    return found


def took_effect(settings: dict) -> dict:
    """``settings`` with every setting not in effect at its default: what the run used."""
    return {**settings, **{name: _defaults()[name] for name in not_in_effect(settings)}}


def without_effect(settings: dict) -> list[tuple[str, str]]:
    """(setting, the other it acts under) for each setting ``settings`` give away from its
    default where it takes no effect."""
    return [(name, under) for name, under in not_in_effect(settings).items()
            if name in settings and _json(settings[name]) != _defaults()[name]]


def naming_fields() -> tuple[str, ...]:
    """Fields of a result's identity for naming: a result is refreshed in place only by a run of
    the same identity (otherwise it gets another name)."""
    replayed = tuple(name for name, item in SCHEMA.items() if item.replayed and name != "device")
    return GATE + tuple(name for name in replayed if name not in GATE)


def agreement_fields() -> tuple[str, ...]:
    """Fields the ranks of one job must agree on before they run."""
    shared = tuple(name for name, item in SCHEMA.items() if not item.per_rank)
    return GATE + tuple(name for name in shared if name not in GATE)


def _json(value: Any) -> Any:
    """What a value looks like once stored in a result file (tuples become lists)."""
    return json.loads(json.dumps(value, default=list))


# The types json keeps as they are: a value of one of these comes back from the round trip
# equal and of the same type.
_JSON_SCALARS = (str, int, float, bool, type(None))


def _stored(value: Any) -> Any:
    """``_json(value)``, sooner: values of JSON's types copied as they are, only the others
    through the round trip (a config's text written and parsed again was two thirds of
    reading a result's identity; a history reads 10,000)."""
    kind = type(value)
    if kind in _JSON_SCALARS:
        return value
    if kind is list or kind is tuple:
        return [_stored(item) for item in value]
    if kind is dict and all(type(name) is str for name in value):   # json.dumps turns other
        return {name: _stored(item) for name, item in value.items()}  # keys into text
    return _json(value)


@functools.lru_cache(maxsize=1)
def _defaults() -> dict:
    """Every setting at its default, as stored (made once: a history reads 10,000 files)."""
    return _json({name: item.default for name, item in SCHEMA.items()})


def of_spec(spec) -> dict:
    """The identity a result of ``spec`` (a RunSpec) will have, known before the run."""
    identity = _json(dataclasses.asdict(spec.config))
    identity.update(model=spec.model.name, per_device_batch=spec.batch_size,
                    input_size=spec.model.input_size, world_size=spec.launch.world_size,
                    device_name=spec.device_name)
    return took_effect(identity)


def of_document(document: dict) -> dict:
    """The identity of a stored result. A setting a file does not hold (it was written before
    the setting existed) ran with its default; what a setting resolved to and the file does not
    say is unknown (None), which matches nothing."""
    config = _dict(document.get("config"))
    identity = dict(_defaults())
    identity.update(_stored(config))
    model, env = _dict(document.get("model")), _dict(document.get("env"))
    identity.update(model=model.get("name", config.get("network")),
                    per_device_batch=document.get("Mini batch size [img/gpu]"),
                    input_size=model.get("seq_len", model.get("image_size")),
                    world_size=document.get("GPUs"), device_name=env.get("device_name"))
    return took_effect(identity)


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def key(identity: dict, fields: tuple[str, ...]) -> str:
    """The identity's ``fields`` as one string: equal exactly where :func:`same` holds (the
    history groups results by it, in one pass)."""
    return json.dumps([identity.get(name) for name in fields], sort_keys=True, default=str)


def differences(ours: dict, theirs: dict, fields: tuple[str, ...]) -> list[str]:
    """``'name X there, Y here'`` for each of ``fields`` in which the two identities differ."""
    return [f"{name} {theirs.get(name)!r} there, {ours.get(name)!r} here" for name in fields
            if ours.get(name) != theirs.get(name)]


def same(ours: dict, theirs: dict, fields: tuple[str, ...]) -> bool:
    return not differences(ours, theirs, fields)


def differing_names(ours: dict, theirs: dict, fields: tuple[str, ...]) -> list[str]:
    return [name for name in fields if ours.get(name) != theirs.get(name)]
