"""Result files are strangers' files (issue 38): control characters, spreadsheet formulas and
markdown in their names, numbers that are not finite or nest 900 deep, text matplotlib would
interpret, and a report folder with bad entries; each read safely or skipped with one line.
Then any number anywhere in a file range-checked (an integer beyond 64 bits: issue 46) and every
figure by its nature (a rate, a time, a share: issue 57), wherever it is read; no string of a
file reaching any output raw (the report's formats and page, --rerun's notes: issue 46); and the
report never writing over a file it reads.

(Part of the hostile-input tests, split from one file by what is attacked.)"""
from __future__ import annotations

import copy
import csv
import errno
import io
import json
import os
import re
import shlex
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from conftest import HISTORY, assert_one_line_error, run_main, stored_result
from microbench.platform import safe_text
from microbench.platform.errors import UsageError
from microbench.store import collection, figures, ranges, schema, stored
from microbench.output import files
from support.hostile import (FAST, RUN, SUBNORMAL, ab_summary, assert_disk_unchanged,
                             bound_socket, hostile_result, report_of, result_named, snapshot,
                             write_ab, write_results)
from support.hostile import no_launcher_environment  # noqa: F401 (autouse: this module's)


# ---------------------------------------------------------------- issue 38: untrusted result files

# What a stranger's result file may carry in its names: OSC 0 (retitle the window), OSC 52
# (write the clipboard), ED (clear the screen), a C1 CSI, DEL, a bidirectional override.
TERMINAL_ATTACKS = ("\x1b]0;owned\x07", "\x1b]52;c;aGk=\x07", "\x1b[2J", "\x9b2J", "\x7f",
                    "\u202e")


def assert_no_controls(text: str) -> None:
    """Nothing a terminal acts on: line breaks and tabs apart, no C0, C1, DEL or bidi control."""
    for line in text.splitlines():
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", line), line


def test_control_characters_from_a_result_file_reach_no_terminal(tmp_path, capfd):
    attack = "".join(TERMINAL_ATTACKS)
    results = write_results(tmp_path / "r", {
        f"a{attack}.json": hostile_result(f"net{attack}", device=f"gpu{attack}"),
        "b.json": hostile_result("resnet18", device="AMD EPYC")})
    (results / f"broken{attack}.json").write_text("{")
    ran = report_of(capfd, str(results))
    assert ran.returncode == 0, ran.stderr
    assert_no_controls(ran.stdout)
    assert_no_controls(ran.stderr)
    assert "\\x1b]52;c;aGk=\\x07" in ran.stdout and "\\u202e" in ran.stdout   # shown, escaped
    assert "broken\\x1b" in ran.stderr                   # the skipped file's line, escaped


def test_an_error_line_naming_a_hostile_path_is_escaped(tmp_path, capfd):
    ran = report_of(capfd, str(tmp_path / "missing\x1b]0;owned\x07.json"))
    assert_one_line_error(ran, 2, "missing\\x1b]0;owned\\x07.json")
    assert_no_controls(ran.stderr)


@pytest.mark.parametrize("name", ["=HYPERLINK(\"http://x\",\"y\")", "+1+1", "-2+3", "@SUM(A1)",
                                  "\tcmd", "\rcmd"])
