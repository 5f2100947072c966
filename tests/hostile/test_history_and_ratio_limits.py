"""The sixth hostile round (issue 65), the history's and the report's limits: a label the
history cannot read, ratios of two in-range figures beyond any float, cells hundreds of
characters wide, a gigabyte reserved per file read, and the history's flags that did not take
effect (--all-columns ignored, --by time sorting text). One class per mechanism, each trying
instances of its own, in-process.

(Part of the hostile-input tests, split from one file by what is attacked.)"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from conftest import nightly_result, run_main, stored_result
from microbench.output import compare, history_table, table
from microbench.platform import inputs, units
from microbench.platform.errors import UsageError
from microbench.report import command
from microbench.settings.argtypes import MAX_LABEL_CHARS, label_problem, label_text
from microbench.store import collection, ranges
from microbench.store.baseline import Gate
from microbench.store.entry import entries_of
from support.hostile import RUN, assert_disk_unchanged, snapshot

# Figures each in range (store/ranges.py) whose ratio is not: the range's ends.
FLOOR, CEILING = 2.3e-308, ranges.LARGEST


def report(capfd, *argv: str):
    return run_main(capfd, *argv, main=command.main)


def assert_one_line(ran, code: int, text: str) -> None:
    assert ran.returncode == code, (ran.stdout[-2000:], ran.stderr[-2000:])
    lines = [line for line in ran.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and text in lines[0], ran.stderr
    assert "Traceback" not in ran.stderr


def write(folder: Path, name: str, document: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(document))
    return path


def at_rate(throughput: float, night: int = 0, label: str | None = None) -> dict:
    """A result whose headline is ``throughput`` (its other figures those of the fixture)."""
    document = stored_result({"label": label} if label else None)
    document["Throughput [img/sec]"] = throughput
    document["throughput"]["images_per_s"] = throughput
    document["flops"]["achieved_tflops"] = None
    document["env"]["time_utc"] = f"2026-01-{night + 1:02d}T00:00:00+00:00"
    return document


def strict_json(text: str):
    """JSON as a strict parser reads it: ``Infinity`` and ``NaN`` are not JSON."""
    def refuse(name):
        raise AssertionError(f"{name} in JSON output")
    return json.loads(text, parse_constant=refuse)


def labels_in_order(capfd, folder: Path) -> list[str]:
    ran = report(capfd, str(folder), "--history", "--by", "label", "--format", "json")
    assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stderr
    [series] = strict_json(ran.stdout)["series"]
    return [result["label"] for result in series["results"]]


class TestLabelsTheHistoryReads:
    """Mechanism 1: every label the tool accepts (and every label a file holds) is one the
    history can order: no int() of what str.isdigit() accepts, one rule for the parser and
    the history's reader."""

    @pytest.mark.parametrize("label", [
        "1" * 5000, "9" * 4301, "n" + "7" * 4400 + "x",       # beyond int()'s 4,300 digits
        "n²", "v¹⁰", "①②", "n٣", "n۱۲", "१२३",               # digits int() refuses or reads
        "\u2003padded", "two\nlines", "", " ",               # no label --label accepts
    ])
    def test_a_label_no_parser_would_give_is_read_or_left_out(self, capfd, tmp_path, label):
        folder = tmp_path / "nightly"
        for night, name in enumerate(("n1", label, "n2")):
            write(folder, f"r{night}.json", nightly_result(100.0 + night, night, label=name))
        ran = report(capfd, str(folder), "--history", "--by", "label", "--format", "json")
        assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stderr
        [series] = strict_json(ran.stdout)["series"]
        shown = [result["label"] for result in series["results"]]
        kept = label_problem(label) is None
        assert (label in shown) == kept
        assert shown[:2] == ["n1", "n2"] or kept

    @pytest.mark.parametrize("label", ["1" * MAX_LABEL_CHARS, "n²", "n٣", "v1.10-rc٣",
                                       "1" * (MAX_LABEL_CHARS + 1), "a\u2028b", " lead",
                                       "trail ", "\x1b[31mred"])
    def test_the_parser_and_the_history_share_one_rule(self, label):
        try:
            accepted = label_text(label) == label
        except argparse.ArgumentTypeError as error:
            accepted = False
            assert "\n" not in str(error)
        assert accepted == (label_problem(label) is None)

    def test_digit_runs_order_as_numbers_however_long(self, capfd, tmp_path):
        names = ["n10", "n9", "n" + "1" * 119, "n" + "9" * 118, "n007", "n0100", "n²", "n٣"]
        for night, name in enumerate(names):
            write(tmp_path, f"r{night}.json", nightly_result(100.0, night, label=name))
        assert labels_in_order(capfd, tmp_path) == [
            "n007", "n9", "n10", "n0100", "n" + "9" * 118, "n" + "1" * 119, "n²", "n٣"]

    def test_a_label_the_history_leaves_out_is_counted_on_one_line(self, capfd, tmp_path):
        write(tmp_path, "a.json", nightly_result(100.0, 0, label="n1"))
        write(tmp_path, "b.json", nightly_result(100.0, 1, label="2" * 5000))
        ran = report(capfd, str(tmp_path), "--history", "--by", "label")
        assert ran.returncode == 0
        [line] = [line for line in ran.stdout.splitlines() if "left out" in line]
        assert "a --label the tool does not accept" in line and "2222" not in line


