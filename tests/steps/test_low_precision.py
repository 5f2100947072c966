"""FP8 training and quantized weights (microbench.steps.low_precision, issue 36), on the CPU: the precision
row and its refusals, int8 weight-only generation with its bytes and accuracy line, which layers
FP8 converts, MFU against two peaks, and --quantize's choices."""
import json
import sys
from types import SimpleNamespace

import pytest
import torch

from conftest import assert_one_line_error, run_main
from microbench.platform import devices
from microbench.measure import flops
from microbench.steps import low_precision
from microbench.settings import precision
from microbench.models.archs import llama
from microbench.output import console
from microbench.store import schema

TINY_GENERATE = ["--network", "llama_tiny", "--mode", "generate", "--seq-len", "32",
                 "--prompt-len", "8", "--gen-len", "4", "--batch-size", "1", "--iterations", "1",
                 "--warmup", "1", "--telemetry-interval", "0"]


@pytest.fixture
def run(capfd, tmp_path):
    def invoke(*args):
        return run_main(capfd, "--output-dir", str(tmp_path / "out"), *args)
    return invoke


# ---------------------------------------------------------------- the precision row, refusals

def test_fp8_is_a_row_of_the_precision_table():
    row = precision.lookup("fp8")
    assert row.fp8 and row.peak_key == "fp8" and row.second_peak_key == "bf16"
    assert row.autocast_dtype == torch.bfloat16 and row.model_dtype == torch.float32
    assert "fp8" in precision.CHOICES


def test_fp8_on_the_cpu_is_refused_in_one_line_and_writes_nothing(run, tmp_path):
    ran = run("--network", "llama_tiny", "--precision", "fp8", "--device", "cpu")
    assert_one_line_error(ran, 2, "the CPU has no FP8 matrix units")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, text", [
    (["--quantize", "float8dq", "--mode", "inference"], "--quantize float8dq needs FP8"),
    (["--quantize", "int4wo", "--mode", "inference"], "--quantize int4wo needs a GPU: use --quantize int8wo on the CPU"),
    (["--quantize", "int8wo"], "--quantize applies to --mode inference and generate"),
    (["--precision", "fp8", "--mode", "inference"], "for inference and generate use --quantize"),
    (["--quantize", "int8wo", "--mode", "inference", "--precision", "amp-bf16"],
     "--quantize quantizes half-precision weights"),
])
def test_what_cannot_run_is_refused_before_the_build(run, tmp_path, argv, text):
    ran = run("--network", "llama_tiny", "--device", "cpu", *argv)
    assert_one_line_error(ran, 2, text)
    assert not (tmp_path / "out").exists()


def test_a_bad_quantize_value_lists_the_valid_ones(run):
    ran = run("--network", "llama_tiny", "--mode", "generate", "--quantize", "int3")
    assert ran.returncode == 2
    assert "none, int8wo, int4wo, float8wo, float8dq" in ran.stderr


