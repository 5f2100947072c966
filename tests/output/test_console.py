"""The console drawn by rich (tables, the progress line's stream) and the host's description
from torch.utils.collect_env: plain output off a terminal, styled output on one, and the
environment block's fields with fakes where this machine lacks them."""
from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import shutil
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest
import torch
from torch.utils import collect_env

from conftest import HISTORY, run_main
from microbench.platform import devices, environment
from microbench.output import sweep_table
from microbench.platform import text_table
from microbench.ops import cli as ops_cli
from microbench.report import command
from microbench.store.entry import MODEL, Entry

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


COLUMNS = [text_table.Column("#", numeric=True), text_table.Column("configuration"),
           text_table.Column("img/s", numeric=True)]
ROWS = [("1", "resnet50 training fp32 b64", "1234.56"), ("2", "resnet50 [b] b128", "12.34")]


# ---------------------------------------------------------------- the tables module

def test_a_plain_table_is_aligned_text_with_a_rule_and_nothing_else():
    assert text_table.render(COLUMNS, ROWS) == (
        "#  configuration                 img/s\n"
        "-- --------------------------- -------\n"
        "1  resnet50 training fp32 b64  1234.56\n"
        "2  resnet50 [b] b128             12.34\n")


def test_a_plain_table_never_wraps_a_long_cell(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    long_label = "x" * 300
    lines = text_table.render(COLUMNS, [("1", long_label, "1.00")]).splitlines()
    assert len(lines) == 3 and long_label in lines[2] and lines[2].endswith("1.00")


def test_on_a_terminal_headings_are_bold_and_the_table_fits_the_width(monkeypatch):
    monkeypatch.setattr(shutil, "get_terminal_size", lambda *a: os.terminal_size((30, 24)))
    text = text_table.render(COLUMNS, ROWS, terminal=True)
    assert "\x1b[1m" in text
    visible = ANSI.sub("", text).splitlines()
    assert max(len(line) for line in visible) <= 30
    assert "".join(visible).replace(" ", "").count("1234.56") == 1


def test_rows_printed_one_at_a_time_line_up_with_the_header():
    printer = text_table.RowPrinter([text_table.Column("op", width=8),
                                 text_table.Column("median ms", numeric=True, width=10),
                                 text_table.Column("flags")])
    header, rule = printer.header().splitlines()
    line = printer.line(("add", "0.0123", "C"))
    assert header.index("flags") == line.index("C")
    assert header.index("median ms") + len("median ms") == line.index("0.0123") + len("0.0123")
    assert set(rule) == {"-", " "} and "\x1b" not in header + line


# ---------------------------------------------------------------- the sweep table

def fake_row(label, throughput, peak_mb=None, unit="images/s", status=None):
    """A sweep row as the closing table reads it: its label and its stored result's entry."""
    entry = None if status is not None else Entry(
        MODEL, label, {}, {"throughput": throughput, "peak_allocated_mb": peak_mb}, unit)
    return SimpleNamespace(failed=status is not None, status=status, label=lambda: label,
                           entry=entry)


def test_the_sweep_table_off_a_terminal():
    rows = [fake_row("resnet50 training fp32 b2", 100.0, 800.0),
            fake_row("resnet50 training fp32 b4", 150.0, 1200.0),
            fake_row("resnet50 training fp32 b8", None, status="out of memory")]
    out = io.StringIO()
    sweep_table.print_comparison(rows, out)
    assert out.getvalue() == (
        "\n"
        "Sweep comparison (speedup and memory change against row 1)\n"
        "  #  configuration                      img/s   speedup    peak MB    memory\n"
        "---- -------------------------- -------------- --------- ---------- --------\n"
        "  1  resnet50 training fp32 b2         100.00     1.00x        800       +0%\n"
        "  2  resnet50 training fp32 b4         150.00     1.50x       1200      +50%\n"
        "  3  resnet50 training fp32 b8  out of memory\n")


def test_a_cpu_sweep_table_has_no_memory_columns():
    """Issue 56: ``peak MB n/a`` and an empty memory column on every row of a CPU sweep."""
    rows = [fake_row("resnet18 training fp32 b2", 100.0),
            fake_row("resnet18 training fp32 b4", 150.0),
            fake_row("resnet18 training fp32 b8", None, status="out of memory")]
    out = io.StringIO()
    sweep_table.print_comparison(rows, out)
    assert out.getvalue().splitlines()[1:3] == [
        "Sweep comparison (speedup against row 1)",
        "  #  configuration                      img/s   speedup"]
    assert "n/a" not in out.getvalue()


def test_a_column_without_a_value_in_any_row_is_left_out():
    columns = [text_table.Column(name) for name in ("#", "MBU", "ITL", "note")]
    kept, rows = text_table.with_values(columns, [("1", "-", "2.0", ""), ("2", "n/a", "", "x")])
    assert [column.heading for column in kept] == ["#", "ITL", "note"]
    assert rows == [("1", "2.0", ""), ("2", "", "x")]


def test_the_sweep_table_counts_a_language_model_in_tokens():
    rows = [fake_row("llama sdpa s128 b2", 1280.0, unit="tokens/s"),
            fake_row("llama sdpa s256 b2", 1536.0, unit="tokens/s")]
    columns, cells = sweep_table.comparison_cells(rows)
    assert columns[2].heading == "tokens/s" and cells[0][2] == "1280.00"
    # The speedup is that of the rate shown (tokens), not of sequences: s256 does twice the
    # tokens per sequence.
    assert cells[1][3] == "1.20x" and cells[0][4:] == ("n/a", "")


def test_a_sweep_of_two_units_names_the_unit_in_each_cell_and_no_speedup_across_them():
    rows = [fake_row("resnet50 b2", 100.0), fake_row("llama b2", 1280.0, unit="tokens/s")]
    columns, cells = sweep_table.comparison_cells(rows)
    assert columns[2].heading == "rate"
    assert [cell[2] for cell in cells] == ["100.00 images/s", "1280.00 tokens/s"]
    assert [cell[3] for cell in cells] == ["1.00x", "-"]


def test_the_sweep_table_speedup_with_trials_is_the_reports_verdict_ratio():
    """Rows with trials: the speedup is the ratio of geometric means the report and --compare
    give for the same two results, not a ratio of two medians."""
    rows = [fake_row("a", 100.0), fake_row("b", 200.0)]
    rows[0].entry = dataclasses.replace(rows[0].entry, trial_values=(100.0, 100.0, 100.0))
    rows[1].entry = dataclasses.replace(rows[1].entry, trial_values=(150.0, 200.0, 300.0))
    [_, second] = sweep_table.comparison_cells(rows)[1]
    expected = (150.0 * 200.0 * 300.0) ** (1 / 3) / 100.0
    # Marked: three trials spread this wide leave 1 inside the ratio's interval.
    assert second[3] == f"{expected:.2f}x*" and second[3] != "2.00x*"


def test_the_sweep_table_marks_a_speedup_inside_the_noise():
    """Issue 64: 3.07x from one-trial rows whose iterations varied by 49% and 63% is marked
    and explained under the table; the same speedup from tight rows is not."""
    rows = [fake_row("a", 100.0), fake_row("b", 307.0)]
    for row, cv in zip(rows, (0.49, 0.63)):
        row.entry = dataclasses.replace(row.entry, figures={**row.entry.figures, "cv": cv})
    out = io.StringIO()
    sweep_table.print_comparison(rows, out)
    assert "3.07x*" in out.getvalue() and "1.00x*" not in out.getvalue()
    assert sweep_table.IN_NOISE_LEGEND in out.getvalue().splitlines()
    for row in rows:
        row.entry = dataclasses.replace(row.entry, figures={**row.entry.figures, "cv": 0.01})
    out = io.StringIO()
    sweep_table.print_comparison(rows, out)
    assert "3.07x*" not in out.getvalue() and "3.07x" in out.getvalue()
    assert sweep_table.IN_NOISE_LEGEND not in out.getvalue()


def test_the_sweep_table_marks_a_speedup_whose_trials_interval_holds_1():
    rows = [fake_row("a", 100.0), fake_row("b", 120.0)]
    rows[0].entry = dataclasses.replace(rows[0].entry, trial_values=(100.0, 60.0, 140.0))
    rows[1].entry = dataclasses.replace(rows[1].entry, trial_values=(120.0, 70.0, 170.0))
    [_, second] = sweep_table.comparison_cells(rows)[1]
    assert second[3].endswith("x*")


def test_the_sweep_table_on_a_terminal_is_styled():
    out = FakeTerminal()
    sweep_table.print_comparison([fake_row("resnet50 b2", 100.0, 800.0)], out)
    assert "\x1b[1m" in out.getvalue() and "1.00x" in ANSI.sub("", out.getvalue())


# ---------------------------------------------------------------- the op bench table

def test_the_op_table_off_a_terminal(capsys):
    ran = run_main(capsys, "--op", "add", "--op-type", "binary", "--num-iters", "2",
                   "--num-warmup-iters", "1", main=ops_cli.main)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("op "))
    header, rule, rows = lines[at], lines[at + 1], lines[at + 2:]
    assert header.split()[:4] == ["op", "shapes", "dtype", "median"]
    assert set(rule) == {"-", " "}
    add_rows = [row for row in rows if row.startswith("add ")]
    assert add_rows and "\x1b" not in ran.stdout
    for row in add_rows:           # the median's unit ends under the heading's last letter
        end = header.index("median") + len("median")
        assert row[:end].endswith((" us", " ms", " s")) and row[end] == " "


