"""Issue 46, the fourth hostile round: each class of failure held as a class.

Result files are shared between people and machines, so every field of every file the tools
read is untrusted: its numbers (range and finiteness, class 1), its strings (controls that reach
a terminal, a CSV, a page: class 2; file names an A/B summary points at: class 3; strings pasted
into a suggested shell command: class 4), and an A/B summary's own figures (class 5). Then the
names a run claims (class 6), the edges of the generate loop (7), the unit an interval and an A/B
are in (8), a library or the system refusing (9), a stop during compilation (10), and the
smaller ones (11: repeated sweep rows, "vs BF16" on rows measured against another precision,
abbreviations inside --ab). Property tests (hypothesis) where a class is about values; the CLI
runs in-process except where a process of its own is the point (an import that fails, signals).
"""
from __future__ import annotations

import contextlib
import copy
import importlib.abc
import importlib.util
import json
import multiprocessing
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from conftest import (SCRIPT, TINY, assert_one_line_error, run_cli, run_main, spawn,
                      stored_result)
from microbench.measure import stats
from microbench.platform import process, safe_text, writing
from microbench.platform.errors import MissingEnvironment, UsageError
from microbench.store import schema

RUN = ["--network", "resnet18", *TINY, "--device", "cpu", "--mode", "inference"]
FAST = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def report_of(capfd, *argv):
    from microbench.report import command
    return run_main(capfd, *argv, main=command.main)


def result_named(name: str, second: int = 0, config: dict | None = None, **keys) -> dict:
    """A schema-valid result whose network is ``name`` (a time of its own: two are two)."""
    document = stored_result({"network": name, **(config or {})}, **keys)
    document["Name"] = name
    document["model"] = {**document["model"], "name": name}
    document["env"] = {**document["env"], "time_utc": f"2026-11-24T20:35:{second:02d}+00:00"}
    return document


def ab_summary(a=(100.0, 110.0, 105.0), b=(200.0, 190.0, 210.0), flags_b="--nhwc",
               a_result="A.json", b_result="B.json", unit="images/s") -> dict:
    """An A/B summary as --ab writes it (drivers/ab.document), from per-round values."""
    result = stats.paired_ab(list(a), list(b))
    return writing.json_safe({"schema_version": schema.SCHEMA_VERSION, "ab": {
        **result.to_dict(), "flags_b": flags_b, "a_result": a_result, "b_result": b_result,
        "a_trials": {**stats.TrialStats(tuple(a)).to_dict(), "unit": unit},
        "b_trials": {**stats.TrialStats(tuple(b)).to_dict(), "unit": unit}}})


def write_ab(folder: Path, summary: dict | None = None, sides: bool = True) -> Path:
    """An A/B summary with its two sides' results beside it; the summary's path."""
    folder.mkdir(parents=True, exist_ok=True)
    summary = summary or ab_summary()
    if sides:
        (folder / "A.json").write_text(json.dumps(result_named("resnet18", 1)))
        (folder / "B.json").write_text(json.dumps(result_named("resnet18", 2,
                                                               config={"nhwc": True})))
    path = folder / "ab_A_vs_B.json"
    path.write_text(json.dumps(summary))
    return path


# ================================================================ 1. numbers out of range

# Places a number sits in a result: headlines, settings, samples, figures nobody checks by name.
NUMBER_PLACES = (("Time per mini-batch",), ("config", "iterations"), ("config", "seed"),
                 ("Mini batch size [img]",), ("GPUs",), ("timing", "stats", "median_ms"),
                 ("memory", "peak_allocated_mb"), ("an_unknown_key",))
HUGE = st.one_of(st.integers(min_value=2**64, max_value=10**400),
                 st.integers(min_value=-10**400, max_value=-2**64))


def placed(document: dict, where: tuple[str, ...], value) -> dict:
    document = copy.deepcopy(document)
    target = document
    for key in where[:-1]:
        target = target.setdefault(key, {})
    target[where[-1]] = value
    return document


@FAST
@given(value=HUGE, where=st.sampled_from(NUMBER_PLACES))
def test_an_integer_beyond_64_bits_anywhere_is_refused_with_one_line(value, where):
    document = placed(stored_result(), where, value)
    with pytest.raises(UsageError) as refused:
        schema.validate_result(document, "r.json")
    message = str(refused.value)          # out of range, or below a minimum the schema sets
    assert "\n" not in message and "r.json" in message and len(message) < 400


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.one_of(HUGE, st.just(float("inf")), st.just(float("nan"))),
       where=st.sampled_from(NUMBER_PLACES))
