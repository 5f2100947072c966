"""``--quant-layout auto`` by measurement: each candidate layout's product timed on this device at
the model's own linear shapes and row counts, per phase of the run, before the timed region; each
layer then runs, in each phase, the layout measured fastest for its shape and rows (issue 61).

A *phase* is a part of the timed work whose linear layers multiply a known number of rows: a
generation's prefill (the prompt's rows; the output head only the last position's) and its decode
step (one row per sequence), or an inference forward. The rows come from the model itself, counted
by hooks on one eager pass of each phase. Candidates hold the same quantized values
(:mod:`microbench.settings.quantization`), so the choice changes the kernel, not the numbers.

How a product is timed (:func:`device_timer`): on a GPU, ``REPEATS`` calls captured in one CUDA
(HIP) graph, each after a write that flushes the last-level cache (a real model's next layer
finds its weight in memory, not in L2), minus the same graph of flushes alone, median of
``ROUNDS`` replays: the kernels' own time, without the host's launches, which the run's compiled
and graph-replayed steps do not pay either. A layout whose product is written for inductor
(``inductor``, ``unwrapped``) is compiled first, with the phase's own compile settings; the
compile time is counted and reported. A candidate that fails (to build, compile or run) is left
out with one line.

The choice is kept in ``user_cache_root()/quant_layouts.json``, keyed by the device, the library
versions, the format, its candidates and the shapes and rows measured; a run that finds its key
there reuses it and says so.

Example::

    phases = (Phase("decode", {"layers.0.attention.wqkv": 1, ...}),
              Phase("prefill", {"layers.0.attention.wqkv": 128, ..., "output": 1}))
    choice = choose(quant_plan, model, phases, device)
    choice.layout("prefill", "layers.0.attention.wqkv")     # 'preshuffled'
    choice.lines()      # ['decode (1 row): tinygemm 2.41 ms, preshuffled 3.10 ms ... -> ...']
"""
from __future__ import annotations

import contextlib
import datetime
import importlib.metadata
import json
import os
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch
from torch import nn

from microbench.measure.drift import phase_label
from microbench.platform import devices, writing
from microbench.platform.errors import CannotWrite
from microbench.platform.inputs import InputRefused, read_bounded
from microbench.steps import quant_layout
from microbench.steps.quant_layers import linear_layers

REPEATS = 10                # products in one timed graph
ROUNDS = 5                  # replays of each graph; the median is kept
CACHE_FILE = "quant_layouts.json"
CACHE_ENTRIES = 64          # the newest choices the cache file keeps
CACHE_LIMIT_BYTES = 4 << 20
# Bumped when what is measured changes, so that older cached choices are not reused.
METHOD = "graph-flushed-v2"
# Layouts whose product is written for inductor: timed compiled, as the run runs them (eager,
# the unwrapped int8 layer writes a BF16 copy of its weight before each product: three times
# the bytes its compiled product reads, which would hand auto to gemlite at any speed). The
# others call their kernels (tinygemm's, mslk's, gemlite's Triton kernels through its custom
# op) whether compiled or not: timed as they are. gemlite may tune its kernels at the first call
# of each shape and row count, which the timer's first calls, outside its graphs, make.
COMPILED = ("inductor", "unwrapped")

Shape = tuple[int, int]     # (in_features, out_features)


@dataclass(frozen=True)
class Phase:
    """A part of the run and the rows each of its linear layers multiplies (by layer name)."""

    name: str
    rows: dict[str, int]

    def keys(self, shapes: dict[str, Shape]) -> set[tuple[Shape, int]]:
        return {(shapes[name], rows) for name, rows in self.rows.items() if name in shapes}

    def typical_rows(self) -> int:
        """The rows most of its layers multiply (the summary's label)."""
        return Counter(self.rows.values()).most_common(1)[0][0] if self.rows else 0


def _key_text(shape: Shape, rows: int) -> str:
    return f"{shape[0]}x{shape[1]}@{rows}"


def _parse_key(text: str) -> tuple[Shape, int]:
    shape, rows = text.split("@")
    inputs, outputs = shape.split("x")
    return (int(inputs), int(outputs)), int(rows)