def test_without_torchao_the_run_gets_the_install_line(run, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torchao", None)          # import torchao fails
    ran = run(*TINY_GENERATE, "--quantize", "int8wo", "--device", "cpu")
    assert_one_line_error(ran, 4, 'pip install "torchao>=0.18"')
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("hip, capability, arch, formats", [
    (False, (9, 0), "", ("e4m3fn", "e5m2")),          # H100
    (False, (8, 9), "", ("e4m3fn", "e5m2")),          # L40S, Ada
    (False, (8, 0), "", ()),                          # A100: no FP8 tensor cores
    (True, None, "gfx942:sramecc+:xnack-", ("e4m3fnuz", "e5m2fnuz")),   # MI300X, MI325X
    (True, None, "gfx950", ("e4m3fn", "e5m2")),       # MI355X: OCP formats
    (True, None, "gfx90a:sramecc+:xnack-", ()),       # MI250X: none
])
def test_the_device_layer_says_which_fp8_formats_a_gpu_has(hip, capability, arch, formats):
    assert devices.fp8_formats_of(hip, capability, arch) == formats


def test_a_gpu_without_fp8_is_refused_with_its_architecture(monkeypatch):
    monkeypatch.setattr(devices, "fp8_formats", lambda device: ())
    monkeypatch.setattr(devices, "architecture", lambda device: "sm_80")
    reason = devices.no_fp8_reason(torch.device("cuda", 0))
    assert "sm_80" in reason and "sm_89" in reason and "gfx942" in reason


# ---------------------------------------------------------------- which layers run in FP8

def test_fp8_converts_every_aligned_linear_but_the_output_head_on_a_meta_model():
    with torch.device("meta"):
        model = llama.build("llama_tiny")
    names = low_precision.fp8_layers(model)
    layers = model.config.num_layers
    assert "output" not in names
    assert len(names) == 7 * layers                    # wq wk wv wo, w1 w2 w3 per block
    assert all(name.startswith("layers.") for name in names)


def test_the_conversion_swaps_exactly_the_selected_layers_on_a_meta_model():
    pytest.importorskip("torchao")
    from torchao.float8.float8_linear import Float8Linear
    with torch.device("meta"):
        model = llama.build("llama_tiny")
    selected = low_precision.fp8_layers(model)
    converted = low_precision.convert_fp8(model, "rowwise", fsdp=False)
    assert converted == sorted(selected)
    swapped = sorted(name for name, module in model.named_modules()
                     if isinstance(module, Float8Linear))
    assert swapped == sorted(selected) and type(model.output) is torch.nn.Linear


def test_fp8_leaves_attention_projections_read_through_their_weight_and_the_head():
    torchvision = pytest.importorskip("torchvision")
    with torch.device("meta"):
        model = torchvision.models.vit_b_16()
    names = low_precision.fp8_layers(model)
    assert "heads.head" not in names
    assert not any("out_proj" in name for name in names)       # MultiheadAttention's
    assert len(names) == 2 * 12                                 # the MLP's two linears a block


def test_the_fp8_share_of_flops_counts_three_gemms_a_linear_in_training():
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 16))
    inputs = torch.randn(5, 32)
    with low_precision.linear_rows(model, ["0"]) as rows:
        with flops.FlopCounterMode(display=False) as counter:
            model(inputs).sum().backward()
    assert rows == {"0": 5}
    assert low_precision.linear_flops(model, rows, training=True) == 3 * 2 * 5 * 32 * 64
    assert low_precision.linear_flops(model, rows, training=True) <= counter.get_total_flops()


# ---------------------------------------------------------------- quantized weights

def test_stored_bytes_of_a_quantized_weight_are_its_integers_and_scales():
    pytest.importorskip("torchao")
    from torchao.quantization import Int8WeightOnlyConfig, quantize_
    model = torch.nn.Sequential(torch.nn.Linear(64, 32, bias=False)).to(torch.bfloat16)
    before = low_precision.weight_bytes(model)
    quantize_(model, Int8WeightOnlyConfig())
    after = low_precision.weight_bytes(model)
    assert before == 64 * 32 * 2
    assert 64 * 32 <= after < before * 0.6             # int8 data, plus a scale per row


@pytest.mark.slow
def test_int8wo_generate_reads_about_half_the_bytes_and_prints_the_accuracy_line(run,
                                                                                 tmp_path):
    pytest.importorskip("torchao")
    pytest.importorskip("matplotlib")
    plot = tmp_path / "quant.png"
    ran = run(*TINY_GENERATE, "--quantize", "none,int8wo", "--device", "cpu", "--plot",
              str(plot))
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert plot.stat().st_size > 0                             # throughput against accuracy
    assert "accuracy vs BF16" in ran.stdout and "agree" in ran.stdout   # the sweep's column
    documents = {}
    for path in (tmp_path / "out").glob("llama_tiny_generate_*.json"):
        document = json.loads(path.read_text())
        schema.validate_result(document, str(path))
        documents[document["config"]["quantize"]] = document
    plain, int8 = documents["none"], documents["int8wo"]
    read = [d["generation"]["decode_bandwidth"]["bytes_read"] for d in (plain, int8)]
    assert 0.4 < read[1] / read[0] < 0.65
    assert plain["config"]["precision"] == "bf16" and "accuracy" not in plain
    accuracy = int8["accuracy"]
    assert accuracy["kind"] == "logits" and accuracy["reference"] == "BF16"
    assert 0 < accuracy["relative_error"] < 0.2 and 0.5 <= accuracy["top1_agreement"] <= 1
    assert int8["low_precision"]["weight_bytes"] < 0.6 * int8["low_precision"][
        "weight_bytes_before"]