def test_the_report_skips_a_file_with_a_bad_number_and_reads_the_others(value, where, tmp_path,
                                                                        capfd):
    folder = tmp_path / f"r{abs(hash((str(value)[:20], where))) % 10**9}"
    folder.mkdir()
    (folder / "bad.json").write_text(json.dumps(placed(result_named("badnet"), where, value)))
    (folder / "good.json").write_text(json.dumps(result_named("goodnet")))
    for format_ in ("text", "csv"):
        ran = report_of(capfd, str(folder), "--format", format_)
        assert ran.returncode == 0, ran.stderr
        assert "goodnet" in ran.stdout and "badnet" not in ran.stdout
        assert "Traceback" not in ran.stderr
        assert [line for line in ran.stderr.splitlines() if "bad.json" in line]


@pytest.mark.parametrize("flag", ["--compare", "--rerun", "--scaling-baseline"])
def test_a_baseline_with_a_huge_integer_is_refused_before_the_run(flag, tmp_path, capfd):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(placed(stored_result(), ("config", "iterations"), 10**400)))
    ran = run_main(capfd, *RUN, "--no-files", flag, str(bad))
    assert_one_line_error(ran, 2, "out of range")


# ================================================================ 2. strings reach no output raw

CONTROLS = st.sampled_from(["\x1b]0;T\x07", "\x1b[2J", "\x9b2J", "\x7f", "\u202e", "\r",
                            "\x1b]52;c;aGk=\x07", "\x00", "\x08", "\u2028"])
HOSTILE_TEXT = st.lists(st.one_of(CONTROLS, st.text(alphabet="ab=+-@|<&", max_size=3)),
                        min_size=1, max_size=5).map("".join)
# What a terminal, a spreadsheet's CSV reader or a browser acts on: C0 (a line's own end
# apart), C1, DEL, the line and paragraph separators and the bidirectional controls.
RAW_CONTROL = re.compile("[\x00-\x09\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e"
                         "\u2066-\u2069]")


def assert_no_raw_controls(text: str) -> None:
    for line in text.replace("\r\n", "\n").split("\n"):
        assert not RAW_CONTROL.search(line), repr(line)


@pytest.mark.slow
@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=HOSTILE_TEXT, key=HOSTILE_TEXT)
def test_no_string_of_a_file_reaches_any_report_output_raw(name, key, tmp_path, capfd):
    folder = tmp_path / f"r{abs(hash((name, key))) % 10**9}"
    folder.mkdir()
    document = result_named(f"net{name}")
    document["env"] = {**document["env"], "device_name": f"gpu{name}", "host": name}
    document["config"][f"x{key}"] = f"v{name}"            # a setting this version does not know
    (folder / "a.json").write_text(json.dumps(document))
    (folder / "b.json").write_text(json.dumps(result_named("resnet18", 3)))
    page = folder.parent / f"{folder.name}.html"
    for format_ in ("text", "csv", "markdown", "json"):
        argv = [str(folder), "--format", format_] + (["--html", str(page)]
                                                      if format_ == "text" else [])
        ran = report_of(capfd, *argv)
        assert ran.returncode == 0, ran.stderr
        assert_no_raw_controls(ran.stdout)
        assert_no_raw_controls(ran.stderr)
    assert_no_raw_controls(page.read_text())


@settings(max_examples=3, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=HOSTILE_TEXT)
def test_rerun_notes_carry_no_control_of_the_file(name, tmp_path, capfd):
    folder = tmp_path / f"r{abs(hash(name)) % 10**9}"
    summary = ab_summary(flags_b=f"--nhwc {shlex.quote(name)}")
    path = write_ab(folder, summary)
    document = json.loads((folder / "A.json").read_text())
    document["config"][f"unknown{name}"] = 1         # a note names settings it leaves out
    (folder / "A.json").write_text(json.dumps(document))
    ran = run_main(capfd, "--rerun", str(path), "--no-files", "--iterations", "1",
                   "--warmup", "0", "--image-size", "32", "--batch-size", "2", "--mode",
                   "inference")
    assert ran.returncode == 0, ran.stderr
    assert "Note: --rerun" in ran.stdout
    assert_no_raw_controls(ran.stdout)
    assert_no_raw_controls(ran.stderr)