def test_report_csv_cells_never_start_a_formula(name, tmp_path, capfd):
    results = write_results(tmp_path / "r", {"a.json": hostile_result(name),
                                             "b.json": hostile_result("resnet18")})
    ran = report_of(capfd, str(results), "--format", "csv")
    assert ran.returncode == 0, ran.stderr
    rows = list(csv.DictReader(io.StringIO(ran.stdout)))
    cells = [value for row in rows for value in row.values()]
    assert not [value for value in cells if value[:1] in ("=", "+", "@", "\t", "\r")]
    assert not [value for value in cells if value.startswith("-") and not is_number(value)]
    # A TAB or CR of the file is escaped where the file is read (issue 46: no control leaves
    # the tool), so that cell starts with a backslash, not a formula; the others are guarded.
    shown = safe_text.csv_cell(safe_text.terminal(name))
    assert shown in cells
    assert shown.startswith("'") or (shown.startswith("\\x") and name[:1] in "\t\r")
    assert all(is_number(row["throughput"]) for row in rows)     # numbers stay numbers


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def test_the_runs_own_csv_guards_text_cells_and_keeps_numbers(tmp_path):
    assert [safe_text.csv_cell(text) for text in ("=1+2", "-3.5", "+1e-3", "-x", "12", "")] \
        == ["'=1+2", "-3.5", "+1e-3", "'-x", "12", ""]
    path = tmp_path / "runs.csv"
    files.append_csv({"network": "=cmd|' /C calc'!A0", "Throughput [img/sec]": -1.5}, str(path))
    [row] = list(csv.DictReader(path.open(newline="")))
    assert row["network"] == "'=cmd|' /C calc'!A0"


@pytest.mark.parametrize("name", [
    "resnet\n# Injected heading", "resnet\r\n| a | b |", "resnet\u2028## heading",
    "resnet\u2029x", "![pixel](https://evil.example/p.png)", "[click](javascript:alert(1))",
    "<img src=x onerror=alert(1)>", "a|b", "**bold** `code` ~~gone~~", "\x1b[2J"])
def test_markdown_cells_and_notes_render_as_text(name, tmp_path, capfd):
    results = write_results(tmp_path / "r", {"a.json": hostile_result(name),
                                             "b.json": hostile_result("resnet18")})
    ran = report_of(capfd, str(results), "--format", "markdown")
    assert ran.returncode == 0, ran.stderr
    table = [line for line in ran.stdout.splitlines() if line.startswith("|")]
    assert len(table) == 2 + 2                           # header, rule, two rows: no row broken
    assert len({len(re.findall(r"(?<!\\)\|", line)) for line in table}) == 1
    assert not re.search(r"(?<!\\)!?(?<!\\)\[[^\]]*(?<!\\)\]\(", ran.stdout)   # no link, no image
    assert "<img" not in ran.stdout and "\u2028" not in ran.stdout
    assert not [line for line in ran.stdout.splitlines() if line.lstrip("- ").startswith("#")]
    assert_no_controls(ran.stdout)


# ---------------------------------------------------------------- issue 38: numbers from files

def with_trials(values: list) -> dict:
    """A schema-valid result whose trials block holds ``values``."""
    document = stored_result()
    trials = json.loads((HISTORY / "v2_17ac068_training.json").read_text())[
        "trials"]
    trials.update(trials=len(values), values=values, per_trial=trials["per_trial"] * len(values))
    document["trials"] = trials
    return document


BAD_NUMBERS = {"infinity": float("inf"), "nan": float("nan"), "zero": 0.0,
               "subnormal": 5e-324, "negative": -3.0}


@pytest.mark.parametrize("bad", list(BAD_NUMBERS))
def test_a_baseline_with_a_bad_trial_value_is_refused_before_the_run(bad, tmp_path, capfd):
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(with_trials([20.0, BAD_NUMBERS[bad], 21.0])))
    before = snapshot(tmp_path)
    ran = run_main(capfd, *RUN, "--output-dir", str(tmp_path / "out"), "--compare",
                   str(baseline))
    assert_one_line_error(ran, 2, "$.trials.values[1]")
    assert "Building" not in ran.stdout
    assert_disk_unchanged(tmp_path, before)


@pytest.mark.parametrize("where", ["Throughput [img/sec]", "samples", "per-trial"])
def test_non_finite_headlines_and_samples_are_refused_with_their_path(where, tmp_path, capfd):
    document = stored_result()
    if where == "Throughput [img/sec]":
        document[where], path = float("inf"), "$['Throughput [img/sec]']"
    elif where == "samples":
        document["timing"]["samples_ms"][0], path = float("nan"), "$.timing.samples_ms[0]"
    else:
        document = with_trials([1.0, 2.0])
        document["trials"]["per_trial"] = [{**document["trials"]["per_trial"][0],
                                            "throughput": 1e309}] * 2
        path = "$.trials.per_trial[0].throughput"
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(document))
    ran = run_main(capfd, *RUN, "--output-dir", str(tmp_path / "out"), "--compare",
                   str(baseline))
    assert_one_line_error(ran, 2, "not a finite number")
    assert path.replace("$['Throughput [img/sec]']", "$.Throughput [img/sec]") in ran.stderr


