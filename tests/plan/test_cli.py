"""Flag parsing and validation into a Plan of BenchConfigs."""
import pytest

from microbench.plan import cli
from microbench.settings import compile_options
from microbench.platform.errors import UsageError


def config_for(*argv):
    return cli.to_plan(cli.parse_args(list(argv))).configs[0]


def test_defaults_are_a_sensible_run():
    config = config_for()
    assert (config.network, config.batch_size, config.iterations) == ("resnet50", 64, 20)
    assert config.warmup >= 5 and config.mode == "training" and not config.tf32
    assert config.precision == "fp32"


@pytest.mark.parametrize("argv, precision", [
    (["--fp16", "1"], "fp16"), (["--amp"], "amp-fp16"), (["--amp", "--amp-dtype", "bf16"],
                                                         "amp-bf16"),
    (["--tf32", "1"], "tf32"), (["--amp-opt-level", "2"], "fp16"), (["--precision", "amp"],
                                                                     "amp-fp16"),
    (["--precision", "amp-bf16"], "amp-bf16")])
def test_every_precision_spelling_resolves_to_one_mode(argv, precision):
    assert config_for(*argv).precision == precision


def test_compile_context_strings_become_booleans():
    options, notes = compile_options.parse_compile_context("{'mode': 'max-autotune', 'fullgraph': 'True'}")
    assert options == {"mode": "max-autotune", "fullgraph": True}
    options, _ = compile_options.parse_compile_context("{'fullgraph': 'False', 'dynamic': False}")
    assert options["fullgraph"] is False and options["dynamic"] is False
    assert notes == []


def test_workshop_inductor_options_map_to_real_ones():
    options, notes = compile_options.parse_compile_context(
        "{'options': {'static-memory': 'True', 'matmul-padding': 'True'}}")
    assert options == {"options": {"memory_planning": True, "shape_padding": True}}
    assert len(notes) == 2


@pytest.mark.parametrize("text, message", [
    ("__import__('os').system('true')", "dict literal"),
    ("{'mode': 'max-autotune'", "dict literal"),
    ("['mode']", "must be a dict"),
    ("{'fullgrap': True}", "not torch.compile arguments"),
    ("{'mode': 'default', 'options': {'shape_padding': True}}", "not both"),
    ("{'options': {'no-such-option': 1}}", "unknown inductor option"),
])
def test_bad_compile_context_is_a_usage_error(text, message):
    with pytest.raises(UsageError, match=message):
        compile_options.parse_compile_context(text)


def test_compile_context_without_compile_is_refused():
    with pytest.raises(UsageError, match="needs --compile"):
        config_for("--compileContext", "{'mode': 'default'}")


def test_compile_needs_a_warmup_iteration():
    with pytest.raises(UsageError, match="--warmup"):
        config_for("--compile", "--warmup", "0")


def test_empty_output_file_name_is_refused():
    with pytest.raises(UsageError, match="must not be empty"):
        config_for("--output-file", "")


@pytest.mark.parametrize("argv", [["--batch-size", "0"], ["--iterations", "-3"],
                                  ["--warmup", "-1"], ["--batch-size", "x"], ["--fp16", "2"],
                                  ["--mode", "eval"]])
def test_bad_numbers_exit_2_with_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_args(argv)
    assert exit_info.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_legacy_and_kebab_spellings_agree():
    a = config_for("--compile", "--compileContext", "{'mode': 'reduce-overhead'}")
    b = config_for("--compile", "--compile-context", "{'mode': 'reduce-overhead'}")
    assert a == b


# ---------------------------------------------------------------- refusals before torch (issue 64)

