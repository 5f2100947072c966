"""Quantized decode and the FP8 probe on one real GPU (issues 48, 53 and 61; ``python3 -m pytest
-m gpu``), with mslk installed and without (benchmarks/gpu_suite.sh runs both): auto measures
every layout the device runs (on a Hopper GPU with mslk, its int4 layouts too, compiled through
the fake kernel this tool registers where mslk 1.1.x lacks it) in CUDA graphs at the model's own
shapes, for the prompt and for the decode step, and each phase names the kernels it ran, read
back from the layers; only the decode step is compiled with coordinate-descent tuning; a
compiled int8 run keeps inductor's CPU int8 lowering out; an FP8 run's measured peak is an FP8
product; with gemlite installed, its layer multiplies the unwrapped layer's values, compiled and
in a CUDA graph, and auto measures it beside the unwrapped layout. Asserts what a GPU run must
show, never a speed: the speeds are benchmarks/quant_decode.py's."""
import sys

import pytest
import torch

from microbench.steps import quant_layout
from gpu_checks import GENERATE, TOKENS, check_run, fp8_device, gpu_suite, has_module

pytestmark = gpu_suite


COMPILED = [*GENERATE, "--batch-size", "1", "--compile-mode", "reduce-overhead"]
TENSORS = {"preshuffled": "Int4MslkLinear", "plain": "Int4MslkLinear",
           "tinygemm": "Int4TinygemmLinear", "inductor": "Int4InductorLinear",
           "unwrapped": "Int8WeightOnlyLinear", "rowwise": "Int8Tensor",
           "gemlite": "GemliteLinear"}


@pytest.mark.parametrize("quantize", ["int4wo", "int8wo"])
def test_each_phase_names_the_kernels_auto_measured_and_chose(cli, quantize, tmp_path,
                                                              monkeypatch):
    if not has_module("torchao"):
        pytest.skip("needs torchao")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))      # measured, not cached
    ran, out_dir = cli(*COMPILED, "--quantize", quantize)
    doc = check_run(ran, out_dir)
    low = doc["low_precision"]
    planned = quant_layout.plan(quantize, "auto", quant_layout.QuantDevice.of(
        torch.device("cuda")))
    if quantize == "int4wo" and has_module("mslk") and \
            torch.cuda.get_device_capability() == (9, 0):
        assert "preshuffled" in planned.layouts, planned     # mslk's layouts measured too
    phases = {phase["phase"]: phase for phase in low["quant_phases"]}
    assert set(phases) == {"decode", "prefill"}
    assert phases["decode"]["rows"] == 1 and phases["prefill"]["rows"] == 32
    choice = low["quant_choice"]
    for name, phase in phases.items():
        ran_layouts = {kernel["tensor"] for kernel in phase["kernels"]} - {"Tensor"}
        assert ran_layouts and ran_layouts <= {TENSORS[layout] for layout in planned.layouts}
        assert sum(choice["phases"][name]["layers"].values()) >= 1
    if planned.measured:
        assert choice["source"] == "measured", choice["source"]
        left_out = {line.split()[0] for line in choice["failures"]}
        for name in phases:
            measured = choice["phases"][name]["candidates_ms"]
            assert set(measured) == set(planned.layouts) - left_out, (measured, planned)
            assert choice["phases"][name]["chosen_ms"] <= min(
                value for value in measured.values() if value is not None) + 1e-9
        assert "Quantized choice" in ran.stdout and "CUDA/HIP graph" in choice["basis"]
        if "preshuffled" in planned.layouts and \
                str(getattr(sys.modules.get("mslk"), "__version__", "")).startswith("1.1."):
            assert any("registered one" in note for note in low["notes"]), low["notes"]
    else:
        assert choice["source"] == "the only candidate this device runs"
    settings = low["compile_settings"]["phases"]
    assert settings["decode"]["coordinate_descent_tuning"] is True
    assert "coordinate_descent_tuning" not in settings["prefill"]
    if quantize == "int8wo":
        assert low["compile_settings"]["int8pack_mm_lowering"] == "kept out"
    assert "Weight error" in ran.stdout and "random weights" in ran.stdout
    assert 0 < low["weight_error"]["max_relative_error"] < 0.2
    assert doc["compiler"]["cache"] in ("cold", "mixed", "warm")


def test_an_fp8_runs_measured_peak_is_an_fp8_product(cli):
    if not (has_module("torchao") and fp8_device()):
        pytest.skip("needs torchao and a GPU with FP8 matrix products")
    ran, out_dir = cli(*TOKENS, "--precision", "fp8", "--measure-peaks", "1")
    doc = check_run(ran, out_dir)
    peaks = doc["peaks"]["measured"]
    assert peaks["dtype"].startswith("fp8_e4m3") and peaks["gemm"]["op"] == "scaled_mm", peaks
    assert peaks["datasheet_column"] == "fp8" and peaks["tflops"] > 0
    assert "measured: fp8_e4m3" in ran.stdout


@pytest.mark.parametrize("quantize", ["int8wo", "float8wo"])
def test_gemlite_multiplies_the_unwrapped_values_compiled_and_in_a_cuda_graph(quantize):
    """gemlite's kernels on the unwrapped layer's values and scales (issue 61): the same
    weight, outputs within the rounding of another order of sums (its split-K kernels add
    partial sums atomically in BF16, so two calls need not agree to the bit: each call, eager
    or compiled through gemlite's fake kernel, is held to the unwrapped layer's output), at the
    row counts of its three kernels (a GEMV, a split-K GEMM, a GEMM), and the product captured
    and replayed in a CUDA graph, as auto times it."""
    if not (has_module("torchao") and has_module("gemlite")):
        pytest.skip("needs torchao and gemlite")
    if quantize == "float8wo" and not fp8_device():
        pytest.skip("needs a GPU with FP8 matrix products")
    from torch import nn

    from microbench.steps import quant_choice
    device = torch.device("cuda")
    facts = quant_layout.QuantDevice.of(device)
    assert facts.gemlite and quant_layout.gemlite_loads() is None
    assert quant_layout.plan(quantize, "auto", facts).layouts == ("unwrapped", "gemlite")
    torch.manual_seed(0)
    layer = nn.Linear(4096, 1024, bias=False, device=device, dtype=torch.bfloat16)
    nn.init.normal_(layer.weight, std=0.02)
    unwrapped = quant_layout.build(layer, quantize, "unwrapped", facts)
    gemlite = quant_layout.build(layer, quantize, "gemlite", facts)
    assert quant_layout.layout_of(gemlite) == "gemlite"
    assert torch.equal(gemlite.dequantize(), unwrapped.dequantize())
    timer = quant_choice.device_timer(device)
    with torch.inference_mode():
        for rows in (1, 16, 128):
            x = torch.randn(rows, 4096, device=device, dtype=torch.bfloat16)
            expected = unwrapped(x).float()
            compiled = torch.compile(gemlite, fullgraph=True, dynamic=False)
            for side, got in (("eager", gemlite(x)), ("compiled", compiled(x))):
                assert got.shape == (rows, 1024) and got.dtype == torch.bfloat16
                error = float((got.float() - expected).norm() / expected.norm())
                assert error < 0.02, (side, rows, error,
                                      quant_layout.describe_layer(gemlite, rows))
            assert timer(lambda: gemlite(x)) > 0
    torch.compiler.reset()
