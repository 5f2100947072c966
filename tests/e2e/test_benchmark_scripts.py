"""The GPU proof scripts in benchmarks/ call the tool's own code path; a restructure of that path
must not leave them broken until the next GPU session. Their tool side runs here on the CPU."""
import pytest

from benchmarks import harness_overhead, llama_harness
from microbench.platform import devices, environment


@pytest.fixture(scope="module")
def cpu():
    device, _ = devices.select("cpu")
    return device, environment.describe(device)


def test_harness_overhead_tool_side_runs_the_cli_path(cpu):
    device, env = cpu
    rate = harness_overhead.tool_throughput(["--image-size", "32"], "inference", 2, 1, 1,
                                            device, env)
    assert rate > 0


def test_llama_harness_tool_side_runs_the_cli_path(cpu):
    _, env = cpu
    rate = llama_harness.tool_throughput(
        ["--network", "llama_tiny", "--batch-size", "1", "--seq-len", "16", "--device", "cpu",
         "--iterations", "1", "--warmup", "1"], env)
    assert rate > 0


# The tool's A/B line as an H100 printed it (docs/results.md, 2026-11-25), and its other verdicts.
AB_LINE = ("A/B: B (--measure-peaks 0) / A = 1.000: same within 5% (interval 0.981-1.021) [95% "
           "CI of the ratio B/A paired by round (Student t on log ratios, 5 rounds)]")


@pytest.mark.parametrize("line, verdict, passes", [
    (AB_LINE, "same within 5%", True),
    ("A/B: B (x) / A = 1.004: no difference detected (interval 0.97-1.03)",
     "no difference detected", True),
    ("A/B: B (x) / A = 1.080: faster (interval 1.05-1.11)", "faster", False),
    ("A/B: B (x) / A = 0.900: slower (interval 0.88-0.92)", "slower", False),
    ("no A/B line at all", None, False)])
def test_peaks_script_reads_every_verdict_of_the_ab_line(line, verdict, passes):
    from benchmarks import peaks_vs_loop
    text = f"A: 2,442 images/s\n{line}\n"
    assert peaks_vs_loop.ab_verdict(text) == verdict
    assert peaks_vs_loop.probe_left_alone(peaks_vs_loop.ab_verdict(text)) is passes


def test_the_fp8_fsdp_summary_judges_each_target_from_the_medians(tmp_path, capsys):
    """benchmarks/fp8_fsdp.py (issue 58): medians of the alternated runs, one PASS/FAIL line a
    target whose case ran, a FAIL where a side left no result, exit 5 on a failure."""
    import json
    from benchmarks import fp8_fsdp

    def write(name, tokens, gpus=4, share=None):
        folder = tmp_path / name
        folder.mkdir()
        doc = {"Throughput [tokens/sec]": tokens * gpus, "GPUs": gpus,
               "timing": {"compile_s": 61.0},
               "low_precision": {"fp8_recipe": "tensorwise", "fp8_flops_share": share,
                                 "fp8_all_gather": True} if share else None}
        (folder / "run.json").write_text(json.dumps(doc))

    for round_, (bf16, fp8) in enumerate(((1000, 1150), (1000, 1090), (1010, 1120)), 1):
        write(f"3b_bf16_{round_}", bf16)
        write(f"3b_tensorwise_{round_}", fp8, share=0.9)
    (tmp_path / "3b_rowwise_1").mkdir()                  # ran and failed: no result
    assert fp8_fsdp.main(tmp_path) == 0                  # 3b rowwise has no target of its own
    out = capsys.readouterr().out
    assert "PASS llama3_3b seq 4096 FSDP, FP8 tensorwise vs BF16: 1.120x" in out
    assert "FP8 share 90.0%, FP8 all-gather  compile + first step 61 s" in out
    assert "3b_rowwise_1         no result" in out and "llama3_8b" not in out
    write("8b_bf16_1", 500)
    write("8b_tensorwise_1", 580, share=0.95)
    assert fp8_fsdp.main(tmp_path) == 5
    out = capsys.readouterr().out
    assert "FAIL llama3_8b seq 8192 FSDP, FP8 tensorwise vs BF16: 1.160x (target >= 1.20x" in out
    assert "FAIL llama3_8b seq 8192 FSDP, FP8 rowwise vs BF16: no finished run of rowwise" in out
