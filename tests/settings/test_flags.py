"""A flag is declared once (issue 63): the parser is the settings' declarations and the plan-level
rows walked in --help's order, nothing written beside them."""
from __future__ import annotations

import pytest

from microbench.plan import cli
from microbench.settings.config import SCHEMA
from microbench.settings.flags import GROUPS, Flag, in_help_order


def _names(flags) -> list[str]:
    return [flag.name for flag in flags]


def test_help_lists_each_section_in_declaration_order():
    flags = [Flag("--b", "timing", help=""), Flag("--a", "model", help=""),
             Flag("--c", "timing", help=""), Flag("--version", None, help="")]
    assert _names(in_help_order(flags)) == ["version", "a", "b", "c"]


def test_a_flag_placed_before_another_comes_just_ahead_of_it_in_its_rows_order():
    flags = [Flag("--precision", "precision", help=""), Flag("--tf32", "precision", help=""),
             Flag("--fp16", "precision", help="", before="tf32"),
             Flag("--amp", "precision", help="", before="tf32")]
    assert _names(in_help_order(flags)) == ["precision", "fp16", "amp", "tf32"]


def test_a_section_help_does_not_have_is_refused():
    with pytest.raises(ValueError, match="no --help section 'nowhere'"):
        Flag("--x", "nowhere", help="")


def test_the_parser_is_the_declarations_each_flag_declared_once():
    declared = [item.as_flag() for item in SCHEMA.values() if item.as_flag() is not None]
    names = _names(declared) + _names(cli.PLAN_FLAGS)
    assert len(names) == len(set(names)), "a destination declared twice"
    parsed = {action.dest: action.option_strings for action in cli.build_parser()._actions
              if action.dest != "help"}
    assert set(parsed) == set(names)
    for flag in [*declared, *cli.PLAN_FLAGS]:
        assert parsed[flag.name] == [flag.spelling, *flag.aliases]
        assert flag.group is None or flag.group in GROUPS


def test_a_setting_derived_from_other_flags_has_no_flag_of_its_own_unless_declared():
    assert SCHEMA["notes"].as_flag() is None and SCHEMA["explicit"].as_flag() is None
    assert SCHEMA["precision"].as_flag().default is None     # --precision's own: derived
    assert SCHEMA["tf32"].as_flag().default == 0


def test_a_sweep_axis_takes_a_list_of_its_choices():
    mode = SCHEMA["mode"].as_flag()
    assert mode.choices is None and mode.type("training,inference") == ["training", "inference"]
    assert mode.default == ["training"]
    assert SCHEMA["optimizer"].as_flag().choices == ("sgd", "adamw")       # not an axis
