"""Issue 65, mechanisms 4, 5, 7, 8 and 14: text from outside the tool shown inertly (markdown
that GitHub would make live, values typed into error lines, paths on the console), and standard
output that takes every byte: an encoding that lacks a character is no closed pipe, and a write
that took part of its bytes is finished or ends at a closed pipe (exit 141).

(Part of the hostile-input tests, split from one file by what is attacked.) In-process where the
mechanism allows; two children where it needs a real locale or a real pipe."""
from __future__ import annotations

import html
import io
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, assert_one_line_error, nightly_result, run_main, spawn
from microbench.platform import process, progress, safe_text
from microbench.platform.inputs import printable
from support.hostile import (CHILD_ENV, DATA_RUN, OPS_RUN, RUN, hostile_result, report_of,
                             write_results)
from support.hostile import no_launcher_environment  # noqa: F401 (autouse: this module's)

# Any control character but the line ends of our own lines: what must never reach a stream raw.
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def assert_no_raw_control(text: str) -> None:
    assert not RAW_CONTROL.search(text.replace("\r\n", "\n")), repr(text)


def ops_main(argv):
    from microbench.ops.cli import main
    return main(argv)


def report_main(argv):
    from microbench.report.command import main
    return main(argv)


# ---------------------------------------------------------------- 4. markdown stays inert

def live_in(source: str) -> list[str]:
    """What GitHub would make live in markdown ``source``: "$" (math; an entity is never a
    delimiter), and in the text it renders (escapes undone, entities decoded: mentions, emoji,
    references and bare links are found there) a mention, an e-mail, an issue reference, an
    emoji shortcode or a bare link."""
    found = ["$"] if "$" in source else []
    text = html.unescape(re.sub(r"\\(.)", r"\1", source))
    patterns = [r"(?<![\w])@[a-z0-9]", r"\w@[a-z0-9]", r"#\d", r"\bgh-\d", r"www\.",
                r"[a-z]+://", r":(?!\d+:)[\w+-]+:", r":(?:100|1234):"]
    return found + [match.group() for pattern in patterns
                    for match in re.finditer(pattern, text, re.IGNORECASE)]


LIVE_TEXT = [
    "$\\sqrt{2}$ @octocat :rocket: www.evil.example",          # the issue's
    "$$x^2$$ and $`y`$", "cc @org/team and @a-b", "mail a@evil.example or mailto:b@evil.example",
    ":+1: :-1: :100: :1234: :non_potable_water:", "https://evil.example/p and HTTP://EVIL.EXAMPLE",
    "(WWW.evil.example)", "_www.evil.example_", "fixes #123 and GH-42", "resnet@v2:latest:",
]


class TestMarkdownStaysInert:
    @pytest.mark.parametrize("text", LIVE_TEXT)
    def test_the_escaping_leaves_nothing_live(self, text):
        escaped = safe_text.markdown(text)
        assert live_in(escaped) == [], escaped
        # What a reader sees is still the text, with an invisible space at most.
        shown = html.unescape(re.sub(r"\\(.)", r"\1", escaped)).replace("\u200b", "")
        assert shown == text

    def test_times_and_plain_words_stay_as_typed(self):
        for text in ("run at 2026-11-24 20:35:00", "a-b_c 1.5 x", "ratio 2:1"):
            assert safe_text.markdown(text) == text.replace("_", "\\_")

    def test_the_report_and_the_history_in_markdown(self, tmp_path, capfd):
        name = LIVE_TEXT[0] + " " + LIVE_TEXT[-2]
        documents = {"a.json": hostile_result(name, device="gpu @octocat :fire:"),
                     "b.json": hostile_result("resnet18")}
        for night in range(3):
            nightly = nightly_result(100.0, night, {"network": name}, label=f"n{night}")
            nightly["model"]["name"] = name
            documents[f"n{night}.json"] = nightly
        results = write_results(tmp_path / "r", documents)
        for argv in (["--format", "markdown", "--all-columns"], ["--format", "markdown"],
                     ["--history", "--format", "markdown"]):
            ran = report_of(capfd, str(results), *argv)
            assert ran.returncode == 0, ran.stderr
            assert "octocat" in ran.stdout
            assert live_in(ran.stdout) == [], (argv, live_in(ran.stdout))