# ---------------------------------------------------------------- the report's text table

def test_the_report_table_plain_in_a_pipe_and_styled_on_a_terminal(capsys, monkeypatch):
    files = [str(HISTORY / "v2_17ac068_training.json"), str(HISTORY / "v2_62b9ba6_training.json")]
    plain = run_main(capsys, *files, main=command.main)
    assert plain.returncode == 0 and "\x1b" not in plain.stdout
    terminal = FakeTerminal()
    monkeypatch.setattr(shutil, "get_terminal_size", lambda *a: os.terminal_size((500, 24)))
    monkeypatch.setattr(sys, "stdout", terminal)
    assert command.main(files) == 0
    monkeypatch.undo()
    styled = terminal.getvalue()
    assert "\x1b[1m" in styled
    assert ANSI.sub("", styled).split() == plain.stdout.split()


# ---------------------------------------------------------------- the host, from collect_env

@pytest.fixture
def host(monkeypatch):
    """collect_env's answers faked; describe()'s caches emptied before and after."""
    def fake(os_name="Ubuntu 24.04.2 LTS (aarch64)", libc="glibc-2.39",
             cpu_info="Architecture: aarch64\nModel name:   Neoverse-V2\nBIOS Model name: x\n"):
        monkeypatch.setattr(collect_env, "get_os", lambda run: os_name)
        monkeypatch.setattr(collect_env, "get_libc_version", lambda: libc)
        monkeypatch.setattr(collect_env, "get_cpu_info", lambda run: cpu_info)
        for expensive in ("get_env_info", "get_pip_packages", "get_conda_packages",
                          "get_running_cuda_version", "get_nvidia_driver_version",
                          "get_gpu_info", "get_cudnn_version"):
            monkeypatch.setattr(collect_env, expensive, _never(expensive))
        _clear()
    yield fake
    _clear()


