"""Issue 34: the decode step's shape (one q|k|v product, GQA attention without expanding the
cache, the decode compile settings) keeps the tokens, and its attribution adds up."""
import contextlib
import dataclasses
import json
import re

import pytest
import torch

from support import llama_reference
from microbench.measure import attribution
from microbench.models.archs import llama
from microbench.scenarios import decoding
from microbench.settings import kinds


def tiny_model(kv_heads: int = 2, layers: int = 2) -> llama.Llama:
    config = dataclasses.replace(llama.PRESETS["llama_tiny"].with_overrides(
        seq_len=16, vocab_size=128, kv_heads=kv_heads), num_layers=layers)
    torch.manual_seed(0)
    return llama.build(config).eval()


# ---------------------------------------------------------------- the same function, fewer kernels

def test_fused_projections_give_the_same_logits_and_parameter_count():
    model = tiny_model()
    tokens = torch.randint(0, 128, (2, 9))
    before, count = model(tokens), sum(p.numel() for p in model.parameters())
    model.fuse_projections()
    attention = model.layers[0].attention
    assert attention.wqkv is not None and not hasattr(attention, "wq")
    feed_forward = model.layers[0].feed_forward
    assert feed_forward.w13 is not None and not hasattr(feed_forward, "w1")
    assert feed_forward.w13.out_features == 2 * feed_forward.w2.in_features
    assert sum(p.numel() for p in model.parameters()) == count
    torch.testing.assert_close(model(tokens), before, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("impl", ["eager", "sdpa", "math"])
def test_grouped_decode_attention_equals_attention_over_the_expanded_cache(impl):
    batch, heads, kv_heads, length, dim = 3, 8, 2, 12, 16
    q = torch.randn(batch, heads, 1, dim)
    k, v = torch.randn(batch, kv_heads, length, dim), torch.randn(batch, kv_heads, length, dim)
    mask = torch.zeros(1, 1, 1, length, dtype=torch.bool)
    mask[..., :7] = True                                    # slots written so far
    groups = heads // kv_heads
    expected = llama.attend(impl, q, llama.expand_kv(k, groups), llama.expand_kv(v, groups), mask)
    torch.testing.assert_close(llama.attend_grouped(impl, q, k, v, mask), expected)


@pytest.mark.parametrize("kv_heads", [1, 2, 8])
def test_built_generation_gives_the_plain_forwards_greedy_tokens_at_fp32(kv_heads):
    model = tiny_model(kv_heads)
    prompt = torch.randint(0, 128, (2, 5))
    reference = llama_reference.generate_without_cache(model, prompt, 6)
    model.fuse_projections()
    shape = kinds.GenerationShape(prompt_len=5, gen_len=6)
    state = decoding.GenerationState(model, model.make_cache(2, shape.positions), prompt)
    for options in (None, {"backend": "aot_eager"}):
        work = decoding.GenerationWorkload(state, shape, contextlib.nullcontext(), options)
        assert torch.equal(decoding.generated_tokens(work), reference)


def test_decode_settings_sit_under_the_users_and_a_mode_becomes_its_options():
    merged = decoding.with_inductor_settings(
        {"fullgraph": True, "mode": "reduce-overhead"}, decoding.DECODE_INDUCTOR)
    assert merged == {"fullgraph": True, "options": {"triton.cudagraphs": True,
                                                     "coordinate_descent_tuning": True}}
    user_off = decoding.with_inductor_settings(
        {"options": {"coordinate_descent_tuning": False}}, decoding.DECODE_INDUCTOR)
    assert user_off["options"] == {"coordinate_descent_tuning": False}


# ---------------------------------------------------------------- attribution

def fake_profile() -> attribution.Profile:
    """Two steps: per step a GEMV 0-40 us, attention 45-55, a norm 55-60, argmax 70-72;
    the second step starts at 100 us."""
    one = [("triton_red_fused_mm_rsqrt_0", 0, 40), ("fmha_cutlassF_bf16", 45, 10),
           ("triton_per_fused_add_mean_pow_1", 55, 5), ("triton_red_fused_argmax_2", 70, 2)]
    items = tuple(attribution.Activity(name, start + offset, duration)
                  for offset in (0, 100) for name, start, duration in one)
    return attribution.Profile(items, steps=2, unit="kernel", pass_s=0.25)


def test_attribution_cuts_the_window_into_kernels_and_gaps_from_the_same_samples():
    found = attribution.attribute(fake_profile(), measured_step_ms=0.090, roofline_ms=0.030,
                                  roofline_basis="fake")
    assert found.step_ms == pytest.approx(0.086)            # 0 .. 172 us over two steps
    assert found.busy_ms == pytest.approx(0.057)
    assert found.gap_ms == pytest.approx(0.029)
    assert found.busy_ms + found.gap_ms == pytest.approx(found.step_ms)
    assert found.per_step == 4
    assert found.coverage == pytest.approx(0.086 / 0.090)
    classes = found.classes
    assert classes["matmul"]["ms"] == pytest.approx(0.040)
    assert classes["attention"]["ms"] == pytest.approx(0.010)
    assert classes["elementwise+norms"]["ms"] == pytest.approx(0.005)
    assert classes["sampling"]["ms"] == pytest.approx(0.002)
    assert sum(row["share"] for row in classes.values()) == pytest.approx(1.0)
    assert found.top[0]["name"] == "triton_red_fused_mm_rsqrt_0"
    line = found.line()
    assert found.implied_gap_ms == pytest.approx(0.090 - 0.057)
    assert line == "measured 90.0 us: kernels 63%, gaps 33.0 us; roofline 30.0 us; " \
                   "4 kernels/step, matmul 70%"
    assert len(f"  Decode step (profiled): {line}") <= 120
    json.dumps(found.to_dict())                              # JSON-ready


def test_profiled_kernels_longer_than_the_measured_step_are_said_so():
    """The profiler stretches each kernel: where the kernels alone outlast the timed step, the
    line says so, not "kernels 134%" and "gaps 0.000 ms"."""
    found = attribution.attribute(fake_profile(), measured_step_ms=0.042)
    line = found.line()
    assert line.startswith("measured 42.0 us, but kernels 57.0 us profiled: gaps unknown;")
    assert "%" not in line.split(";")[0] and "0.000" not in line
    unmeasured = attribution.attribute(fake_profile()).line()
    assert unmeasured.startswith("profiled 86.0 us: kernels 66%, gaps 29.0 us;")


def test_overlapping_kernels_are_busy_once():
    items = [attribution.Activity("a", 0, 10), attribution.Activity("b", 5, 10),
             attribution.Activity("c", 30, 5)]
    assert attribution.busy_us(items) == 20


@pytest.mark.parametrize("name, label", [
    ("nvjet_tst_128x64_64x8_1x2_h_bz_TNT", "matmul"), ("sm90_xmma_gemm_bf16bf16", "matmul"),
    ("triton_red_fused_mm_0", "matmul"), ("aten::mm", "matmul"),
    ("pytorch_flash::flash_fwd_kernel", "attention"), ("triton_per_fused__softmax_3", "attention"),
    ("triton_red_fused_argmax_5", "sampling"), ("Memcpy DtoD (Device -> Device)", "copies"),
    ("triton_poi_fused_index_copy_4", "copies"),
    ("triton_red_fused__to_copy__unsafe_view_add_mean_mul_pow_rsqrt_13", "elementwise+norms"), ("triton_per_fused_add_mean_pow_rsqrt_1",
                                                   "elementwise+norms"),
    ("Torch-Compiled Region: 0/1", "compiled")])
def test_kernels_are_classed_by_name(name, label):
    assert attribution.classify(name) == label


def test_an_empty_profile_attributes_nothing():
    assert attribution.attribute(attribution.Profile((), 4, "kernel", 0.1)) is None


def test_a_cpu_generate_run_prints_and_stores_the_attribution(cli):
    ran, out_dir = cli("--network", "llama_tiny", "--seq-len", "16", "--vocab-size", "128",
                       "--batch-size", "2", "--mode", "generate", "--prompt-len", "5",
                       "--gen-len", "4", "--iterations", "2", "--warmup", "1")
    assert ran.returncode == 0, ran.stderr
    assert "Decode step (profiled): " in ran.stdout and "operators/step" in ran.stdout
    lines = {line.split(":")[0].strip(): line for line in ran.stdout.splitlines()}
    assert len(lines["Decode step (profiled)"]) <= 120
    assert re.search(r"Decode bandwidth +: [1-9][\d.]* (MB|GB|TB)/s ", ran.stdout), ran.stdout
    assert "[img" not in ran.stdout
    assert "Mini batch size [seq] : 2" in ran.stdout and "Throughput [seq/sec] : " in ran.stdout
    document = json.loads(next(out_dir.glob("*.json")).read_text())
    found = document["generation"]["decode_attribution"]
    assert found["unit"] == "operator" and found["steps_profiled"] == 3
    assert found["busy_ms"] + found["gap_ms"] == pytest.approx(found["step_ms"])
    from microbench.store import schema
    from microbench.store.entry import entries_of
    schema.validate_result(document, "run.json")                 # the block is in the schema
    figures = entries_of(document, "run.json")[0].figures
    assert figures["decode_kernel_ms"] == pytest.approx(found["busy_ms"])
    assert figures["decode_gap_ms"] == pytest.approx(found["gap_ms"])


# ---------------------------------------------------------------- compiler warnings

def test_compiler_warnings_are_kept_for_the_report_not_printed(capfd):
    import warnings
    from microbench.measure import compile_watch
    watch = compile_watch.CompileWatch(torch.device("cpu"), {})
    with watch.during("warm-up"):
        for _ in range(2):
            warnings.warn("TensorFloat32 tensor cores for float32 matrix multiplication "
                          "available but not enabled", UserWarning)
    assert "TensorFloat32" not in capfd.readouterr().err
    report = watch.report()
    assert report.warnings == ("UserWarning: TensorFloat32 tensor cores for float32 matrix "
                               "multiplication available but not enabled",)
    assert report.to_dict()["warnings"] == list(report.warnings)
    assert compile_watch.combine([report, report]).warnings == report.warnings


# ---------------------------------------------------------------- a batch sweep

@pytest.mark.slow
def test_a_generate_sweep_prints_its_generation_table_and_plots_rate_against_latency(
        cli, tmp_path):
    plot = tmp_path / "curve.png"
    ran, out_dir = cli("--network", "llama_tiny", "--seq-len", "16", "--vocab-size", "128",
                       "--batch-size", "1,2", "--mode", "generate", "--prompt-len", "5",
                       "--gen-len", "3", "--iterations", "2", "--warmup", "1",
                       "--plot", str(plot))
    assert ran.returncode == 0, ran.stderr
    table = ran.stdout.split("Generation (decode tok/s")[1]
    assert "ITL p50 ms" in table and "ITL p99 ms" in table and "TTFT p50 ms" in table
    assert "MBU" not in table          # no bandwidth peak known for the CPU: a column of n/a
    rows = [line.split() for line in table.splitlines() if line.strip()[:1] in ("1", "2")]
    assert [row[1] for row in rows] == ["1", "2"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "[img" not in ran.stdout


def generate_row(batch, itl_ms, rate, quantize="none"):
    """A generate sweep's row as the sweep leaves it: its spec and its result read back as an
    entry (the figure and the table read only the entry and the spec)."""
    from types import SimpleNamespace
    from microbench.drivers import sweep
    from microbench.settings import precision
    from microbench.settings.config import BenchConfig
    from microbench.store.entry import MODEL, Entry
    config = BenchConfig(network="llama_1b", mode="generate", precision="bf16",
                         quantize=quantize, batch_size=batch)
    spec = SimpleNamespace(config=config, batch_size=batch, precision=precision.lookup("bf16"),
                           model=SimpleNamespace(attention="sdpa", seq_len=32, tokens_per_item=32,
                                                 reads_tokens=True,
                                                 item="sequence"),
                           parallel=SimpleNamespace(name="single", shards=False),
                           scenario=SimpleNamespace(decodes_tokens=True),
                           device=torch.device("cpu"))
    settings = {"network": "llama_1b", "precision": "bf16", "quantize": quantize,
                "batch": batch, "attention": "sdpa", "seq len": 32}
    figures = {"itl_ms": itl_ms, "itl_p99_ms": itl_ms * 1.1, "ttft_ms": 3 * itl_ms,
               "decode_tokens_per_s": rate, "throughput": rate}
    return sweep.Row(spec, entry=Entry(MODEL, "row", settings, figures, "tokens/s"))


def _inside(figure, axis) -> bool:
    """Whether every text drawn in the axes (the points' labels) lies within them."""
    figure.canvas.draw()
    box = axis.get_window_extent()
    return all(box.x0 <= text.get_window_extent().x0 and text.get_window_extent().x1 <= box.x1
               and box.y0 <= text.get_window_extent().y0
               and text.get_window_extent().y1 <= box.y1 for text in axis.texts)


def test_the_generation_figure_puts_one_labelled_point_per_batch_inside_the_axes():
    """The top point sat on the frame and the rightmost 'batch 2' ran past the axes."""
    import unittest.mock as mock
    from microbench.output import sweep_plot
    rows = [generate_row(4, 2.0, 2000.0), generate_row(1, 1.5, 650.0)]
    with mock.patch.object(sweep_plot, "subtitle", return_value="device"):
        figure = sweep_plot.build_generation_figure(rows)
    axis = figure.axes[0]
    x, y = axis.lines[0].get_data()
    assert list(x) == [1.5, 2.0] and list(y) == [650.0, 2000.0]      # in batch order
    assert [text.get_text() for text in axis.texts] == ["batch 1", "batch 4"]
    assert axis.get_ylim()[1] >= 2000.0 * 1.1 and axis.get_xlim()[1] >= 2.0 * 1.1
    assert _inside(figure, axis)


def test_a_quantize_sweep_tells_its_rows_apart_in_the_generation_table_and_figure():
    """Two rows of one batch (none and int8wo) read alike in the table and the figure."""
    import unittest.mock as mock
    from microbench.output import sweep_plot, sweep_table
    rows = [generate_row(b, itl, rate, q) for q, itl, rate in
            (("none", 2.0, 1000.0), ("int8wo", 1.5, 1300.0)) for b in (1, 2)]
    columns, cells = sweep_table.generation_cells(rows)
    assert [column.heading for column in columns][:3] == ["#", "quantize", "batch"]
    assert [cell[1:3] for cell in cells] == [("none", "1"), ("none", "2"), ("int8wo", "1"),
                                             ("int8wo", "2")]
    with mock.patch.object(sweep_plot, "subtitle", return_value="device"):
        figure = sweep_plot.build_generation_figure(rows)
    axis = figure.axes[0]
    assert len(axis.lines) == 2
    assert [text.get_text() for text in axis.get_legend().get_texts()] == ["bf16",
                                                                           "bf16 int8wo"]
    assert _inside(figure, axis)


def test_the_workers_legend_covers_no_point():
    """Inside the axes (centre right) the legend covered the workers=1 point."""
    from types import SimpleNamespace
    from microbench.output import sweep_plot
    from microbench.settings.config import BenchConfig
    from microbench.store.entry import MODEL, Entry

    def row(workers, pipeline, wait):
        config = BenchConfig(data="loader", workers=workers)
        figures = {"pipeline_per_s": pipeline, "wait_share": wait, "model_alone_per_s": 120.0}
        return SimpleNamespace(spec=SimpleNamespace(config=config, device=torch.device("cpu")),
                               entry=Entry(MODEL, "row", {"devices": 1}, figures, "images/s",
                                           data_unit="images/s"), failed=False)
    figure = sweep_plot.build_workers_figure([row(0, 60.0, 0.5), row(1, 110.0, 0.45)], "device")
    figure.canvas.draw()
    left = figure.axes[0]
    legend = left.get_legend().get_window_extent()
    plotted = left.get_window_extent()
    assert legend.y1 <= plotted.y0 or legend.x0 >= plotted.x1         # outside the axes


# ---------------------------------------------------------------- Hugging Face decoders

HF_TINY = ["--network", "hf:llama", "--model-kwargs", "hidden_size=64", "intermediate_size=128",
           "num_hidden_layers=2", "num_attention_heads=4", "num_key_value_heads=2",
           "vocab_size=128", "max_position_embeddings=64", "--seq-len", "16",
           "--batch-size", "2", "--mode", "generate", "--prompt-len", "5", "--gen-len", "6"]


@pytest.mark.slow
def test_hf_generation_gives_transformers_greedy_tokens_through_its_static_cache():
    from microbench.plan import cli, spec as spec_mod
    from microbench.steps import workload as workload_mod
    spec = spec_mod.resolve(cli.to_plan(cli.parse_args([*HF_TINY, "--no-files"])).configs[0])
    model = workload_mod.prepare_model(spec)
    work = decoding.build(spec, model, None, count_flops=False, shape=spec.scenario.shape)
    assert isinstance(work.state, decoding.HfGenerationState)
    reference = model.generate(work.state.prompt, max_new_tokens=6, min_new_tokens=6,
                               do_sample=False, pad_token_id=0)[:, 5:]
    assert torch.equal(decoding.generated_tokens(work), reference)
    assert work.traffic.kv_bytes_per_position == 2 * 2 * 2 * 2 * 16 * 4   # layers k,v batch kv dim fp32
    compiled = decoding.build(spec, model, {"backend": "aot_eager"}, count_flops=False,
                              shape=spec.scenario.shape)
    assert torch.equal(decoding.generated_tokens(compiled), reference)


def test_hf_generate_runs_through_the_cli_with_the_same_figures(cli):
    ran, out_dir = cli(*HF_TINY, "--iterations", "2", "--warmup", "1")
    assert ran.returncode == 0, ran.stderr
    for label in ("Time to first token", "Inter-token latency", "Decode step (profiled)"):
        assert label in ran.stdout
    document = json.loads(next(out_dir.glob("*.json")).read_text())
    assert document["generation"]["decode_tokens_per_s"] > 0


def test_an_hf_model_type_without_a_static_cache_is_refused_in_one_line():
    from microbench.platform.errors import UsageError
    model = torch.nn.Linear(2, 2)
    model.config = type("Config", (), {"model_type": "oldstyle"})()
    with pytest.raises(UsageError, match="cannot run hf:oldstyle.*static KV cache"):
        decoding.hf_state(model, torch.zeros(1, 2, dtype=torch.long), 4,
                          contextlib.nullcontext())