@given(text=st.text(max_size=30))
def test_each_escape_of_safe_text_leaves_no_control(text):
    for escaped in (safe_text.terminal(text), safe_text.csv_cell(text),
                    safe_text.markdown(text), safe_text.html(text)):
        assert_no_raw_controls(escaped)
    assert_no_raw_controls(json.dumps(safe_text.neutralised({text: [text, {"k": text}]})))


# ================================================================ 3. an A/B summary's sides

@pytest.mark.parametrize("form", ["absolute", "parent", "deeper-parent", "subfolder"])
def test_a_summarys_sides_are_read_only_beside_it_by_base_name(form, tmp_path, capfd):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.json").write_text(json.dumps(result_named("secretnet", 9)))
    named = {"absolute": str(elsewhere / "secret.json"), "parent": "../elsewhere/secret.json",
             "deeper-parent": "../../../../elsewhere/secret.json",
             "subfolder": "elsewhere/secret.json"}[form]
    folder = tmp_path / "shared"
    path = write_ab(folder, ab_summary(a_result=named), sides=False)
    (folder / "B.json").write_text(json.dumps(result_named("resnet18", 2)))
    ran = report_of(capfd, str(path))
    assert ran.returncode == 0, ran.stderr
    assert "secretnet" not in ran.stdout + ran.stderr
    ran = run_main(capfd, "--rerun", str(path), "--no-files")
    assert ran.returncode != 0 or "secretnet" not in ran.stdout
    assert "secretnet" not in ran.stderr and "Traceback" not in ran.stderr


# ================================================================ 4. suggested commands

@settings(max_examples=30, deadline=None)
@given(flags_b=st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1,
                       max_size=40))
def test_the_command_rerun_suggests_keeps_every_file_string_one_word(flags_b, tmp_path_factory):
    from microbench.plan import rerun
    assume(flags_b.strip())
    folder = tmp_path_factory.mktemp("ab'$(touch PWNED) ;")
    path = write_ab(folder, ab_summary(flags_b=flags_b))
    _, notes = rerun.flags_of(str(path))
    side_a, side_b = str(folder / "A.json"), str(folder / "B.json")
    both = f"--rerun {shlex.quote(side_a)} --ab {shlex.quote(flags_b)}"
    assert notes[0].endswith(f"; both again: {both}")
    assert f"--rerun {shlex.quote(side_b)}; both again" in notes[0]
    # Pasted into a shell, each is the words it names, whatever the file held.
    assert shlex.split(both) == ["--rerun", side_a, "--ab", flags_b]
    assert shlex.split(f"--rerun {shlex.quote(side_b)}") == ["--rerun", side_b]


# ================================================================ 5. an A/B summary's figures

ROUNDS = st.lists(st.floats(min_value=1e-3, max_value=1e9), min_size=1, max_size=6)


@FAST
@given(a=ROUNDS, data=st.data())
def test_a_summary_that_agrees_with_itself_is_read_and_any_contradiction_is_refused(a, data):
    b = data.draw(st.lists(st.floats(min_value=1e-3, max_value=1e9), min_size=len(a),
                           max_size=len(a)))
    summary = ab_summary(a, b)
    schema.validate_result(summary, "ab.json")                 # what --ab writes is read
    ab = summary["ab"]
    change = data.draw(st.sampled_from(["ratio", "ci95", "rounds", "verdict", "a", "b",
                                        "a_trials"]))
    broken = copy.deepcopy(summary)
    if change == "ratio":
        broken["ab"]["ratio"] = ab["ratio"] * data.draw(st.sampled_from([0.5, 2.0, 1e-300]))
    elif change == "ci95":
        broken["ab"]["ci95"] = [1e308, 5e-324] if ab["ci95"] else [0.5, 2.0]
    elif change == "rounds":
        broken["ab"]["rounds"] = ab["rounds"] + 1
    elif change == "verdict":
        broken["ab"]["verdict"] = data.draw(st.sampled_from(
            [v for v in ("faster", "slower", "no difference detected", "same within 5%")
             if v != ab["verdict"]]))
    elif change in ("a", "b"):
        broken["ab"][change] = [value * 3 for value in ab[change]]
    else:
        broken["ab"]["a_trials"]["values"] = [value * 3 for value in ab["a"]]
    with pytest.raises(UsageError, match="contradicts itself"):
        schema.validate_result(broken, "ab.json")