@dataclass(frozen=True)
class Choice:
    """Which layout each linear layer runs in each phase, and what was measured to choose it."""

    quantize: str
    phases: tuple[Phase, ...]
    shapes: dict[str, Shape]                        # layer name -> (in, out)
    fastest: dict[tuple[Shape, int], str]           # (shape, rows) -> layout
    # (shape, rows) -> layout -> milliseconds per product (measured); failures: one line each.
    timings: dict[tuple[Shape, int], dict[str, float]] = field(default_factory=dict)
    failures: tuple[str, ...] = ()
    source: str = "measured"        # measured | cached (<when>) | asked for | only candidate
    seconds: float = 0.0            # spent measuring (building, compiling, timing)
    compile_seconds: float = 0.0    # of which compiling inductor-written products

    def layout(self, phase: str, name: str) -> str:
        rows = self._phase(phase).rows[name]
        return self.fastest[(self.shapes[name], rows)]

    def _phase(self, name: str) -> Phase:
        return next(phase for phase in self.phases if phase.name == name)

    def phase_total_ms(self, phase: Phase, layout: str) -> float | None:
        """Every linear product of ``phase`` in ``layout`` (None where one was not measured)."""
        total = 0.0
        for name, rows in phase.rows.items():
            value = self.timings.get((self.shapes[name], rows), {}).get(layout)
            if value is None:
                return None
            total += value
        return total

    def chosen_total_ms(self, phase: Phase) -> float | None:
        try:
            return sum(self.timings[(self.shapes[name], rows)][self._chosen(name, rows)]
                       for name, rows in phase.rows.items())
        except KeyError:
            return None

    def _chosen(self, name: str, rows: int) -> str:
        return self.fastest[(self.shapes[name], rows)]

    def layers_by_layout(self, phase: Phase) -> Counter:
        return Counter(self._chosen(name, rows) for name, rows in phase.rows.items())

    @property
    def measured_layouts(self) -> list[str]:
        """Every layout that has a time, sorted."""
        return sorted({layout for row in self.timings.values() for layout in row})

    def lines(self) -> list[str]:
        """A line per phase: each candidate's time for the phase's products and what was
        chosen."""
        lines = []
        for phase in self.phases:
            label = phase_label(phase.name, phase.typical_rows())
            chosen = ", ".join(f"{layout} on {count}" for layout, count in
                               self.layers_by_layout(phase).most_common())
            if not self.timings:
                lines.append(f"{label}: {chosen} ({self.source})")
                continue
            each = ", ".join(f"{layout} {_ms(self.phase_total_ms(phase, layout))}"
                             for layout in self.measured_layouts)
            lines.append(f"{label}: {each}; chosen per shape "
                         f"{_ms(self.chosen_total_ms(phase))}: {chosen}")
        return lines

    def basis(self) -> str:
        if not self.timings:
            return self.source
        compiled = (f", of which {self.compile_seconds:.1f} s compiling inductor's products"
                    if self.compile_seconds else "")
        return (f"{self.source}: every linear product of each phase summed, each product timed "
                f"in a CUDA/HIP graph after a last-level-cache flush ({REPEATS} products, median "
                f"of {ROUNDS} replays); {self.seconds:.1f} s spent measuring{compiled}")

    def to_dict(self) -> dict:
        return {"source": self.source, "seconds": self.seconds,
                "compile_seconds": self.compile_seconds,
                "phases": {phase.name: {
                    "rows": phase.typical_rows(),
                    "layers": dict(self.layers_by_layout(phase)),
                    "candidates_ms": {layout: self.phase_total_ms(phase, layout)
                                      for layout in self.measured_layouts},
                    "chosen_ms": self.chosen_total_ms(phase)} for phase in self.phases},
                "products": {_key_text(*key): {"chosen": layout,
                                               "ms": dict(self.timings.get(key, {}))}
                             for key, layout in sorted(self.fastest.items())},
                "failures": list(self.failures), "basis": self.basis()}


def _ms(value: float | None) -> str:
    return "failed" if value is None else f"{value:.3f} ms"


# ---------------------------------------------------------------- timing one product

def device_timer(device: torch.device) -> Callable[[Callable[[], object]], float]:
    """A timer of one product on ``device``, in milliseconds per call (see the module)."""
    if not devices.is_gpu(device):
        return _host_timer
    cache = devices.last_level_cache(device).size_bytes or (64 << 20)
    flush = torch.empty(2 * cache, dtype=torch.int8, device=device)

    def time_ms(product: Callable[[], object]) -> float:
        product()                       # first calls outside the graph: allocations, autotuning
        product()
        torch.cuda.synchronize(device)
        both, flushes = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(both):
            for _ in range(REPEATS):
                flush.zero_()
                product()
        with torch.cuda.graph(flushes):
            for _ in range(REPEATS):
                flush.zero_()
        both_ms, flush_ms = [], []
        for _ in range(ROUNDS):         # alternated, so drift touches both alike
            both_ms.append(_replay_ms(both, device))
            flush_ms.append(_replay_ms(flushes, device))
        return max(0.0, statistics.median(both_ms) - statistics.median(flush_ms)) / REPEATS
    return time_ms


