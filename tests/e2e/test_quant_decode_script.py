"""benchmarks/quant_decode.py (issues 48 and 61) on the CPU: its tool command is one the command line
takes, it reads the figures the tool writes, and it judges every target of the issue from them
(PASS, FAIL, or not run with the reason)."""
from pathlib import Path

import pytest

from benchmarks import quant_decode
from microbench.plan import cli


def test_the_tool_command_parses_with_the_tools_own_flags(tmp_path):
    command = quant_decode.tool_command("llama3_8b", "int4wo", quant_decode.FULL, tmp_path,
                                        "llama3_8b_int4wo")
    assert command[1:3] == ["-m", "microbench"]
    args = cli.parse_args(command[3:])
    [config] = cli.to_plan(args).configs
    assert (config.network, config.mode, config.quantize, config.batch_size) == \
        ("llama3_8b", "generate", "int4wo", 1)
    assert config.compile and config.compile_options.get("mode") == "reduce-overhead"
    assert config.warmup >= 3                      # the tool asks it of reduce-overhead
    bf16 = quant_decode.tool_command("llama_1b", "bf16", quant_decode.FULL, tmp_path, "x")
    assert bf16[bf16.index("--quantize") + 1] == "none"


def test_figures_are_read_from_the_result_document():
    document = {"generation": {"decode_tokens_per_s": 250.0,
                               "time_to_first_token": {"stats": {"median_ms": 3.0}}},
                "timing": {"first_iteration_s": 80.0},
                "low_precision": {"quant_layout": "tinygemm",
                                  "quant_kernels": [{"tensor": "Int4TilePackedTo4dTensor",
                                                     "packing": "tile_packed_to_4d",
                                                     "kernel": "k", "layers": 155}]}}
    figures = quant_decode.tool_figures(document)
    assert (figures["decode_tokens_per_s"], figures["ttft_ms"], figures["first_iteration_s"],
            figures["layout"]) == (250.0, 3.0, 80.0, "tinygemm")
    assert figures["decode_busy_ms"] is None and figures["decode_top"] == []
    document["generation"]["decode_attribution"] = {
        "busy_ms": 3.5, "gap_ms": 0.5, "top": [{"name": "triton_red_fused_mm_0", "ms": 1.25}]}
    figures = quant_decode.tool_figures(document)
    assert (figures["decode_busy_ms"], figures["decode_gap_ms"]) == (3.5, 0.5)
    row = {"model": "llama3_8b", "format": "int8wo", "tool": figures,
           "loop": {"error": "not run"},
           "gptfast": {"decode_tokens_per_s": 250.0, "decode_busy_ms": 3.9,
                       "decode_top": [{"name": "triton_red_fused_1", "ms": 1.5}]}}
    steps = quant_decode.step_table([row])
    assert "| llama3_8b | int8wo | tool | 4.000 | 3.500 | triton_red_fused_mm_0 (1.250) |" in steps
    assert "| llama3_8b | int8wo | gpt-fast int8 form | 4.000 | 3.900 |" in steps
    assert "| llama3_8b | int8wo | torchao loop |  |  |  |" in steps


def _row(model, fmt, tool_rate, loop_rate, ttft=2.0, first=60.0):
    return {"model": model, "format": fmt,
            "tool": {"decode_tokens_per_s": tool_rate, "ttft_ms": ttft,
                     "first_iteration_s": first, "kernels": []},
            "loop": {"decode_tokens_per_s": loop_rate}}