@pytest.mark.parametrize("a, b", [([1e-300] * 3, [1e300] * 3), ([1e300] * 2, [1e-300] * 2)])
def test_rounds_whose_ratio_leaves_the_floats_are_refused_not_infinitely_faster(a, b):
    summary = ab_summary()                   # its figures as a stranger wrote them, finite
    summary["ab"].update(a=a, b=b, rounds=len(a), ratio=1e300, ci95=[1e299, 1e301])
    with pytest.raises(UsageError, match="contradicts itself.*out of range"):
        schema.validate_result(summary, "ab.json")


def test_a_crafted_summary_is_skipped_by_the_report_with_one_line(tmp_path, capfd):
    summary = ab_summary()
    summary["ab"].update(ratio=5e-324, ci95=[1e308, -5])
    path = write_ab(tmp_path / "r", summary)
    ran = report_of(capfd, str(path))
    assert ran.returncode == 2 and "contradicts itself" in ran.stderr
    assert "slower" not in ran.stdout and "Traceback" not in ran.stderr


# ================================================================ 6. names claimed

def _claim_at_once(path: str, barrier, results) -> None:
    barrier.wait()
    results.put((os.getpid(), writing.claim(path)))


def test_of_processes_claiming_one_name_at_once_exactly_one_gets_it(tmp_path):
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(4), context.Queue()
    path = str(tmp_path / "out" / "resnet18_inference_fp32_b2.json")
    workers = [context.Process(target=_claim_at_once, args=(path, barrier, results))
               for _ in range(4)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=60)[1] for _ in workers]
    for worker in workers:
        worker.join(60)
    assert sorted(outcomes) == [False, False, False, True]


def test_a_live_runs_claim_sends_this_run_to_another_name(tmp_path, capfd):
    out = tmp_path / "out"
    out.mkdir()
    # Another run of this host, alive (this test's parent), holds the default name.
    (out / ".resnet18_inference_fp32_b2.json.claim").write_text(
        f"{os.getppid()} {writing._HOST}")
    ran = run_main(capfd, *RUN, "--output-dir", str(out))
    assert ran.returncode == 0, ran.stderr
    assert (out / "resnet18_inference_fp32_b2-2.json").exists()
    assert not (out / "resnet18_inference_fp32_b2.json").exists()
    assert "claimed by another run" in ran.stdout
    assert not list(out.glob(".resnet18_inference_fp32_b2-2.json.claim"))   # given back


def test_a_claim_of_a_dead_process_is_taken_over_and_claims_are_given_back(tmp_path, capfd):
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    (out / ".resnet18_inference_fp32_b2.json.claim").write_text(f"{dead} {writing._HOST}")
    ran = run_main(capfd, *RUN, "--output-dir", str(out))
    assert ran.returncode == 0, ran.stderr
    assert (out / "resnet18_inference_fp32_b2.json").exists()
    assert not [p for p in os.listdir(out) if p.endswith(".claim")]


def test_new_names_never_replace_and_are_claimed(tmp_path):
    first = writing.claim_new(str(tmp_path / "sweep_20261126T000000Z.json"))
    second = writing.claim_new(str(tmp_path / "sweep_20261126T000000Z.json"))
    assert first != second and second.endswith("-2.json")
    writing.release_claims()
    assert not list(tmp_path.glob(".*.claim"))


def test_an_ab_summary_is_named_by_both_sides():
    from types import SimpleNamespace
    from microbench.drivers import ab

    def side(name):
        return SimpleNamespace(json_path=f"/r/{name}.json", result_name=name)
    a = side("resnet18_inference_fp32_b2")
    first = ab.summary_path(a, side("resnet18_inference_fp32_b2-2"))
    other_b = ab.summary_path(a, side("resnet18_inference_fp32_b4"))
    assert first != other_b and os.path.dirname(first) == "/r"
    assert first == ab.summary_path(a, side("resnet18_inference_fp32_b2-2"))   # refreshed
    # Two names near NAME_MAX each: the summary's name still fits, and still tells Bs apart.
    long_a = side("a" * 200 + "\u00e9" * 20)
    names = {os.path.basename(ab.summary_path(long_a, side(f"{'b' * 240}{tail}")))
             for tail in ("x", "y", "\u00e9")}
    assert len(names) == 3 and all(len(name.encode()) <= ab.NAME_MAX for name in names)
    assert all(name.startswith("ab_aaa") and name.endswith(".json") for name in names)
    for name in names:
        name.encode().decode()                       # never cut inside a character


