"""Generation that measures the GPU (issue 21): half-precision weights, the captured decode
step, and what the compiler did, on tiny llama_tiny shapes on the CPU."""
import pytest
import torch

from support import llama_reference
from conftest import LANGUAGE_MODEL, requires_gpu, run_main
from microbench.plan import cli, spec as spec_mod
from microbench.settings import precision
from microbench.models.archs import llama
from microbench.scenarios import decoding
from microbench.settings import kinds

TINY_LM = ["--network", "llama_tiny", "--seq-len", "16", "--vocab-size", "128",
           "--batch-size", "2", "--mode", "generate", "--prompt-len", "5", "--gen-len", "6"]


def resolved(*flags: str):
    plan = cli.to_plan(cli.parse_args([*TINY_LM, "--no-files", *flags]))
    return spec_mod.resolve(plan.configs[0])


def workload(*flags: str, compile_options=None):
    spec = resolved(*flags)
    from microbench.steps import workload as workload_mod
    return decoding.build(spec, workload_mod.prepare_model(spec), compile_options,
                          count_flops=False, shape=spec.scenario.shape)


# ---------------------------------------------------------------- half-precision weights

@pytest.mark.parametrize("name, dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_half_weights_hold_every_parameter_buffer_and_the_cache_in_that_dtype(name, dtype):
    work = workload("--precision", name)
    floating = [t for t in [*work.state.model.parameters(), *work.state.model.buffers(),
                            *work.cache.keys, *work.cache.values] if t.is_floating_point()]
    assert floating and {t.dtype for t in floating} == {dtype}
    assert isinstance(work.autocast, type(precision.lookup(name).autocast(torch.device("cpu"))))
    assert precision.lookup(name).autocast_dtype is None       # no autocast: the weights are it
    work.step()                                                 # and it runs


def test_bf16_is_a_row_with_the_bf16_peak_and_fp32_master_weights_in_training():
    row = precision.lookup("bf16")
    assert (row.model_dtype, row.peak_key, row.master_weights) == (torch.bfloat16, "bf16", True)
    from microbench.steps import workload as workload_mod
    model = torch.nn.Linear(4, 4).to(torch.bfloat16)
    update = workload_mod.make_update(model, row, torch.device("cpu"))
    assert {p.dtype for p in update.master_params} == {torch.float32}
    assert update.loss_scale == 1.0                             # BF16 needs no loss scaling


@pytest.mark.parametrize("timm, ours", [("bfloat16", "bf16"), ("float16", "fp16"),
                                        ("float32", "fp32")])
def test_timms_precision_spellings_are_read_as_ours_with_a_note(timm, ours):
    args = cli.parse_args(["--precision", timm])
    assert cli.to_config(args).precision == ours
    assert f"--precision {timm} is timm's spelling: read as --precision {ours}" in \
        " ".join(args.spelling_notes)
    assert cli.parse_args(["--precision", "bf16"]).spelling_notes == []


def test_bf16_generate_runs_through_the_cli(capfd, tmp_path):
    ran = run_main(capfd, *TINY_LM, "--precision", "bfloat16", "--iterations", "1",
                   "--warmup", "1", "--output-dir", str(tmp_path))
    assert ran.returncode == 0, ran.stderr
    assert "BF16" in ran.stdout and "timm's spelling" in ran.stdout


# ---------------------------------------------------------------- the captured decode step

def small_generation(compile_options=None, device="cpu") -> decoding.GenerationWorkload:
    """Two layers at FP32 (compiling eight costs seconds of tracing for nothing more)."""
    import contextlib
    import dataclasses
    config = dataclasses.replace(llama.PRESETS["llama_tiny"].with_overrides(
        seq_len=16, vocab_size=128), num_layers=2)
    torch.manual_seed(0)
    model = llama.build(config).eval().to(device)
    shape = kinds.GenerationShape(prompt_len=5, gen_len=6)
    prompt = torch.randint(0, 128, (2, shape.prompt_len)).to(device)
    state = decoding.GenerationState(model, model.make_cache(2, shape.positions), prompt)
    return decoding.GenerationWorkload(state, shape, contextlib.nullcontext(), compile_options)


def test_captured_decode_gives_the_uncached_references_tokens_at_fp32():
    work = small_generation()
    reference = llama_reference.generate_without_cache(work.state.model, work.state.prompt,
                                             work.shape.gen_len)
    assert torch.equal(decoding.generated_tokens(work), reference)
    compiled = small_generation(compile_options={"backend": "eager"})
    assert torch.equal(decoding.generated_tokens(compiled), reference)


def test_the_decode_step_compiles_once_as_one_graph_and_never_again():
    from torch._dynamo.testing import CompileCounter
    torch._dynamo.reset()
    counter = CompileCounter()
    work = small_generation(compile_options={"backend": counter})
    work.step()                                     # prefill and decode: one graph each
    assert counter.frame_count == 2
    for _ in range(2):                              # two more generations: every position
        work.step()
    assert counter.frame_count == 2, "a decode step recompiled"


def test_the_steps_take_no_tensor_arguments_and_keep_the_cache_as_module_buffers():
    work = workload("--precision", "fp32")
    buffers = {id(t) for t in work.state.buffers()}
    assert all(id(t) in buffers for t in work.cache.keys + work.cache.values)
    assert id(work.state.input_pos) in buffers and id(work.state.token) in buffers
    before = int(work.state.input_pos)
    work.prefill()
    assert int(work.state.input_pos) == work.shape.prompt_len != before
    work.decode()
    assert int(work.state.input_pos) == work.shape.prompt_len + 1


# ---------------------------------------------------------------- what the compiler did

def test_a_cuda_graph_skip_is_reported_with_its_reason_and_kept_off_the_console(capfd):
    import logging
    from torch._dynamo.utils import counters
    from microbench.measure import compile_watch
    watch = compile_watch.CompileWatch(torch.device("cuda"), {"mode": "reduce-overhead"})
    with watch.during("warm-up"):
        counters["stats"]["unique_graphs"] += 2
        counters["inductor"]["cudagraph_skips"] += 1       # what inductor does, faked
        logging.getLogger(compile_watch.CUDAGRAPHS_LOGGER).warning(
            "skipping cudagraphs due to mutated inputs (44 instances). Found from : \n x.py:3")
    with watch.during("timed"):
        counters["stats"]["unique_graphs"] += 1             # a recompile while timed
    report = watch.report()
    assert report.cuda_graphs == "skipped (mutated inputs)"
    assert (report.graphs, report.timed_recompiles) == (3, 1)
    assert "1 compiled while timed" in report.summary_text()
    assert "skipping cudagraphs" not in capfd.readouterr().err


def test_graphs_not_asked_for_are_not_used_and_say_why():
    from microbench.measure import compile_watch
    for device, options, label in [
            ("cpu", {"mode": "reduce-overhead"}, "not used (CPU)"),
            ("cuda", {}, "not used (compile mode default)"),
            ("cuda", {"mode": "max-autotune-no-cudagraphs"},
             "not used (compile mode max-autotune-no-cudagraphs)")]:
        watch = compile_watch.CompileWatch(torch.device(device), options)
        with watch.during("warm-up"):
            pass
        assert watch.report().cuda_graphs == label


@pytest.mark.slow
def test_a_compiled_generate_run_says_what_the_compiler_did(cli):
    import json
    ran, out_dir = cli(*TINY_LM, "--precision", "fp32", "--compile", "--compileContext",
                       "{'backend': 'eager'}", "--iterations", "2", "--warmup", "1")
    assert ran.returncode == 0, ran.stderr
    assert "CUDA graphs           : not used (CPU)" in ran.stdout
    assert "Compiled              : 2 graphs, 0 graph breaks, none compiled while timed" \
        in ran.stdout
    [path] = out_dir.glob("*.json")
    compiler = json.loads(path.read_text())["compiler"]
    assert compiler["graphs"] == 2 and compiler["cuda_graphs"] == "not used (CPU)"


# ---------------------------------------------------------------- MBU

def test_mbu_is_the_bytes_the_decode_steps_read_over_their_own_samples():
    import itertools
    from microbench.measure import flops
    work = workload("--precision", "bf16")
    ticks = itertools.count()
    times = decoding.timed_generation(work, 2, torch.device("cpu"),
                                      time_fn=lambda: next(ticks) * 0.004)   # 4 ms a mark
    model, config = work.state.model, work.state.model.config
    # Closed form: BF16 weights (an untied embedding's unread rows left out; a tied one is
    # read whole by the output projection), K and V per position.
    unread = 0 if config.tie_embeddings else (config.vocab_size - 2) * config.hidden_size
    weights = 2 * (sum(p.numel() for p in model.parameters()) - unread)
    per_position = 2 * 2 * config.num_layers * 2 * config.num_kv_heads * config.head_dim
    prompt, generated = work.shape.prompt_len, work.shape.gen_len
    expected = 2 * sum(weights + (prompt + i + 1) * per_position for i in range(generated - 1))
    assert times.decode_bytes == expected
    assert times.decode.count == 2 * (generated - 1) and times.decode.total_ms == \
        pytest.approx(4.0 * times.decode.count)
    use = flops.BandwidthUtilization(times.decode_bytes, times.decode.total_ms / 1e3,
                                     flops.BandwidthPeak(100.0, "--peak-bandwidth"))
    assert use.achieved_gbs == pytest.approx(expected / (0.004 * times.decode.count) / 1e9)
    assert use.mbu == pytest.approx(use.achieved_gbs / 100.0)


def test_the_bandwidth_peak_is_the_override_else_the_datasheet_else_unknown(monkeypatch):
    from microbench.measure import flops
    cpu = torch.device("cpu")
    assert flops.choose_bandwidth(cpu, 1234.0) == flops.BandwidthPeak(1234.0, "--peak-bandwidth")
    unknown = flops.choose_bandwidth(cpu, None)
    assert unknown.gbs is None and "--peak-bandwidth" in unknown.source
    assert flops.BandwidthUtilization(10**9, 1.0, unknown).mbu is None
    monkeypatch.setattr(flops, "peak_for_device", lambda device: flops.H200_SXM)
    assert flops.choose_bandwidth(torch.device("cuda"), None).gbs == 4800.0


def test_mbu_reaches_the_console_and_the_json(cli):
    import json
    ran, out_dir = cli(*TINY_LM, "--precision", "bf16", "--iterations", "1", "--warmup", "1",
                       "--peak-bandwidth", "100")
    assert ran.returncode == 0, ran.stderr
    assert "MBU (decode)          : " in ran.stdout and "of 100 GB/s (--peak-bandwidth)" \
        in ran.stdout
    [path] = out_dir.glob("*.json")
    generation = json.loads(path.read_text())["generation"]
    bandwidth = generation["decode_bandwidth"]
    assert generation["mbu"] == pytest.approx(bandwidth["achieved_gb_per_s"] / 100.0)
    assert bandwidth["achieved_gb_per_s"] == pytest.approx(
        bandwidth["bytes_read"] / bandwidth["seconds"] / 1e9)
    assert bandwidth["seconds"] * 1e3 == pytest.approx(
        sum(generation["inter_token_latency"]["samples_ms"]))


@pytest.mark.parametrize("tied", [True, False])
def test_a_decode_step_reads_the_embeddings_batch_rows_unless_the_output_reads_all_of_it(tied):
    import dataclasses
    config = dataclasses.replace(llama.PRESETS["llama_tiny"].with_overrides(seq_len=8,
                                                                           vocab_size=64),
                                 tie_embeddings=tied)
    model = llama.build(config)
    cache = model.make_cache(3, 8)
    state = decoding.GenerationState(model, cache, torch.zeros(3, 2, dtype=torch.long))
    traffic = decoding.DecodeTraffic.of(state)
    every_weight = 4 * len(torch.nn.utils.parameters_to_vector(model.parameters()))
    unread = 0 if tied else 4 * (64 - 3) * config.hidden_size
    assert traffic.weight_bytes == every_weight - unread
    assert traffic.step_bytes(5) == traffic.weight_bytes + 5 * cache.nbytes // 8


# ---------------------------------------------------------------- --preset fast --mode generate

@pytest.mark.parametrize("bf16_units, weights", [(True, "bf16"), (False, "fp16")])
def test_preset_fast_generates_from_half_weights_with_a_captured_decode_step_on_gpus(
        monkeypatch, bf16_units, weights):
    from microbench.plan import preset
    monkeypatch.setattr(preset, "_bf16_matrix_units", lambda device: bf16_units)
    plan = cli.to_plan(cli.parse_args([*TINY_LM, "--preset", "fast"]))
    effective = preset.apply(plan.configs[0], LANGUAGE_MODEL, torch.device("cuda"), 1, False,
                             half_weights=True)
    assert (effective.precision, effective.compile) == (weights, True)
    assert effective.compile_options == {"mode": "reduce-overhead"}
    assert preset.as_flags(effective) == f"--precision {weights} --compile-mode reduce-overhead"
    cpu = preset.fast_choices(LANGUAGE_MODEL, torch.device("cpu"), 1, False, half_weights=True)
    assert cpu == {"compile": True, "compile_options": {}}       # FP32, default mode on the CPU


def test_preset_fast_generate_prints_its_flags_on_the_cpu(cli):
    # The eager backend given explicitly (it wins), so no C++ compiler runs in the test.
    ran, _ = cli(*TINY_LM, "--preset", "fast", "--iterations", "1", "--warmup", "1",
                 "--compile", "--compileContext", "{'backend': 'eager'}", "--no-files")
    assert ran.returncode == 0, ran.stderr
    assert "--preset fast chose: --compile" in ran.stdout
    assert "CUDA graphs           : not used (CPU)" in ran.stdout


# ---------------------------------------------------------------- energy per token

def test_energy_per_token_end_to_end_is_the_telemetrys_and_decode_is_an_estimate_by_time():
    from types import SimpleNamespace
    from microbench.measure.results import GenerationTimes
    from microbench.measure.telemetry import ENERGY_COUNTER, TelemetryReport
    from microbench.measure.timing import Measurement
    spec = resolved()
    scenario = spec.scenario                              # 5-token prompt, 6 tokens generated
    times = GenerationTimes(prefill=Measurement([4.0]), decode=Measurement([2.0] * 5),
                            e2e=Measurement([14.0]))
    report = TelemetryReport(available=True, energy_j=1.2, joules_per_item=0.1,
                             energy_basis=ENERGY_COUNTER)
    summary = SimpleNamespace(detail=times, telemetry=report, spec=spec, measured_peak=None,
                              measured_bandwidth=None)
    energy = scenario.energy_per_token(summary)
    assert energy["end_to_end_j_per_token"] == 0.1 and energy["end_to_end_basis"] == "counter"
    # 10 of the 14 ms were decode steps, which made 5 of every 6 tokens.
    assert energy["decode_j_per_token"] == pytest.approx(0.1 * 6 * (10 / 14) / 5)
    assert "estimated" in energy["decode_basis"]
    rows = dict(scenario.console_rows(summary))
    assert rows["Energy per token"].startswith("0.1 J end-to-end (energy counter); decode ~")
    assert "estimated" in rows["Energy per token"].split("decode")[1]
    cpu = SimpleNamespace(detail=times, spec=spec, measured_peak=None, measured_bandwidth=None,
                          telemetry=TelemetryReport.unavailable("telemetry: the CPU"))
    assert scenario.energy_per_token(cpu) is None and "Energy per token" not in dict(
        scenario.console_rows(cpu))


def test_prefill_mfu_is_the_prefills_flops_over_its_own_samples():
    from types import SimpleNamespace
    from microbench.measure import flops
    from microbench.measure.results import GenerationTimes
    from microbench.measure.timing import Measurement
    spec = resolved("--peak-tflops", "2")
    times = GenerationTimes(prefill=Measurement([2.0, 6.0]), decode=Measurement([1.0]),
                            e2e=Measurement([3.0, 7.0]), prefill_flops=8 * 10**9)
    use = spec.scenario.prefill_utilization(SimpleNamespace(detail=times, spec=spec))
    assert use.achieved_tflops == pytest.approx(8e9 * 2 / 8e-3 / 1e12)     # 2 prefills in 8 ms
    assert use.mfu == pytest.approx(use.achieved_tflops / 2.0)
    assert isinstance(use, flops.Utilization)


# ---------------------------------------------------------------- on a GPU (the lead's runs)

@requires_gpu
def test_a_decode_step_never_waits_for_the_host():
    work = small_generation(device="cuda")
    work.prefill()
    work.decode()                                   # first calls may allocate; then none sync
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            work.decode()
    finally:
        torch.cuda.set_sync_debug_mode("default")


@requires_gpu
def test_under_reduce_overhead_the_decode_step_replays_as_a_graph():
    from microbench.measure import compile_watch
    torch._dynamo.reset()
    work = small_generation({"mode": "reduce-overhead"}, device="cuda")
    reference = llama_reference.generate_without_cache(work.state.model, work.state.prompt,
                                             work.shape.gen_len)
    watch = compile_watch.CompileWatch(torch.device("cuda"), {"mode": "reduce-overhead"})
    with watch.during("warm-up"):
        for _ in range(3):
            work.step()
    with watch.during("timed"):
        tokens = decoding.generated_tokens(work)
    report = watch.report()
    assert report.cuda_graphs == "replayed", report
    assert report.timed_recompiles == 0 and report.graph_breaks == 0
    assert torch.equal(tokens, reference)


def test_bf16_weights_under_fsdp_are_refused_in_one_line(capfd, tmp_path):
    ran = run_main(capfd, "--network", "llama_tiny", "--seq-len", "16", "--parallel", "fsdp",
                   "--precision", "bf16", "--output-dir", str(tmp_path))
    assert ran.returncode == 2 and "Traceback" not in ran.stderr
    assert ran.stderr.strip().count("\n") == 0 and "--precision amp-bf16" in ran.stderr
    assert not any(tmp_path.iterdir())


def test_the_prefill_row_says_an_mfu_only_where_there_is_one():
    """Without a peak the MFU line says 'unknown' once; the prefill row no longer repeats it
    (issue 64: 'MFU unknown' two or three times in one summary)."""
    from microbench.measure.flops import PeakChoice, Utilization
    from microbench.scenarios import generate
    unknown = Utilization(8_060_000_000, 2.0, PeakChoice(None, "no peak known for the CPU"))
    [(label, text)] = generate._prefill_rows(unknown)
    assert label == "Prefill compute" and text.endswith("(8.06 GFLOP per prefill)")
    assert "MFU" not in text
    known = Utilization(8_060_000_000, 2.0, PeakChoice(1.0, "--peak-tflops"))
    assert generate._prefill_rows(known)[0][1].endswith("; MFU 1.6% of 1 TFLOP/s")
