"""Language models through the CLI on the CPU: training and inference in tokens/s, generation with
time to first token and inter-token latency, the phase split of training iterations, sweeps,
profilers, DDP, and the combinations that are refused."""
import json
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, SCRIPT, assert_one_line_error, run_main
from microbench.models import language, registry as models

# llama_tiny at 16 tokens: the smallest run that exercises every phase in under a second a step.
LM = ["--network", "llama_tiny", "--seq-len", "16", "--batch-size", "2", "--iterations", "3",
      "--warmup", "1"]


@pytest.fixture
def run(capfd, tmp_path):
    def invoke(*args):
        return run_main(capfd, "--output-dir", str(tmp_path), *args)
    return invoke


def only_json(directory):
    [path] = [p for p in directory.glob("*.json")
              if not p.name.startswith("sweep_") and "_trace" not in p.name]
    return json.loads(path.read_text())


@pytest.mark.parametrize("mode", ["training", "inference"])
def test_tokens_per_second_is_batch_times_sequence_over_time(run, tmp_path, mode):
    process = run(*LM, "--mode", mode)
    assert process.returncode == 0, process.stderr
    doc = only_json(tmp_path)
    samples = doc["timing"]["samples_ms"]
    assert doc["Throughput [tokens/sec]"] == pytest.approx(2 * 16 * 3 / (sum(samples) / 1e3))
    assert doc["Throughput [img/sec]"] == pytest.approx(2 * 3 / (sum(samples) / 1e3))
    assert doc["model"]["seq_len"] == 16 and doc["model"]["input_shape"] == [2, 16]
    assert f"Throughput [tokens/sec] : {doc['Throughput [tokens/sec]']:.2f}" in process.stdout
    assert "Microbenchmark for network : llama_tiny" in process.stdout
    # FLOPs per token: about 6 x parameters for training, 2 x for the forward (Kaplan et al.
    # 2020, section 2.1), plus attention; the tied head is counted once per use.
    flops_per_token = doc["flops"]["flops_per_iteration"] / (2 * 16)
    factor = 6 if mode == "training" else 2
    assert flops_per_token == pytest.approx(factor * doc["model"]["parameters"], rel=0.25)


def test_training_phases_add_up_to_each_iteration(run, tmp_path):
    process = run("--network", "resnet18", "--image-size", "32", "--batch-size", "2",
                  "--iterations", "4", "--warmup", "1")
    assert process.returncode == 0, process.stderr
    doc = only_json(tmp_path)
    phases = doc["phases"]
    assert list(phases) == ["forward", "backward", "optimizer"]
    for index, total in enumerate(doc["timing"]["samples_ms"]):
        parts = sum(phases[name]["samples_ms"][index] for name in phases)
        assert parts == pytest.approx(total, abs=1e-6)
    assert "Phases (mean)" in process.stdout and "backward" in process.stdout
    process = run("--network", "resnet18", "--image-size", "32", "--batch-size", "2",
                  "--iterations", "2", "--warmup", "1", "--no-phases", "--no-files")
    assert "Phases" not in process.stdout


def test_generation_reports_first_token_and_inter_token_latency(run, tmp_path):
    process = run(*LM, "--mode", "generate", "--prompt-len", "6", "--gen-len", "5")
    assert process.returncode == 0, process.stderr
    doc = only_json(tmp_path)
    generation = doc["generation"]
    ttft = generation["time_to_first_token"]["samples_ms"]
    itl = generation["inter_token_latency"]["samples_ms"]
    assert len(ttft) == 3 and len(itl) == 3 * 4          # gen_len - 1 decode steps each
    e2e = doc["timing"]["samples_ms"]
    for i in range(3):
        assert e2e[i] == pytest.approx(ttft[i] + sum(itl[4 * i:4 * i + 4]), abs=1e-6)
    assert generation["decode_tokens_per_s"] == pytest.approx(2 * 12 / (sum(itl) / 1e3))
    assert doc["Throughput [tokens/sec]"] == pytest.approx(2 * 5 * 3 / (sum(e2e) / 1e3))
    for label in ("Time to first token", "Inter-token latency", "Decode  "):
        assert label in process.stdout


def test_grouped_query_attention_with_fewer_kv_heads(run, tmp_path):
    process = run(*LM, "--kv-heads", "2", "--attention", "eager", "--mode", "inference")
    assert process.returncode == 0, process.stderr
    assert "8 heads / 2 kv" in process.stdout and "attention eager" in process.stdout


@pytest.mark.parametrize("argv, code, text", [
    (["--network", "llama_tiny", "--attention", "flash", "--device", "cpu"], 2, "GPU"),
    (["--network", "llama_tiny", "--nhwc"], 2, "--nhwc"),
    (["--network", "llama_tiny", "--image-size", "64"], 2, "--seq-len"),
    (["--network", "llama_tiny", "--prompt-len", "8"], 2, "apply to --mode generate"),
    (["--network", "resnet18", "--mode", "generate"], 2, "llama_* presets"),
    (["--network", "resnet18", "--seq-len", "32"], 2, "apply to language models"),
    (["--network", "llama_tiny", "--kv-heads", "3"], 2, "--kv-heads 3"),
    (["--network", "llama_tiny", "--mode", "generate", "--prompt-len", "100", "--gen-len",
      "100"], 2, "positions"),
    (["--network", "llama_tiny", "--model-kwargs", "hidden_size=8"], 2, "hf:<model_type>"),
    (["--network", "llama_tiny", "--attention", "fast"], 2, "invalid choice"),
])
def test_refused_combinations_give_one_line(run, argv, code, text):
    assert_one_line_error(run(*argv), code, text)


