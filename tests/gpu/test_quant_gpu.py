"""Quantized decode and the FP8 probe on one real GPU (issues 48 and 53; ``python3 -m pytest -m
gpu``): the layout auto picks runs and is read back from the model (with mslk installed and
without: on a Hopper GPU with mslk, int4 runs the preshuffled kernel, compiled through the fake
kernel this tool registers where mslk 1.1.x lacks it, or falls back with a Note saying why),
int8 runs torchao's rowwise Int8Tensor, a compiled int8 run keeps inductor's CPU int8 lowering
out, its 32-row prefill names the GEMM path it took, and an FP8 run's measured peak is an FP8
product. Asserts what a GPU run must show, never a speed: how far the int8 prefill is from BF16's is
benchmarks/quant_decode.py's (on llama_tiny the ratio is launch overhead, and it failed a 5x
bound on 2 H200s while the lowering was kept out)."""
import sys

import pytest
import torch

from microbench.steps import quant_layout
from gpu_checks import GENERATE, TOKENS, check_run, fp8_device, gpu_suite, has_module

pytestmark = gpu_suite


COMPILED = [*GENERATE, "--batch-size", "1", "--compile-mode", "reduce-overhead"]


@pytest.mark.parametrize("quantize", ["int4wo", "int8wo"])
def test_the_kernel_that_ran_is_named_from_the_model(cli, quantize):
    if not has_module("torchao"):
        pytest.skip("needs torchao")
    ran, out_dir = cli(*COMPILED, "--quantize", quantize)
    doc = check_run(ran, out_dir)
    low = doc["low_precision"]
    facts = quant_layout.QuantDevice.of(torch.device("cuda"))
    expected = quant_layout.choose_layout(quantize, "auto", facts)
    fell_back = [note for note in low["notes"] if note.startswith(f"--quantize {quantize} runs")]
    if fell_back:          # only where mslk's product cannot be traced: one line says why
        assert expected in ("preshuffled", "plain") and len(fell_back) == 1, low["notes"]
        assert low["quant_layout"] == "tinygemm" and "Note" in ran.stdout
    else:
        assert low["quant_layout"] == expected, (low["quant_layout"], facts)
    if low["quant_layout"] == "preshuffled" and has_module("mslk") and \
            str(getattr(sys.modules["mslk"], "__version__", "")).startswith("1.1."):
        # mslk 1.1.x's missing fake kernel was registered here, and said so.
        assert any("registered one" in note for note in low["notes"]), low["notes"]
    tensor = low["quant_kernels"][0]["tensor"]
    assert tensor == {"preshuffled": "Int4PreshuffledTensor", "plain": "Int4Tensor",
                      "tinygemm": "Int4TilePackedTo4dTensor", "unwrapped": "Int8WeightOnlyLinear",
                      "rowwise": "Int8Tensor"}[low["quant_layout"]], low["quant_kernels"]
    assert "Quantized kernels" in ran.stdout and "Weight error" in ran.stdout
    settings = low["compile_settings"]
    assert settings["coordinate_descent_tuning"] is True
    if quantize == "int8wo":
        assert settings["int8pack_mm_lowering"] == "kept out", settings
        assert settings["prefill_product"].startswith(
            "32 rows > 16" if low["quant_layout"] == "unwrapped" else "the decode step's"), settings
    assert "Quantized prefill" in ran.stdout
    assert 0 < low["weight_error"]["max_relative_error"] < 0.2


def test_an_fp8_runs_measured_peak_is_an_fp8_product(cli):
    if not (has_module("torchao") and fp8_device()):
        pytest.skip("needs torchao and a GPU with FP8 matrix products")
    ran, out_dir = cli(*TOKENS, "--precision", "fp8", "--measure-peaks", "1")
    doc = check_run(ran, out_dir)
    peaks = doc["peaks"]["measured"]
    assert peaks["dtype"].startswith("fp8_e4m3") and peaks["gemm"]["op"] == "scaled_mm", peaks
    assert peaks["datasheet_column"] == "fp8" and peaks["tflops"] > 0
    assert "measured: fp8_e4m3" in ran.stdout
