"""What a user sees: scaled units, the headline, the progress line, library chatter filtered,
--help without raw Python values, timm's spellings, --precision for one run, --rerun."""
from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import sys
from types import SimpleNamespace

import pytest

from conftest import TINY, assert_one_line_error, run_cli, stored_result
from microbench.plan import cli
from microbench.platform import noise
from microbench.platform import progress
from microbench.platform import units


# ---------------------------------------------------------------- units

@pytest.mark.parametrize("ms, text", [(0.0123, "12.3 us"), (0.5, "500 us"), (12.345, "12.3 ms"),
                                      (113.2, "113 ms"), (3787.75, "3.79 s")])
def test_durations_scale_to_three_significant_digits(ms, text):
    assert units.duration_ms(ms) == text


def test_flops_memory_and_rates_scale():
    assert units.flops(3.49e9) == "3.49 GFLOP"
    assert units.flops(8.72e8) == "872 MFLOP"
    assert units.flops(30.5e9, per_second=True) == "30.5 GFLOP/s"
    assert units.flops(412e12, per_second=True) == "412 TFLOP/s"
    assert units.megabytes(830.2) == "830 MB" and units.megabytes(12345.6) == "12.3 GB"
    assert units.rate(5163.72) == "5,164" and units.rate(34.969) == "34.97"


@pytest.mark.parametrize("gbs, text", [(0.0123, "12.3 MB/s"), (0.32, "320 MB/s"), (1.0, "1 GB/s"),
                                       (41.27, "41.3 GB/s"), (412.4, "412 GB/s"),
                                       (3350.0, "3.35 TB/s"), (0.0000004, "0.0004 MB/s")])
def test_a_bandwidth_scales_to_its_unit_and_is_never_zero(gbs, text):
    """Decode bandwidth once printed "0.0 GB/s" on the CPU: one helper scales every bandwidth
    (a peak's too) to MB/s, GB/s or TB/s."""
    assert units.bandwidth(gbs) == text and units.gbs_rate(gbs) == text


# ---------------------------------------------------------------- progress

class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def screen(written: str) -> list[str]:
    """What a terminal shows after ``written``: carriage returns, erased lines (ESC [2K, ESC
    [K) and moves up (ESC [nA) applied, the line under the cursor last."""
    lines, row, col = [""], 0, 0
    for token in re.split(r"(\r|\n|\x1b\[\d*[AK]|\x1b\[\?25[lh])", written):
        if token == "\r":
            col = 0
        elif token == "\n":
            row, col = row + 1, 0
            lines += [""] * (row + 1 - len(lines))
        elif token.startswith("\x1b[") and token.endswith("K"):
            lines[row] = ""
        elif token.startswith("\x1b[") and token.endswith("A"):
            row = max(0, row - int(token[2:-1] or 1))
        elif token and not token.startswith("\x1b"):
            lines[row] = lines[row][:col].ljust(col) + token + lines[row][col + len(token):]
            col += len(token)
    return lines[:row + 1]


def test_progress_on_a_terminal_counts_elapsed_time_and_keeps_the_duration():
    now = [100.0]
    out = FakeTerminal()
    activity = progress.Activity(out, clock=lambda: now[0], tick=False)
    activity.start("Compiling")
    now[0] += 75.0
    activity.render()
    assert screen(out.getvalue()) == ["Compiling... 1 min 15 s"]
    now[0] += 5.0
    activity.start("Timing 20 iterations")          # ends the compile phase
    assert screen(out.getvalue()) == ["Compiling... done in 1 min 20 s",
                                      "Timing 20 iterations... 0.0 s"]
    activity.finish()
    assert screen(out.getvalue()) == ["Compiling... done in 1 min 20 s",
                                      "Timing 20 iterations... done in 0.0 s", ""]
    assert "\x1b[?25l" not in out.getvalue(), "the cursor stays shown"