def test_every_target_is_judged():
    rows = [_row("llama3_8b", "bf16", 100.0, 100.0),
            {**_row("llama3_8b", "int4wo", 180.0, 182.0), "mslk": True},    # 1.8x < 1.85x
            {**_row("llama3_8b", "int8wo", 150.0, 150.0, ttft=5.0), "gemlite": True},  # TTFT 2.5x
            _row("llama_1b", "bf16", 800.0, 790.0),
            _row("llama_1b", "float8wo", 700.0, 690.0, first=150.0)]
    rows[2]["tool"]["choice_s"] = 18.0               # auto's measuring counts with the compile
    lines = quant_decode.verdicts(rows)
    text = "\n".join(lines)
    assert "FAIL     llama3_8b int4wo (with mslk) decode vs BF16 >= 1.85x: 1.800x" in text
    # Whether gemlite could be imported is named on the int8 and FP8 lines, as mslk on int4's.
    assert "PASS     llama3_8b int8wo (with gemlite) decode vs BF16 >= 1.50x: 1.500x" in text
    assert "FAIL     llama3_8b int8wo (with gemlite) TTFT at prompt 128 vs BF16 <= 1.3x: " \
           "2.500x" in text
    assert "FAIL     llama3_8b int8wo (with gemlite) compile + first iteration (+ auto's " \
           "measuring) vs BF16 <= 1.3x: 1.300x" not in text
    assert "PASS     llama3_8b int8wo (with gemlite) compile + first iteration (+ auto's " \
           "measuring) vs BF16 <= 1.3x: 1.300x" in text
    assert "FAIL     llama_1b float8wo (without gemlite) decode vs BF16 >= 1.00x: 0.875x" in text
    assert "FAIL     llama_1b float8wo (without gemlite) compile + first iteration (+ auto's " \
           "measuring) vs BF16 <= 1.3x: 2.500x" in text
    assert "PASS     llama3_8b int4wo (with mslk) tool vs torchao loop >= 0.97x: 0.989x" in text
    assert not any(line.startswith("not run") for line in lines)
    assert not any("bf16" in line for line in lines)        # the baseline judges the others
    table = quant_decode.table(rows)
    assert "| llama3_8b | int4wo | yes | no | 180.0 | 1.800 | 128: 2.00 |" in table
    assert "| llama3_8b | int8wo | no | yes | 150.0 | 1.500 | 128: 5.00 |" in table


def test_the_time_to_first_token_is_judged_at_every_prompt_run():
    rows = [{**_row("llama3_8b", "bf16", 100.0, 100.0), "ttft_by_prompt": {128: 2.0, 1024: 20.0}},
            {**_row("llama3_8b", "int4wo", 190.0, 0.0), "ttft_by_prompt": {128: 2.4, 1024: 30.0},
             "loop": {"error": "not run (--loops)"}}]
    text = "\n".join(quant_decode.verdicts(rows))
    assert "PASS     llama3_8b int4wo (without mslk) TTFT at prompt 128 vs BF16 <= 1.3x: 1.200x" \
        in text
    assert "FAIL     llama3_8b int4wo (without mslk) TTFT at prompt 1024 vs BF16 <= 1.3x: " \
           "1.500x" in text
    assert "torchao loop" not in text                   # not asked for: no line


def test_int8_is_judged_against_gpt_fasts_form_and_float8_against_its_new_target():
    rows = [_row("llama3_8b", "bf16", 100.0, 100.0, ttft=2.0),
            {**_row("llama3_8b", "int8wo", 150.0, 140.0, ttft=2.5),
             "gptfast": {"decode_tokens_per_s": 160.0, "ttft_ms": 4.0}},
            _row("llama3_8b", "float8wo", 134.0, 121.0, ttft=3.1)]
    text = "\n".join(quant_decode.verdicts(rows))
    assert "FAIL     llama3_8b int8wo (without gemlite) decode vs gpt-fast's int8 form >= " \
           "1.00x: 0.938x" in text
    assert "PASS     llama3_8b int8wo (without gemlite) TTFT at prompt 128 vs BF16 <= 1.3x: " \
           "1.250x" in text
    assert "FAIL     llama3_8b float8wo (without gemlite) decode vs BF16 >= 1.35x: 1.340x" in text
    assert "FAIL     llama3_8b float8wo (without gemlite) TTFT at prompt 128 vs BF16 <= 1.3x: " \
           "1.550x" in text
    assert "gpt-fast" not in "\n".join(line for line in text.splitlines() if "float8" in line)
    assert "| llama3_8b | gpt-fast int8 form (loop) | no | no | 160.0 | 1.600 |" in \
        quant_decode.table(rows)
    missing = [{**rows[1], "gptfast": {"error": "exit 1, see gptfast_llama3_8b_int8wo.log"}}]
    [line] = [line for line in quant_decode.verdicts(rows[:1] + missing) if "gpt-fast" in line]
    assert line.startswith("not run") and "gptfast_llama3_8b_int8wo.log" in line


def test_a_layout_can_be_asked_of_the_tool(tmp_path):
    args = quant_decode.parse([str(tmp_path), "--layouts", "int4wo=tinygemm"])
    assert args.layouts == {"int4wo": "tinygemm"}
    command = quant_decode.tool_command("llama3_8b", "int4wo", quant_decode.FULL, tmp_path, "x",
                                        "tinygemm")
    [config] = cli.to_plan(cli.parse_args(command[3:])).configs
    assert config.quant_layout == "tinygemm"
    assert "--quant-layout" not in quant_decode.tool_command(
        "llama3_8b", "int4wo", quant_decode.FULL, tmp_path, "x")
    for bad in ("int4wo", "int3wo=tinygemm"):
        with pytest.raises(SystemExit):
            quant_decode.parse([str(tmp_path), "--layouts", bad])