class TestRatiosStayFinite:
    """Mechanism 2: a ratio of two figures each in range is checked as a figure is: within
    ranges.LARGEST either way, or shown as unknown (never inf, Infinity or a crash)."""

    @pytest.mark.parametrize("numerator, denominator", [
        (CEILING, FLOOR), (FLOOR, CEILING), (1e15, 1e-300), (1.0, 2.2250738585072014e-308),
        (3e-308, 1e-1), (math.inf, 1.0), (1.0, 0.0), (None, 1.0), (math.nan, 1.0)])
    def test_an_out_of_range_ratio_is_unknown(self, numerator, denominator):
        assert ranges.ratio_of(numerator, denominator) is None

    @pytest.mark.parametrize("numerator, denominator", [(1e15, 1.0), (1.0, 1e15), (3.0, 2.0),
                                                        (1e-7, 1e7)])
    def test_an_in_range_ratio_is_the_quotient(self, numerator, denominator):
        assert ranges.ratio_of(numerator, denominator) == numerator / denominator

    @pytest.mark.parametrize("baseline", ["1", "2"])
    @pytest.mark.parametrize("format_", ["text", "markdown", "csv", "json"])
    def test_the_reports_vs_column_has_no_infinity(self, capfd, tmp_path, baseline, format_):
        write(tmp_path, "a.json", at_rate(CEILING))
        write(tmp_path, "b.json", at_rate(FLOOR, 1))
        before = snapshot(tmp_path)
        ran = report(capfd, str(tmp_path), "--baseline", baseline, "--format", format_)
        assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stderr
        assert not {"inf", "infinity", "nan"} & set(ran.stdout.lower().replace(",", " ").split())
        assert "infx" not in ran.stdout.lower()
        if format_ == "json":
            rows = strict_json(ran.stdout)["tables"][0]["rows"]
            assert {row["versus_baseline"]["ratio"] for row in rows} == {None, 1.0}
        if format_ in ("text", "markdown"):
            assert ranges.BEYOND_RATIO in ran.stdout
        assert_disk_unchanged(tmp_path, before)

    @pytest.mark.parametrize("ours, theirs", [((1e15, 9e14), (FLOOR, 3e-308)),
                                              ((FLOOR, 3e-308), (1e15, 9e14)),
                                              ((1e15, 1e15), (1e-300, 1e-301))])
    def test_the_trials_gate_in_the_report_is_unknown_beyond_range(self, ours, theirs):
        found = table.trial_verdict(theirs, ours)
        assert found.ratio is None and found.text == ranges.BEYOND_RATIO

    def test_a_history_step_beyond_range_has_no_infinity(self, capfd, tmp_path):
        values = [FLOOR * (1 + night / 100) for night in range(8)] + \
                 [CEILING * (1 - night / 100) for night in range(8)]
        for night, value in enumerate(values):
            write(tmp_path, f"r{night}.json", at_rate(value, night))
        for format_ in ("json", "text", "markdown"):
            ran = report(capfd, str(tmp_path), "--history", "--format", format_)
            assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stderr
            assert "inf%" not in ran.stdout and "Infinity" not in ran.stdout
            if format_ == "json":
                for change in strict_json(ran.stdout)["series"][0]["changes"]:
                    assert change["ratio"] is None or math.isfinite(change["ratio"])

    @pytest.mark.parametrize("throughput", [FLOOR, 1e-300, 3e-308])
    def test_compare_against_a_baseline_beyond_any_ratio_is_refused(self, throughput):
        baseline = at_rate(throughput)
        gate = Gate("base.json", 5.0, baseline, any_config=True)
        current = at_rate(200.0)
        verdict = compare.judge(current, gate)
        with pytest.raises(UsageError, match="beyond any ratio of two runs") as error:
            compare.compare(current, gate, None, verdict)
        assert "\n" not in str(error.value)

    def test_compare_in_a_run_exits_2_leaving_the_baseline(self, capfd, tmp_path, steady_clock):
        base = write(tmp_path, "base.json", at_rate(FLOOR))
        before = base.read_bytes()
        ran = run_main(capfd, *RUN, "--compare", str(base), "--compare-any-config",
                       "--output-dir", str(tmp_path / "out"))
        assert ran.returncode == 2, ran.stderr[-2000:]
        assert "beyond any ratio of two runs" in ran.stderr.strip().splitlines()[-1]
        assert "Traceback" not in ran.stderr and base.read_bytes() == before


