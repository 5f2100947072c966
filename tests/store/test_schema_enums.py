"""The schema's enums of kinds of run, strategies, quantizations and FP8 recipes are the names
the settings declare, filled in when the schema is read; the command line offers the same."""
from __future__ import annotations

import json

from microbench.plan import cli
from microbench.settings import config, quantization
from microbench.store import schema


def _nodes(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _nodes(value)
    elif isinstance(node, list):
        for value in node:
            yield from _nodes(value)


def test_every_enum_left_to_the_settings_is_filled_from_them():
    filled = [node for node in _nodes(schema.schema()) if "x-enum-of" in node]
    assert {node["x-enum-of"] for node in filled} == set(schema.enums())
    assert all(node["enum"] == list(schema.enums()[node["x-enum-of"]]) for node in filled)


def test_the_published_file_names_no_such_value_itself():
    """A name written in the file as well would be a second declaration to keep in step."""
    text = schema.resources.files(schema.__package__).joinpath(schema.SCHEMA_FILE).read_text()
    shipped = [node for node in _nodes(json.loads(text)) if "x-enum-of" in node]
    assert shipped and not any("enum" in node for node in shipped)


def test_the_parser_offers_exactly_the_schemas_names():
    offered = {action.dest: set(action.type.allowed) for action in cli.build_parser()._actions
               if hasattr(action.type, "allowed")}
    assert offered["mode"] == set(config.MODES)
    assert offered["parallel"] == set(config.PARALLEL)
    assert offered["quantize"] == set(quantization.FORMATS)
    layouts = next(action for action in cli.build_parser()._actions
                   if action.dest == "quant_layout")
    assert set(layouts.choices) == set(quantization.LAYOUTS)
