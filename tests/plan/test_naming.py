"""Run names, sweep labels and figure facets read the settings' schema: a sweep axis declared
with a label (one ``setting(..., axis=N, label=...)``) reaches the parser, the sweep, the
result's name, the row's label, the figure's facets and subtitle, with nothing else written."""
from __future__ import annotations

import dataclasses

import pytest

from microbench.plan import cli, naming, spec
from microbench.settings import config

QUICK = ["--network", "resnet18", "--image-size", "32", "--batch-size", "2"]


@pytest.fixture
def scratch_axis(monkeypatch):
    """--optimizer made a labelled sweep axis, between checkpointing and quantization."""
    item = dataclasses.replace(config.SCHEMA["optimizer"], axis=105, label="opt")
    monkeypatch.setitem(config.SCHEMA, "optimizer", item)


def names_of(plan_config) -> tuple[str, str, dict]:
    described = naming.Described.of(spec.resolve(plan_config))
    return (naming.run_name(described, 1), naming.row_label(described),
            naming.facets(described))


def test_a_labelled_axis_reaches_the_parser_the_names_and_the_facets(scratch_axis):
    plan = cli.to_plan(cli.parse_args([*QUICK, "--optimizer", "sgd,adamw", "--batch-size",
                                       "2,4"]))
    assert [(c.optimizer, c.batch_size) for c in plan.configs] == \
        [("sgd", 2), ("sgd", 4), ("adamw", 2), ("adamw", 4)]       # nested before the batch
    default, adamw = names_of(plan.configs[0]), names_of(plan.configs[2])
    assert default[:2] == ("resnet18_training_fp32_b2", "resnet18 training fp32 b2")
    assert adamw[:2] == ("resnet18_training_fp32_opt-adamw_b2",
                         "resnet18 training fp32 opt=adamw b2")
    assert (default[2]["optimizer"], adamw[2]["optimizer"]) == ("", "opt adamw")
    assert list(adamw[2]).index("optimizer") == list(adamw[2]).index("batch") - 1
    assert "optimizer" in naming.shown_settings()


def test_without_a_label_the_setting_is_no_axis():
    assert "optimizer" not in config.sweep_axes()
    assert "optimizer" not in naming.facets(naming.Described.of(spec.resolve(
        cli.to_config(cli.parse_args(QUICK)))))
    with pytest.raises(SystemExit):
        cli.parse_args([*QUICK, "--optimizer", "sgd,adamw"])


def test_the_sweep_nests_the_axes_in_the_schemas_order():
    assert config.sweep_axes() == (
        "network", "mode", "precision", "compile", "attention", "seq_len", "decode", "workers",
        "parallel", "activation_checkpointing", "quantize", "batch_size")
