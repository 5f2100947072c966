"""``--rerun RESULT.json``: a stored configuration spelled back as command-line flags.

Every result JSON stores the configuration it ran (its ``config`` object, the
:class:`~microbench.config.BenchConfig` fields). :func:`flags_of` turns that object into the
flags that ask for the same configuration; the command line then parses them followed by the
flags given beside ``--rerun``, so a later flag replaces a stored one (``--iterations 100``) and
every value passes the same checks as one typed by hand: a result file is input, and an edited
one must not reach torch with a value the command line would refuse.

What is not replayed: where results go (``--output-dir``, ``--output-file``, ``--csv-file``,
``--no-files``, ``--quiet``, ``--profiler-output``), the baselines read from disk, and the launch
(ranks, world size, rendezvous): those belong to this invocation. A result of several ranks says
so in a note, with the launch that repeats it.

Example::

    flags, notes = flags_of("results/resnet50_training_amp-bf16_b128.json")
    # ['--network=resnet50', '--batch-size=128', '--precision=amp-bf16', ...]
"""
from __future__ import annotations

import dataclasses

from .config import BenchConfig
from .errors import UsageError

# Fields of this invocation, never replayed (see the module docstring).
NOT_REPLAYED = frozenset({
    "output_dir", "output_file", "csv_file", "write_files", "quiet", "profiler_output",
    "scaling_baseline", "distributed_dataparallel", "device_ids", "rank", "world_size",
    "dist_backend", "dist_url", "explicit", "notes",
})

# Switches: the flag that turns each one on (they are off by default).
SWITCHES = {"nhwc": "--nhwc", "compile": "--compile", "ddp_static_graph": "--ddp-static-graph",
            "ddp_gradient_as_bucket_view": "--ddp-gradient-as-bucket-view",
            "autograd_profiler": "--autograd-profiler", "kineto": "--kineto",
            "capture_range": "--capture-range"}

# Fields whose flag is not --<field with dashes>.
FLAG_NAMES = {"telemetry_interval_ms": "--telemetry-interval", "compile_options":
              "--compileContext"}

_DEFAULTS = {field.name: field.default if field.default is not dataclasses.MISSING
             else field.default_factory() for field in dataclasses.fields(BenchConfig)}


def flags_of(path: str) -> tuple[list[str], list[str]]:
    """The flags that repeat the run stored in ``path``, and notes for the user."""
    from .report.compare import load_result
    document = load_result(path, "--rerun")
    stored = document.get("config")
    if not isinstance(stored, dict):
        raise UsageError(f"--rerun {path}: the result stores no configuration (written by an "
                         f"older version?)")
    unknown = sorted(set(stored) - set(_DEFAULTS))
    notes = [f"--rerun {path}: settings this version does not know were left out: "
             f"{', '.join(unknown)}"] if unknown else []
    devices = document.get("GPUs")
    if isinstance(devices, int) and devices > 1:
        notes.append(f"--rerun {path}: that result ran on {devices} ranks; this invocation's "
                     f"launch decides how many run now (torchrun --nproc-per-node {devices} "
                     f"... --rerun {path} repeats it on one node)")
    flags: list[str] = []
    for name, value in stored.items():
        if name in _DEFAULTS and name not in NOT_REPLAYED:
            flags += _flags(name, value, stored, path)
    return flags, notes


def _flags(name: str, value, stored: dict, path: str) -> list[str]:
    """The flags for one stored field (none when it holds the default)."""
    comparable = tuple(value) if isinstance(value, list) else value
    if name == "tf32" or comparable == _DEFAULTS[name] and name != "precision":
        return []
    if name == "precision":
        return _precision_flags(value, bool(stored.get("tf32")), path)
    if name in SWITCHES:
        return [SWITCHES[name]] if value is True else _refuse(name, value, path)
    if name == "phase_timing":
        return ["--no-phases"] if value is False else _refuse(name, value, path)
    if name == "cudnn_benchmark":
        return [f"--cudnn-benchmark={int(bool(value))}"]
    if name == "profiler_schedule" and isinstance(value, list):
        return [f"--profiler-schedule={','.join(map(str, value))}"]
    if name == "model_kwargs" and isinstance(value, list):
        return _model_kwargs(value, path)
    if name == "compile_options" and isinstance(value, dict):
        return [f"--compileContext={value!r}"]
    if isinstance(value, (dict, list)) or value is None:
        return _refuse(name, value, path)
    flag = FLAG_NAMES.get(name, "--" + name.replace("_", "-"))
    return [f"{flag}={value}"]


def _precision_flags(name, tf32: bool, path: str) -> list[str]:
    """--precision names every mode; TF32 beside a mixed or FP16 mode (FP32 work outside
    autocast) has only the older spelling."""
    if not isinstance(name, str):
        return _refuse("precision", name, path)
    if not tf32 or name in ("fp32", "tf32"):
        return [f"--precision={'tf32' if tf32 else name}"]
    older = {"fp16": ["--fp16=1"], "amp-fp16": ["--amp"],
             "amp-bf16": ["--amp", "--amp-dtype=bf16"]}.get(name)
    return (older + ["--tf32=1"]) if older else _refuse("precision", name, path)


def _model_kwargs(values: list, path: str) -> list[str]:
    if not all(isinstance(item, str) and "=" in item and not item.startswith("-")
               for item in values):
        return _refuse("model_kwargs", values, path)
    return ["--model-kwargs", *values]


def _refuse(name: str, value, path: str) -> list[str]:
    raise UsageError(f"--rerun {path}: stored setting {name} = {value!r} is not a value this "
                     f"tool writes")