def _replay_ms(graph: torch.cuda.CUDAGraph, device: torch.device) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    torch.cuda.synchronize(device)
    return start.elapsed_time(end)


def _host_timer(product: Callable[[], object]) -> float:
    product()
    started = time.perf_counter()
    for _ in range(REPEATS):
        product()
    return (time.perf_counter() - started) * 1e3 / REPEATS


# ---------------------------------------------------------------- measuring the candidates

def count_rows(model: nn.Module, run: Callable[[], object]) -> dict[str, int]:
    """The rows each linear layer of ``model`` multiplies while ``run()`` runs (one eager pass
    of a phase, under no_grad)."""
    counted: dict[str, int] = {}
    handles = []
    for name, layer in linear_layers(model):
        def hook(module: nn.Linear, args: tuple[torch.Tensor, ...], output: torch.Tensor,
                 name: str = name):
            counted[name] = counted.get(name, 0) + args[0].numel() // module.in_features
        handles.append(layer.register_forward_hook(hook))
    try:
        with torch.inference_mode():
            run()
    finally:
        for handle in handles:
            handle.remove()
    return counted


def choose(plan: quant_layout.QuantPlan, model: nn.Module, phases: tuple[Phase, ...],
           device: torch.device, timer: Callable[[Callable[[], object]], float] | None = None,
           cache_path: str | None = None,
           compile_options: Callable[[str], dict | None] | None = None) -> Choice:
    """The layout of each linear layer of ``model`` (BF16, not yet quantized) in each phase:
    the plan's only layout, or the fastest of its candidates measured here (or found in the
    cache). ``compile_options(phase)``: torch.compile's keyword arguments for that phase's
    graphs (None: the products are timed uncompiled)."""
    shapes = {name: (layer.in_features, layer.out_features)
              for name, layer in linear_layers(model)}
    keys = set().union(*(phase.keys(shapes) for phase in phases)) if phases else set()
    if not plan.measured:
        source = ("asked for" if plan.requested != "auto" else
                  "the only candidate this device runs")
        return Choice(plan.quantize, phases, shapes, {key: plan.layouts[0] for key in keys},
                      source=source)
    path = cache_path or os.path.join(writing.user_cache_root(), CACHE_FILE)
    cache_key = _cache_key(plan, keys, device)
    cached = _cached(path, cache_key)
    if cached is not None and set(cached["fastest"]) >= keys:
        return Choice(plan.quantize, phases, shapes,
                      {key: cached["fastest"][key] for key in keys},
                      {key: cached["timings"].get(key, {}) for key in keys},
                      source=f"cached ({cached['when']})")
    started = time.perf_counter()
    timings, failures, compile_s = _measure(plan, model, phases, shapes, keys, device,
                                            timer or device_timer(device), compile_options)
    fastest = {}
    for key in keys:
        measured = timings.get(key, {})
        fastest[key] = min(measured, key=measured.__getitem__) if measured else plan.layouts[0]
    choice = Choice(plan.quantize, phases, shapes, fastest, timings, tuple(failures),
                    seconds=time.perf_counter() - started, compile_seconds=compile_s)
    _store(path, cache_key, choice)
    return choice