@pytest.mark.parametrize("flag", ["--html", "--plot"])
def test_the_report_never_writes_over_a_file_it_reads(flag, tmp_path, capfd):
    pytest.importorskip("matplotlib")
    folder = tmp_path / "r"
    folder.mkdir()
    for index in range(2):
        (folder / f"{index}.json").write_text(json.dumps(result_named(f"n{index}", index)))
    target = folder / "0.json"
    argv = [str(folder), flag, str(target)]
    if flag == "--plot":              # a chart's suffix: a result named as a file of its own
        target = target.rename(folder / "0.svg")
        argv = [str(target), str(folder / "1.json"), flag, str(target)]
    before = target.read_bytes()
    ran = report_of(capfd, *argv)
    assert_one_line_error(ran, 2, "is one of the result files this report reads")
    assert target.read_bytes() == before


# ================================================================ 7. the generate loop's edges

@pytest.mark.parametrize("prompt, generated", [(1, 2), (1, 3), (4, 2), (2, 1), (1, 1)])
def test_every_generate_edge_runs_and_writes_or_is_refused_first(prompt, generated, tmp_path,
                                                                 capfd):
    ran = run_main(capfd, "--network", "llama_tiny", "--mode", "generate", "--device", "cpu",
                   "--batch-size", "1", "--iterations", "1", "--warmup", "1",
                   "--prompt-len", str(prompt), "--gen-len", str(generated),
                   "--output-dir", str(tmp_path / "out"))
    if ran.returncode == 0:
        [result] = (tmp_path / "out").glob("*.json")
        assert json.loads(result.read_text())["generation"]["gen_len"] == generated
    else:
        assert_one_line_error(ran, 2, "--gen-len")
        assert "Building" not in ran.stdout and not (tmp_path / "out").exists()
    assert generated >= 2 or ran.returncode == 2


# ================================================================ 8. units

def test_a_language_models_interval_is_in_its_headlines_unit(capfd, steady_clock):
    ran = run_main(capfd, "--network", "llama_tiny", "--seq-len", "16", "--device", "cpu",
                   "--mode", "inference", "--batch-size", "2", "--iterations", "2",
                   "--warmup", "1", "--repeat", "2", "--trials", "in-process", "--no-files")
    assert ran.returncode == 0, ran.stderr
    headline = next(line for line in ran.stdout.splitlines()
                    if line.startswith("llama_tiny inference:"))
    found = re.search(r": ([\d,.]+) tokens/s .* 95% CI ([\d,.]+) to ([\d,.]+)", headline)
    rate, low, high = (float(text.replace(",", "")) for text in found.groups())
    assert low <= rate <= high, headline


@pytest.mark.parametrize("b", ["--network llama_tiny --seq-len 16", "--seq-len 8"])
def test_an_ab_of_sides_in_different_units_is_refused_before_building(b, capfd):
    base = (["--network", "llama_tiny", "--seq-len", "16"] if b == "--seq-len 8" else
            ["--network", "resnet18", "--batch-size", "2"])
    ran = run_main(capfd, *base, "--device", "cpu", "--iterations", "1", "--warmup", "1",
                   "--no-files", "--ab", b)
    assert_one_line_error(ran, 2, "a ratio of different units")
    assert "Building" not in ran.stdout


def test_a_summary_whose_sides_have_different_units_is_refused():
    with pytest.raises(UsageError, match="different units"):
        summary = ab_summary()
        summary["ab"]["b_trials"]["unit"] = "sequences/s"
        schema.validate_result(summary, "ab.json")


# ================================================================ 9. a library or the system refuses

def test_model_kwargs_that_transformers_refuses_are_one_line_exit_2(capfd):
    pytest.importorskip("transformers")
    small = ["num_hidden_layers=1", "intermediate_size=64", "vocab_size=128"]
    for kwargs in (["hidden_size=65", "num_attention_heads=2"],
                   ["hidden_size=64", "num_attention_heads=4", "num_key_value_heads=3"]):
        ran = run_main(capfd, "--network", "hf:llama", "--model-kwargs", *kwargs, *small,
                       "--mode", "inference", "--batch-size", "1", "--seq-len", "8",
                       "--iterations", "1", "--warmup", "1", "--no-files", "--device", "cpu")
        assert_one_line_error(ran, 2, "transformers")


class FailingImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Importing ``name`` (or a module of it) raises ``error``: a broken install. The package is
    found (as an installed one is) and fails when it is loaded, as a C++ extension that cannot
    be opened does; a missing package (ModuleNotFoundError) is not even found."""

    def __init__(self, name: str, error: BaseException):
        self.name, self.error = name, error

    def find_spec(self, fullname, path=None, target=None):
        if not (fullname == self.name or fullname.startswith(self.name + ".")):
            return None
        if isinstance(self.error, ModuleNotFoundError):
            raise self.error
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise self.error


def broken(monkeypatch, name: str, error: BaseException) -> None:
    for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        monkeypatch.delitem(sys.modules, loaded)
    monkeypatch.setattr(sys, "meta_path", [FailingImport(name, error), *sys.meta_path])


@pytest.mark.slow
@pytest.mark.parametrize("error", [OSError("libtorchao.so: cannot open shared object file"),
                                   RuntimeError("torchao built for another torch"),
                                   AttributeError("module 'torch' has no attribute 'x'"),
                                   ModuleNotFoundError("No module named 'torchao'",
                                                       name="torchao")])
def test_an_optional_library_that_fails_to_import_is_one_line_exit_4(error, monkeypatch, capfd):
    broken(monkeypatch, "torchao", error)
    ran = run_main(capfd, "--network", "llama_tiny", "--seq-len", "16", "--mode", "inference",
                   "--quantize", "int8wo", "--device", "cpu", "--no-files")
    assert_one_line_error(ran, 4, "torchao")


def test_a_plot_library_that_fails_to_import_is_one_line_exit_4(monkeypatch, tmp_path, capfd):
    broken(monkeypatch, "matplotlib", OSError("libfreetype.so.6: cannot open shared object"))
    (tmp_path / "a.json").write_text(json.dumps(result_named("n")))
    ran = report_of(capfd, str(tmp_path / "a.json"), "--plot", str(tmp_path / "c.png"))
    assert_one_line_error(ran, 4, "matplotlib")


def test_torch_refusing_its_environment_at_import_is_one_line_exit_4():
    ran = run_cli("--network", "resnet18", "--no-files", env={"TORCH_LOGS": "nonsense"},
                  timeout=120)
    assert_one_line_error(ran, 4, "TORCH_LOGS=nonsense")


THREAD_LIMIT = RuntimeError("can't start new thread")


@pytest.mark.parametrize("error", [
    THREAD_LIMIT,
    RuntimeError("Caught RuntimeError in DataLoader worker process 0.\nOriginal Traceback "
                 "(most recent call last):\n  ...\nRuntimeError: can't start new thread\n"),
    RuntimeError("DataLoader worker failed"),              # its cause is the limit
])
def test_a_thread_or_process_limit_anywhere_is_one_line_exit_4(error, capfd, monkeypatch):
    from microbench.drivers import benchmark

    def run(spec, **kwargs):
        if error.args[0] == "DataLoader worker failed":
            try:
                raise THREAD_LIMIT
            except RuntimeError as limit:
                raise error from limit
        raise error
    monkeypatch.setattr(benchmark, "run", run)
    ran = run_main(capfd, *RUN, "--no-files")
    assert_one_line_error(ran, 4, "could not start")


def test_an_eagain_not_raised_by_a_start_stays_a_bug():
    try:
        raise BlockingIOError(11, "Resource temporarily unavailable")
    except BlockingIOError as error:
        assert process.limit_reached(error) is None


def _replies(worker_main, *arguments) -> list:
    """What a worker's main sends its parent, on a connection that keeps it."""
    sent = []

    class Connection:
        send = sent.append

        def close(self):
            pass
    worker_main(*arguments, Connection())
    return sent


def _meets_the_limit(*args, **kwargs):
    raise THREAD_LIMIT


def test_a_trial_worker_that_meets_the_limit_reports_it_as_one_line(monkeypatch):
    from microbench.drivers import trials
    monkeypatch.setattr(trials, "_measure_here", _meets_the_limit)
    [(kind, error)] = _replies(trials._worker_main, None, None, None)
    assert kind == "error" and isinstance(error, MissingEnvironment)