def test_the_loops_are_chosen_by_name(tmp_path):
    assert quant_decode.parse([str(tmp_path)]).loops == ("gptfast",)
    assert quant_decode.parse([str(tmp_path), "--loops", "torchao,gptfast"]).loops == \
        ("torchao", "gptfast")
    assert quant_decode.parse([str(tmp_path), "--prompts", "128,1024"]).prompts == (128, 1024)
    with pytest.raises(SystemExit):
        quant_decode.parse([str(tmp_path), "--prompts", "long"])
    assert quant_decode.parse([str(tmp_path), "--loops", "gptfast"]).loops == ("gptfast",)
    assert quant_decode.parse([str(tmp_path), "--loops", "none"]).loops == ()
    with pytest.raises(SystemExit):
        quant_decode.parse([str(tmp_path), "--loops", "vllm"])


def test_a_run_without_figures_says_why():
    rows = [_row("llama_1b", "bf16", 800.0, 790.0),
            {"model": "llama_1b", "format": "int8wo",
             "tool": {"error": "exit 1, see tool_llama_1b_int8wo.log"}, "loop": {}}]
    lines = [line for line in quant_decode.verdicts(rows) if "int8wo" in line]
    assert lines and all(line.startswith("not run") and "tool_llama_1b_int8wo.log" in line
                         for line in lines)


def test_bf16_always_runs_first_and_unknown_names_are_refused(tmp_path):
    args = quant_decode.parse([str(tmp_path), "--models", "llama_1b",
                               "--formats", "int8wo,bf16"])
    assert args.formats == ["bf16", "int8wo"] and args.models == ["llama_1b"]
    with pytest.raises(SystemExit):
        quant_decode.parse([str(tmp_path), "--formats", "int3wo"])
    assert Path(quant_decode.__file__).parent.name == "benchmarks"


def test_the_tight_loop_quantizes_and_times_the_same_model(monkeypatch, tmp_path):
    """The loop's logic on the CPU: compile left out and CUDA events read from the host clock
    (the GPU run compiles and records real events)."""
    pytest.importorskip("torchao")
    import itertools
    import json

    import torch
    ticks = itertools.count()

    class Event:
        def __init__(self, **_):
            self.at = None

        def record(self):
            self.at = next(ticks)          # 1 ms apart

        def elapsed_time(self, other):
            return float(other.at - self.at)

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: None)
    monkeypatch.setattr(torch, "compile", lambda function, **_: function)
    out = tmp_path / "loop.json"
    quant_decode.loop_worker("llama_tiny", "int8wo", "tensorwise",
                             dict(prompt=8, gen=4, iterations=2, warmup=2), str(out), "cpu")
    result = json.loads(out.read_text())
    assert result["weights"] == ["Int8Tensor"]
    # Each generation: prefill 1 tick, 3 decode steps in 1 tick (events only around them).
    assert result["decode_tokens_per_s"] == pytest.approx(2 * 3 / (2 * 1e-3))
    assert result["ttft_ms"] == 1.0
    assert "decode_busy_ms" not in result                 # profiled on a GPU only
    # gpt-fast's int8 form, written in the benchmark: plain int8 buffers, no torchao tensor.
    quant_decode.loop_worker("llama_tiny", "int8wo", "gptfast",
                             dict(prompt=8, gen=4, iterations=2, warmup=2), str(out), "cpu")
    assert json.loads(out.read_text())["weights"] == ["Tensor"]


def test_the_torchao_loop_runs_torchaos_own_gemlite_form_where_the_tool_chose_gemlite():
    """int8: torchao's UIntxWeightOnlyConfig (gemlite's A16W8 under a tensor subclass); FP8:
    torchao has no gemlite form, and the loop runs its rowwise Float8Tensor."""
    pytest.importorskip("torchao")
    config = quant_decode._torchao_config("int8wo", "gemlite")
    assert type(config).__name__ == "UIntxWeightOnlyConfig"
    assert (config.bit_width, config.group_size, config.set_inductor_config) == (8, None, False)
    assert quant_decode.torchao_layout("int8wo", "gemlite") == "gemlite"
    assert quant_decode.torchao_layout("float8wo", "gemlite") == "rowwise"
    assert quant_decode.torchao_layout("int8wo", "unwrapped") == "rowwise"