# ---------------------------------------------------------------- 5. error lines

def bench_main(argv):
    from microbench.main import main
    return main(argv)


TYPED = {
    "label-newline": (bench_main, ["--label", "a\nb"]),                   # the issue's
    "label-clipboard": (bench_main, ["--label", "x\x1b]52;c;aGk=\x07"]),
    "iterations": (bench_main, ["--iterations", "3\n4"]),
    "csv-file-surrogate": (bench_main, ["--csv-file", "a\ud800b.csv"]),
    "output-file": (bench_main, ["--output-file", "a\n\x1b[2J/b.json"]),
    "ops-num-iters": (ops_main, ["--num-iters", "3\nx"]),                  # the issue's
    "ops-op": (ops_main, ["--op", "add\x1b[31m"]),
    "report-tolerance": (report_main, ["--tolerance", "5\x9b2J", str(ROOT)]),
    "report-unknown": (report_main, [str(ROOT), "--bogus", "x\u2028y"]),
}


class TestErrorLinesShowTextSafely:
    @pytest.mark.parametrize("case", sorted(TYPED))
    def test_a_value_typed_is_shown_escaped_on_one_line(self, case, capfd):
        main, argv = TYPED[case]
        ran = run_main(capfd, *argv, main=main)
        assert_one_line_error(ran, 2, "error: ")
        assert_no_raw_control(ran.stderr.rstrip("\n"))

    def test_the_newline_is_shown_as_an_escape(self, capfd):
        ran = run_main(capfd, "--label", "a\nb", main=bench_main)
        assert "'a\\x0ab'" in ran.stderr

    def test_a_rank_prefix_from_the_environment_is_escaped_too(self, monkeypatch, capfd):
        monkeypatch.setenv("RANK", "0\x1b[2J")
        monkeypatch.setenv("WORLD_SIZE", "2")
        ran = run_main(capfd, "--label", "", main=bench_main)
        assert_one_line_error(ran, 2, "[rank 0\\x1b[2J] ")
        capfd.readouterr()
        process.error_line(f"{process.env_rank_prefix()}error: x\ny")
        assert capfd.readouterr().err == "[rank 0\\x1b[2J] error: x\\x0ay\n"

    def test_printable_escapes_controls_and_keeps_bytes_readable(self):
        assert printable("a\udcffb\x1b") == "a\\xffb\\x1b"
        assert printable("a\ud800") == "a\\ud800"          # a surrogate that is no byte


# ---------------------------------------------------------------- 7. an encoding is no closed pipe

def ascii_stdout(errors: str = "surrogateescape") -> tuple[io.TextIOWrapper, io.BytesIO]:
    """Standard output as ``LC_ALL=C PYTHONUTF8=0`` makes it: ASCII, surrogateescape."""
    sink = io.BytesIO()
    return io.TextIOWrapper(sink, encoding="ascii", errors=errors, write_through=True), sink


def regression_folder(folder):
    """resnet18 10% slower on the last 4 of 8 nights: --history exits 5."""
    for night in range(8):
        value = 100.0 * (0.9 if night >= 4 else 1.0) * (1 + 0.001 * (night % 3))
        document = nightly_result(value, night, {"network": "resnet18"},
                                  {"torch": "2.15.0" if night >= 4 else "2.14.1"}, f"n{night}")
        (folder / f"n{night}.json").write_text(json.dumps(document))
    return folder


