"""What a stored result ran on, as flat fields: the history's "what changed" compares them.

A result records its software (PyTorch, CUDA or HIP, the DNN library, torchao), the driver and
the device, the clocks and power limit seen, the host, the tool's version and the flags. Each
field is declared once in :data:`FIELDS` with its kind; the kinds are in the order a change of
speed is most likely explained by them (:data:`KINDS`): a flag the user changed changes the work
itself; a new PyTorch, CUDA, ROCm or DNN library changes the kernels; a driver or firmware
changes how they run; clocks and power limits change how fast; the tool's own version and the
host come last. The run's identity (network, batch, precision, device model...:
:mod:`microbench.settings.identity`) is not here: results of another identity are another
history, never a change within one.

Measured clocks vary from run to run, so they are kept to two significant digits (as
``entry.measured_peak`` keeps measured peaks): a change of a few MHz is not a different clock.

Example::

    fields = environment_of(document)      # {'torch': '2.14.1+cu130', '--cudnn-benchmark': 'True', ...}
    KIND_OF['torch']                        # 'software'
"""
from __future__ import annotations

import json
from typing import Callable

from microbench.settings import identity
from microbench.settings.config import SCHEMA
from microbench.store.figures import by_key, number, value_at

FLAG, SOFTWARE, DRIVER, CLOCKS, TOOL, HOST = ("flag", "software", "driver and device",
                                              "clocks and power", "tool", "host")
KINDS = (FLAG, SOFTWARE, DRIVER, CLOCKS, TOOL, HOST)


def _at(*path: str) -> Callable[[dict], object]:
    return lambda document: value_at(document, path)


def _two_digits(*path: str) -> Callable[[dict], object]:
    def read(document: dict) -> object:
        value = number(value_at(document, path))
        return None if value is None else float(f"{value:.2g}")
    return read


def _figure(key: str, digits: int | None = None) -> Callable[[dict], object]:
    """A figure of the registry (store/figures.py, where it is declared and read): a flag as
    True or False, a number to ``digits`` significant digits where it varies run to run."""
    figure = by_key()[key]

    def field(document: dict) -> object:
        value = figure.read(document)
        if value is None:
            return None
        if figure.unit == "flag":
            return bool(value)
        return value if digits is None else float(f"{value:.{digits}g}")
    return field


def _dnn_library(document: dict) -> object:
    name, version = (value_at(document, ("env", key)) for key in ("dnn_library",
                                                                  "dnn_library_version"))
    return None if name is None else f"{name} {version}" if version is not None else name


# (name, kind, how it is read); the names are what "what changed" prints.
FIELDS: tuple[tuple[str, str, Callable[[dict], object]], ...] = (
    ("torch", SOFTWARE, _at("env", "torch")),
    ("CUDA", SOFTWARE, _at("env", "cuda")),
    ("HIP", SOFTWARE, _at("env", "hip")),
    ("DNN library", SOFTWARE, _dnn_library),
    ("torchvision", SOFTWARE, _at("env", "torchvision")),
    ("torchao", SOFTWARE, _at("low_precision", "torchao_version")),
    ("python", SOFTWARE, _at("env", "python")),
    ("driver", DRIVER, _at("env", "driver")),
    ("architecture", DRIVER, _at("env", "architecture")),
    ("device memory [GB]", DRIVER, _at("env", "device_memory_gb")),
    ("multiprocessors", DRIVER, _at("env", "multiprocessors")),
    ("power limit [W]", CLOCKS, _at("peaks", "measured", "clocks", "power_limit_w")),
    ("power capped", CLOCKS, _at("peaks", "measured", "clocks", "power_capped")),
    ("max SM clock [MHz]", CLOCKS, _at("telemetry", "max_sm_clock_mhz")),
    ("SM clock [MHz]", CLOCKS, _two_digits("telemetry", "stats", "sm_clock_mhz", "median")),
    ("memory clock [MHz]", CLOCKS, _two_digits("telemetry", "stats", "memory_clock_mhz",
                                               "median")),
    ("throttled", CLOCKS, _at("telemetry", "throttled")),
    ("tool", TOOL, _at("tool_version")),
    ("host", HOST, _at("env", "host")),
    ("OS", HOST, _at("env", "os")),
    ("libc", HOST, _at("env", "libc")),
    ("CPU", HOST, _at("env", "cpu")),
    ("CPU threads", HOST, _at("env", "cpu_threads")),
    ("visible devices", HOST, _at("env", "visible_devices")),
    # The host's load around the timed region (issue 64): its verdict, and the load average per
    # core to one significant digit (it varies from run to run; a change beside a host that
    # went from idle to loaded names it).
    ("host loaded", HOST, _figure("host_loaded")),
    ("host load [per core]", HOST, _figure("host_load_per_core", digits=1)),
)

# The settings that make a run's identity, by their config names (and those the identity holds
# resolved: network, batch, input size; the device asked for, whose model is the identity's):
# another value is another history.
_IDENTITY_KEYS = frozenset(identity.GATE) | {"network", "batch_size", "image_size", "seq_len",
                                             "device"}
# The flags that may change within one history: every setting a rerun replays that is not
# part of the identity (--cudnn-benchmark, --optimizer-impl, --iterations, ...).
FLAGS = tuple(name for name, item in SCHEMA.items()
              if item.replayed and name not in _IDENTITY_KEYS)
KIND_OF = {**{name: kind for name, kind, _ in FIELDS},
           **{SCHEMA[name].flag: FLAG for name in FLAGS}}


def _shown(value: object) -> object:
    """A value as compared and printed: lists and objects as their JSON text."""
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value


def environment_of(document: dict) -> dict:
    """The fields of a result document (None where it does not record one)."""
    config = value_at(document, ("config",))
    config = config if isinstance(config, dict) else {}
    fields = {name: _shown(read(document)) for name, _, read in FIELDS}
    fields.update({flag: _shown(config[name]) for name, flag in _FLAG_NAMES if name in config})
    return fields


# Each flag's config name and its spelling (a history asks for them 10,000 times).
_FLAG_NAMES = tuple((name, SCHEMA[name].flag) for name in FLAGS)