def test_progress_elsewhere_is_one_plain_line_per_phase():
    out = io.StringIO()                               # not a terminal: a log file, CI
    activity = progress.Activity(out, clock=lambda: 0.0)
    activity.start("Warming up")
    activity.start("Timing 2 iterations", tick=False)
    assert activity._thread is None                   # the timed region: no thread
    activity.finish()
    assert out.getvalue() == "Warming up...\nTiming 2 iterations...\n"
    assert activity._thread is None


def test_a_long_phase_in_a_log_says_every_ten_seconds_that_it_is_still_running():
    """Off a terminal a slow compile adds a plain line every 10 s (issue 64: 37.8 s of warm-up
    printed nothing); the ticking thread's call is made here with a fake clock."""
    now = [0.0]
    out = io.StringIO()
    activity = progress.Activity(out, clock=lambda: now[0])
    assert activity.PLAIN_TICK_S == 10.0
    activity.start("Compiling")
    assert activity.ticking
    now[0] = 10.0
    activity.render()
    now[0] = 75.0
    activity.render()
    activity.finish("done")
    assert out.getvalue().splitlines() == ["Compiling...", "Compiling... still running, 10 s",
                                           "Compiling... still running, 1 min 15 s",
                                           "Compiling: done"]
    assert not activity.ticking


def test_progress_on_a_terminal_ticks_in_a_thread_and_stops():
    out = FakeTerminal()
    activity = progress.Activity(out, clock=lambda: 0.0)
    activity.start("Searching")
    assert activity.ticking and activity._thread.daemon
    activity.finish("batch 64")
    assert not activity.ticking and out.getvalue().endswith("batch 64 in 0.0 s\n")


def test_the_timed_phase_is_drawn_once_and_never_redrawn():
    out = FakeTerminal()
    activity = progress.Activity(out, clock=lambda: 0.0)
    activity.start("Timing 20 iterations", tick=False)
    drawn = out.getvalue()
    assert not activity.ticking and screen(drawn) == ["Timing 20 iterations... 0.0 s"]
    activity.finish()
    assert out.getvalue().startswith(drawn)


def test_a_stream_that_stops_taking_writes_ends_the_ticking_quietly(monkeypatch):
    out = FakeTerminal()
    activity = progress.Activity(out, clock=lambda: 0.0)
    monkeypatch.setattr(activity, "TICK_S", 0.001)
    activity.start("Compiling")
    out.close()                                   # the next redraw raises ValueError
    activity._thread.join(timeout=10)
    assert not activity._thread.is_alive()


# ---------------------------------------------------------------- library chatter

CHATTER = [
    "USDT:2026-11-22 09:03:04 2443:2443 SyncActivityProfilerHandler.cpp:39] profiler_start\n",
    "ERROR:2026-11-22 09:03:04 2443:2443 DeviceProperties.cpp:56] gpuGetDeviceCount failed "
    "with code 35\n",
    "[2026-11-22 09:03:02,723] [WARNING] [real_accelerator.py:213:get_accelerator] Setting "
    "accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it.\n",
    "No CUDA runtime is found, using CUDA_HOME='/usr/local/cuda'\n",
]


def test_known_chatter_is_dropped_and_everything_else_kept(monkeypatch):
    real = "RuntimeError: something the user must see\n"
    assert noise.kept_lines("".join(CHATTER) + real) == real
    monkeypatch.setenv(noise.ENV_SWITCH, "all")
    assert noise.kept_lines("".join(CHATTER)) == "".join(CHATTER)


def test_capture_filters_what_cpp_writes_to_the_descriptor(capfd, monkeypatch):
    stream = open(2, "w", closefd=False)              # sys.stderr on fd 2, as outside pytest
    monkeypatch.setattr(sys, "stderr", stream)
    with noise.captured():
        os.write(2, "".join(CHATTER).encode() + b"a real warning\n")
    stream.flush()
    err = capfd.readouterr().err
    assert err == "a real warning\n"


