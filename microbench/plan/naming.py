"""What tells one configuration from another, in the three places it is written: the result
file's default name (``resnet18_training_amp-bf16_nhwc_b64.json``), a sweep row's label
(``resnet18 training amp-bf16 nhwc b64``) and a figure's legend, whose facets
(``{"precision": "amp-bf16", "batch": "batch 64", ...}``) name only what varies.

One table (:data:`PARTS`) holds each part in the order all three list them, with the settings
it shows. The parts written out here are those whose spelling predates this table (and that
read the resolved run: the model's name, the sequence length it resolved to, the strategy); a
sweep axis declared with a label (``setting(..., axis=N, label="opt")`` in
:mod:`microbench.settings.config`) gets its part from that declaration alone, after these:
``opt-adamw`` in the name, ``opt=adamw`` in the label, ``opt adamw`` as a facet, nothing at its
default.

This module imports no torch: the sweep's figures read it where torch may be absent.

Example::

    described = Described.of(spec)
    run_name(described, 1)       # 'llama_tiny_training_amp-bf16_sdpa-s64_b8'
    row_label(described)         # 'llama_tiny training amp-bf16 sdpa s64 b8'
    facets(described)["batch"]   # 'batch 8'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from microbench.settings.config import SCHEMA

if TYPE_CHECKING:     # the run's types, named without importing torch for --help
    from microbench.models.family import ModelFamily
    from microbench.scenarios.views import RunView, StrategyView
    from microbench.settings.config import BenchConfig
    from microbench.settings.precision import Precision


@dataclass(frozen=True)
class Described:
    """A configuration as its names read it: the settings and what resolve made of them."""

    config: BenchConfig
    model: ModelFamily          # the configured model (its name, attention, seq_len)
    precision: Precision        # the precision row
    strategy: StrategyView
    batch: int | None = None    # this process's batch (the facet); None: the config's

    @classmethod
    def of(cls, spec: RunView) -> "Described":
        return cls(spec.config, spec.model, spec.precision, spec.parallel, spec.batch_size)


Spelling = Callable[[Described], str]


def _none(_: Described) -> str:
    return ""


@dataclass(frozen=True)
class Part:
    """One part of a configuration's names ('' where a spelling leaves it out)."""

    facet: str | None           # its key among a figure's facets; None: not a facet
    settings: tuple[str, ...]   # the settings it shows (a figure's subtitle leaves them out)
    name: Spelling = _none      # in the result file's name, parts joined by '_'
    label: Spelling = _none     # in a sweep row's label, parts joined by ' '
    figure: Spelling = _none    # as a facet of a figure's legend


# ---------------------------------------------------------------- the parts spelled here

def _precision_label(d: Described) -> str:
    """The precision with --precision fp8's recipe and --quantize."""
    config = d.config
    return (d.precision.name + (f" {config.fp8_recipe}" if config.precision == "fp8" else "")
            + (f" {config.quantize}" if config.quantize != "none" else ""))


def _compile_mode(d: Described) -> str:
    return d.config.compile_options.get("mode", "default")


def _compile_name(d: Described) -> str:
    if not d.config.compile:
        return ""
    mode = d.config.compile_options.get("mode")
    return f"compile-{mode}" if mode else "compile"


def _language(d: Described, between: str) -> str:
    model = d.model
    return f"{model.attention}{between}s{model.tokens_per_item}" if model.reads_tokens else ""


def _profilers(d: Described) -> str:
    config = d.config
    return "_".join(tag for given, tag in ((config.autograd_profiler, "autograd"),
                                           (config.kineto, "kineto"),
                                           (config.flops_prof_step is not None, "flops"))
                    if given)


def _sharded(d: Described) -> str:
    return d.strategy.name if d.strategy.shards else ""


def _checkpointing(d: Described, spelled: str) -> str:
    mode = d.config.activation_checkpointing
    return "" if mode == "none" else spelled.format(mode)


def _workers(d: Described) -> str:
    return "auto" if d.config.workers is None else str(d.config.workers)


def _fed(d: Described, spelled: Spelling) -> str:
    """An input pipeline's part: left out for synthetic inputs."""
    return "" if d.config.data == "synthetic" else spelled(d)