class TestEncodingIsNotAClosedPipe:
    @pytest.mark.parametrize("encoding,errors", [("ascii", "strict"), ("ascii", "surrogateescape"),
                                                 ("latin-1", "strict")])
    def test_a_character_the_encoding_lacks_is_written_as_an_escape(self, encoding, errors):
        sink = io.BytesIO()
        output = process.GuardedOutput(io.TextIOWrapper(sink, encoding=encoding, errors=errors,
                                                        write_through=True))
        output.write("a · b → c\n")
        output.flush()
        assert output.lost is None
        assert sink.getvalue() == "a · b \\u2192 c\n".encode(encoding, "backslashreplace")

    def test_the_plain_report_is_written_not_called_closed(self, tmp_path, monkeypatch, capfd):
        stream, sink = ascii_stdout()
        monkeypatch.setattr(sys, "stdout", stream)
        results = write_results(tmp_path / "r", {"a.json": hostile_result("résnet ±")})
        ran = report_of(capfd, str(results))
        assert ran.returncode == 0 and "could not be written" not in ran.stderr, ran.stderr
        assert "r\\xe9snet \\xb1" in sink.getvalue().decode("ascii")

    def test_a_closed_stream_is_still_called_closed(self):
        class Closed(io.StringIO):
            def write(self, text):
                raise ValueError("I/O operation on closed file.")
        output = process.GuardedOutput(Closed())
        output.write("x")
        assert output.lost == "it is closed"

    def test_the_history_under_the_c_locale_prints_its_table_and_exits_5(self, tmp_path):
        (tmp_path / "h").mkdir()
        folder = regression_folder(tmp_path / "h")
        environment = {key: value for key, value in os.environ.items() if key != "LANG"}
        child = spawn([sys.executable, "-m", "microbench.report", str(folder), "--history"],
                      cwd=ROOT, env={**environment, **CHILD_ENV, "LC_ALL": "C",
                                     "PYTHONUTF8": "0"},
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = child.communicate(timeout=120)
        assert child.returncode == 5, err
        assert b"REGRESSION" in out and b"\\xb7" in out
        assert b"could not be written" not in err and b"Traceback" not in err


# ---------------------------------------------------------------- 8. writes finish or stop at 141

class Trickle(io.RawIOBase):
    """A raw stream that takes at most ``step`` bytes a write (a pipe nearly full); after
    ``gone_after`` bytes its reader has left; ``busy`` writes find it full (non-blocking)."""

    def __init__(self, step: int = 5, gone_after: int | None = None, busy: int = 0,
                 fileno: int | None = None):
        super().__init__()
        self.data, self.step, self.gone_after, self.busy = bytearray(), step, gone_after, busy
        self._fileno = fileno

    def writable(self):
        return True

    def write(self, data):
        if self.busy:
            self.busy -= 1
            return None
        if self.gone_after is not None and len(self.data) >= self.gone_after:
            raise BrokenPipeError(32, "Broken pipe")
        taken = bytes(data[:self.step])
        self.data += taken
        return len(taken)

    def fileno(self):
        if self._fileno is None:
            raise io.UnsupportedOperation("no descriptor")
        return self._fileno


def unbuffered(raw: Trickle) -> io.TextIOWrapper:
    """Standard output as ``PYTHONUNBUFFERED`` makes it: text straight onto the raw stream."""
    return io.TextIOWrapper(raw, encoding="utf-8", write_through=True)


class TestWritesFinishOrStopAtAClosedPipe:
    def test_every_byte_is_written_in_order(self):
        raw = Trickle(step=7)
        output = process.GuardedOutput(unbuffered(raw))
        output.write("first é\n")
        output.write("x" * 1000 + "\n")
        assert raw.data.decode() == "first é\n" + "x" * 1000 + "\n"

    def test_a_full_non_blocking_stream_is_waited_for(self):
        read_end, write_end = os.pipe()
        try:
            raw = Trickle(step=3, busy=2, fileno=write_end)
            process.GuardedOutput(unbuffered(raw)).write("abcdefgh")
            assert raw.data == b"abcdefgh"
        finally:
            os.close(read_end)
            os.close(write_end)

    def test_a_reader_gone_mid_write_is_a_closed_pipe(self):
        with pytest.raises(BrokenPipeError):
            process.GuardedOutput(unbuffered(Trickle(step=64, gone_after=64))).write("y" * 500)

    def test_the_report_exits_141_when_its_reader_leaves_mid_table(self, tmp_path, monkeypatch,
                                                                   capfd):
        monkeypatch.setattr(sys, "stdout", unbuffered(Trickle(step=4096, gone_after=4096)))
        results = write_results(tmp_path / "r", {f"r{i}.json": hostile_result(f"n{i}" + "x" * 900)
                                                 for i in range(10)})
        ran = report_of(capfd, str(results), "--format", "markdown")
        assert ran.returncode == process.EXIT_READER_GONE and ran.stderr == "", ran.stderr

    def test_markdown_piped_into_a_reader_of_one_line_exits_141(self, tmp_path):
        names = {f"r{i}.json": hostile_result(f"n{i:02d}" + "x" * 4000) for i in range(40)}
        results = write_results(tmp_path / "r", names)        # 160 kB of table: > a pipe's 64
        child = spawn([sys.executable, "-m", "microbench.report", str(results), "--format",
                       "markdown"], cwd=ROOT, env={**os.environ, **CHILD_ENV},
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert child.stdout.readline().startswith(b"**Model results")
        child.stdout.close()                                    # what head -1 does
        err = child.stderr.read()
        assert child.wait(timeout=120) == process.EXIT_READER_GONE, err
        assert err == b""


# ---------------------------------------------------------------- 14. paths on the console

class TestPathsShownSafely:
    def test_the_ops_tool_names_its_files_escaped(self, tmp_path, capfd):
        json_path = tmp_path / "a\x1b]0;owned\x07.json"
        csv_path = tmp_path / "b\nc\x9b2J.csv"
        ran = run_main(capfd, *OPS_RUN, "--output-json", str(json_path), "--output-csv",
                       str(csv_path), main=ops_main)
        assert ran.returncode == 0, ran.stderr
        assert_no_raw_control(ran.stdout)
        assert f"Results JSON : {safe_text.terminal(json_path)}\n" in ran.stdout
        assert f"Results CSV  : {safe_text.terminal(csv_path)}\n" in ran.stdout
        assert json_path.is_file() and csv_path.is_file()          # the names as given

    def test_a_phase_line_naming_a_path_is_escaped(self):
        out = io.StringIO()
        activity = progress.Activity(out, live=False, tick=False)
        activity.start("Making /cache/\x1b]52;c;aGk=\x07/set (once; later runs reuse it)")
        activity.finish("done")
        assert_no_raw_control(out.getvalue())
        assert "/cache/\\x1b]52;c;aGk=\\x07/set" in out.getvalue()

    def test_the_benchmark_names_its_cache_and_results_escaped(self, tmp_path, capfd):
        cache, results = tmp_path / "c\x1b[2J", tmp_path / "r\u202eout"
        ran = run_main(capfd, *DATA_RUN, "--workers", "0", "--data-cache", str(cache),
                       "--output-dir", str(results))
        assert ran.returncode == 0, ran.stderr
        assert_no_raw_control(ran.stdout + ran.stderr)
        assert re.search(r"^Making .*c\\x1b\[2J", ran.stdout, re.MULTILINE), ran.stdout
        assert f"Results JSON : {safe_text.terminal(results)}" in ran.stdout

    def test_a_sweep_names_its_files_and_plot_escaped(self, tmp_path, capfd):
        results = tmp_path / "r\x1b]0;owned\x07"
        ran = run_main(capfd, *RUN, "--batch-size", "1,2", "--output-dir", str(results),
                       "--plot", str(tmp_path / "p\x9b2J.png"))
        assert ran.returncode == 0, ran.stderr
        assert_no_raw_control(ran.stdout + ran.stderr)
        assert safe_text.terminal(str(results)) in ran.stdout
        assert "p\\x9b2J.png" in ran.stdout