@pytest.mark.slow
def test_cpu_profiling_run_shows_no_library_chatter(tmp_path):
    """A real process: the chatter is written to file descriptors, which pytest replaces."""
    pytest.importorskip("deepspeed")
    process = run_cli("--network", "resnet18", "--image-size", "32", "--batch-size", "2",
                      "--iterations", "3", "--warmup", "1", "--no-files", "--quiet",
                      "--kineto", "--profiler-schedule", "0,1,1", "--flops-prof-step", "1",
                      "--profiler-output", str(tmp_path) + os.sep)
    assert process.returncode == 0, process.stderr
    both = process.stdout + process.stderr
    for text in ("USDT", "gpuGetDeviceCount", "Setting accelerator"):
        assert text not in both
    # DeepSpeed's profile comes after the summary, not inside the timed iterations' lines.
    assert process.stdout.index("SUMMARY") < process.stdout.index("DeepSpeed Flops Profiler")


# ---------------------------------------------------------------- --help and spellings

def test_help_shows_each_default_once_as_typed(capsys):
    with pytest.raises(SystemExit):
        cli.parse_args(["--help"])
    text = capsys.readouterr().out
    assert "['" not in text and "(1, 2, 2)" not in text and "default: False" not in text
    assert "(default: 64)" in text and "(default: 1,2,2)" in text
    flat = " ".join(text.split())
    assert "(default: auto)" in flat and "(default: None)" not in flat
    # Each option's help names its default once (argparse's own and the text's would repeat it).
    options = re.split(r"\n  -", text)
    assert len(options) > 50
    assert [option.split()[0] for option in options if option.count("(default:") > 1] == []


def test_timm_spellings_are_aliases():
    args = cli.parse_args(["--model", "resnet18", "--channels-last", "--img-size", "64"])
    config = cli.to_config(args)
    assert (config.network, config.nhwc, config.image_size) == ("resnet18", True, 64)


def test_precision_is_the_one_flag_for_a_single_run():
    config = cli.to_config(cli.parse_args(["--precision", "amp-bf16"]))
    assert config.precision == "amp-bf16"
    older = cli.to_config(cli.parse_args(["--amp", "--amp-dtype", "bf16"]))
    assert older.precision == "amp-bf16"


def test_precision_and_an_older_spelling_together_are_refused(cli):
    process, _ = cli("--precision", "fp16", "--amp", *TINY)
    assert_one_line_error(process, 2, "--precision replaces")


# ---------------------------------------------------------------- --rerun

def _stored_config(path):
    config = json.loads(path.read_text())["config"]
    for key in ("output_dir", "explicit", "notes", "quiet", "write_files"):
        config.pop(key)
    return config


def test_rerun_repeats_the_stored_configuration_with_new_flags_on_top(cli, tmp_path):
    first, out = cli("--network", "resnet18", "--precision", "tf32", "--nhwc", "--seed", "7",
                     "--opt-step", "2", *TINY, "--quiet")
    assert first.returncode == 0, first.stderr
    [stored] = out.glob("*.json")
    again_dir = tmp_path / "again"
    second, _ = cli("--rerun", str(stored), "--iterations", "3", "--output-dir", str(again_dir),
                    "--quiet")
    assert second.returncode == 0, second.stderr
    # The note shows what runs: the stored settings with the flags given now in their place.
    [note] = [line for line in second.stdout.splitlines()
              if line.startswith(f"Note: --rerun {stored} runs: --network resnet18")]
    assert "--iterations 3" in note and "--iterations 2" not in note and "--seed 7" in note
    [repeated] = again_dir.glob("*.json")
    before, after = _stored_config(stored), _stored_config(repeated)
    assert after.pop("iterations") == 3 and before.pop("iterations") == 2
    assert after == before


def test_rerun_of_amp_with_tf32_keeps_both():
    from microbench.settings import config as config_mod
    flags = config_mod.spelled({"precision": "amp-bf16", "tf32": True}, ("precision", "tf32"))
    config = cli.to_config(cli.parse_args(flags))
    assert (config.precision, config.tf32) == ("amp-bf16", True)


