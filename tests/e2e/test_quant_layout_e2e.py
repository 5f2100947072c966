"""--quant-layout end to end on the CPU (issue 48): the layout asked for runs, the summary and
the result file name the kernel read back from the weights, the weight errors are stored (and
valid against the schema), and a layout the format or the device does not have is refused in
one line before anything is built."""
import json

import pytest

from conftest import assert_one_line_error, run_main
from microbench.store import schema

TINY = ["--network", "llama_tiny", "--mode", "generate", "--seq-len", "32", "--prompt-len", "8",
        "--gen-len", "4", "--batch-size", "1", "--iterations", "1", "--warmup", "1",
        "--telemetry-interval", "0", "--device", "cpu", "--quantize", "int8wo"]


@pytest.fixture
def run(capfd, tmp_path):
    def invoke(*args):
        return run_main(capfd, "--output-dir", str(tmp_path / "out"), *args)
    return invoke


def test_the_layout_asked_for_runs_and_is_named_from_the_model(run, tmp_path):
    pytest.importorskip("torchao")
    ran = run(*TINY, "--quant-layout", "tensorwise")
    assert ran.returncode == 0, ran.stderr[-3000:]
    [kernels] = [line for line in ran.stdout.splitlines() if "Quantized kernels" in line]
    assert "layout tensorwise: Int8Tensor (tensorwise" in kernels
    assert "Weight error" in ran.stdout and "weights rel. error max" in ran.stdout
    [path] = (tmp_path / "out").glob("llama_tiny_generate_*int8wo_tensorwise*.json")
    document = json.loads(path.read_text())
    schema.validate_result(document, str(path))
    block = document["low_precision"]
    assert document["config"]["quant_layout"] == "tensorwise"
    assert block["quant_layout"] == "tensorwise"
    assert {k["tensor"] for k in block["quant_kernels"]} == {"Int8Tensor"}
    assert 0 < block["weight_error"]["max_relative_error"] < 0.05
    assert block["compile_settings"] is None                  # eager: nothing compiled
    assert [phase["phase"] for phase in block["quant_phases"]] == ["decode", "prefill"]
    assert [phase["rows"] for phase in block["quant_phases"]] == [1, 8]
    assert block["quant_choice"]["source"] == "asked for"


@pytest.mark.parametrize("layout, words", [
    ("preshuffled", "--quant-layout preshuffled is not a layout of --quantize int8wo"),
    ("sideways", "invalid choice"),
])
def test_a_layout_the_format_does_not_have_is_one_line(run, layout, words):
    ran = run(*TINY, "--quant-layout", layout)
    assert_one_line_error(ran, 2, words)


def test_gemlite_named_on_a_gpu_without_it_is_one_line(run, monkeypatch):
    """An H100 without gemlite (faked: the refusal comes before anything is built)."""
    from microbench.platform.devices import Vendor
    from microbench.steps.quant_layout import QuantDevice
    h100 = QuantDevice(Vendor.NVIDIA, (9, 0), fp8=True, mslk=False, gemlite=False)
    monkeypatch.setattr(QuantDevice, "of", classmethod(lambda cls, device: h100))
    ran = run(*TINY, "--quant-layout", "gemlite")
    assert_one_line_error(ran, 2, "--quant-layout gemlite for --quantize int8wo: the gemlite "
                                  "layout (gemlite's A16W8 Triton kernels) needs the gemlite "
                                  "package: pip install gemlite")


@pytest.mark.slow
def test_a_compiled_quantized_run_records_its_compile_settings(run, tmp_path):
    """The eager backend keeps the CPU test short: the record is written all the same."""
    pytest.importorskip("torchao")
    ran = run(*TINY, "--compile", "--compileContext", "{'backend': 'eager'}")
    assert ran.returncode == 0, ran.stderr[-3000:]
    [line] = [line for line in ran.stdout.splitlines() if "Quantized compile" in line]
    assert "decode: coordinate_descent_tuning=True" in line and "weight_metadata_guards" in line
    assert "prefill: force_fuse_int_mm_with_mul=True" in line
    [path] = (tmp_path / "out").glob("llama_tiny_generate_*int8wo*.json")
    document = json.loads(path.read_text())
    schema.validate_result(document, str(path))
    settings = document["low_precision"]["compile_settings"]
    # Coordinate-descent tuning for the one-row decode step only (issue 61).
    assert settings["phases"]["decode"]["coordinate_descent_tuning"] is True
    assert "coordinate_descent_tuning" not in settings["phases"]["prefill"]
    assert settings["phases"]["prefill"]["force_fuse_int_mm_with_mul"] is True
    assert "coordinate_descent_check_all_directions" not in settings["phases"]["decode"]
    assert "int8pack_mm_lowering" not in settings          # the CPU keeps its own kernel
    assert document["compiler"]["cache"] in ("cold", "warm", "mixed", "not consulted")