class TestFiguresStayNarrow:
    """Mechanism 3: the shared formatting (platform/units.py) writes no figure wider than
    MAX_FIXED_CHARS plus its unit, whatever the float: the range's floor, subnormals, the
    float range's ceiling, negative values."""

    VALUES = (2.3e-308, 3e-308, 5e-324, 1e-200, 1e-12, 0.00042, 1.0, 5163.72, 1e15, 1e16,
              1e300, 1.7976931348623157e308, -3e-308, -1e300)
    FORMATS = (units.rate, units.significant, units.percent, units.duration_ms, units.flops,
               units.megabytes, units.bandwidth)

    @pytest.mark.parametrize("value", VALUES)
    @pytest.mark.parametrize("formatter", FORMATS)
    def test_no_figure_is_written_out_absurdly_wide(self, formatter, value):
        assert len(formatter(value)) <= units.MAX_FIXED_CHARS + len(" PFLOP/s")

    @pytest.mark.parametrize("value", [5163.72, 0.0123, 1e15, 21.26, 0.00042])
    def test_figures_a_run_measures_keep_their_fixed_form(self, value):
        assert "e" not in units.rate(value) and "e" not in units.significant(value)

    @pytest.mark.parametrize("throughput", [FLOOR, 3e-308, 1e-200, CEILING])
    def test_a_report_row_of_a_figure_at_the_ranges_ends_is_narrow(self, capfd, tmp_path,
                                                                   throughput):
        write(tmp_path, "a.json", at_rate(throughput))
        write(tmp_path, "b.json", at_rate(100.0, 1))
        ran = report(capfd, str(tmp_path), "--baseline", "2")
        assert ran.returncode == 0, ran.stderr
        rows = [line for line in ran.stdout.splitlines() if line[:2] in ("1 ", "2 ", "--")]
        assert rows and all(len(line) < 120 for line in rows), rows

    def test_a_history_level_at_the_floor_is_narrow(self, capfd, tmp_path):
        values = [3e-308 * (1 + night / 50) for night in range(8)] + \
                 [3e-306 * (1 + night / 50) for night in range(8)]
        for night, value in enumerate(values):
            write(tmp_path, f"r{night}.json", at_rate(value, night))
        ran = report(capfd, str(tmp_path), "--history")
        assert ran.returncode == 0, ran.stderr
        rows = [line for line in ran.stdout.splitlines() if line[:1].isdigit()]
        assert len(rows) >= 1 and all(len(line) < 200 for line in rows), rows
        assert "0" * 25 not in ran.stdout