@pytest.mark.parametrize("stored, message", [
    ({"network": "resnet18", "batch_size": 10**12}, "--batch-size"),
    ({"network": "resnet18", "compile": True,
      "compile_options": {"options": {"cpp.cxx": "/bin/sh"}}}, "not allowed"),
    ({"network": "resnet18", "nhwc": "yes"}, "at $.config.nhwc: 'yes' is not of type"),
    ({"network": "resnet18", "model_kwargs": ["--output-dir=/etc"]}, "not a value"),
])
def test_rerun_checks_a_stored_value_like_a_typed_one(cli, tmp_path, stored, message):
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(stored_result(stored)))
    process, out = cli("--rerun", str(path), "--no-files")
    assert_one_line_error(process, 2, message)
    assert not out.exists()


def test_rerun_of_a_file_that_is_not_a_result_is_one_line(cli, tmp_path):
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    process, _ = cli("--rerun", str(path))
    assert_one_line_error(process, 2, "not a result of this tool")


# ---------------------------------------------------------------- result names

@pytest.mark.slow
def test_a_result_of_another_configuration_is_never_replaced(cli):
    first, out = cli("--network", "resnet18", *TINY, "--quiet")
    second, _ = cli("--network", "resnet18", *TINY, "--quiet", "--seed", "3")
    assert first.returncode == second.returncode == 0, second.stderr
    assert "holds a result of another configuration (differing in seed)" in second.stdout
    names = sorted(p.name for p in out.glob("*.json"))
    assert names == ["resnet18_training_fp32_b2-2.json", "resnet18_training_fp32_b2.json"]
    seeds = {json.loads((out / name).read_text())["config"]["seed"] for name in names}
    assert seeds == {0, 3}
    # The same configuration again refreshes its own file, wherever it went.
    third, _ = cli("--network", "resnet18", *TINY, "--quiet", "--seed", "3")
    assert third.stdout.split("Results JSON : ")[1].split()[0].endswith("_b2-2.json")
    assert len(list(out.glob("*.json"))) == 2


def test_an_explicit_output_file_is_replaced_with_a_note(cli):
    cli("--network", "resnet18", *TINY, "--quiet", "--output-file", "mine")
    again, out = cli("--network", "resnet18", *TINY, "--quiet", "--output-file", "mine",
                     "--seed", "5")
    assert "--output-file names it, so this run's result replaces it" in again.stdout
    assert json.loads((out / "mine.json").read_text())["config"]["seed"] == 5


def test_default_names_tell_profiled_compiled_and_language_runs_apart():
    from microbench.settings import config as config_mod, precision
    from microbench.plan import spec as spec_mod
    from microbench.models import registry
    from microbench.scenarios import parallel

    def name(config, model, policy, world_size):
        return spec_mod._json_name(config, model, policy, world_size,
                                   parallel.strategy_of(config, SimpleNamespace(
                                       distributed=world_size > 1)))
    fp32 = precision.lookup("fp32")
    vision = registry.resolve("resnet18", registry.ModelOptions())
    llama = registry.resolve("llama_tiny", registry.ModelOptions(seq_len=64))
    base = config_mod.BenchConfig(network="resnet18", batch_size=8)
    assert name(base, vision, fp32, 1) == "resnet18_training_fp32_b8.json"
    assert name(base, vision, fp32, 4) == "resnet18_training_fp32_b8_w4.json"
    profiled = dataclasses.replace(base, kineto=True, flops_prof_step=2, compile=True,
                                   compile_options={"mode": "max-autotune"})
    assert name(profiled, vision, fp32, 1) == \
        "resnet18_training_fp32_compile-max-autotune_kineto_flops_b8.json"
    lm = dataclasses.replace(base, network="llama_tiny")
    assert name(lm, llama, fp32, 1) == "llama_tiny_training_fp32_sdpa-s64_b8.json"


# ---------------------------------------------------------------- slow precisions

@pytest.mark.parametrize("bf16, faster", [(False, "FP32 (--precision fp32) is faster here"),
                                           (True, "--precision amp-bf16 (and FP32) is faster")])
