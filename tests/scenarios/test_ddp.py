"""scenarios/ddp.py: DDP owns its options (the named flags and --ddp-options' allow-list), its
wrapper, its preset choices and its refusals; a new keyword is its word in the allow-list."""
from __future__ import annotations

import shlex
from types import SimpleNamespace

import pytest
import torch

from conftest import IMAGE_MODEL
from microbench.plan import cli, preset
from microbench.platform.errors import UsageError
from microbench.scenarios import ddp, parallel
from microbench.settings.strategy_flags import boolean

GPU = torch.device("cuda", 0)
DDP = parallel.STRATEGIES["ddp"]


def plan_config(*argv):
    return cli.to_plan(cli.parse_args(list(argv))).configs[0]


def wrapped_with(monkeypatch, config, updates_weights=True) -> dict | None:
    """The keywords DDP's wrapper gives DistributedDataParallel (None: no wrapper)."""
    given = {}

    def constructor(model, **keywords):
        given.update(keywords)
        return model
    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", constructor)
    spec = SimpleNamespace(config=config, device=torch.device("cpu"),
                           scenario=SimpleNamespace(updates_weights=updates_weights))
    wrap = DDP.wrapper(spec)
    if wrap is None:
        return None
    wrap(torch.nn.Linear(2, 2))
    return given


def test_the_wrapper_takes_the_named_flags_and_the_dict(monkeypatch):
    config = plan_config("--ddp-bucket-cap-mb", "50", "--ddp-static-graph", "--ddp-options",
                         "{'broadcast_buffers': 'False', 'find_unused_parameters': True}")
    assert wrapped_with(monkeypatch, config) == {
        "device_ids": None, "static_graph": True, "gradient_as_bucket_view": False,
        "bucket_cap_mb": 50.0, "broadcast_buffers": False, "find_unused_parameters": True}


def test_a_run_that_steps_no_optimizer_is_not_wrapped(monkeypatch):
    assert wrapped_with(monkeypatch, plan_config(), updates_weights=False) is None


@pytest.mark.parametrize("argv, text", [
    (["--ddp-options", "{'broadcast_bufers': False}"],
     "unknown option 'broadcast_bufers' (did you mean broadcast_buffers?)"),
    (["--ddp-options", "{'static_graph': True}"], "has a flag of its own: use --ddp-static-graph"),
    (["--ddp-options", "{'broadcast_buffers': 2}"], "must be True or False, got 2"),
    (["--parallel", "fsdp", "--network", "llama_tiny", "--ddp-options",
      "{'broadcast_buffers': False}"],
     "DistributedDataParallel's options (--ddp-options) do not apply to --parallel fsdp"),
])
def test_what_ddp_refuses_is_one_line(argv, text):
    with pytest.raises(UsageError) as refused:
        plan_config(*argv)
    assert text in str(refused.value)


@pytest.mark.parametrize("text", ["{'a': [1]}", "[1, 2]", "{'a': 1", "{1: 2}", "x" * 2000])
def test_the_dict_flag_takes_a_flat_literal_only(text, capsys):
    with pytest.raises(SystemExit) as stopped:
        cli.parse_args(["--ddp-options", text])
    assert stopped.value.code == 2 and "--ddp-options" in capsys.readouterr().err


def test_the_preset_chooses_ddp_options_under_ddp_only(monkeypatch):
    monkeypatch.setattr(preset, "_bf16_matrix_units", lambda device: True)
    under_ddp = preset.fast_choices(IMAGE_MODEL, GPU, 2, True, strategy=DDP)
    assert (under_ddp["ddp_static_graph"], under_ddp["ddp_gradient_as_bucket_view"]) == (True, True)
    for world, training, strategy in ((1, True, DDP), (2, False, DDP),
                                      (2, True, parallel.STRATEGIES["fsdp"])):
        chosen = preset.fast_choices(IMAGE_MODEL, GPU, world, training, strategy=strategy)
        assert not [key for key in chosen if key.startswith("ddp_")], (world, training)


def test_a_new_keyword_is_one_word_in_the_allow_list(monkeypatch):
    """Issue 54's measure: a DDP keyword added to the options and to the preset is its word in
    its flag side, settings/strategy_flags.py (and its line in docs/flags.md); the flag, its
    check, the wrapper, the preset, its reproducing flags and --rerun's spelling follow."""
    monkeypatch.setitem(ddp.Replicated.OPTIONS, "scratch_keyword", boolean)
    monkeypatch.setattr(ddp.Replicated, "PRESET", {**ddp.Replicated.PRESET,
                                                   "scratch_keyword": True})
    config = plan_config("--ddp-options", "{'scratch_keyword': True}")
    assert wrapped_with(monkeypatch, config)["scratch_keyword"] is True
    monkeypatch.setattr(preset, "_bf16_matrix_units", lambda device: True)
    effective = preset.apply(plan_config("--preset", "fast"), IMAGE_MODEL, GPU, 2, True)
    assert effective.ddp_options == {"scratch_keyword": True}
    again = plan_config(*shlex.split(preset.as_flags(effective)))
    assert again.ddp_options == {"scratch_keyword": True} and again.ddp_static_graph