@pytest.mark.parametrize("bad", list(BAD_NUMBERS))
def test_the_report_skips_a_file_with_bad_numbers_and_reads_the_others(bad, tmp_path, capfd):
    results = write_results(tmp_path / "r", {
        "bad.json": {**with_trials([20.0, BAD_NUMBERS[bad]]), "Name": "bad"},
        "good.json": hostile_result("resnet50"), "other.json": hostile_result("resnet18")})
    for baseline in ([], ["--baseline", "1"]):
        for format_ in ("text", "json", "csv", "markdown"):
            ran = report_of(capfd, str(results), "--format", format_, *baseline)
            assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stderr
            assert "bad.json" in ran.stderr and "$.trials.values[1]" in ran.stderr
            assert "bad.json" not in ran.stdout


@pytest.mark.parametrize("format_", ["text", "json", "csv", "markdown"])
def test_a_result_nested_900_deep_is_skipped_with_one_line(format_, tmp_path, capfd):
    deep: list = []
    for _ in range(900):
        deep = [deep]
    results = write_results(tmp_path / "r", {"deep.json": stored_result({"extra": deep}),
                                             "good.json": hostile_result("resnet50")})
    ran = report_of(capfd, str(results), "--format", format_)
    assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stderr
    assert "nested deeper than" in ran.stderr


def test_headlines_far_apart_give_an_infinite_ratio_not_an_overflow():
    from microbench.measure import stats
    verdict = stats.gate((1e-300, 1.7e-300), (1e300, 2e300), 5)
    assert verdict.ratio == float("inf") and not verdict.regression
    assert stats.gate((1e300, 1.7e300), (1e-300, 2e-300), 5).regression


# ---------------------------------------------------------------- issue 38: text a library interprets

def mathtext_results(tmp_path: Path) -> Path:
    first, second = hostile_result("$\\frac{$"), hostile_result("$x^2$ \x1b[2J")
    return write_results(tmp_path / "r", {"a.json": first, "b.json": second})


def test_names_with_mathtext_are_drawn_literally(tmp_path, capfd):
    results = mathtext_results(tmp_path)
    ran = report_of(capfd, str(results), "--plot", str(tmp_path / "c.png"),
                    "--html", str(tmp_path / "p.html"))
    # Standard error holds only the files written (the report names them there).
    assert ran.returncode == 0 and ran.stderr.splitlines() == [
        f"Chart : {tmp_path / 'c.png'}", f"Page  : {tmp_path / 'p.html'}"], ran.stderr
    assert (tmp_path / "c.png").read_bytes().startswith(b"\x89PNG")
    assert "data:image/png;base64," in (tmp_path / "p.html").read_text()


def test_a_chart_that_still_fails_leaves_the_page_with_a_note(tmp_path, capfd, monkeypatch):
    from microbench.output import chart

    def broken(*args, **kwargs):
        raise ValueError("a layout matplotlib cannot make")
    monkeypatch.setattr(chart, "build_figure", broken)
    results = mathtext_results(tmp_path)
    ran = report_of(capfd, str(results), "--html", str(tmp_path / "p.html"))
    assert ran.returncode == 0, ran.stderr
    assert "No chart: matplotlib could not draw the chart" in (tmp_path / "p.html").read_text()
    ran = report_of(capfd, str(results), "--plot", str(tmp_path / "c.png"),
                    "--html", str(tmp_path / "q.html"))
    assert_error_after_table(ran, 1, "matplotlib could not draw the chart (ValueError")
    assert (tmp_path / "q.html").exists() and not (tmp_path / "c.png").exists()