def test_a_node_check_process_that_meets_the_limit_exits_4_as_the_others_do(monkeypatch):
    """The node check's processes reply as a trial's worker does (platform/workers.py): a
    thread limit is exit 4 there too, its line prefixed with the rank (it was 1)."""
    from microbench.node import check
    monkeypatch.setattr(check, "_measure_rank", _meets_the_limit)
    [(kind, error)] = _replies(check._worker_main, 1, 2, 0, None)
    assert kind == "error" and error.exit_code == 4
    assert str(error).startswith("[rank 1] a thread or process could not start")


# ================================================================ 10. a stop ends the process

STUCK = textwrap.dedent("""
    import atexit, signal, subprocess, sys, time
    from microbench.platform import process

    def main():
        process.STOP_GRACE_S, process.STOP_DEADLINE_S = 0.5, 2.0
        # A child that ignores SIGTERM, and an exit handler that waits for it without end:
        # inductor's compile-worker sidecar, busy compiling, and SubprocPool.shutdown.
        child = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                                  "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                  "print('child', flush=True); time.sleep(600)"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        child.stdout.readline()                   # its SIGTERM ignored from here on
        atexit.register(child.wait)
        if sys.argv[1] == "native":
            # The main thread in native code that no signal interrupts: Python's handler
            # cannot run until it returns.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        def run():
            print("ready", flush=True)        # inside the command: its stop handling is on
            time.sleep(600)
        return process.command(run)
""")


@pytest.mark.parametrize("where", ["python", "native"])
@pytest.mark.parametrize("signal_number, code, line", [
    (signal.SIGTERM, 143, "error: terminated (SIGTERM)"),
    (signal.SIGINT, 130, "error: interrupted")])