def _measure(plan: quant_layout.QuantPlan, model: nn.Module, phases: tuple[Phase, ...],
             shapes: dict[str, Shape], keys: set[tuple[Shape, int]], device: torch.device,
             timer: Callable[[Callable[[], object]], float],
             compile_options: Callable[[str], dict | None] | None
             ) -> tuple[dict[tuple[Shape, int], dict[str, float]], list[str], float]:
    """(shape, rows) -> layout -> ms; the failures, one line each; seconds spent compiling."""
    layers: dict[Shape, nn.Linear] = {}
    for name, layer in linear_layers(model):
        layers.setdefault(shapes[name], layer)
    phase_of: dict[tuple[Shape, int], str] = {}
    for phase in phases:
        for key in phase.keys(shapes):
            phase_of.setdefault(key, phase.name)
    timings: dict[tuple[Shape, int], dict[str, float]] = defaultdict(dict)
    failures: list[str] = []
    failed: set[str] = set()
    compile_s, compiled_any = 0.0, False
    for shape in sorted({shape for shape, _ in keys}):
        for layout in plan.layouts:
            if layout in failed:
                continue
            try:
                built = quant_layout.build(layers[shape], plan.quantize, layout, plan.facts)
            except Exception as error:      # noqa: BLE001 (any failure: leave it out, say why)
                failed.add(layout)
                failures.append(f"{layout} left out: building it failed "
                                f"({quant_layout.error_text(error)})")
                continue
            product: Callable[[torch.Tensor], object] = built
            for key in sorted(key for key in keys if key[0] == shape):
                rows = key[1]
                x = torch.randn(rows, shape[0], device=device,
                                dtype=layers[shape].weight.dtype)
                product = built
                try:
                    # None for the phase: timed as an uncompiled run runs it (a run without
                    # --compile, or not through inductor)
                    options = (compile_options(phase_of[key])
                               if layout in COMPILED and compile_options is not None else None)
                    if options is not None:
                        # A fresh compiler for each: the shapes share one forward, which
                        # dynamo would stop compiling after its recompile limit (8).
                        torch.compiler.reset()
                        compiled_any = True
                        product = torch.compile(built, **options)
                        started = time.perf_counter()
                        with torch.inference_mode():
                            product(x)
                        devices.synchronize(device)
                        compile_s += time.perf_counter() - started
                    with torch.inference_mode():
                        timings[key][layout] = timer(lambda: product(x))
                except Exception as error:  # noqa: BLE001 (any failure: leave it out, say why)
                    failed.add(layout)
                    failures.append(f"{layout} left out: its product at {shape[0]}x{shape[1]}, "
                                    f"{rows} rows, failed ({quant_layout.error_text(error)})")
                    break
            del built, product              # this candidate's layers let go
            if layout in failed:            # a layout is measured everywhere or nowhere
                for row in timings.values():
                    row.pop(layout, None)
    if compiled_any:        # the measurement's graphs hold its layers: let both go
        torch.compiler.reset()
    return dict(timings), failures, compile_s


# ---------------------------------------------------------------- the cache

def _versions() -> dict:
    found = {"torch": str(torch.__version__)}
    for name in ("torchao", "mslk-cuda", "gemlite"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[name] = importlib.metadata.version(name)
    return found


def _cache_key(plan: quant_layout.QuantPlan, keys: Iterable[tuple[Shape, int]], device: torch.device
              ) -> str:
    facts = plan.facts
    return json.dumps({"method": METHOD, "device": devices.device_name(device),
                       "capability": list(facts.capability) if facts and facts.capability
                       else None, "versions": _versions(), "quantize": plan.quantize,
                       "layouts": list(plan.layouts),
                       "products": sorted(_key_text(*key) for key in keys)}, sort_keys=True)


def _read_cache(path: str) -> dict:
    try:
        data = json.loads(read_bounded(path, "quantization layout cache", CACHE_LIMIT_BYTES))
    except (InputRefused, ValueError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _cached(path: str, key: str) -> dict | None:
    if not os.path.exists(path):
        return None
    entry = _read_cache(path).get(key)
    if not isinstance(entry, dict):
        return None
    try:
        return {"when": str(entry["when"]),
                "fastest": {_parse_key(text): str(layout)
                            for text, layout in entry["fastest"].items()},
                "timings": {_parse_key(text): {str(k): float(v) for k, v in row.items()}
                            for text, row in entry["timings"].items()}}
    except (TypeError, KeyError, ValueError, AttributeError):
        return None


def _store(path: str, key: str, choice: Choice) -> None:
    """Add ``choice`` to the cache file (the newest :data:`CACHE_ENTRIES` kept), written whole
    or not at all; a cache that cannot be written is only a cache."""
    entries = _read_cache(path) if os.path.exists(path) else {}
    entries.pop(key, None)
    entries[key] = {"when": datetime.datetime.now().isoformat(timespec="seconds"),
                    "fastest": {_key_text(*k): v for k, v in choice.fastest.items()},
                    "timings": {_key_text(*k): v for k, v in choice.timings.items()}}
    kept = dict(list(entries.items())[-CACHE_ENTRIES:])
    with contextlib.suppress(OSError, CannotWrite):
        with writing.replacing(path) as temporary:
            writing.fill(temporary, json.dumps(kept).encode(), path)