def test_a_quantized_run_prints_its_accuracy_line(run):
    pytest.importorskip("torchao")
    ran = run(*TINY_GENERATE, "--quantize", "int8wo", "--device", "cpu", "--no-files")
    assert ran.returncode == 0, ran.stderr[-3000:]
    [line] = [line for line in ran.stdout.splitlines() if "Accuracy vs BF16" in line]
    assert "logits rel. error" in line and "greedy tokens agree" in line
    assert "Quantized" in ran.stdout and "int8wo" in ran.stdout


def test_the_drift_line_of_training_shows_both_losses():
    drift = low_precision.Drift("loss", "AMP-BF16", losses=(2.0, 1.5), reference_losses=(2.0, 1.6))
    assert drift.loss_difference == pytest.approx(0.1 / 1.6)
    assert "2.0000, 1.5000 vs AMP-BF16 2.0000, 1.6000" in drift.line()


def _entry(figures, accuracy_kind=""):
    from microbench.store.entry import MODEL, Entry
    return Entry(MODEL, "row", {}, figures, "tokens/s", accuracy_kind=accuracy_kind)


def test_the_sweep_tables_accuracy_cell_reads_the_stored_drift():
    from microbench.output import sweep_table
    loss = low_precision.Drift("loss", "AMP-BF16", losses=(2.0, 1.5), reference_losses=(2.0, 1.6))
    assert sweep_table.accuracy_cell(_entry({"accuracy": loss.loss_difference}, "loss")) \
        == "loss diff 6.25%"
    assert sweep_table.accuracy_cell(_entry({"accuracy": 0.0123, "accuracy_agreement": 0.9375},
                                      "logits")) == "err 1.23%, agree 93.8%"
    assert sweep_table.accuracy_cell(_entry({"accuracy": None}, "loss")) == "not measured"
    assert sweep_table.accuracy_cell(_entry({})) == "-"                 # the BF16 reference


# ---------------------------------------------------------------- MFU with two peaks

def test_the_datasheet_table_has_fp8_peaks_with_their_source():
    assert flops.peak_tflops(flops.H100_SXM, "fp8") == 2 * flops.H100_SXM.bf16
    assert flops.peak_tflops(flops.MI300X, "fp8") == pytest.approx(2614.9)
    assert flops.peak_tflops(flops.A100_SXM_80GB, "fp8") is None    # no FP8 tensor cores
    rows_with_fp8 = [peak for peak in vars(flops).values()
                     if isinstance(peak, flops.DevicePeak) and peak.fp8 is not None]
    assert len(rows_with_fp8) >= 9 and all(peak.source for peak in rows_with_fp8)


def test_mfu_under_fp8_is_given_against_the_fp8_and_the_bf16_peak():
    fp8 = flops.PeakChoice(1979.0, "H100 dense fp8")
    bf16 = flops.PeakChoice(989.5, "H100 dense bf16")
    first = flops.Utilization(int(1e12), 100.0, fp8)           # 100 TFLOP/s achieved
    second = flops.Utilization(int(1e12), 100.0, bf16)
    assert second.mfu == pytest.approx(2 * first.mfu)
    summary = SimpleNamespace(second_utilization=second,
                              lowp=SimpleNamespace(fp8_flops_share=0.9))
    [(label, text)] = console._second_mfu_rows(summary)
    assert label == "MFU (BF16 peak)"
    assert "10.1% of 989.5 TFLOP/s (H100 dense bf16)" in text and "90.0% of the FLOPs" in text