def test_fp16_on_a_cpu_without_amx_fp16_gets_a_note(cli, monkeypatch, bf16, faster):
    import torch
    monkeypatch.setattr(torch.cpu, "_is_amx_fp16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: bf16)
    process, _ = cli("--network", "resnet18", *TINY, "--amp", "--no-files", "--quiet")
    assert process.returncode == 0, process.stderr
    assert "Note: AMP-FP16 is slow on this device: this CPU has no FP16 arithmetic " \
        "instructions" in process.stdout and faster in process.stdout


@pytest.mark.parametrize("capability, dtype, slow", [
    ((6, 0), "float16", False), ((6, 1), "float16", True), ((5, 2), "float16", True),
    ((7, 0), "float16", False), ((7, 5), "bfloat16", True), ((8, 0), "bfloat16", False)])
def test_slow_half_reasons_on_nvidia_gpus(monkeypatch, capability, dtype, slow):
    import torch
    from microbench.platform import devices
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    reason = devices.slow_half_reason(torch.device("cuda"), getattr(torch, dtype))
    assert (reason is not None) == slow


@pytest.mark.parametrize("arch, slow", [("gfx906:sramecc+:xnack-", True), ("gfx1030", True),
                                        ("gfx90a:sramecc+:xnack-", False), ("gfx942", False)])
def test_bf16_on_rocm_gpus_without_bf16_units_gets_a_reason(monkeypatch, arch, slow):
    import types
    import torch
    from microbench.platform import devices
    monkeypatch.setattr(torch.version, "hip", "6.4")
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device=None: types.SimpleNamespace(gcnArchName=arch))
    reason = devices.slow_half_reason(torch.device("cuda"), torch.bfloat16)
    assert (reason is not None) == slow


def test_slow_half_reasons_follow_the_device(monkeypatch):
    import torch
    from microbench.platform import devices
    cpu = torch.device("cpu")
    monkeypatch.setattr(torch.cpu, "_is_amx_fp16_supported", lambda: True)
    assert devices.slow_half_reason(cpu, torch.float16) is None
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert "no BF16 instructions" in devices.slow_half_reason(cpu, torch.bfloat16)
    assert devices.slow_half_reason(cpu, torch.float32) is None


# ---------------------------------------------------------------- | head

class ClosedPipe(io.StringIO):
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")


@pytest.mark.parametrize("entry, argv", [("microbench.main", ["--list-networks"]),
                                         ("microbench.ops.cli", ["--op", "add", "--op-type",
                                                                 "binary", "--num-iters", "1"])])
def test_a_reader_that_leaves_ends_the_run_quietly(capfd, monkeypatch, entry, argv):
    import importlib
    main = importlib.import_module(entry).main
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    code = main(argv)
    monkeypatch.undo()
    assert code == 141 and capfd.readouterr().err.count("Traceback") == 0


def test_clear_leaves_no_line_of_its_own():
    out = FakeTerminal()
    activity = progress.Activity(out, clock=lambda: 0.0, tick=False)
    activity.start("add 64-1024", announce=False)
    activity.clear()
    assert "add 64-1024... 0.0 s" in out.getvalue() and screen(out.getvalue()) == [""]
    plain = io.StringIO()
    quiet = progress.Activity(plain, clock=lambda: 0.0)
    quiet.start("add 64-1024", announce=False)
    quiet.clear()
    assert plain.getvalue() == ""


def test_a_sweep_naming_one_model_twice_is_refused_before_it_runs(cli):
    """SqueezeNet is the older name of squeezenet1_0: the two rows would be one configuration
    measured twice, shown as two (issue 46: refused, one line, nothing written)."""
    process, out = cli("--network", "SqueezeNet,squeezenet1_0", "--image-size", "64",
                       "--batch-size", "2", "--iterations", "2", "--warmup", "1", "--quiet")
    assert_one_line_error(process, 2, "the sweep lists one configuration twice")
    assert not out.exists()


def test_a_result_from_another_device_model_is_not_replaced(cli):
    first, out = cli("--network", "resnet18", *TINY, "--quiet")
    [path] = out.glob("*.json")
    document = json.loads(path.read_text())
    document["env"]["device_name"] = "NVIDIA H200"
    path.write_text(json.dumps(document))
    again, _ = cli("--network", "resnet18", *TINY, "--quiet")
    assert "differing in device_name" in again.stdout
    assert len(list(out.glob("*.json"))) == 2


