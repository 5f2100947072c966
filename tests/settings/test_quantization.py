"""The quantization table (microbench.settings.quantization, issue 61) is the one place a format
or a layout is named: a row added there reaches the command line's choices and help, the result
schema's enums and the device rules, with no other edit."""
from __future__ import annotations

import dataclasses

import pytest

from microbench.platform.devices import Vendor
from microbench.plan import cli
from microbench.settings import quantization
from microbench.settings.quantization import FORMATS, LAYOUTS, Format, Layout
from microbench.steps import quant_layout
from microbench.store import schema


@pytest.fixture
def a_new_format(monkeypatch):
    monkeypatch.setitem(LAYOUTS, "blocky", Layout("blocky", "int2wo: blocks of 64",
                                                  "the blocky kernel", ("hopper",)))
    monkeypatch.setitem(FORMATS, "int2wo", Format("int2wo", "int2 weight-only, blocks of 64",
                                                  ("blocky",), ("blocky",), ("gpu",),
                                                  "use --quantize int8wo"))
    schema.schema.cache_clear()
    yield
    schema.schema.cache_clear()


def test_a_format_added_to_the_table_is_offered_and_stored(a_new_format):
    parser = cli.build_parser()
    quantize = next(action for action in parser._actions if action.dest == "quantize")
    layout = next(action for action in parser._actions if action.dest == "quant_layout")
    assert "int2wo" in quantize.type.allowed and "blocky" in layout.choices
    assert "int2wo (int2 weight-only, blocks of 64)" in quantize.help
    assert "int2wo" in schema.enums()["QUANTIZE"] and "blocky" in schema.enums()["QUANT_LAYOUTS"]
    config = schema.schema()["$defs"]["config"]["properties"]
    assert "int2wo" in config["quantize"]["enum"] and "blocky" in config["quant_layout"]["enum"]


def test_its_device_rules_are_the_tables(a_new_format):
    hopper = quant_layout.QuantDevice(Vendor.NVIDIA, (9, 0), fp8=True, mslk=False)
    ampere = dataclasses.replace(hopper, capability=(8, 0))
    cpu = quant_layout.QuantDevice(Vendor.CPU, None, fp8=False, mslk=False)
    assert quant_layout.plan("int2wo", "auto", hopper).layouts == ("blocky",)
    with pytest.raises(Exception, match="the blocky kernel is built for sm_90"):
        quant_layout.plan("int2wo", "blocky", ampere)
    with pytest.raises(Exception, match="--quantize int2wo needs a GPU: use --quantize int8wo"):
        quant_layout.plan("int2wo", "auto", cpu)


def test_every_layout_a_format_names_is_in_the_table_and_every_rule_is_known():
    for form in FORMATS.values():
        assert set(form.candidates) <= set(form.layouts) <= set(LAYOUTS)
        for layout in form.layouts:
            assert set(quantization.rules_of(form.name, layout)) <= set(quantization.RULES)
    assert list(FORMATS)[0] == "none" and not FORMATS["none"].layouts


def test_the_gemlite_layout_is_the_tables_everywhere():
    """Issue 61: one row in the table offers gemlite to the command line, its help, the schema
    and auto's candidates of int8wo and float8wo, with the install its rule names."""
    parser = cli.build_parser()
    layout = next(action for action in parser._actions if action.dest == "quant_layout")
    assert "gemlite" in layout.choices
    assert "gemlite (int8wo, float8wo: the unwrapped layout's values and row scales repacked " \
           "for gemlite's A16W8 Triton kernels" in layout.help
    assert "gemlite" in schema.enums()["QUANT_LAYOUTS"]
    for name in ("int8wo", "float8wo"):
        assert FORMATS[name].candidates == ("unwrapped", "gemlite")
        assert quantization.rules_of(name, "gemlite")[-2:] == ("gpu", "gemlite")
    assert "pip install gemlite" in quantization.RULES["gemlite"]