def assert_error_after_table(ran, code: int, text: str) -> None:
    """One error line on standard error, after the lines naming the files that were written."""
    lines = [line for line in ran.stderr.strip().splitlines()
             if not line.startswith(("Chart : ", "Page  : "))]
    assert ran.returncode == code and len(lines) == 1 and text in lines[0], ran.stderr
    assert "Traceback" not in ran.stderr


def test_a_chart_of_a_metric_no_row_knows_is_refused_before_any_output(tmp_path, capfd):
    results = mathtext_results(tmp_path)
    ran = report_of(capfd, str(results), "--plot", str(tmp_path / "c.png"), "--metric", "mfu")
    assert_one_line_error(ran, 2, "--plot would draw nothing: no row has a known mfu")
    assert ran.stdout == "" and not (tmp_path / "c.png").exists()


# ---------------------------------------------------------------- issue 38: a folder given to the report

@pytest.mark.parametrize("bad", ["dangling-link", "link-loop", "non-utf8-name", "oversized",
                                 "unreadable-folder", "link-to-folder", "socket"])
def test_one_bad_entry_in_a_report_folder_is_skipped_with_a_line(bad, tmp_path, capfd,
                                                                 monkeypatch):
    results = write_results(tmp_path / "r", {"good.json": hostile_result("resnet50"),
                                             "other.json": hostile_result("resnet18")})
    if bad == "dangling-link":
        (results / "gone.json").symlink_to(tmp_path / "nowhere.json")
    elif bad == "link-loop":
        (results / "loop.json").symlink_to(results / "loop.json")
    elif bad == "non-utf8-name":
        with open(os.path.join(os.fsencode(results), b"bad\xff.json"), "wb") as stream:
            stream.write(json.dumps(hostile_result("resnet34")).encode())
    elif bad == "oversized":
        (results / "huge.json").write_text(json.dumps(hostile_result("resnet34")) + " " * 4096)
        monkeypatch.setattr(collection, "MAX_INPUT_BYTES", 4000)
    elif bad == "unreadable-folder":          # root reads any folder: the refusal is faked
        (results / "locked").mkdir()
        real_walk = os.walk

        def walk(top, onerror=None, **kwargs):
            for root, folders, names in real_walk(top, onerror=onerror, **kwargs):
                if "locked" in folders:
                    folders.remove("locked")
                    onerror(PermissionError(errno.EACCES, "Permission denied",
                                            os.path.join(root, "locked")))
                yield root, folders, names
        monkeypatch.setattr(collection.os, "walk", walk)
    elif bad == "socket":
        bound_socket(results / "s.json")
    else:
        (results / "elsewhere").symlink_to(tmp_path)
    ran = report_of(capfd, str(results))
    assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("skipped "), ran.stderr
    assert_no_controls(ran.stderr)
    assert "Model results: 2 rows" in ran.stdout


@pytest.mark.parametrize("ensure_ascii", [True, False], ids=["escaped", "raw"])
def test_controls_written_raw_or_escaped_are_read_escaped(tmp_path, ensure_ascii):
    """stored.parse skips the walk over a document whose text holds nothing to escape
    (safe_text.plain_json); a C1 CSI, DEL or bidi override written raw, or as \\uXXXX, is
    still escaped (raw C0 controls are not JSON inside a string)."""
    from microbench.store import stored
    attack = "\x9b2J\x7f\u202e"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(hostile_result(f"net{attack}"), ensure_ascii=ensure_ascii),
                    encoding="utf-8")
    assert stored.parse(str(path), "r.json")["Name"] == "net\\x9b2J\\x7f\\u202e"
    assert safe_text.plain_json(json.dumps(hostile_result("resnet18"), indent=1))


# ---------------------------------------------------------------- issue 46: numbers out of range

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


# ---------------------------------------------------------------- issue 57: every figure range-checked by its nature

# Every value no figure may hold, whatever it is: not finite, negative, beyond any measurement,
# an integer beyond 64 bits; and those that depend on what it is (zero; a subnormal).
NEVER = (float("nan"), float("inf"), float("-inf"), -1.0, -1e308, 1e308, 2**70, -(2**70))


