"""The fast path on the CPU: --preset fast resolves to explicit, printed, stored settings that
explicit flags override; the fused optimizer steps like the foreach one; cudnn.benchmark is set."""
import json
import shlex

import pytest
import torch
from torch import nn

from conftest import IMAGE_MODEL, LANGUAGE_MODEL, TINY, run_main
from microbench.plan import cli, preset, spec as spec_mod
from microbench.settings import config as config_mod
from microbench.steps import workload
from microbench.platform.errors import UsageError

GPU = torch.device("cuda", 0)


def plan_config(*argv):
    return cli.to_plan(cli.parse_args(list(argv))).configs[0]


def test_fast_on_a_gpu_picks_every_lever(monkeypatch):
    monkeypatch.setattr(preset, "_bf16_matrix_units", lambda device: True)
    choices = preset.fast_choices(IMAGE_MODEL, GPU, world_size=2, training=True)
    assert choices == {"compile": True, "compile_options": {"mode": "reduce-overhead"},
                       "nhwc": True, "precision": "amp-bf16", "cudnn_benchmark": True,
                       "optimizer_impl": "fused", "ddp_gradient_as_bucket_view": True,
                       "ddp_static_graph": True}
    assert preset.fast_choices(IMAGE_MODEL, GPU, 1, False)["compile_options"] == {}
    monkeypatch.setattr(preset, "_bf16_matrix_units", lambda device: False)
    assert preset.fast_choices(LANGUAGE_MODEL, GPU, 1, True)["precision"] == "amp-fp16"
    assert "nhwc" not in preset.fast_choices(LANGUAGE_MODEL, GPU, 1, True)
    assert "optimizer_impl" not in preset.fast_choices(IMAGE_MODEL, GPU, 1, False)


def test_explicit_flags_win_over_the_preset(monkeypatch):
    monkeypatch.setattr(preset, "_bf16_matrix_units", lambda device: True)
    config = plan_config("--preset", "fast", "--precision", "fp32", "--compile-mode", "none",
                         "--optimizer-impl", "foreach")
    assert {"precision", "compile", "compile_options", "optimizer_impl"} <= set(config.explicit)
    effective = preset.apply(config, IMAGE_MODEL, GPU, 1, True)
    assert (effective.precision, effective.compile, effective.optimizer_impl) == (
        "fp32", False, "foreach")
    assert effective.nhwc and effective.cudnn_benchmark
    older = preset.apply(plan_config("--preset", "fast", "--amp"), IMAGE_MODEL, GPU, 1,
                         True)
    assert older.precision == "amp-fp16", "--amp is an explicit precision too"


def test_the_printed_flags_reproduce_the_run_without_the_preset(monkeypatch):
    monkeypatch.setattr(preset, "_bf16_matrix_units", lambda device: True)
    effective = preset.apply(plan_config("--preset", "fast"), IMAGE_MODEL, GPU, 2, True)
    again = plan_config(*shlex.split(preset.as_flags(effective)))
    for field in ("precision", "nhwc", "compile", "compile_options", "optimizer_impl",
                  "cudnn_benchmark", "ddp_gradient_as_bucket_view", "ddp_static_graph"):
        assert getattr(again, field) == getattr(effective, field), field


@pytest.mark.slow
def test_the_preset_is_printed_and_stored_in_the_result(capfd, tmp_path):
    process = run_main(capfd, "--network", "resnet18", *TINY, "--preset", "fast",
                       "--compile-mode", "none", "--output-dir", str(tmp_path))
    assert process.returncode == 0, process.stderr
    assert "Note: --preset fast chose: --nhwc" in process.stdout
    [path] = tmp_path.glob("*.json")
    stored = json.loads(path.read_text())["config"]
    assert stored["preset"] == "fast" and stored["nhwc"] is True and stored["compile"] is False
    assert "compile" in stored["explicit"]


def test_fused_and_foreach_sgd_take_the_same_step():
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3)) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    inputs, target = torch.randn(4, 8), torch.tensor([0, 1, 2, 0])
    for model, impl in zip(models, ("foreach", "fused")):
        optimizer = workload.make_sgd(model.parameters(), impl)
        for _ in range(3):
            nn.functional.cross_entropy(model(inputs), target).backward()
            optimizer.step()
            optimizer.zero_grad()
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_fused_optimizer_runs_through_the_cli_and_says_so(capfd):
    process = run_main(capfd, "--network", "resnet18", *TINY, "--optimizer-impl", "fused",
                       "--cudnn-benchmark", "1", "--no-files")
    assert process.returncode == 0, process.stderr
    assert "SGD, fused; cuDNN benchmark on" in process.stdout
    assert torch.backends.cudnn.benchmark is True
    torch.backends.cudnn.benchmark = False


def test_a_preset_that_compiles_still_needs_a_warmup_iteration():
    config = config_mod.BenchConfig(network="resnet18", warmup=0, preset="fast", device="cpu",
                                    write_files=False)
    with pytest.raises(UsageError, match="--warmup"):
        spec_mod.resolve(config)


def test_on_the_cpu_the_preset_says_it_buys_only_compile_and_what_compile_costs():
    """Issue 56: --preset fast --mode generate compiled for minutes on a CPU without a word."""
    def notes(*argv):
        return spec_mod.resolve(plan_config("--device", "cpu", "--preset", "fast", "--no-files",
                                            *argv)).notes
    [generate] = [note for note in notes("--network", "llama_tiny", "--mode", "generate")
                  if note.startswith("on the CPU --preset fast")]
    assert "buys only torch.compile:" in generate and "takes minutes" in generate
    [image] = [note for note in notes("--network", "resnet18", "--compile-mode", "none")
               if note.startswith("on the CPU --preset fast")]
    assert "buys only channels-last" in image and "minutes" not in image