SPELLED: tuple[Part, ...] = (
    Part("network", ("network",), name=lambda d: d.model.name.replace(":", "-"),
         label=lambda d: d.config.network, figure=lambda d: d.config.network),
    Part("mode", ("mode",), name=lambda d: d.config.mode, label=lambda d: d.config.mode,
         figure=lambda d: d.config.mode),
    Part("precision", ("precision", "tf32"), name=lambda d: d.precision.name,
         label=_precision_label, figure=_precision_label),
    Part(None, ("fp8_recipe",),
         name=lambda d: d.config.fp8_recipe
         if d.precision.fp8 and d.config.fp8_recipe != "tensorwise" else ""),
    Part(None, ("quantize",),
         name=lambda d: d.config.quantize if d.config.quantize != "none" else ""),
    Part(None, ("quant_layout",),
         name=lambda d: d.config.quant_layout
         if d.config.quantize != "none" and d.config.quant_layout != "auto" else ""),
    Part("layout", ("nhwc",), name=lambda d: "nhwc" if d.config.nhwc else "",
         label=lambda d: "nhwc" if d.config.nhwc else "",
         figure=lambda d: "nhwc" if d.config.nhwc else "nchw"),
    Part("compile", ("compile", "compile_options"), name=_compile_name,
         label=lambda d: f"compile={_compile_mode(d)}" if d.config.compile else "",
         figure=lambda d: f"compile {_compile_mode(d)}" if d.config.compile else "eager mode"),
    Part("language", ("attention", "seq_len"), name=lambda d: _language(d, "-"),
         label=lambda d: _language(d, " "), figure=lambda d: _language(d, " ")),
    Part(None, ("autograd_profiler", "kineto", "flops_prof_step"), name=_profilers),
    Part("parallel", ("parallel",), name=_sharded, label=_sharded, figure=_sharded),
    Part("checkpointing", ("activation_checkpointing",),
         name=lambda d: _checkpointing(d, "ac-{}"), label=lambda d: _checkpointing(d, "ac={}"),
         figure=lambda d: _checkpointing(d, "checkpointing {}")),
)

LAST: tuple[Part, ...] = (
    Part("batch", ("batch_size",), name=lambda d: f"b{d.config.batch_size}",
         label=lambda d: f"b{d.config.batch_size}",
         figure=lambda d: f"batch {d.config.batch_size if d.batch is None else d.batch}"),
    Part("data", ("data",),
         name=lambda d: _fed(d, lambda d: f"{d.config.data}-w{_workers(d)}-decode-"
                                          f"{d.config.decode}"),
         label=lambda d: _fed(d, lambda d: f"{d.config.data} workers={_workers(d)} "
                                           f"decode={d.config.decode}"),
         figure=lambda d: _fed(d, lambda d: f"data {d.config.data}")),
    Part("workers", ("workers",), figure=lambda d: _fed(d, lambda d: f"workers {_workers(d)}")),
    Part("decode", ("decode",), figure=lambda d: _fed(d, lambda d: f"decode {d.config.decode}")),
)


# ---------------------------------------------------------------- the parts of labelled axes

def _declared(name: str, label: str) -> Part:
    """The part of a sweep axis declared with a label: its value, unless the default."""
    default = SCHEMA[name].default

    def value(d: Described) -> str:
        given = getattr(d.config, name)
        return "" if given == default else str(given)

    def spelled(between: str) -> Spelling:
        return lambda d: f"{label}{between}{value(d)}" if value(d) else ""
    return Part(name, (name,), name=spelled("-"), label=spelled("="), figure=spelled(" "))


def parts() -> tuple[Part, ...]:
    """Every part, in order: those spelled here, then the labelled axes, the batch and the
    input pipeline last (read from the schema on each call, where a test may add an axis)."""
    declared = tuple(_declared(name, item.label) for name, item in SCHEMA.items()
                     if item.axis and item.label)
    return SPELLED + declared + LAST


def run_name(d: Described, world_size: int) -> str:
    """The result file's default name, without ``.json``: the configuration's parts, then the
    processes of the job (``w4``) when there are several."""
    names = [part.name(d) for part in parts()] + [f"w{world_size}" if world_size > 1 else ""]
    return "_".join(text for text in names if text)


def row_label(d: Described) -> str:
    """A sweep row's label."""
    return " ".join(text for text in (part.label(d) for part in parts()) if text)


def facets(d: Described) -> dict[str, str]:
    """A figure's facets of this configuration, in the order a legend lists them."""
    return {part.facet: part.figure(d) for part in parts() if part.facet is not None}


def shown_settings() -> set[str]:
    """The settings a figure's facets show (its subtitle need not repeat them)."""
    return {name for part in parts() if part.facet is not None for name in part.settings}
