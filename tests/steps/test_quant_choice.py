"""--quant-layout auto by measurement (microbench.steps.quant_choice, issue 61), with a fake timer
and fake layouts: the faster candidate wins per phase and per shape, an explicit layout is taken
without measuring, a cached choice is reused (and a damaged cache is only a cache), a candidate
that fails is left out with one line, and the rows of each phase are counted from the model."""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from microbench.platform.devices import Vendor
from microbench.steps import low_precision, quant_choice, quant_layout
from microbench.steps.quant_choice import Phase
from microbench.steps.quant_layers import PhaseLinear, linear_layers
from microbench.steps.quant_layout import QuantDevice, QuantPlan

GPU = QuantDevice(Vendor.NVIDIA, (9, 0), fp8=True, mslk=False)
CPU = torch.device("cpu")


class Tagged(nn.Linear):
    """A stand-in quantized layer: the BF16 product, and the layout it stands for."""

    def __init__(self, layer: nn.Linear, layout: str):
        super().__init__(layer.in_features, layer.out_features, bias=False,
                         dtype=layer.weight.dtype)
        with torch.no_grad():
            self.weight.copy_(layer.weight)
        self.layout = layout


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128, bias=False), nn.Linear(128, 64, bias=False),
                         nn.Linear(64, 128, bias=False)).to(torch.bfloat16)


def _phases(model, decode_rows=1, prompt_rows=32) -> tuple[Phase, ...]:
    names = [name for name, _ in linear_layers(model)]
    return (Phase("decode", {name: decode_rows for name in names}),
            Phase("prefill", {name: prompt_rows for name in names}))


class FakeTimer:
    """Milliseconds by (layout, rows, in_features): what each product 'takes'."""

    def __init__(self, table, fail=()):
        self.table, self.fail, self.calls = table, set(fail), []

    def __call__(self, product):
        # The product closes over the built layer and the input: read both from the closure.
        cells = {type(c.cell_contents).__name__: c.cell_contents
                 for c in product.__closure__ or ()}
        built, x = cells.get("Tagged"), cells.get("Tensor")
        self.calls.append((built.layout, x.shape[0], built.in_features))
        if built.layout in self.fail:
            raise RuntimeError("no kernel image is available\nfor execution")
        return self.table[(built.layout, x.shape[0], built.in_features)]


@pytest.fixture
def fake_layouts(monkeypatch):
    monkeypatch.setattr(quant_layout, "build",
                        lambda layer, quantize, layout, facts: Tagged(layer, layout))


def _plan(*layouts, requested="auto"):
    return QuantPlan("int4wo", requested, layouts, facts=GPU)


def test_the_faster_candidate_wins_per_phase_and_per_shape(fake_layouts, tmp_path):
    model = _model()
    timer = FakeTimer({("small", 1, 64): 1.0, ("big", 1, 64): 2.0,
                       ("small", 1, 128): 3.0, ("big", 1, 128): 2.5,     # the down shape: big
                       ("small", 32, 64): 9.0, ("big", 32, 64): 4.0,
                       ("small", 32, 128): 9.0, ("big", 32, 128): 4.0})
    choice = quant_choice.choose(_plan("small", "big"), model, _phases(model), CPU, timer,
                                 cache_path=str(tmp_path / "cache.json"))
    assert choice.source == "measured"
    assert [choice.layout("decode", name) for name in ("0", "1", "2")] == ["small", "big",
                                                                            "small"]
    assert {choice.layout("prefill", name) for name in ("0", "1", "2")} == {"big"}
    decode, prefill = choice.phases
    assert choice.phase_total_ms(decode, "small") == 1.0 + 3.0 + 1.0
    assert choice.chosen_total_ms(decode) == 1.0 + 2.5 + 1.0
    # Each (shape, rows) product timed once per candidate: 2 shapes x 2 row counts x 2.
    assert len(timer.calls) == 8
    [decode_line, prefill_line] = choice.lines()
    assert decode_line.startswith("decode (1 row): big 6.500 ms, small 5.000 ms; chosen per "
                                  "shape 4.500 ms: small on 2, big on 1")
    assert "prefill (32 rows)" in prefill_line and "big on 3" in prefill_line
    stored = choice.to_dict()
    assert stored["phases"]["decode"]["layers"] == {"small": 2, "big": 1}
    assert stored["products"]["128x64@1"] == {"chosen": "big", "ms": {"small": 3.0, "big": 2.5}}


