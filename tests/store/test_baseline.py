"""The --compare gate through the real command line (CPU, in-process, on a steady fake clock):
both sides' trials, another configuration refused or compared on request, a failed gate that
never replaces its baseline, and a one-trial ratio inside its runs' iteration noise that fails no
gate (issue 64)."""
import contextlib
import io
import json

import pytest

from conftest import HISTORY, TINY, assert_one_line_error, nightly_result, run_main

RUN = ["--network", "resnet18", *TINY, "--device", "cpu", "--mode", "inference"]


@pytest.fixture
def run(capfd, steady_clock):
    return lambda *args: run_main(capfd, *RUN, *args)


def stored(path):
    return json.loads(path.read_text())


def scaled(path, factor, spread=()):
    """Rewrite a result as a baseline ``factor`` times as fast as it measured (its trials too,
    each moved by the given relative offsets)."""
    document = stored(path)
    measured = [trial["throughput"] for trial in document["trials"]["per_trial"]]
    document["Throughput [img/sec]"] = measured[0] * factor
    document["trials"]["values"] = [v * factor * (1 + d) for v, d in
                                    zip(measured, spread or [0.0] * len(measured))]
    path.write_text(json.dumps(document))


def test_three_regressed_runs_in_a_row_leave_the_baseline_byte_identical(run, tmp_path):
    out = tmp_path / "out"
    assert run("--output-dir", str(out), "--output-file", "x").returncode == 0
    target = out / "x.json"
    scaled(target, 10.0)
    before = target.read_bytes()
    for attempt in ("", "2", "3"):
        ran = run("--output-dir", str(out), "--output-file", "x", "--compare", str(target))
        assert_one_line_error(ran, 5, "throughput regressed")
        assert "one sample on a side" in ran.stderr
        # Each fact once on the console: the point-ratio basis in the verdict only.
        [gate_line] = [line for line in ran.stdout.splitlines() if "Gate:" in line]
        assert gate_line.count("noise not tested") == 1 and "point ratio" in gate_line
        assert ran.stdout.count("noise not tested") == 1
        assert target.read_bytes() == before, "a failed gate replaced its baseline"
        kept = out / f"x.regressed{attempt}.json"
        assert kept.exists(), ran.stdout
        assert f"this run's result goes to {kept}" in ran.stdout
    assert stored(out / "x.regressed3.json")["Throughput [img/sec]"] < \
        stored(target)["Throughput [img/sec]"] / 5


def test_fail_if_never_reports_the_regression_and_still_keeps_the_baseline(run, tmp_path):
    out = tmp_path / "out"
    assert run("--output-dir", str(out), "--output-file", "x").returncode == 0
    target = out / "x.json"
    scaled(target, 10.0)
    before = target.read_bytes()
    ran = run("--output-dir", str(out), "--output-file", "x", "--compare", str(target),
              "--fail-if", "never")
    assert ran.returncode == 0, ran.stderr
    assert "--fail-if never: exit 0" in ran.stdout and target.read_bytes() == before


def test_a_passing_run_against_its_own_file_replaces_it(run, tmp_path):
    out = tmp_path / "out"
    assert run("--output-dir", str(out), "--output-file", "x").returncode == 0
    target = out / "x.json"
    scaled(target, 0.5)
    ran = run("--output-dir", str(out), "--output-file", "x", "--compare", str(target))
    assert ran.returncode == 0, ran.stderr
    assert stored(target)["Throughput [img/sec]"] > 0 and not list(out.glob("*.regressed*"))
    assert "Gate passed" in ran.stdout


@pytest.mark.slow
def test_trials_on_both_sides_use_welch_and_a_noisy_drop_passes(run, tmp_path):
    base = tmp_path / "base"
    assert run("--output-dir", str(base), "--output-file", "b", "--repeat", "3",
               "--trials", "in-process").returncode == 0
    baseline = base / "b.json"
    # 14% faster on average, but the baseline's own trials spread by +-30%: not significant.
    scaled(baseline, 1.08, spread=(0.3, -0.3, 0.3))
    ran = run("--no-files", "--repeat", "3", "--trials", "in-process", "--compare",
              str(baseline))
    assert ran.returncode == 0, ran.stderr
    assert "Welch's t test on log throughput (3 baseline, 3 current trials)" in ran.stdout
    [gate_line] = [line for line in ran.stdout.splitlines() if "Gate:" in line]
    assert ": no difference detected (interval " in gate_line and "Gate passed" in ran.stdout
    # The same drop with a tight baseline is a regression.
    scaled(baseline, 1.14, spread=(0.001, -0.001, 0.0))
    ran = run("--no-files", "--repeat", "3", "--trials", "in-process", "--compare",
              str(baseline))
    assert_one_line_error(ran, 5, "Welch p = ")


def test_another_configuration_is_refused_unless_asked(run, tmp_path):
    assert run("--output-dir", str(tmp_path), "--output-file", "b").returncode == 0
    baseline = tmp_path / "b.json"
    before = baseline.read_bytes()
    ran = run("--no-files", "--image-size", "48", "--compare", str(baseline))
    assert_one_line_error(ran, 2, "is another configuration: input_size 32 there, 48 here")
    assert "--compare-any-config" in ran.stderr
    ran = run("--no-files", "--image-size", "48", "--compare", str(baseline),
              "--compare-any-config")
    assert ran.returncode in (0, 5), ran.stderr
    assert "--compare-any-config" in ran.stdout and "input_size 32 there, 48 here" in ran.stdout
    assert baseline.read_bytes() == before


@pytest.mark.parametrize("field, value", [
    ("device_name", "NVIDIA H200"), ("precision", "amp-bf16"), ("nhwc", True),
    ("per_device_batch", 64), ("world_size", 8), ("model", "resnet50")])