PATHED = tuple(f for f in figures.of_table(figures.MODEL) if f.path is not None)


FEW = settings(max_examples=25, deadline=None)


def _set(document: dict, path: tuple[str, ...], value) -> dict:
    document = copy.deepcopy(document)
    node = document
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value
    return document


def _refused(document: dict) -> bool:
    """The numbers' check every reader's validation runs (schema.validate_result): whether it
    finds a number out of range (the schema's own rules aside)."""
    return schema.number_problem(document) is not None


class TestFiguresByWhatTheyAre:
    """Mechanism 1: every figure of the registry is range-checked by its nature, wherever it is
    read (the readers' validation, --compare's baseline, node documents and their samples)."""

    @FEW
    @given(figure=st.sampled_from(PATHED), value=st.sampled_from(NEVER))
    def test_no_figure_takes_a_value_no_run_measures(self, figure, value):
        assume(not (ranges.nature(figure) == ranges.BOUND and value == -1.0))
        assert _refused(_set(stored_result(), figure.path, value))

    def test_a_pipeline_faster_than_its_model_alone_is_read(self):
        """data.verdict.kept is the pipeline's rate over the model alone's, 1.19 in a CPU sweep
        whose model-alone pass was disturbed: a ratio, not a share of a whole."""
        assert not _refused(_set(stored_result(), ("data", "verdict", "kept"), 1.19))

    def test_an_older_files_arithmetic_interval_below_zero_is_read(self):
        """Versions before the log-scale interval stored the arithmetic mean's: with two trials
        of 100 and 50 items/s its low end is about -243, and the file must stay readable."""
        document = _set(stored_result(), ("trials", "ci95_low"), -243.0)
        assert not _refused(_set(document, ("trials", "ci95_high"), 393.0))
        assert _refused(_set(document, ("trials", "ci95_high"), 1e308))

    @FEW
    @given(figure=st.sampled_from(PATHED))
    def test_subnormal_and_zero_by_nature(self, figure):
        kind = ranges.nature(figure)
        assert _refused(_set(stored_result(), figure.path, SUBNORMAL))
        assert _refused(_set(stored_result(), figure.path, 0)) == (kind == ranges.RATE)

    def test_a_share_of_a_whole_is_at_most_one(self):
        shares = [f for f in PATHED if ranges.nature(f) == ranges.SHARE]
        assert shares
        for figure in shares:
            assert _refused(_set(stored_result(), figure.path, 1.5))
            assert not _refused(_set(stored_result(), figure.path, 0.5))

    @pytest.mark.parametrize("value", NEVER + (0, SUBNORMAL))
    def test_node_figures_and_samples(self, value):
        for key in ("value", "median", "samples"):
            keys = ("node_check", "gpus", "figures", "gemm_tflops", key)
            number = float(value)
            assert (not (number == number and abs(number) != float("inf"))
                    or ranges.problem(keys, number) is not None)

    @pytest.mark.parametrize("value", (1e308, -1e308, SUBNORMAL, 0.0))
    def test_a_tampered_compare_baseline_is_refused(self, tmp_path, value):
        for path in (("Throughput [img/sec]",), ("memory", "peak_allocated_mb"),
                     ("timing", "stats", "p99_ms")):
            if value == 0.0 and path[0] != "Throughput [img/sec]":
                continue                                       # zero: a time or an amount
            baseline = tmp_path / "base.json"
            baseline.write_text(json.dumps(_set(stored_result(), path, value)))
            with pytest.raises(UsageError, match="base.json"):
                stored.load_result(str(baseline), "--compare")

    def test_a_figure_a_reader_derives_is_checked_too(self):
        document = stored_result()
        document["Throughput [img/sec]"], document["Throughput [tokens/sec]"] = 1e-300, 1e14
        document = _set(document, ("trials", "ci95_low"), 1e14)
        document = _set(document, ("trials", "ci95_high"), 1e14)
        assert _refused(document)


# ---------------------------------------------------------------- issue 46: no string of a file reaches any output raw

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


# ---------------------------------------------------------------- issue 46: the report never writes over what it reads

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