@pytest.mark.slow
def test_a_sweep_over_attention_and_sequence_length(run, tmp_path):
    process = run("--network", "llama_tiny", "--seq-len", "8,16", "--attention", "eager,sdpa",
                  "--batch-size", "2", "--iterations", "2", "--warmup", "1", "--mode",
                  "inference")
    assert process.returncode == 0, process.stderr
    [sweep] = tmp_path.glob("sweep_*.json")
    rows = json.loads(sweep.read_text())["rows"]
    shapes = [(r["result"]["model"]["attention"], r["result"]["model"]["seq_len"]) for r in rows]
    assert shapes == [("eager", 8), ("eager", 16), ("sdpa", 8), ("sdpa", 16)]
    assert "llama_tiny inference fp32 eager s8 b2" in process.stdout


def test_list_networks_shows_the_presets_with_their_parameters(run):
    process = run("--list-networks")
    line = next(l for l in process.stdout.splitlines() if l.startswith("llama_1b "))
    assert "1,100.0M parameters" in line and "22 layers" in line
    assert any(l.startswith("hf:<model_type>") for l in process.stdout.splitlines())
    assert "resnet50" in process.stdout.split()


def test_a_spec_travels_to_a_spawned_worker_with_its_overrides():
    import pickle
    spec = models.resolve("llama_tiny", models.ModelOptions(seq_len=24, kv_heads=2,
                                                            attention="math"))
    again = pickle.loads(pickle.dumps(spec))
    assert again == spec and again.llama_config.num_kv_heads == 2


def test_kineto_and_deepspeed_profile_a_language_model(run, tmp_path):
    pytest.importorskip("deepspeed")
    process = run(*LM, "--iterations", "3", "--flops-prof-step", "1", "--kineto",
                  "--profiler-schedule", "0,1,1", "--profiler-output", f"{tmp_path}/")
    assert process.returncode == 0, process.stderr[-2000:]
    assert "DeepSpeed Flops Profiler" in process.stdout
    [trace] = tmp_path.glob("*trace*.json")
    assert trace.name.endswith("_kineto_flops_b2_trace2.json"), trace.name
    assert len(only_json(tmp_path)["timing"]["samples_ms"]) == 2


@pytest.fixture
def small_preset(monkeypatch):
    """A two-layer preset, registered for one test: compiling llama_tiny's eight layers on two
    cores takes a minute, and what is tested does not depend on the depth."""
    from microbench.models.archs import llama
    monkeypatch.setitem(llama.PRESETS, "llama_test", llama.LlamaConfig(
        vocab_size=128, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
        intermediate_size=128, max_seq_len=32))
    models.registry.cache_clear()
    yield "llama_test"
    models.registry.cache_clear()


def test_generation_compiles_once_and_never_per_token(capfd, small_preset):
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    process = run_main(capfd, "--network", small_preset, "--seq-len", "16", "--batch-size", "1",
                       "--mode", "generate", "--prompt-len", "4", "--gen-len", "6",
                       "--iterations", "2", "--warmup", "1", "--compile", "--no-files")
    assert process.returncode == 0, process.stderr[-2000:]
    # One graph for the prefill, one for the decode step, whatever the number of tokens.
    assert counters["stats"]["unique_graphs"] <= 2
    assert "compile + first iteration" in process.stdout


def test_hugging_face_architecture_from_its_config(run, tmp_path):
    pytest.importorskip("transformers")
    process = run("--network", "hf:llama", "--model-kwargs", "hidden_size=64",
                  "num_hidden_layers=2", "num_attention_heads=4", "intermediate_size=128",
                  "vocab_size=256", "--seq-len", "16", "--batch-size", "2", "--iterations", "2",
                  "--warmup", "1")
    assert process.returncode == 0, process.stderr[-2000:]
    doc = only_json(tmp_path)
    assert doc["model"]["vocab_size"] == 256 and doc["Throughput [tokens/sec]"] > 0
    assert_one_line_error(run("--network", "hf:lama"), 2, "did you mean")


@pytest.mark.slow
def test_hugging_face_without_transformers_exits_4(tmp_path):
    stub = tmp_path / "stub" / "transformers"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('No module named transformers')\n")
    process = subprocess.run([sys.executable, str(SCRIPT), "--network", "hf:llama"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120,
                             env={**__import__("os").environ,
                                  "PYTHONPATH": str(tmp_path / "stub")})
    assert_one_line_error(process, 4, "pip install transformers")


@pytest.mark.slow
def test_torchrun_trains_a_language_model_on_two_ranks(tmp_path):
    from support.launch import run_torchrun
    process = run_torchrun(2, "--network", "llama_tiny", "--seq-len", "8", "--batch-size", "4",
                           "--iterations", "2", "--warmup", "1", "--device", "cpu",
                           "--output-dir", str(tmp_path))
    assert process.returncode == 0, process.stderr[-3000:]
    doc = only_json(tmp_path)
    assert doc["GPUs"] == 2 and doc["Throughput [tokens/sec]"] == pytest.approx(
        doc["Throughput [img/sec]"] * 8)


def test_presets_are_registered_as_language_models():
    for name in ("llama_tiny", "llama_medium", "llama_1b"):
        spec = models.lookup(name)
        assert isinstance(spec, language.LanguageModelSpec) and spec.can_generate
    assert models.lookup("llama_medium").seq_len == 512