def test_the_gate_refuses_each_identity_field(field, value):
    from microbench.settings import identity
    from microbench.store import baseline
    from microbench.platform.errors import UsageError
    ours = {name: None for name in identity.GATE}
    document = {"config": {}, "model": {}, "env": {}}
    theirs = identity.of_document(document)
    ours.update({name: theirs.get(name) for name in identity.GATE})
    ours[field] = value
    with pytest.raises(UsageError, match=f"another configuration: {field} "):
        baseline.check_same_configuration(ours, document, "b.json")
    assert baseline.check_same_configuration(ours, document, "b.json", any_config=True)


def test_the_gate_reads_both_sides_through_the_reports_model():
    """--compare reads the baseline as microbench-report does (store.entry): a language model's
    trials in tokens/s on both sides, so the verdict's ratio is the items' ratio, and the
    table's throughput row keeps the older tool's items/s."""
    from microbench.measure import stats
    from microbench.store.baseline import metrics, trial_values
    from microbench.store.entry import entries_of
    document = json.loads((HISTORY / "v2_1e1a09d_generate.json").read_text())
    entry = entries_of(document, "base.json")[0]
    tokens_per_item = document["Throughput [tokens/sec]"] / document["Throughput [img/sec]"]
    assert trial_values(entry) == pytest.approx((document["Throughput [tokens/sec]"],))
    assert metrics(entry)["Throughput [img/sec]"] == document["Throughput [img/sec]"]
    slower = entries_of({**document, "trials": {"values": [9.0, 10.0, 11.0]}}, "run.json")[0]
    faster = entries_of({**document, "trials": {"values": [18.0, 20.0, 22.0]}}, "run.json")[0]
    assert trial_values(slower) == pytest.approx(tuple(v * tokens_per_item for v in (9, 10, 11)))
    assert stats.gate(trial_values(slower), trial_values(faster), 5.0).ratio == \
        pytest.approx(stats.gate((9.0, 10.0, 11.0), (18.0, 20.0, 22.0), 5.0).ratio)


# ---------------------------------------------------------------- one trial a side: its noise

def _one_trial(throughput: float, cv: float) -> dict:
    """A one-trial result at ``throughput`` whose iterations vary by ``cv``."""
    document = nightly_result(throughput, 0)
    document["timing"]["stats"]["cv"] = cv
    return document


def _gate(baseline: dict, current: dict) -> tuple[int, str, str]:
    """--compare's gate on two documents, in-process, as the command runs it: its exit code
    (Regression: 5) and what it printed."""
    from microbench.output import compare
    from microbench.platform import process
    from microbench.store.baseline import Gate
    gate, out, err = Gate("base.json", 5.0, baseline), io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        code = process.command(lambda: compare.compare(current, gate, out,
                                                       compare.judge(current, gate)) or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("ratio", [1.116, 0.711])
def test_a_one_trial_ratio_inside_the_iteration_noise_passes_the_gate(ratio):
    """Issue 64: CVs of 32% and 75%, 11.6% faster or 28.9% slower: within noise, exit 0."""
    code, out, err = _gate(_one_trial(100.0, 0.32), _one_trial(100.0 * ratio, 0.75))
    assert code == 0, err
    [gate_line] = [line for line in out.splitlines() if "Gate:" in line]
    assert ": within noise (one trial on a side: the ratio lies inside 0.236-4.243" in gate_line
    assert "faster" not in gate_line and "slower" not in gate_line
    assert "Gate passed" in out


def test_the_same_ratio_with_tight_iterations_still_fails_the_gate():
    code, out, err = _gate(_one_trial(100.0, 0.01), _one_trial(71.1, 0.01))
    assert code == 5 and "throughput regressed 28.9%" in err
    assert "a point ratio, noise not tested; beyond their iteration noise 0.973-1.028" in err
    [gate_line] = [line for line in out.splitlines() if "Gate:" in line]
    assert ": slower (one trial on a side: the point ratio, noise not tested), beyond " \
           "0.973-1.028" in gate_line


def test_fail_if_slower_passes_a_one_trial_run_inside_its_noise(run, tmp_path):
    """Through the command line: the baseline 30% faster, but its iterations varied by 75%."""
    base = tmp_path / "base"
    assert run("--output-dir", str(base), "--output-file", "b").returncode == 0
    baseline = base / "b.json"
    document = stored(baseline)
    document["Throughput [img/sec]"] *= 1.3
    document["timing"]["stats"]["cv"] = 0.75
    baseline.write_text(json.dumps(document))
    ran = run("--no-files", "--compare", str(baseline), "--fail-if", "slower")
    assert ran.returncode == 0, ran.stderr
    assert ": within noise (one trial on a side" in ran.stdout and "Gate passed" in ran.stdout
    document["timing"]["stats"]["cv"] = 0.001
    baseline.write_text(json.dumps(document))
    ran = run("--no-files", "--compare", str(baseline), "--fail-if", "slower")
    assert_one_line_error(ran, 5, "throughput regressed")


@pytest.mark.parametrize("before, value, shown", [
    (100.0, 0.0, "-100.0%"),        # a metric gone to zero is all of it gone, as before
    (100.0, 110.0, "+10.0%"),
    (2.3e-308, 1e15, "n/a"),        # beyond any ratio of two runs (issue 65)
    (0.0, 5.0, "n/a"),
])
def test_a_metrics_change_is_its_ratio_less_one_within_the_range_of_ratios(before, value,
                                                                            shown):
    from microbench.output import compare
    assert compare._change(False, before, value) == shown