class TestReadsTakeTheMemoryOfTheFile:
    """Mechanism 9: a file read reserves what the file holds, not the bound it is read
    against (one read of limit + 1 bytes reserved a gigabyte per file)."""

    @pytest.mark.parametrize("size", [0, 1, 4096, 3 * inputs.READ_CHUNK_BYTES + 5])
    def test_a_bound_of_petabytes_reads_a_small_file(self, tmp_path, size):
        path = tmp_path / "r.json"
        path.write_bytes(b"x" * size)
        assert inputs.read_bounded(str(path), "r.json", limit=1 << 50) == b"x" * size

    @pytest.mark.parametrize("size, chunk", [(100, 7), (100, 100), (99, 1), (64, 101)])
    def test_chunks_make_the_whole_file(self, tmp_path, monkeypatch, size, chunk):
        monkeypatch.setattr(inputs, "READ_CHUNK_BYTES", chunk)
        path = tmp_path / "r.bin"
        data = bytes(range(size))
        path.write_bytes(data)
        assert inputs.read_bounded(str(path), "r.bin", limit=100) == data

    @pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
    def test_a_file_past_its_bound_is_still_refused(self, tmp_path, monkeypatch, chunk):
        monkeypatch.setattr(inputs, "READ_CHUNK_BYTES", chunk)
        path = tmp_path / "r.bin"
        path.write_bytes(b"y" * 101)
        with pytest.raises(inputs.InputRefused):
            inputs.read_bounded(str(path), "r.bin", limit=100)

    def test_the_history_reads_under_a_bound_no_memory_holds(self, capfd, tmp_path,
                                                             monkeypatch):
        monkeypatch.setattr(collection, "MAX_INPUT_BYTES", 1 << 50)
        for night in range(3):
            write(tmp_path, f"r{night}.json", nightly_result(100.0, night, label=f"n{night}"))
        ran = report(capfd, str(tmp_path), "--history", "--by", "label")
        assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stderr


class TestHistoryFlagsTakeEffect:
    """The issue's notes: --all-columns with --history (ignored before) is refused, and --by
    time orders by the time each run ran, not by its text."""

    @pytest.mark.parametrize("format_", ["markdown", "text", "json"])
    def test_all_columns_with_history_is_refused(self, capfd, tmp_path, format_):
        write(tmp_path, "a.json", nightly_result(100.0, 0))
        before = snapshot(tmp_path)
        ran = report(capfd, str(tmp_path), "--history", "--all-columns", "--format", format_)
        assert_one_line(ran, 2, "--all-columns")
        assert ran.stdout == ""
        assert_disk_unchanged(tmp_path, before)

    @pytest.mark.parametrize("times, order", [
        # Text order puts the later run first in each case.
        (["2026-01-01T23:00:00-05:00", "2026-01-02T01:00:00+00:00"], [1, 0]),
        (["2026-01-02T00:30:00+01:00", "2026-01-01T23:45:00+00:00"], [0, 1]),
        (["2026-01-01T10:00:00", "2026-01-01T09:00:00-02:00"], [0, 1]),      # naive is UTC
        (["2026-01-01T10:00:00Z", "2026-01-01T10:00:00.5+00:00"], [0, 1]),
    ])
    def test_by_time_orders_as_times(self, capfd, tmp_path, times, order):
        for index, when in enumerate(times):
            document = nightly_result(100.0 + index, index, label=f"run{index}")
            document["env"]["time_utc"] = when
            write(tmp_path, f"r{index}.json", document)
        ran = report(capfd, str(tmp_path), "--history", "--format", "json")
        assert ran.returncode == 0, ran.stderr
        [series] = strict_json(ran.stdout)["series"]
        assert [result["label"] for result in series["results"]] == \
            [f"run{index}" for index in order]

    @pytest.mark.parametrize("when", ["yesterday", "2026-13-01T00:00:00", "", "9" * 5000])
    def test_a_time_that_is_none_is_left_out_on_one_line(self, capfd, tmp_path, when):
        write(tmp_path, "a.json", nightly_result(100.0, 0))
        document = nightly_result(100.0, 1)
        document["env"]["time_utc"] = when
        write(tmp_path, "b.json", document)
        ran = report(capfd, str(tmp_path), "--history", "--format", "json")
        assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stderr
        found = strict_json(ran.stdout)
        assert len(found["series"][0]["results"]) == 1
        assert any("no time of the run recorded" in line for line in found["notes"])

    def test_a_long_label_from_a_file_is_not_a_point_name(self):
        [entry] = entries_of(nightly_result(100.0, 0, label="3" * 5000), "a.json")
        assert history_table.point_name(entry) == "2026-01-01 00:00"