def test_a_sweep_says_when_a_quantized_row_ran_slower_than_bf16():
    from microbench.drivers import sweep
    from microbench.output import sweep_table
    from microbench.settings.config import BenchConfig

    def row(quantize, rate):
        config = BenchConfig(network="llama_tiny", mode="generate", precision="bf16",
                             quantize=quantize)
        spec = SimpleNamespace(config=config, precision=precision.lookup("bf16"),
                               model=SimpleNamespace(attention="sdpa", seq_len=32,
                                                     tokens_per_item=1, reads_tokens=True),
                               parallel=SimpleNamespace(name="single", shards=False))
        return sweep.Row(spec, entry=_entry({"throughput": rate},
                                            "" if quantize == "none" else "logits"))

    lines = sweep_table.slower_than_bf16([row("none", 100.0), row("int8wo", 44.0)])
    assert len(lines) == 1 and "0.44x" in lines[0] and "int8wo" in lines[0]
    assert sweep_table.slower_than_bf16([row("none", 100.0), row("int8wo", 150.0)]) == []


@pytest.mark.parametrize("recipe, emulated", [("rowwise", True), ("tensorwise", None)])
def test_a_compiled_rowwise_run_emulates_eager_casts_on_its_own_graphs(monkeypatch, recipe,
                                                                       emulated):
    """torchtitan's setting for the rowwise recipe under compile (NaNs otherwise, with
    checkpointing), given to this run's torch.compile, not to the whole process."""
    from microbench.drivers import benchmark
    seen = {}
    monkeypatch.setattr(torch, "compile", lambda model, **options: seen.update(options))
    config = SimpleNamespace(compile=True, compile_options={"mode": "default"}, quantize="none",
                             precision="fp8", fp8_recipe=recipe)
    benchmark._compile_wrapper(config, torch.device("cpu"))(torch.nn.Linear(16, 16))
    assert seen.get("options", {}).get("emulate_precision_casts") is emulated
    from torch._inductor import config as inductor
    assert not inductor.emulate_precision_casts


@pytest.mark.parametrize("parallel, says", [
    ("ddp", "FP8 compile takes longer than BF16's: torch.compile traces the whole model"),
    ("fsdp", "FP8 compiles block by block under --parallel fsdp")])
def test_a_compiled_fp8_run_says_how_long_its_compile_takes_before_it_starts(monkeypatch,
                                                                             parallel, says):
    """Issue 58: an FP8 compile ran for minutes without a word; the note is in the spec, which
    the configuration echo prints before the model is built and compiled."""
    from microbench.plan import spec as spec_mod
    from microbench.settings.config import BenchConfig
    monkeypatch.setattr(devices, "no_fp8_reason", lambda device: None)
    monkeypatch.setattr(devices, "fp8_formats", lambda device: ("float8_e4m3fn", "float8_e5m2"))
    config = BenchConfig(network="llama_tiny", precision="fp8", compile=True, device="cpu",
                         parallel=parallel, optimizer="adamw", write_files=False)
    notes = spec_mod.resolve(config).notes
    assert [note for note in notes if note.startswith(says)]
    bf16 = spec_mod.resolve(BenchConfig(network="llama_tiny", precision="amp-bf16",
                                        compile=True, device="cpu", write_files=False))
    assert not [note for note in bf16.notes if "compile" in note]


def test_a_quantized_run_without_compile_says_so_and_a_compiled_one_does_not():
    """docs/fp8-and-quantization.md: quantized weights run eagerly without --compile, and the
    run says so (issue 56: only FP8 did)."""
    from microbench.plan import spec as spec_mod
    from microbench.settings.config import BenchConfig

    def notes(**settings):
        return spec_mod.resolve(BenchConfig(network="llama_tiny", mode="generate", device="cpu",
                                            quantize="int8wo", write_files=False,
                                            **settings)).notes
    eager = [note for note in notes() if note.startswith("--quantize int8wo without --compile")]
    assert eager and "add --compile" in eager[0]
    assert not [note for note in notes(compile=True) if "without --compile" in note]