def test_a_stop_ends_the_process_and_everything_below_it_in_seconds(where, signal_number, code,
                                                                    line, tmp_path):
    if where == "native" and signal_number == signal.SIGINT:
        pytest.skip("the same path as SIGTERM")
    (tmp_path / "stuck_main.py").write_text(STUCK)
    child = spawn([sys.executable, "-c", "import sys; from microbench.platform import process; "
                   "sys.exit(process.entry('stuck_main'))", where],
                  cwd=SCRIPT.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                  env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{SCRIPT.parent}"})
    assert child.stdout.readline() == "ready\n"
    below = process._descendants(child.pid)
    assert below
    started = time.monotonic()
    child.send_signal(signal_number)
    _, err = child.communicate(timeout=60)
    assert child.returncode == code and time.monotonic() - started < 15
    assert err.strip().splitlines() == [line]
    assert not [pid for pid in below if process._running(pid)]


ORPHANING = textwrap.dedent("""
    import subprocess, time
    from microbench.platform import process

    def main():
        # A grandchild whose parent has ended (g++ killed while its cc1plus compiles on).
        orphan = subprocess.run(["sh", "-c", "sleep 600 </dev/null >/dev/null 2>&1 & echo $!"],
                                capture_output=True, text=True, check=True).stdout.strip()
        def run():
            print(orphan, flush=True)
            time.sleep(600)
        return process.command(run)
""")


def test_a_stop_also_ends_a_process_whose_parent_below_the_run_has_ended(tmp_path):
    (tmp_path / "orphaning_main.py").write_text(ORPHANING)
    child = spawn([sys.executable, "-c", "import sys; from microbench.platform import process; "
                   "sys.exit(process.entry('orphaning_main'))"],
                  cwd=SCRIPT.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                  env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{SCRIPT.parent}"})
    orphan = int(child.stdout.readline())
    try:
        assert orphan in process._descendants(child.pid)
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
        assert child.returncode == 143 and err.strip() == "error: terminated (SIGTERM)"
        assert not process._running(orphan)
    finally:
        with contextlib.suppress(OSError):
            os.kill(orphan, signal.SIGKILL)


@pytest.mark.slow
def test_sigterm_while_inductor_compiles_ends_the_run_and_its_compilers(tmp_path):
    """On the CPU inductor compiles each kernel with a C++ compiler in a process of its own:
    a SIGTERM then ends the run within seconds, with its one line, and no compiler left."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    child = spawn([sys.executable, str(SCRIPT), "--network", "resnet18", *TINY, "--device",
                   "cpu", "--mode", "inference", "--compile", "--no-files"],
                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, compiling = time.monotonic() + 240, []
    while not compiling and time.monotonic() < deadline and child.poll() is None:
        below = process._descendants(child.pid)
        compiling = [pid for pid in below if _command(pid) in ("g++", "cc1plus", "c++", "gcc")]
        time.sleep(0.05)
    if not compiling:
        child.kill()
        pytest.skip("no compiler process seen (a warm cache, or no C++ compiler)")
    started = time.monotonic()
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 143 and time.monotonic() - started < 15, err[-2000:]
    assert err.strip().splitlines()[-1] == "error: terminated (SIGTERM)"
    assert "Traceback" not in err
    assert not [pid for pid in below if process._running(pid)]


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip()
    except OSError:
        return ""


# ================================================================ 11. the smaller ones

@pytest.mark.parametrize("argv", [
    ["--batch-size", "2,2"], ["--network", "resnet18,resnet18"],
    ["--precision", "fp32,fp32"], ["--mode", "inference,inference"],
    ["--network", "resnext50,resnext50_32x4d"],            # one model, by alias and by name
    ["--batch-size", "2,4,2"]])
def test_a_sweep_that_names_one_configuration_twice_is_refused_first(argv, capfd):
    base = ["--network", "resnet18", "--image-size", "32", "--iterations", "1", "--warmup", "1",
            "--device", "cpu", "--batch-size", "2", "--no-files", "--mode", "inference"]
    ran = run_main(capfd, *base, *argv)
    assert_one_line_error(ran, 2, "lists one configuration twice")
    assert "Building" not in ran.stdout


def _flag_prefixes():
    from microbench.plan.cli import build_parser
    flags = [flag for flag in build_parser()._option_string_actions if flag.startswith("--")]
    return [(flag, flag[:length]) for flag in flags for length in range(3, len(flag))
            if flag[:length] not in flags]


@FAST
@given(pair=st.sampled_from(_flag_prefixes()))
def test_no_abbreviation_is_taken_inside_ab(pair):
    from microbench.plan import cli
    _, prefix = pair
    args = cli.parse_args([*RUN, "--no-files", "--ab", f"{prefix} 4"])
    with pytest.raises(UsageError, match="abbreviations are not taken inside --ab"):
        cli.to_plan(args)


def test_accuracy_labels_name_the_reference_each_row_was_measured_against():
    from microbench.output import sweep_table as table
    from microbench.store.entry import (Entry, MODEL, accuracy_reference,
                                        is_accuracy_reference)

    def row(precision, reference="", kind="logits"):
        return Entry(MODEL, "f", {"precision": precision},
                     {"throughput": 10.0, "accuracy": 0.004}, "tokens/s",
                     accuracy_kind=kind if reference else "", accuracy_reference=reference)
    fp16_quantized, bf16_quantized = row("fp16", "FP16"), row("bf16", "BF16")
    fp8 = row("fp8", "AMP-BF16", "loss")
    assert accuracy_reference([fp16_quantized, row("fp16")]) == "FP16"
    assert accuracy_reference([bf16_quantized, fp8, row("bf16")]) == "BF16"
    assert accuracy_reference([fp16_quantized, bf16_quantized]) is None
    assert is_accuracy_reference(row("bf16"), "BF16")
    assert not is_accuracy_reference(row("fp16"), "BF16")      # no point at 0 "vs BF16"
    assert table.accuracy_cell(fp16_quantized, named_in_heading=False).endswith("vs FP16")
    rows = [type("Row", (), {"entry": e, "spec": None, "status": "ok",
                             "label": lambda self: "row"})() for e in (fp16_quantized,
                                                                     row("fp16"))]
    columns, _ = table.comparison_cells(rows)
    assert columns[-1].heading == "accuracy vs FP16"


def test_a_report_of_fp16_rows_does_not_say_vs_bf16(tmp_path, capfd):
    document = result_named("llama_tiny")
    document["precision"] = {**document.get("precision", {}), "name": "fp16"}
    document["accuracy"] = {"kind": "logits", "reference": "FP16", "relative_error": 0.01,
                            "top1_agreement": 0.99, "positions": 64}
    (tmp_path / "q.json").write_text(json.dumps(document))
    ran = report_of(capfd, str(tmp_path / "q.json"))
    assert ran.returncode == 0, ran.stderr
    assert "vs FP16" in ran.stdout and "BF16" not in ran.stdout