def test_quantizing_builds_a_layer_per_phase_only_where_the_phases_differ(fake_layouts,
                                                                          tmp_path,
                                                                          monkeypatch):
    monkeypatch.setattr(quant_choice.writing, "user_cache_root", lambda: str(tmp_path))
    model = _model()
    timer = FakeTimer({("small", 1, 64): 1.0, ("big", 1, 64): 2.0,
                       ("small", 1, 128): 1.0, ("big", 1, 128): 2.0,
                       ("small", 32, 64): 9.0, ("big", 32, 64): 4.0,
                       ("small", 32, 128): 1.0, ("big", 32, 128): 4.0})
    monkeypatch.setattr(low_precision, "torchao", lambda: None)
    monkeypatch.setattr(low_precision, "weight_error", lambda original, layer: 0.01)
    probe = torch.randn(32, 64, dtype=torch.bfloat16)
    report = low_precision.quantize_measured(model, _plan("small", "big"), _phases(model), probe,
                                             CPU, timer=timer)
    first, down = model[0], model[1]
    assert isinstance(first, PhaseLinear) and first.decode.layout == "small" \
        and first.prompt.layout == "big" and first.decode_rows == 1
    assert isinstance(down, Tagged) and down.layout == "small"      # both phases alike
    # The decode step reads only its phase's copy; the file says what each phase ran.
    assert low_precision.weight_bytes(model, rows=1) == 3 * 64 * 128 * 2
    assert low_precision.weight_bytes(model) == 5 * 64 * 128 * 2
    assert first(torch.randn(1, 64, dtype=torch.bfloat16)).shape == (1, 128)
    assert report.quant_layout == "per phase"
    assert [layer.layout for _, layer in linear_layers(model, rows=32)] == ["big", "small",
                                                                             "big"]
    labels = dict(report.rows())
    assert labels["Quantized layouts"].startswith("auto, measured: every linear product")
    assert [phase["phase"] for phase in report.quant_phases] == ["decode", "prefill"]


def test_an_explicit_layout_is_taken_without_measuring(fake_layouts, tmp_path):
    model = _model()
    timer = FakeTimer({})
    choice = quant_choice.choose(_plan("big", requested="big"), model, _phases(model), CPU,
                                 timer, cache_path=str(tmp_path / "cache.json"))
    assert timer.calls == [] and choice.source == "asked for"
    assert {choice.layout(phase, "1") for phase in ("decode", "prefill")} == {"big"}
    assert not (tmp_path / "cache.json").exists()
    only = quant_choice.choose(_plan("small"), model, _phases(model), CPU, timer)
    assert only.source == "the only candidate this device runs" and timer.calls == []


def test_a_cached_choice_is_reused_and_a_new_shape_is_measured_again(fake_layouts, tmp_path):
    model, path = _model(), str(tmp_path / "cache.json")
    table = {(layout, rows, width): cost for layout, cost in (("small", 1.0), ("big", 2.0))
             for rows in (1, 32, 8) for width in (64, 128)}
    first = FakeTimer(table)
    quant_choice.choose(_plan("small", "big"), model, _phases(model), CPU, first,
                        cache_path=path)
    again = FakeTimer(table)
    cached = quant_choice.choose(_plan("small", "big"), model, _phases(model), CPU, again,
                                 cache_path=path)
    assert again.calls == [] and cached.source.startswith("cached (")
    assert cached.layout("prefill", "1") == "small"
    assert cached.lines()[0].startswith("decode (1 row): big 6.000 ms, small 3.000 ms")
    other = FakeTimer(table)           # another prompt length: another key, measured
    quant_choice.choose(_plan("small", "big"), model, _phases(model, prompt_rows=8), CPU,
                        other, cache_path=path)
    assert other.calls
    assert len(json.loads((tmp_path / "cache.json").read_text())) == 2


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b'{"x": {"when": 1}}',
                                     b"\xff\xfe"])