def _never(name):
    def call(*args):
        raise AssertionError(f"collect_env.{name} is slow (it starts processes): not called")
    return call


def _clear():
    for cached in (devices.cpu_model, environment._os_name, environment._libc):
        cached.cache_clear()


def _env_schema():
    schema = json.loads((Path(devices.__file__).parent.parent / "store" /
                         "result.schema.json").read_text())
    return {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": "#/$defs/env"}


def test_the_environment_block_names_os_libc_and_cpu_from_collect_env(host):
    host()
    env = environment.describe(torch.device("cpu"))
    assert (env.os, env.libc, env.cpu, env.device_name) == (
        "Ubuntu 24.04.2 LTS (aarch64)", "glibc-2.39", "Neoverse-V2", "Neoverse-V2")
    document = env.to_dict()
    assert document["os"] == "Ubuntu 24.04.2 LTS (aarch64)" and document["libc"] == "glibc-2.39"
    jsonschema.validate(document, _env_schema())


def test_where_collect_env_cannot_tell_the_fields_say_so(host, monkeypatch):
    host(os_name=None, libc="N/A", cpu_info="/bin/sh: 1: lscpu: not found")
    monkeypatch.setattr(devices, "_proc_cpuinfo_model", lambda: None)
    monkeypatch.setattr(devices.platform, "processor", lambda: "")
    monkeypatch.setattr(devices.platform, "machine", lambda: "riscv64")
    env = environment.describe(torch.device("cpu"))
    assert (env.os, env.libc, env.cpu) == ("unknown", None, "riscv64")
    jsonschema.validate(env.to_dict(), _env_schema())


def test_a_probe_that_fails_leaves_its_field_unknown_not_the_run_failed(host, monkeypatch):
    host()
    monkeypatch.setattr(collect_env, "get_os", _never("get_os"))
    env = environment.describe(torch.device("cpu"))
    assert env.os == "unknown" and env.libc == "glibc-2.39"


def test_without_lscpu_the_cpu_model_comes_from_proc_cpuinfo(host, monkeypatch):
    host(cpu_info="/bin/sh: 1: lscpu: not found")
    monkeypatch.setattr(devices, "_proc_cpuinfo_model", lambda: "AMD EPYC 9654 96-Core Processor")
    assert environment.describe(torch.device("cpu")).cpu == "AMD EPYC 9654 96-Core Processor"


def test_collect_env_is_asked_once_per_process(host, monkeypatch):
    host()
    calls = []
    monkeypatch.setattr(collect_env, "get_os", lambda run: calls.append(1) or "Linux (x86_64)")
    environment._os_name.cache_clear()
    for _ in range(3):
        environment.describe(torch.device("cpu"))
    assert len(calls) == 1


@pytest.mark.slow
def test_the_header_names_the_system(host, capsys, tmp_path):
    host()
    ran = run_main(capsys, "--network", "resnet18", "--image-size", "32", "--batch-size", "2",
                   "--iterations", "1", "--warmup", "1", "--output-dir", str(tmp_path),
                   "--trials", "in-process")
    assert ran.returncode == 0, ran.stderr
    assert "  System        : Ubuntu 24.04.2 LTS (aarch64), Python " in ran.stdout
    [result] = tmp_path.glob("*.json")
    env = json.loads(result.read_text())["env"]
    assert (env["os"], env["libc"], env["cpu"]) == ("Ubuntu 24.04.2 LTS (aarch64)",
                                                    "glibc-2.39", "Neoverse-V2")


# ---------------------------------------------------------------- rich missing

def test_a_checkout_without_rich_says_what_to_install(monkeypatch, capsys):
    """An updated checkout run without reinstalling: one line and exit 4, not a traceback."""
    from microbench.platform import process
    for name in [name for name in sys.modules
                 if name == "rich" or name.startswith("rich.")
                 or name in ("microbench.report.command", "microbench.platform.progress",
                             "microbench.platform.text_table")]:
        monkeypatch.delitem(sys.modules, name)
    import microbench.platform
    import microbench.report
    for package, name in ((microbench.platform, "progress"), (microbench.platform, "text_table"),
                          (microbench.report, "command")):
        monkeypatch.delattr(package, name, raising=False)   # else `from .. import` finds it
    monkeypatch.setitem(sys.modules, "rich", None)      # import rich raises ModuleNotFoundError
    # entry() installs its signal handlers for the life of the process: put pytest's back.
    previous = {number: signal.getsignal(number) for number in process.STOPPING}
    try:
        assert process.entry("microbench.report.command") == 4
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    assert capsys.readouterr().err == ("error: rich is not installed: pip install -r "
                                       "requirements.txt (or pip install . from the checkout)\n")


def test_a_torchvision_from_another_build_is_one_line_naming_both_versions(monkeypatch, capsys,
                                                                           tmp_path):
    """torch and torchvision from different builds (pip took one from another index): one line
    naming both versions and the fix, exit 4, not a 40-line traceback."""
    from microbench.platform import process
    fake = tmp_path / "torchvision"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "raise RuntimeError('operator torchvision::nms does not exist')\n")
    (tmp_path / "torchvision-0.28.0.dist-info").mkdir()
    (tmp_path / "torchvision-0.28.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.28.0\n")
    (tmp_path / "entry_needing_torchvision.py").write_text("import torchvision\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [name for name in sys.modules if name.partition(".")[0] == "torchvision"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(torch, "__version__", "2.13.0+cpu")
    previous = {number: signal.getsignal(number) for number in process.STOPPING}
    try:
        assert process.entry("entry_needing_torchvision") == 4
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    assert capsys.readouterr().err == (
        "error: torchvision 0.28.0 does not work with torch 2.13.0+cpu: torch is a CPU build "
        "(+cpu), torchvision the package index's default build (CUDA on Linux); torchvision's compiled operators do not "
        "load (torchvision::nms missing). Install both from one source: pip install "
        "--force-reinstall \"torch==2.13.0+cpu\" \"torchvision==0.28.*\" --index-url "
        "https://download.pytorch.org/whl/cpu (where that index cannot be reached: the package "
        "index's build of the same release, CUDA, which runs on the CPU too, from it or your "
        "mirror: pip install --force-reinstall \"torch===2.13.0\" \"torchvision==0.28.*\"; "
        "README Install)\n")


def test_an_error_outside_torchvision_at_import_is_not_called_a_broken_pair():
    from microbench.platform import process
    try:
        raise RuntimeError("something else")
    except RuntimeError as error:
        assert process.broken_pair(error) is None


def test_the_op_bench_line_on_a_terminal_is_never_redrawn_while_an_op_is_timed(monkeypatch):
    """An op's phase holds its timed calls: its line is drawn once, no thread ticks."""
    from microbench.platform import progress
    threads = []
    original = progress.Activity.start

    def start(self, label, announce=True, tick=True):
        original(self, label, announce, tick)
        threads.append(self.ticking)
    monkeypatch.setattr(progress.Activity, "start", start)
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    code = ops_cli.main(["--op", "add", "--op-type", "binary", "--input1-dim", "8",
                         "--num-iters", "2", "--num-warmup-iters", "1"])
    monkeypatch.undo()
    assert code == 0 and threads == [False]
    assert "add" in ANSI.sub("", terminal.getvalue())