# Each is refused from the flags alone; --device cpu keeps the FP8 one off any GPU's answer.
REFUSED_BEFORE_TORCH = [
    ["--network", "resnet18", "--plot", "x.png"],
    ["--memory-budget-gb", "3"],
    ["--fail-if", "slower"],
    ["--batch-size", "8,8"],
    ["--precision", "amp,amp-fp16"],
    ["--precision", "fp8", "--device", "cpu"],
    ["--network", "resnet18,resnet18", "--max-noise", "5"],
    # The rules of a kind of run, its input data, strategy and precision (settings/kinds.py,
    # settings/data_settings.py, settings/strategy_flags.py), which waited for torch until then.
    ["--mode", "inference", "--opt-step", "2"],
    ["--prompt-len", "8"],
    ["--network", "llama_tiny", "--mode", "generate", "--gen-len", "1"],
    ["--mode", "inference", "--precision", "fp8"],
    ["--quantize", "int8wo", "--precision", "bf16"],
    ["--mode", "inference", "--quantize", "int8wo", "--precision", "fp32"],
    ["--mode", "inference", "--parallel", "fsdp"],
    ["--mode", "inference", "--optimizer", "adamw"],
    ["--parallel", "fsdp", "--precision", "amp-fp16"],
    ["--parallel", "fsdp", "--opt-step", "2"],
    ["--parallel", "fsdp", "--optimizer-impl", "fused"],
    ["--parallel", "fsdp", "--ddp-static-graph"],
    ["--ddp-options", "{'bogus': 1}"],
    ["--reshard-after-forward", "0"],
    ["--workers", "2"],
    ["--network", "llama_tiny", "--mode", "generate", "--data", "loader"],
    ["--data", "folder"],
    ["--data", "loader", "--decode", "gpu"],
    ["--mode", "inference,training", "--quantize", "int8wo"],
    # A generation longer than its model, where the flags tell the model's length.
    ["--network", "llama_tiny", "--mode", "generate", "--prompt-len", "500"],
    ["--network", "Llama_Tiny", "--mode", "generate", "--gen-len", "200"],
    ["--network", "llama_tiny", "--mode", "generate", "--seq-len", "64", "--prompt-len", "64"],
    ["--network", "hf:gpt2", "--mode", "generate", "--seq-len", "32", "--gen-len", "40"],
]


def test_refusals_from_the_flags_alone_come_before_torch_is_imported():
    """Issue 64: --plot on one configuration waited 7-26 s for torch's import and the device
    probe before its one line. One process runs them all: torch's absence is the check, not
    a clock (which a loaded machine would fail)."""
    import subprocess
    import sys
    from conftest import ROOT
    code = ("import sys; from microbench.main import main; "
            f"codes = [main(argv) for argv in {REFUSED_BEFORE_TORCH!r}]; "
            "print(codes, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.stdout.strip() == f"{[2] * len(REFUSED_BEFORE_TORCH)} False", done.stderr
    assert len(done.stderr.strip().splitlines()) == len(REFUSED_BEFORE_TORCH)


@pytest.mark.parametrize("argv", [["--batch-size", "2,4,2"], ["--precision", "amp,amp-fp16"],
                                  ["--compile-mode", "none,none"]])
def test_a_list_naming_one_value_twice_is_refused_with_the_flag(argv):
    with pytest.raises(UsageError, match=f"lists one configuration twice \\({argv[0]} "):
        cli.to_plan(cli.parse_args(argv))


def test_fp8_training_where_torch_can_see_no_gpu_is_refused_before_it(monkeypatch):
    from microbench.platform import gpu_presence
    monkeypatch.setattr(gpu_presence, "none_visible", lambda: True)
    with pytest.raises(UsageError, match="the CPU has no FP8 matrix units"):
        cli.refuse_fp8_without_gpu(cli.parse_args(["--precision", "bf16,fp8"]))
    # A device named, or inference (whose own line says FP8 is for training), is not its call.
    for argv in (["--device", "cuda"], ["--mode", "inference"]):
        cli.refuse_fp8_without_gpu(cli.parse_args(["--precision", "fp8", *argv]))
    # Where a GPU may be seen, the device probe decides (steps.low_precision.check).
    monkeypatch.setattr(gpu_presence, "none_visible", lambda: False)
    cli.refuse_fp8_without_gpu(cli.parse_args(["--precision", "fp8"]))


def test_fp8_training_on_device_cpu_is_refused_by_the_plan_and_inference_by_its_kind():
    with pytest.raises(UsageError, match="the CPU has no FP8 matrix units"):
        cli.to_plan(cli.parse_args(["--precision", "fp8", "--device", "cpu"]))
    with pytest.raises(UsageError, match="use --quantize"):
        cli.to_plan(cli.parse_args(["--precision", "fp8", "--mode", "inference",
                                    "--device", "cpu"]))