def test_a_damaged_cache_is_measured_again_and_rewritten(fake_layouts, tmp_path, content):
    model, path = _model(), tmp_path / "cache.json"
    path.write_bytes(content)
    table = {(layout, rows, width): cost for layout, cost in (("small", 1.0), ("big", 2.0))
             for rows in (1, 32) for width in (64, 128)}
    timer = FakeTimer(table)
    choice = quant_choice.choose(_plan("small", "big"), model, _phases(model), CPU, timer,
                                 cache_path=str(path))
    assert timer.calls and choice.source == "measured"
    assert isinstance(json.loads(path.read_text()), dict)


def test_a_candidate_that_fails_is_left_out_in_one_line(fake_layouts, tmp_path):
    model = _model()
    table = {(layout, rows, width): 1.0 for layout in ("small", "big") for rows in (1, 32)
             for width in (64, 128)}
    timer = FakeTimer(table, fail={"big"})
    choice = quant_choice.choose(_plan("small", "big"), model, _phases(model), CPU, timer,
                                 cache_path=str(tmp_path / "cache.json"))
    assert {choice.layout("decode", name) for name in ("0", "1", "2")} == {"small"}
    (line,) = choice.failures
    assert line.startswith("big left out: its product at ") and "\n" not in line
    assert "RuntimeError: no kernel image is available for execution" in line
    assert all(set(row) == {"small"} for row in choice.timings.values())


def test_each_phases_rows_are_counted_from_the_model():
    model = _model()
    counted = quant_choice.count_rows(model, lambda: model(torch.randn(2, 5, 64,
                                                                       dtype=torch.bfloat16)))
    assert counted == {"0": 10, "1": 10, "2": 10}
    assert Phase("prefill", {"a": 10, "b": 10, "head": 2}).typical_rows() == 10


def test_the_cpus_timer_times_the_calls_themselves():
    """(A GPU's graph-and-flush timer runs in the GPU suite.)"""
    calls = []
    assert quant_choice.device_timer(CPU)(lambda: calls.append(1)) >= 0
    assert len(calls) == 1 + quant_choice.REPEATS


def test_a_gemlite_that_fails_to_build_is_left_out_in_one_line(monkeypatch, tmp_path):
    """The real build, gemlite faked to refuse the shape (gemlite 0.6 refuses an input width
    not divisible by 32): unwrapped is measured alone and chosen, and a line says why."""
    pytest.importorskip("torchao")
    import dataclasses

    from support import gemlite_fake

    from microbench.steps import quant_layers
    gemlite_fake.install(monkeypatch, quant_layout, quant_layers,
                         fails=NotImplementedError("Invalid input shapes: 64 , 128.\nin_features "
                                                   "should be divisible by 32"))
    model = _model()
    planned = QuantPlan("int8wo", "auto", ("unwrapped", "gemlite"),
                        facts=dataclasses.replace(GPU, gemlite=True))
    choice = quant_choice.choose(planned, model, _phases(model), CPU, lambda product: 1.0,
                                 cache_path=str(tmp_path / "cache.json"))
    (line,) = choice.failures
    assert line == ("gemlite left out: building it failed (NotImplementedError: Invalid input "
                    "shapes: 64 , 128. in_features should be divisible by 32)")
    assert choice.measured_layouts == ["unwrapped"]
    assert {choice.layout("prefill", name) for name in ("0", "1", "2")} == {"unwrapped"}


def test_layouts_written_for_inductor_are_timed_compiled_and_kernels_as_they_are(
        fake_layouts, monkeypatch, tmp_path):
    """The unwrapped layer (and int4's inductor layout) run compiled: timed eager, int8's
    unwrapped product would write a BF16 copy of its weight first and lose to gemlite at any
    speed. A kernel layout (gemlite's custom op) is timed as it is."""
    compiled = []

    def fake_compile(module, **options):
        compiled.append((module.layout, options["options"]["phase"]))
        return module
    monkeypatch.setattr(torch, "compile", fake_compile)
    model = _model()
    choice = quant_choice.choose(_plan("unwrapped", "gemlite"), model, _phases(model), CPU,
                                 lambda product: 1.0, cache_path=str(tmp_path / "cache.json"),
                                 compile_options=lambda phase: {"options": {"phase": phase}})
    assert set(choice.measured_layouts) == {"unwrapped", "gemlite"}
    # Each (shape, rows) of a compiled layout compiled once, with its phase's options.
    assert sorted(compiled) == sorted([("unwrapped", "decode")] * 2 +
                                      [("unwrapped", "prefill")] * 2)
    assert choice.compile_seconds >= 0