@pytest.mark.slow
def test_traces_are_named_after_the_configuration_with_no_files(cli, tmp_path):
    traces = tmp_path / "traces"
    for precision in ("fp32", "amp-bf16"):
        process, _ = cli("--network", "resnet18", *TINY, "--quiet", "--no-files", "--kineto",
                         "--profiler-schedule", "0,1,1", "--precision", precision,
                         "--profiler-output", f"{traces}/")
        assert process.returncode == 0, process.stderr
    assert sorted(p.name for p in traces.glob("*.json")) == [
        "resnet18_training_amp-bf16_kineto_b2_trace2.json",
        "resnet18_training_fp32_kineto_b2_trace2.json"]


# ---------------------------------------------------------------- output a reader expects

def test_compile_settings_print_in_words_not_as_a_python_dict():
    from microbench.settings.config import BenchConfig
    from microbench.output.console import compile_text
    assert compile_text(BenchConfig()) == "off"
    assert compile_text(BenchConfig(compile=True)) == "on (default)"
    assert compile_text(BenchConfig(compile=True, compile_options={"mode": "reduce-overhead"})
                        ) == "on (mode reduce-overhead)"
    assert "{" not in compile_text(BenchConfig(compile=True, compile_options={
        "fullgraph": True, "options": {"max_autotune": True}}))


def test_a_language_model_has_no_memory_format_and_generation_one_time_per_sequence(cli):
    ran, _ = cli("--network", "llama_tiny", "--seq-len", "16", "--mode", "generate",
                 "--prompt-len", "4", "--gen-len", "3", "--batch-size", "2", "--iterations", "1",
                 "--warmup", "1", "--no-files", "--quiet")
    assert ran.returncode == 0, ran.stderr
    assert "Memory format" not in ran.stdout
    lines = [line for line in ran.stdout.splitlines() if line.startswith("  Time per")
             or "End-to-end" in line]
    assert len(lines) == 1 and lines[0].strip().startswith("Time per sequence"), lines


def test_timm_spellings_run_and_are_shown_as_this_tools_flags(cli):
    ran, _ = cli("-m", "resnet18", "-b", "2", "--bench", "inference", "--num-bench-iter", "2",
                 "--image-size", "32", "--warmup", "1", "--no-files", "--quiet")
    assert ran.returncode == 0, ran.stderr
    assert "Note: --bench inference is timm's spelling: read as --mode inference" in ran.stdout
    assert "Note: -m resnet18 is timm's spelling: read as --network resnet18" in ran.stdout
    assert "Mode          : inference" in ran.stdout


def test_a_sweep_row_line_uses_the_summarys_scaled_units(cli):
    ran, _ = cli("--network", "resnet18", "--batch-size", "2,4", "--image-size", "32",
                 "--iterations", "1", "--warmup", "0", "--no-files")
    assert ran.returncode == 0, ran.stderr
    rows = [line for line in ran.stdout.splitlines() if line.startswith("[1/2]")
            and "images/s" in line]
    assert rows, ran.stdout
    # e.g. "median 83.1 ms," (or us or s on a faster or busier machine), never "83.123":
    median = re.search(r"median (\S+) (us|ms|s),", rows[-1])
    assert median and len(median.group(1).replace(".", "")) <= 4, rows[-1]


def test_the_plot_subtitle_names_settings_that_differ_from_the_defaults():
    from support.rows import measured_row
    from microbench.output import sweep_plot
    text = sweep_plot.subtitle([measured_row(2), measured_row(4)])
    assert "image size 32" in text


def test_op_bench_rates_never_print_as_zero():
    from microbench.ops.report import _format_rate
    assert _format_rate(0.000213) == "0.000213"
    assert _format_rate(0.0) == "-" and _format_rate(None) == "-"
    assert _format_rate(12.34) == "12.3"
