"""The contract under hostile input and faults (docs/architecture.md, "Errors").

Every case holds the contract: the documented exit code, one line on stderr, no traceback, and
the disk left as it was (files that were there unchanged byte for byte, nothing new written, no
temporary file, no directory made). The classes of issue 23 are groups here too: inputs that
never end or are huge (FIFOs, devices, sockets, oversized or malformed documents), names that are
not valid text, a terminal that takes no writes, --model-kwargs values, SIGHUP and SIGQUIT, what
a killed run leaves, ranks with their own --output-dir, and the smaller edges (--dist-url,
MICROBENCH_FAIL_RANK, sweep size, conv2d kernels, symlinked CSVs). Most cases run main()
in-process (a subprocess costs 6-8 s of imports); a few need a process of their own: a
file-size limit (RLIMIT_FSIZE) standing in for a full disk, signals during the timed loop, a
stdout on /dev/full or closed, argv bytes that are not UTF-8, and ranks that meet over gloo.
"""
from __future__ import annotations

import contextlib
import csv
import errno
import io
import importlib.abc
import itertools
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import (HISTORY, ROOT, SCRIPT, TINY, alive, assert_one_line_error, run_main, spawn,
                      stored_result)
from microbench.platform import inputs, process, safe_text
from microbench.platform.errors import CannotWrite, Terminated
from microbench.data import cache
from microbench.store import collection
from microbench.output import files
from microbench.platform import writing

RUN = ["--network", "resnet18", *TINY, "--device", "cpu"]
CHILD_ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                      "TORCHELASTIC_RUN_ID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")
HEADER = writing.csv_lines([files.CSV_COLUMNS], "\r\n").encode()


# ---------------------------------------------------------------- what is on disk

def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (directories do not count)."""
    return {str(path.relative_to(root)): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file()}


def directories_under(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_dir())


def temporaries(root: Path) -> list[str]:
    return [str(path) for path in root.rglob(f"{writing.TEMPORARY_PREFIX}*")]


def assert_disk_unchanged(root: Path, before: dict[str, bytes]) -> None:
    after = snapshot(root)
    assert temporaries(root) == []
    assert sorted(after) == sorted(before), "files appeared or vanished"
    for name, data in before.items():
        assert after[name] == data, f"{name} changed"


@pytest.fixture(autouse=True)
def no_launcher_environment(monkeypatch):
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


# ---------------------------------------------------------------- the table

@dataclass
class Case:
    """argv ({tmp} is the test's directory), the exit code, text of the one stderr line, files
    on disk before (path -> bytes), launcher variables, and a setup(monkeypatch) if needed."""

    id: str
    argv: list[str]
    code: int
    text: str
    files: dict[str, bytes] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    setup: object = None
    modes: dict[str, int] = field(default_factory=dict)    # chmod after creating the files
    layout: object = None          # layout(tmp_path): what files= cannot say (a FIFO, a hole)


class BrokenImport(importlib.abc.MetaPathFinder):
    """Importing DeepSpeed raises ``error`` (a broken install, or none)."""

    def __init__(self, error: BaseException):
        self.error = error

    def find_spec(self, name, path=None, target=None):
        if name == "deepspeed" or name.startswith("deepspeed."):
            raise self.error
        return None


def deepspeed_raises(error: BaseException):
    def setup(monkeypatch):
        for name in [name for name in sys.modules if name.split(".")[0] == "deepspeed"]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.setattr(sys, "meta_path", [BrokenImport(error), *sys.meta_path])
    return setup


SWEEP = ["--batch-size", "2,4"]
FOREIGN_CSV = b"a,b,c\n1,2,3\n"
STORED_MODEL = stored_result()["model"]


def stored(config: dict | None = None, **keys) -> bytes:
    """A result file's bytes, matching the schema (conftest.stored_result); ``None`` drops a
    key."""
    document = stored_result(config, **keys)
    return json.dumps({key: value for key, value in document.items()
                       if value is not None}).encode()


def result_limit(size: int):
    """The largest result file read, lowered for the test (1 GiB is too large to write)."""
    return lambda monkeypatch: monkeypatch.setattr(inputs, "MAX_RESULT_BYTES", size)


def bound_socket(path: Path) -> None:
    """A UNIX socket left on disk (closed: stat still sees it)."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
TORCHRUN_ENV = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": "29500"}

CASES = [
    # Float flags: finite, in range, checked in one place (cli.finite_float).
    Case("tolerance-nan", ["--tolerance", "nan"], 2, "--tolerance: must be a finite number"),
    Case("tolerance-inf", ["--tolerance", "inf"], 2, "--tolerance: must be a finite number"),
    Case("tolerance-negative", ["--tolerance", "-1"], 2, "--tolerance"),
    Case("peak-tflops-nan", ["--peak-tflops", "nan"], 2, "--peak-tflops: must be a finite"),
    Case("peak-tflops-inf", ["--peak-tflops", "1e999"], 2, "--peak-tflops: must be a finite"),
    Case("dist-timeout-nan", ["--dist-timeout", "nan"], 2, "--dist-timeout: must be a finite"),
    Case("dist-timeout-huge", ["--dist-timeout", "1e300"], 2, "--dist-timeout"),
    Case("dist-timeout-zero", ["--dist-timeout", "0"], 2, "--dist-timeout"),
    Case("memory-budget-nan", ["--find-max-batch", "--memory-budget-gb", "nan"], 2,
         "--memory-budget-gb: must be a finite"),
    Case("bucket-cap-inf", ["--ddp-bucket-cap-mb", "inf"], 2, "--ddp-bucket-cap-mb"),
    # Integers with documented bounds.
    Case("seed-beyond-64-bits", ["--seed", str(2**64)], 2, "--seed: must be zero or more"),
    Case("seed-negative", ["--seed", "-1"], 2, "--seed"),
    Case("iterations-huge", ["--iterations", str(10**12)], 2, "--iterations: must be a positive"),
    Case("warmup-huge", ["--warmup", str(10**9)], 2, "--warmup"),
    Case("image-size-huge", ["--image-size", str(10**9)], 2, "--image-size"),
    Case("batch-size-huge", ["--batch-size", str(2**40)], 2, "--batch-size"),
    Case("opt-step-huge", ["--opt-step", str(10**12)], 2, "--opt-step"),
    Case("digits-beyond-int-limit", ["--iterations", "9" * 5000], 2, "must be an integer"),
    Case("profiler-schedule-huge", ["--profiler-schedule", "1,2,1000000"], 2,
         "--profiler-schedule"),
    Case("device-index-huge", ["--distributed_dataparallel", "--device_ids", "0,99999999999"],
         2, "--device_ids"),
    # --compileContext: literals only, every value checked, no option that runs a program.
    Case("compile-mode-not-a-string", ["--compile", "--compileContext", "{'mode': 5}"], 2,
         "'mode' must be one of"),
    Case("compile-mode-unknown", ["--compile", "--compileContext", "{'mode': 'fastest'}"], 2,
         "'mode' must be one of"),
    Case("compile-fullgraph-maybe", ["--compile", "--compileContext", "{'fullgraph': 'maybe'}"],
         2, "'fullgraph' must be True or False"),
    Case("compile-dynamic-number", ["--compile", "--compileContext", "{'dynamic': 3}"], 2,
         "'dynamic' must be True or False or None"),
    Case("compile-backend-unknown", ["--compile", "--compileContext", "{'backend': 'gcc'}"], 2,
         "'backend' must be one of"),
    Case("compile-keyword-unsupported", ["--compile", "--compileContext", "{'name': 'x'}"], 2,
         "cannot be set here"),
    Case("compile-cxx-option", ["--compile", "--compileContext",
                                "{'options': {'cpp.cxx': 'gcc'}}"], 2, "is not allowed"),
    Case("compile-cuda-cxx-option", ["--compile", "--compileContext",
                                     "{'options': {'cuda.cuda_cxx': '/tmp/x'}}"], 2,
         "is not allowed"),
    Case("compile-debug-dir-option", ["--compile", "--compileContext",
                                      "{'options': {'trace.debug_dir': '/tmp'}}"], 2,
         "is not allowed"),
    Case("compile-value-names-program", ["--compile", "--compileContext",
                                         "{'options': {'max_autotune_gemm_backends': 'sh'}}"],
         2, "not a path or a program"),
    Case("compile-value-is-path", ["--compile", "--compileContext",
                                   "{'options': {'max_autotune_gemm_backends': '/bin/sh'}}"],
         2, "not a path or a program"),
    Case("compile-value-wrong-type", ["--compile", "--compileContext",
                                      "{'options': {'max_autotune': 3}}"], 2, "must be bool"),
    Case("compile-value-huge", ["--compile", "--compileContext",
                                "{'options': {'cpp.threads': 10000000000000}}"], 2,
         "out of range"),
    Case("compile-deep-literal", ["--compile", "--compileContext",
                                  "{'options': " + "[" * 90 + "]" * 90 + "}"], 2,
         "nests more than"),
    Case("compile-very-deep-literal", ["--compile", "--compileContext", "[" * 100000], 2,
         "characters long"),
    Case("compile-unary-chain", ["--compile", "--compileContext",
                                 "{'fullgraph': " + "-" * 4000 + "1}"], 2, "dict literal"),
    Case("compile-code", ["--compile", "--compileContext", "__import__('os').system('true')"],
         2, "dict literal"),
    # --output-file is a name inside --output-dir.
    Case("output-file-dotdot", ["--output-file", "../escaped"], 2, "must be a file name"),
    Case("output-file-absolute", ["--output-file", "/tmp/escaped.json"], 2,
         "must be a file name"),
    Case("output-file-subdirectory", ["--output-file", "sub/r.json"], 2, "must be a file name"),
    Case("output-file-is-dotdot", ["--output-file", ".."], 2, "must be a file name"),
    Case("output-file-empty", ["--output-file", " "], 2, "must not be empty"),
    Case("csv-file-empty", ["--csv-file", ""], 2, "must not be empty"),
    Case("output-file-names-directory", ["--output-file", "r.json"], 2, "is a directory",
         files={"out/r.json/keep": b"x"}),
    Case("output-file-too-long", ["--output-file", "x" * 300], 2, "longer than"),
    Case("output-dir-is-a-file", ["--output-dir", "{tmp}/afile/sub"], 2, "cannot write results",
         files={"afile": b"x"}),
    # The CSV: checked before the run.
    Case("csv-foreign-header", ["--csv-file", "{tmp}/f.csv"], 2, "different CSV header",
         files={"f.csv": FOREIGN_CSV}),
    Case("csv-binary", ["--csv-file", "{tmp}/b.csv"], 2, "not a text CSV",
         files={"b.csv": b"\x00\x01\x02binary\x00"}),
    Case("csv-not-utf8", ["--csv-file", "{tmp}/l.csv"], 2, "not a UTF-8 text CSV",
         files={"l.csv": b"time_utc,n\xe9twork\n"}),
    Case("csv-is-directory", ["--csv-file", "{tmp}/csvdir"], 2, "is a directory",
         files={"csvdir/keep": b""}),
    Case("csv-in-missing-directory", ["--csv-file", "{tmp}/nowhere/s.csv"], 2,
         "does not exist"),
    Case("csv-is-device", ["--csv-file", os.devnull], 2, "not a regular file"),
    Case("csv-is-the-json", ["--output-file", "r.json", "--csv-file", "{tmp}/out/r.json"], 2,
         "is also the JSON result file"),
    # Read-only files and directories (root writes them anyway: those cases skip as root).
    Case("csv-read-only", ["--csv-file", "{tmp}/ro.csv"], 2, "the file is read-only",
         files={"ro.csv": HEADER}, modes={"ro.csv": 0o444}),
    Case("json-read-only", ["--output-file", "r.json"], 2, "the file is read-only",
         files={"out/r.json": b"{}"}, modes={"out/r.json": 0o444}),
    Case("output-dir-read-only", [], 2, "cannot write results to --output-dir",
         files={"out/keep": b""}, modes={"out": 0o555}),
    # --plot and --profiler-output.
    Case("plot-single-configuration", ["--plot", "{tmp}/p.png"], 2, "--plot draws a sweep"),
    Case("plot-missing-directory", [*SWEEP, "--plot", "{tmp}/nowhere/p.png"], 2,
         "does not exist"),
    Case("plot-unknown-format", [*SWEEP, "--plot", "{tmp}/p.xyz"], 2, "suffix names the format"),
    Case("plot-no-suffix", [*SWEEP, "--plot", "{tmp}/plot"], 2, "suffix names the format"),
    Case("plot-is-directory", [*SWEEP, "--plot", "{tmp}/p.png"], 2, "is a directory",
         files={"p.png/keep": b""}),
    Case("profiler-output-under-a-file", ["--kineto", "--profiler-output", "{tmp}/afile/t/"],
         2, "cannot write --kineto traces", files={"afile": b"x"}),
    # The --compare and --scaling-baseline inputs: results of this tool, or refused.
    Case("compare-list", ["--compare", "{tmp}/base.json"], 2, "not a result of this tool",
         files={"base.json": b"[1, 2]"}),
    Case("compare-missing-keys", ["--compare", "{tmp}/base.json"], 2, "not a result",
         files={"base.json": b"{}"}),
    Case("compare-zero-throughput", ["--compare", "{tmp}/base.json"], 2, "not a result",
         files={"base.json": b'{"Throughput [img/sec]": 0}'}),
    Case("compare-nan-throughput", ["--compare", "{tmp}/base.json"], 2, "not a result",
         files={"base.json": b'{"Throughput [img/sec]": NaN}'}),
    Case("compare-boolean-throughput", ["--compare", "{tmp}/base.json"], 2, "not a result",
         files={"base.json": b'{"Throughput [img/sec]": true}'}),
    Case("compare-binary", ["--compare", "{tmp}/base.json"], 2, "cannot read a result JSON",
         files={"base.json": b"\xff\xfe\x00garbage"}),
    Case("compare-deeply-nested", ["--compare", "{tmp}/base.json"], 2, "cannot read",
         files={"base.json": b"[" * 200000}),
    Case("compare-missing", ["--compare", "{tmp}/none.json"], 2, "cannot read a result JSON"),
    Case("compare-directory", ["--compare", "{tmp}"], 2, "cannot read a result JSON"),
    Case("compare-another-configuration", ["--compare", "{tmp}/base.json"], 2,
         "is another configuration: model 'resnet50' there, 'resnet18' here",
         files={"base.json": stored({"network": "resnet50"}, Name="resnet50",
                                    model={**STORED_MODEL, "name": "resnet50"})}),
    Case("scaling-baseline-list", ["--scaling-baseline", "{tmp}/base.json"], 2,
         "--scaling-baseline", files={"base.json": b"[]"}),
    Case("scaling-baseline-other-mode", ["--scaling-baseline", "{tmp}/base.json"], 2,
         "differs in", files={"base.json": stored({"network": "resnet18",
                                                   "mode": "inference"})}),
    # Inputs that never end, block or are huge: checked with os.stat before the open, opened
    # without blocking, read with a bound (microbench.platform.inputs); documents through the schema.
    Case("compare-dev-zero", ["--compare", "/dev/zero"], 2,
         "--compare /dev/zero: cannot read a result JSON (is a device, not a regular file)"),
    Case("rerun-dev-zero", ["--rerun", "/dev/zero"], 2, "--rerun /dev/zero: cannot read"),
    Case("scaling-baseline-dev-urandom", ["--scaling-baseline", "/dev/urandom"], 2,
         "is a device, not a regular file"),
    Case("compare-fifo", ["--compare", "{tmp}/pipe.json"], 2, "is a FIFO, not a regular file",
         layout=lambda tmp: os.mkfifo(tmp / "pipe.json")),
    Case("rerun-fifo", ["--rerun", "{tmp}/pipe.json"], 2, "is a FIFO, not a regular file",
         layout=lambda tmp: os.mkfifo(tmp / "pipe.json")),
    Case("scaling-baseline-fifo", ["--scaling-baseline", "{tmp}/pipe.json"], 2,
         "is a FIFO, not a regular file", layout=lambda tmp: os.mkfifo(tmp / "pipe.json")),
    Case("compare-larger-than-a-result", ["--compare", "{tmp}/huge.json"], 2,
         "holds 2,000 bytes, more than the 1,000 a result file can have",
         files={"huge.json": b" " * 2000}, setup=result_limit(1000)),
    Case("rerun-larger-than-a-result", ["--rerun", "{tmp}/huge.json"], 2,
         "more than the 1,000 a result file", files={"huge.json": stored() + b" " * 5000},
         setup=result_limit(1000)),
    Case("rerun-socket", ["--rerun", "{tmp}/s"], 2, "is a socket, not a regular file",
         layout=lambda tmp: bound_socket(tmp / "s")),
    Case("compare-schema-wrong-type", ["--compare", "{tmp}/base.json"], 2,
         "does not match the result schema (version 2) at $.GPUs",
         files={"base.json": stored(GPUs="two")}),
    Case("rerun-schema-wrong-type", ["--rerun", "{tmp}/base.json"], 2,
         "--rerun {tmp}/base.json: does not match the result schema (version 2) at "
         "$.config.batch_size", files={"base.json": stored({"batch_size": "64"})}),
    Case("scaling-baseline-schema-missing-key", ["--scaling-baseline", "{tmp}/base.json"], 2,
         "at $: 'env' is a required property",
         files={"base.json": stored(env=None)}),
    Case("compare-newer-schema", ["--compare", "{tmp}/base.json"], 2,
         "schema version 99 is newer than this tool reads",
         files={"base.json": stored(schema_version=99)}),
    Case("compare-sweep-document", ["--compare", "{tmp}/base.json"], 2,
         "is a sweep document, not one run's result",
         files={"base.json": (HISTORY / "v1_8aa20e1_sweep.json").read_bytes()}),
    # Names that are not valid text (non-UTF-8 bytes arrive as lone surrogates): every path
    # flag refused before the run (argtypes.path_text), the bytes shown as escapes.
    *[Case(f"{flag[2:]}-not-utf8", [*before, flag, "{tmp}/r\udce9sults" + suffix], 2,
           f"{flag}: '{{tmp}}/r\\xe9sults{suffix}': the name is not valid UTF-8 text")
      for flag, before, suffix in (
          ("--output-dir", [], ""), ("--output-file", [], ".json"), ("--csv-file", [], ".csv"),
          ("--plot", SWEEP, ".png"), ("--profiler-output", ["--kineto"], ""),
          ("--compare", [], ".json"), ("--rerun", [], ".json"),
          ("--scaling-baseline", [], ".json"), ("--data-dir", ["--data", "folder"], ""),
          ("--data-cache", ["--data", "loader"], ""))],
    # --dist-url: torch.distributed's init methods only, checked before the run.
    Case("dist-url-http", ["--dist-url", "http://10.0.0.1:29500"], 2,
         "the scheme must be one of tcp://HOST:PORT, env:// or file:///PATH"),
    Case("dist-url-no-scheme", ["--dist-url", "10.0.0.1:29500"], 2, "the scheme must be"),
    Case("dist-url-tcp-no-port", ["--dist-url", "tcp://10.0.0.1"], 2, "tcp:// takes HOST:PORT"),
    Case("dist-url-tcp-port-huge", ["--dist-url", "tcp://h:99999"], 2, "a port from 1 to 65535"),
    Case("dist-url-file-relative", ["--dist-url", "file://rendezvous"], 2,
         "file:// takes an absolute path"),
    # The failure-injection hook is checked like the launcher's variables.
    Case("fail-rank-not-a-number", [], 2, "MICROBENCH_FAIL_RANK='abc' is not an integer",
         env={"MICROBENCH_FAIL_RANK": "abc"}),
    Case("fail-rank-negative", [], 2, "MICROBENCH_FAIL_RANK=-1 must be in",
         env={"MICROBENCH_FAIL_RANK": "-1"}),
    # A sweep is bounded; refused runs leave no directory behind (checked for every row).
    Case("sweep-20000-batch-sizes", ["--batch-size", ",".join(map(str, range(1, 20001)))], 2,
         "a sweep of 20,000 configurations, more than the 1,000 one invocation runs"),
    Case("sweep-product-too-large", ["--batch-size", ",".join(map(str, range(1, 41))),
                                     "--network", ",".join(["resnet18"] * 30)], 2,
         "a sweep of 1,200 configurations"),
    Case("refused-run-nested-output-dir", ["--output-dir", "{tmp}/a/b/c", "--csv-file",
                                           "{tmp}/f.csv"], 2, "different CSV header",
         files={"f.csv": FOREIGN_CSV}),
    # Launcher environments: all of it or none of it.
    Case("env-rank-alone", [], 2, "partial launcher environment", env={"RANK": "0"}),
    Case("env-no-master", [], 2, "MASTER_ADDR, MASTER_PORT not",
         env={"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}),
    Case("env-rank-beyond-world", [], 2, "RANK=5 must be in [0, 1]",
         env={**TORCHRUN_ENV, "RANK": "5"}),
    Case("env-port-not-a-number", [], 2, "MASTER_PORT='http' is not an integer",
         env={**TORCHRUN_ENV, "MASTER_PORT": "http"}),
    Case("env-torchelastic-partial", [], 2, "partial launcher environment",
         env={"TORCHELASTIC_RUN_ID": "x", "RANK": "0"}),
    Case("env-slurm-no-localid", [], 2, "SLURM_LOCALID is not set",
         env={"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "MASTER_ADDR": "h",
              "MASTER_PORT": "1"}),
    Case("manual-launch-error-has-rank", ["--distributed_dataparallel", "--rank", "1",
                                          "--world-size", "2", "--dist-backend", "gloo",
                                          "--dist-url", "tcp://127.0.0.1:1", "--batch-size",
                                          "3", "--device_ids", "0,1"], 2,
         "[rank 2] error: --batch-size 3 does not split evenly"),
    # DeepSpeed: missing, or failing with something other than ImportError; sweeps too.
    Case("deepspeed-broken", ["--flops-prof-step", "1"], 4, "DeepSpeed is installed but fails",
         setup=deepspeed_raises(RuntimeError("CUDA_HOME does not exist"))),
    Case("deepspeed-missing-in-sweep", [*SWEEP, "--flops-prof-step", "1"], 4,
         "needs DeepSpeed", setup=deepspeed_raises(ImportError("No module named 'deepspeed'"))),
]


def prepare(case: Case, tmp_path: Path, monkeypatch) -> dict[str, bytes]:
    """Lay out the case's files and environment; what is on disk before the run."""
    if case.modes and os.geteuid() == 0:
        pytest.skip("root writes read-only files and directories")
    for name, data in case.files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    if case.layout is not None:
        case.layout(tmp_path)
    for name, mode in case.modes.items():
        (tmp_path / name).chmod(mode)
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    if case.setup is not None:
        case.setup(monkeypatch)
    return snapshot(tmp_path)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_input_one_line_and_disk_unchanged(case, tmp_path, capfd, monkeypatch):
    before = prepare(case, tmp_path, monkeypatch)
    directories = directories_under(tmp_path)
    argv = [arg.replace("{tmp}", str(tmp_path))
            for arg in [*RUN, "--output-dir", "{tmp}/out", *case.argv]]
    try:
        ran = run_main(capfd, *argv)
        assert_one_line_error(ran, case.code, case.text.replace("{tmp}", str(tmp_path)))
        assert "Warming up" not in ran.stdout, "found only after the run"
        assert_disk_unchanged(tmp_path, before)
        assert directories_under(tmp_path) == directories, "a refused run made a directory"
    finally:
        for name in case.modes:                  # let pytest clean up
            (tmp_path / name).chmod(0o755)


# The op bench: the same contract for its flags, shapes and output files.
OPS_RUN = ["--op", "add", "--input1-dim", "8", "--device", "cpu", "--num-iters", "2",
           "--num-warmup-iters", "0"]
OPS_CASES = [
    Case("ops-peak-tflops-nan", ["--peak-tflops", "nan"], 2, "--peak-tflops: must be a finite"),
    Case("ops-peak-gbs-inf", ["--peak-gbs", "inf"], 2, "--peak-gbs: must be a finite"),
    Case("ops-num-iters-huge", ["--num-iters", str(10**12)], 2, "--num-iters"),
    Case("ops-num-iters-zero", ["--num-iters", "0"], 2, "--num-iters"),
    Case("ops-dimension-huge", ["--input1-dim", "99999999999999"], 2, "more than any device"),
    Case("ops-too-many-dimensions", ["--input1-dim", "-".join(["1"] * 9)], 2, "at most 8"),
    Case("ops-zero-dimension", ["--input1-dim", "0-4"], 2, "malformed shape"),
    Case("ops-negative-dimension", ["--input1-dim", "4--4"], 2, "malformed shape"),
    Case("ops-unicode-digits", ["--input1-dim", "\uff12-3"], 2, "malformed shape"),
    Case("ops-matmul-one-dimension", ["--op", "matmul", "--input1-dim", "3", "--input2-dim",
                                      "3"], 2, "needs shapes of at least 2 dims"),
    # A missing folder is made (as microbench makes its --output-dir); a file in the way is not.
    Case("ops-json-under-a-file", ["--output-json", "{tmp}/afile/o.json"], 2,
         "does not exist", files={"afile": b""}),
    Case("ops-csv-is-directory", ["--output-csv", "{tmp}/d"], 2, "is a directory",
         files={"d/keep": b""}),
    Case("ops-json-is-device", ["--output-json", os.devnull], 2, "not a regular file"),
    Case("ops-json-not-utf8", ["--output-json", "{tmp}/\udcffo.json"], 2,
         "--output-json: '{tmp}/\\xffo.json': the name is not valid UTF-8 text"),
    Case("ops-csv-not-utf8", ["--output-csv", "{tmp}/o\udc80.csv"], 2,
         "the name is not valid UTF-8 text"),
    Case("ops-conv2d-kernel-larger", ["--op", "conv2d", "--input1-dim", "1-3-4-4",
                                      "--input2-dim", "8-3-7-7"], 2,
         "conv2d's kernel 7x7 is larger than its 4x4 input"),
    Case("ops-conv2d-kernel-wider", ["--op", "conv2d", "--input1-dim", "1-3-8-2",
                                     "--input2-dim", "8-3-1-3"], 2,
         "kernel 1x3 is larger than its 8x2 input"),
    Case("ops-json-and-csv-same", ["--output-json", "{tmp}/o", "--output-csv", "{tmp}/o"], 2,
         "name the same file"),
]


@pytest.mark.parametrize("case", OPS_CASES, ids=[case.id for case in OPS_CASES])
def test_hostile_op_bench_input_one_line_and_disk_unchanged(case, tmp_path, capfd,
                                                            monkeypatch):
    from microbench.ops.cli import main as ops_main
    before = prepare(case, tmp_path, monkeypatch)
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in [*OPS_RUN, *case.argv]]
    ran = run_main(capfd, *argv, main=ops_main)
    assert_one_line_error(ran, case.code, case.text.replace("{tmp}", str(tmp_path)))
    assert_disk_unchanged(tmp_path, before)


# --model-kwargs of hf: models, checked against the model type's config before anything is
# built (microbench.models.hf_overrides): keys it knows, the type of its default, ranges, activations.
HF_RUN = ["--network", "hf:llama", "--seq-len", "8", "--batch-size", "2", "--iterations", "1",
          "--warmup", "0", "--device", "cpu"]
MODEL_KWARGS_CASES = [
    ("layers-negative", ["num_hidden_layers=-1"], "num_hidden_layers=-1: must be positive"),
    ("heads-zero", ["num_attention_heads=0"], "num_attention_heads=0: must be positive"),
    ("layers-none", ["num_hidden_layers=none"], "a size or count must be a number"),
    ("hidden-size-5000-digits", ["hidden_size=" + "9" * 5000], "5,000 characters long"),
    ("hidden-size-huge", ["hidden_size=" + "9" * 30], "at most 1.67772e+07 in magnitude"),
    ("hidden-size-float", ["hidden_size=64.5"], "hidden_size=64.5: must be an integer"),
    ("hidden-size-bool", ["hidden_size=true"], "hidden_size=True: must be an integer"),
    ("hidden-size-list", ["hidden_size=[64]"], "must be an integer"),
    ("hidden-act-import", ["hidden_act=__import__"], "not an activation transformers knows"),
    ("hidden-act-code", ["hidden_act=__import__('os').system('true')"],
     "not an activation transformers knows"),
    ("hidden-act-number", ["hidden_act=3"], "not an activation transformers knows"),
    ("eps-negative", ["rms_norm_eps=-1e-5"], "rms_norm_eps=-1e-05: must be positive"),
    ("eps-nan", ["rms_norm_eps=nan"], "rms_norm_eps='nan': must be a number"),
    ("eps-infinite", ["rms_norm_eps=1e999"], "must be a finite number"),
    ("dropout-above-one", ["attention_dropout=2"], "a probability, from 0 to 1"),
    ("use-cache-word", ["use_cache=maybe"], "use_cache='maybe': must be true or false"),
    ("unknown-key", ["hiden_size=64"], "'hiden_size' is not a setting of the llama config"
                                       " (LlamaConfig); did you mean hidden_size"),
    ("private-key", ["_attn_implementation_internal=eager"], "is not a setting"),
    ("dict-nested", ["rope_parameters={'factor': [1, 2]}"], "must be a number, a word"),
    ("dict-code-word", ["rope_parameters={'rope_type': 'os.system(1)'}"],
     "a word of letters, digits"),
    ("dict-not-a-dict", ["rope_parameters=3"], "must be a dict literal"),
]


@pytest.mark.parametrize("kwargs, text", [case[1:] for case in MODEL_KWARGS_CASES],
                         ids=[case[0] for case in MODEL_KWARGS_CASES])
def test_hostile_model_kwargs_one_line_before_building(kwargs, text, tmp_path, capfd):
    pytest.importorskip("transformers")
    ran = run_main(capfd, *HF_RUN, "--output-dir", str(tmp_path / "out"), "--model-kwargs",
                   *kwargs)
    assert_one_line_error(ran, 2, text)
    assert "Building" not in ran.stdout and snapshot(tmp_path) == {}


# The report command: the same contract for its inputs and outputs (it imports no torch).
REPORT_CASES = [
    Case("report-input-not-utf8", ["{tmp}/r\udcffsults"], 2,
         "'{tmp}/r\\xffsults': the name is not valid UTF-8 text"),
    Case("report-plot-not-utf8", [str(HISTORY), "--plot", "{tmp}/\udce9.png"],
         2, "argument --plot: '{tmp}/\\xe9.png': the name is not valid UTF-8"),
    Case("report-html-not-utf8", [str(HISTORY), "--html", "{tmp}/\udce9"],
         2, "argument --html"),
    Case("report-fifo", ["{tmp}/pipe.json"], 2, "is a FIFO, not a regular file",
         layout=lambda tmp: os.mkfifo(tmp / "pipe.json")),
    Case("report-dev-zero", ["/dev/zero"], 2, "is a device, not a regular file"),
    Case("report-too-large", ["{tmp}/big.json"], 2, "more than the 1,000 a result file",
         files={"big.json": b" " * 2000},
         setup=lambda monkeypatch: monkeypatch.setattr(collection, "MAX_INPUT_BYTES", 1000)),
]


@pytest.mark.parametrize("case", REPORT_CASES, ids=[case.id for case in REPORT_CASES])
def test_hostile_report_input_one_line_and_disk_unchanged(case, tmp_path, capfd, monkeypatch):
    from microbench.report.command import main as report_main
    before = prepare(case, tmp_path, monkeypatch)
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in case.argv]
    ran = run_main(capfd, *argv, main=report_main)
    assert_one_line_error(ran, case.code, case.text.replace("{tmp}", str(tmp_path)))
    assert_disk_unchanged(tmp_path, before)


def test_a_name_of_non_utf8_bytes_from_the_command_line_is_one_line(tmp_path):
    """As a process, so the bytes go through Python's own decoding of argv (surrogateescape)."""
    name = os.fsencode(str(tmp_path)) + b"/r\xe9sults.json"
    done = subprocess.run([sys.executable, "-m", "microbench.report", name],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert_one_line_error(done, 2, "sults.json': the name is not valid UTF-8 text")
    assert snapshot(tmp_path) == {}


# ---------------------------------------------------------------- a terminal that takes no writes

class FullTerminal:
    """Standard output on /dev/full, in-process: every write fails with ENOSPC."""

    def write(self, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self):
        raise OSError(errno.ENOSPC, "No space left on device")

    def isatty(self):
        return False


LOST_OUTPUT = "error: standard output could not be written ({}); the run finished and its " \
              "result files, if any, were written"
TERMINALS = {"dev-full": (FullTerminal, "No space left on device"),
             "closed": (lambda: None, "it is closed")}


@pytest.mark.parametrize("terminal", sorted(TERMINALS))
def test_ops_and_report_finish_their_files_when_stdout_takes_no_writes(tmp_path, capfd,
                                                                      monkeypatch, terminal):
    from microbench.ops.cli import main as ops_main
    from microbench.report.command import main as report_main
    make, reason = TERMINALS[terminal]
    monkeypatch.setattr(sys, "stdout", make())
    ran = run_main(capfd, *OPS_RUN, "--output-json", str(tmp_path / "o.json"), main=ops_main)
    assert_one_line_error(ran, 4, LOST_OUTPUT.format(reason))
    assert json.loads((tmp_path / "o.json").read_text())["results"][0]["op"] == "add"
    ran = run_main(capfd, str(tmp_path / "o.json"), "--html", str(tmp_path / "p.html"),
                   main=report_main)
    # The report names the page it wrote on standard error (its stdout may be CSV or JSON),
    # then the one error line.
    assert ran.returncode == 4
    assert ran.stderr.splitlines() == [f"Page  : {tmp_path / 'p.html'}",
                                       LOST_OUTPUT.format(reason)]
    assert (tmp_path / "p.html").read_text().startswith("<!DOCTYPE html>")
    assert temporaries(tmp_path) == []


def test_a_lost_terminal_does_not_hide_a_failure_nor_a_reader_that_left():
    output = process.GuardedOutput(FullTerminal())
    output.write("lost")
    assert output.lost == "No space left on device" and not output.isatty()
    assert process.ended(5, output) == 5          # a regression still fails the gate as 5
    assert process.ended(0, process.GuardedOutput(None)) == 4

    class GoneReader(FullTerminal):
        def write(self, text):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
    with pytest.raises(BrokenPipeError):          # | head: exit 141, silently, as before
        process.GuardedOutput(GoneReader()).write("x")


def test_the_progress_line_takes_a_closed_stdout():
    from microbench.platform import progress
    activity = progress.Activity(None)
    activity.start("Building")
    activity.finish("done")


@pytest.mark.parametrize("terminal", ["dev-full", "closed"])
def test_a_run_whose_stdout_takes_no_writes_still_writes_its_results(tmp_path, terminal):
    """As a process: stdout on /dev/full, or closed by the shell (``>&-``): one line, exit 4,
    the JSON and the CSV row whole."""
    out = tmp_path / "out"
    argv = [sys.executable, str(SCRIPT), *RUN, "--mode", "inference", "--output-dir", str(out)]
    env = {**os.environ, **CHILD_ENV}
    if terminal == "dev-full":
        with open("/dev/full", "w") as full:
            done = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True,
                                  cwd=ROOT, env=env, timeout=240)
    else:
        done = subprocess.run(argv, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env,
                              timeout=240, preexec_fn=lambda: os.close(1))
    reason = TERMINALS[terminal][1]
    assert_one_line_error(subprocess.CompletedProcess(argv, done.returncode, "", done.stderr),
                          4, LOST_OUTPUT.format(reason))
    [result] = out.glob("*.json")
    assert json.loads(result.read_text())["Throughput [img/sec]"] > 0
    [row] = list(csv.DictReader((out / "benchmark_summary.csv").open()))
    assert row["status"] == "ok" and row["json_file"].endswith(result.name)
    assert temporaries(tmp_path) == []


# ---------------------------------------------------------------- runs that get to the end

def run_ok(capfd, *argv):
    ran = run_main(capfd, *RUN, *argv)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return ran


def test_compare_with_this_runs_own_file_reads_the_old_content_first(tmp_path, capfd,
                                                                      steady_clock):
    """X is the file this run writes: the gate reads X before the run, so a drop fails (on a
    steady fake clock, both runs measure the same: only the stored 10x can differ)."""
    out = tmp_path / "out"
    run_ok(capfd, "--mode", "inference", "--output-dir", str(out), "--output-file", "x")
    target = out / "x.json"
    baseline = json.loads(target.read_text())
    baseline["Throughput [img/sec]"] *= 10          # the stored run was 10x faster
    target.write_text(json.dumps(baseline))
    ran = run_main(capfd, *RUN, "--mode", "inference", "--output-dir", str(out),
                   "--output-file", "x", "--compare", str(target))
    assert_one_line_error(ran, 5, "throughput regressed")
    assert "is also this run's result file" in ran.stdout
    [line] = [line for line in ran.stdout.splitlines()
              if line.strip().startswith("Throughput [img/sec]") and line.endswith("%")]
    assert float(line.split()[-1].rstrip("%")) < -50, ran.stdout   # not +0.0% against itself
    stored = json.loads(target.read_text())["Throughput [img/sec]"]
    assert stored == baseline["Throughput [img/sec]"], ran.stdout  # a failed gate keeps it
    assert (out / "x.regressed.json").exists()
    assert temporaries(tmp_path) == []


def test_a_csv_with_unix_line_ends_takes_our_rows_with_its_own_line_ends(tmp_path, capfd):
    csv_path = tmp_path / "lf.csv"
    csv_path.write_bytes(HEADER.replace(b"\r\n", b"\n"))
    run_ok(capfd, "--mode", "inference", "--output-dir", str(tmp_path / "out"),
           "--csv-file", str(csv_path))
    data = csv_path.read_bytes()
    assert b"\r" not in data and data.count(b"\n") == 2
    [row] = list(csv.DictReader(data.decode().splitlines()))
    assert row["status"] == "ok"


def test_links_a_csv_appends_through_and_a_json_is_replaced(tmp_path, capfd):
    """The rule for symlinks (README, "Guarantees"): an append adds to the link's target (a
    shared summary CSV linked into several places), a whole file replaces the link itself, so
    no link makes the tool overwrite the file it points to."""
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "shared.csv").write_bytes(HEADER)
    (tmp_path / "elsewhere.json").write_bytes(b"precious")
    (tmp_path / "s.csv").symlink_to(tmp_path / "shared.csv")
    (out / "r.json").symlink_to(tmp_path / "elsewhere.json")
    run_ok(capfd, "--mode", "inference", "--output-dir", str(out), "--output-file", "r",
           "--csv-file", str(tmp_path / "s.csv"))
    assert (tmp_path / "s.csv").is_symlink()
    [row] = list(csv.DictReader((tmp_path / "shared.csv").open()))
    assert row["status"] == "ok"
    assert not (out / "r.json").is_symlink() and json.loads((out / "r.json").read_text())
    assert (tmp_path / "elsewhere.json").read_bytes() == b"precious"


def test_every_row_of_a_sweep_failing_is_not_a_success(tmp_path, capfd):
    # inception_v3 refuses 32 px inputs: each row is a usage error (2).
    ran = run_main(capfd, *RUN, "--network", "inception_v3", "--batch-size", "2,4",
                   "--output-dir", str(tmp_path))
    assert_one_line_error(ran, 2, "every configuration of the sweep failed (2 of 2)")
    rows = list(csv.DictReader((tmp_path / "benchmark_summary.csv").open()))
    assert [row["status"] for row in rows] == ["error", "error"]   # still recorded


def test_a_sweep_where_every_row_runs_out_of_memory_exits_3(tmp_path, capfd):
    ran = run_main(capfd, *RUN, "--batch-size", "500000,1000000", "--image-size", "2048",
                   "--iterations", "1", "--output-dir", str(tmp_path))
    assert_one_line_error(ran, 3, "every configuration of the sweep failed")


# ---------------------------------------------------------------- the writers under faults

def row(tag: str) -> dict:
    return {column: f"{tag}" for column in files.CSV_COLUMNS}


def rows_of(path: Path) -> list[list[str]]:
    return list(csv.reader(path.read_bytes().decode().splitlines()))


def fail_after_half(monkeypatch, error: BaseException):
    """The next write of a CSV append writes half its bytes, then fails."""
    real = writing._write_all

    def half_then_fail(fd, data):
        real(fd, data[:len(data) // 2])
        raise error
    monkeypatch.setattr(writing, "_write_all", half_then_fail)


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"),
                                   KeyboardInterrupt()], ids=["disk-full", "ctrl-c"])
def test_a_failed_append_is_cut_back_and_the_next_one_is_clean(tmp_path, monkeypatch, error):
    path = tmp_path / "s.csv"
    files.append_csv(row("first"), str(path))
    before = path.read_bytes()
    fail_after_half(monkeypatch, error)
    with pytest.raises(CannotWrite if isinstance(error, OSError) else KeyboardInterrupt):
        files.append_csv(row("lost"), str(path))
    assert path.read_bytes() == before
    monkeypatch.undo()
    files.append_csv(row("next"), str(path))
    assert [r[0] for r in rows_of(path)] == ["time_utc", "first", "next"]


@pytest.mark.parametrize("tail, kept", [
    (b"half,a,ro", ["time_utc", "first", "next"]),                  # cut off
    (writing.csv_lines([row("whole").values()], "").encode(),      # ended and kept
     ["time_utc", "first", "whole", "next"]),
    (writing.csv_lines([row("whole").values()], "").encode() + b"\r",
     ["time_utc", "first", "whole", "next"]),
], ids=["half-a-row", "a-row-without-line-end", "a-row-without-its-newline"])
def test_an_incomplete_last_line_is_repaired_before_appending(tmp_path, tail, kept):
    path = tmp_path / "s.csv"
    files.append_csv(row("first"), str(path))
    with path.open("ab") as stream:
        stream.write(tail)
    files.append_csv(row("next"), str(path))
    assert [r[0] for r in rows_of(path)] == kept
    assert all(len(r) == len(files.CSV_COLUMNS) for r in rows_of(path))
    assert path.read_bytes().endswith(b"\r\n") and b"\r\r" not in path.read_bytes()


def test_a_header_cut_short_by_a_crash_is_written_again(tmp_path):
    path = tmp_path / "s.csv"
    path.write_bytes(HEADER[:20])
    files.check_csv(str(path))                       # accepted before the run
    files.append_csv(row("first"), str(path))
    assert [r[0] for r in rows_of(path)] == ["time_utc", "first"]


def test_an_error_message_with_line_breaks_stays_on_its_row(tmp_path):
    path = tmp_path / "s.csv"
    files.append_csv({**row("x"), "error": "line one\nline two\r\nthree"}, str(path))
    assert path.read_bytes().count(b"\n") == 2
    assert rows_of(path)[1][-1] == "line one line two three"


def test_json_and_csv_row_are_written_together_or_not_at_all(tmp_path, monkeypatch):
    """The CSV append fails after the JSON is ready: the JSON stays as it was too."""
    json_path, csv_path = tmp_path / "r.json", tmp_path / "s.csv"
    json_path.write_text('{"previous": true}')
    files.append_csv(row("first"), str(csv_path))
    before = snapshot(tmp_path)
    summary = type("S", (), {})()
    summary.spec = type("Spec", (), {"json_path": str(json_path), "csv_path": str(csv_path)})()
    monkeypatch.setattr(files, "result_document", lambda s: {"new": 1})
    monkeypatch.setattr(files, "csv_row", lambda s: row("lost"))
    fail_after_half(monkeypatch, OSError(errno.EDQUOT, "Disk quota exceeded"))
    with pytest.raises(CannotWrite, match="Disk quota exceeded"):
        files.write_files(summary)
    assert_disk_unchanged(tmp_path, before)


def test_the_csv_row_is_appended_only_once_its_json_is_in_place(tmp_path, monkeypatch):
    """What a killed run leaves: the JSON is swapped in before the row is appended, so a kill
    between the two leaves a JSON without its row, never a row without its JSON."""
    json_path, csv_path = tmp_path / "r.json", tmp_path / "s.csv"
    json_path.write_text('{"previous": true}')
    summary = type("S", (), {})()
    summary.spec = type("Spec", (), {"json_path": str(json_path), "csv_path": str(csv_path)})()
    monkeypatch.setattr(files, "result_document", lambda s: {"new": 1})
    monkeypatch.setattr(files, "csv_row", lambda s: row("x"))
    seen = []
    real_append = files.append_csv
    monkeypatch.setattr(files, "append_csv", lambda r, path: (
        seen.append(json.loads(json_path.read_text())), real_append(r, path)))
    files.write_files(summary)
    assert seen == [{"new": 1}] and json.loads(json_path.read_text()) == {"new": 1}
    assert [r[0] for r in rows_of(csv_path)] == ["time_utc", "x"] and temporaries(tmp_path) == []


def _dead_pid() -> int:
    child = spawn([sys.executable, "-c", ""])
    child.wait()
    return child.pid


def test_stale_temporaries_of_dead_processes_on_this_host_are_swept(tmp_path):
    host = writing._HOST
    other_host = "0" * 8 if host != "0" * 8 else "1" * 8
    dead, mine = _dead_pid(), os.getpid()
    names = {"dead": f".tmp-{dead}.{host}.0123abcd-r.json",
             "dead-backup": f".tmp-{dead}.{host}.89abcdef-s.json",
             "alive": f".tmp-{os.getppid()}.{host}.0123abcd-r.json",
             "mine": f".tmp-{mine}.{host}.0123abcd-r.json",
             "other-host": f".tmp-{dead}.{other_host}.0123abcd-r.json",
             "older-format": ".tmp-0123abcd-r.json", "not-ours": "notes.txt"}
    for name in names.values():
        (tmp_path / name).write_text("x")
    writing.write_json(str(tmp_path / "r.json"), {"a": 1})
    left = {path.name for path in tmp_path.iterdir()}
    assert left == {"r.json", *(names[key] for key in ("alive", "mine", "other-host",
                                                       "older-format", "not-ours"))}


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"),
                                   KeyboardInterrupt()], ids=["disk-full", "ctrl-c"])
def test_a_failed_whole_write_leaves_the_previous_file(tmp_path, monkeypatch, error):
    target = tmp_path / "r.json"
    target.write_text("previous")
    fail_after_half(monkeypatch, error)
    with pytest.raises(CannotWrite if isinstance(error, OSError) else KeyboardInterrupt):
        writing.write_json(str(target), {"new": 1})
    assert_disk_unchanged(tmp_path, {"r.json": b"previous"})


def test_result_files_honour_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        writing.write_json(str(tmp_path / "r.json"), {"a": 1})
        files.append_csv(row("x"), str(tmp_path / "s.csv"))
        writing.write_via(str(tmp_path / "t.json"),
                          lambda path: Path(path).write_text("{}"))
    finally:
        os.umask(old)
    for name in ("r.json", "s.csv", "t.json"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o640, name


def test_concurrent_appends_with_failures_never_interleave_nor_leave_fragments(tmp_path,
                                                                              monkeypatch):
    """Threads append under the lock (flock locks each open file); every third write fails
    half-way; the file holds exactly the rows that succeeded, each whole."""
    path, real, count = str(tmp_path / "s.csv"), writing._write_all, [0]

    def sometimes_fails(fd, data):
        count[0] += 1
        if count[0] % 3 == 0:
            real(fd, data[:len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, data)
    monkeypatch.setattr(writing, "_write_all", sometimes_fails)
    written, lock = [], threading.Lock()

    def worker(name):
        for index in range(15):
            try:
                files.append_csv(row(f"{name}-{index}"), path)
                with lock:
                    written.append(f"{name}-{index}")
            except CannotWrite:
                pass
    threads = [threading.Thread(target=worker, args=(f"w{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    rows = rows_of(Path(path))
    if written:                                   # the header went with the first row
        assert rows[0] == list(files.CSV_COLUMNS)
    assert sorted(r[0] for r in rows[1:]) == sorted(written)
    assert all(len(r) == len(files.CSV_COLUMNS) and len(set(r)) == 1 for r in rows[1:])


def test_ctrl_c_or_sigterm_during_the_imports_prints_one_line(capfd, monkeypatch):
    previous = {number: signal.getsignal(number) for number in process.STOPPING}
    try:
        for error, code, text in ((KeyboardInterrupt(), 130, "error: interrupted"),
                                  (Terminated(), 143, "error: terminated (SIGTERM)"),
                                  (Terminated("SIGHUP", 129), 129, "error: terminated (SIGHUP)")):
            class Interrupting(importlib.abc.MetaPathFinder):
                def find_spec(self, name, path=None, target=None):
                    if name == "microbench.main":
                        raise error
                    return None
            monkeypatch.delitem(sys.modules, "microbench.main", raising=False)
            monkeypatch.setattr(sys, "meta_path", [Interrupting(), *sys.meta_path])
            capfd.readouterr()
            assert process.entry("microbench.main") == code
            err = capfd.readouterr().err
            assert err == text + "\n"
            monkeypatch.undo()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


# ---------------------------------------------------------------- processes of their own

def child(argv, **kwargs) -> subprocess.Popen:
    return spawn([sys.executable, str(SCRIPT), *argv], cwd=ROOT,
                            env={**os.environ, **CHILD_ENV, **kwargs.pop("env", {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def file_size_limit(size: int):
    """Run in the child before exec: writes past ``size`` bytes fail with EFBIG, like a full
    disk (Python ignores SIGXFSZ, so the write returns the error)."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


@pytest.mark.parametrize("where", ["json", "csv"])
def test_a_full_disk_leaves_json_and_csv_as_they_were(tmp_path, where):
    out = tmp_path / "out"
    out.mkdir()
    (out / "r.json").write_bytes(b'{"previous": true}\n')
    # A CSV of earlier rows; for the CSV case larger than the new JSON, so only its append
    # crosses the limit.
    rows = 1 if where == "json" else 200
    lines = writing.csv_lines([list(row(f"old{n}").values()) for n in range(rows)], "\r\n")
    (out / "benchmark_summary.csv").write_bytes(HEADER + lines.encode())
    before = snapshot(tmp_path)
    limit = 1500 if where == "json" else len(HEADER) + len(lines) + 100
    proc = child([*RUN, "--mode", "inference", "--output-dir", str(out), "--output-file", "r"],
                 preexec_fn=file_size_limit(limit))
    stdout, stderr = proc.communicate(timeout=240)
    ran = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert_one_line_error(ran, 4, "File too large; the previous file is unchanged")
    assert_disk_unchanged(tmp_path, before)


@pytest.mark.parametrize("signal_number, code, text", [
    (signal.SIGTERM, 143, "error: terminated (SIGTERM)"),
    (signal.SIGINT, 130, "error: interrupted"),
    (signal.SIGHUP, 129, "error: terminated (SIGHUP)"),
    (signal.SIGQUIT, 131, "error: terminated (SIGQUIT)")],
    ids=["sigterm", "sigint", "sighup", "sigquit"])
def test_a_signal_in_the_timed_loop_ends_with_one_line_and_no_files(tmp_path, signal_number,
                                                                   code, text):
    proc = child([*RUN, "--iterations", str(10**6), "--output-dir", str(tmp_path)])
    deadline = time.monotonic() + 180
    for line in proc.stdout:                      # polling the output, no sleeps
        if line.startswith("Timing") or time.monotonic() > deadline:
            break
    proc.send_signal(signal_number)
    stdout, stderr = proc.communicate(timeout=60)
    ran = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert_one_line_error(ran, code, text)
    assert snapshot(tmp_path) == {} and temporaries(tmp_path) == []


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_ranks_started_with_different_settings_exit_2_at_once(tmp_path):
    """Two ranks as torchrun would start them, with different --iterations: both stop right
    after the process group forms, naming the first difference. A rank that went on would
    wait in a collective until --dist-timeout (600 s) and fail with a timeout instead, so the
    message is the proof, not the wall clock (which a busy machine stretches)."""
    port = str(free_port())
    procs = [child([*RUN, "--batch-size", "4", "--iterations", str(iterations),
                    "--output-dir", str(tmp_path)],
                   env={"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
             for rank, iterations in enumerate((2, 3))]
    outputs = [proc.communicate(timeout=300) for proc in procs]
    for rank, (proc, (stdout, stderr)) in enumerate(zip(procs, outputs)):
        ran = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        assert_one_line_error(ran, 2, f"[rank {rank}] error: ranks were started with different "
                                      f"settings: --iterations is 2 on rank 0, 3 on rank 1")
    assert snapshot(tmp_path) == {}


def test_ranks_may_name_different_output_dirs_and_only_rank_0_writes(tmp_path):
    """The lead's rule: --output-dir (and --output-file, --csv-file) may differ across ranks;
    only rank 0 writes results, so rank 1's directory is never created nor checked (here it
    lies under a file, where no directory can be)."""
    (tmp_path / "afile").write_bytes(b"x")
    port = str(free_port())
    procs = [child([*RUN, "--batch-size", "4", "--output-dir", str(tmp_path / directory)],
                   env={"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
             for rank, directory in enumerate(("rank0", "afile/rank1"))]
    outputs = [proc.communicate(timeout=240) for proc in procs]
    for proc, (stdout, stderr) in zip(procs, outputs):
        assert proc.returncode == 0, stderr[-3000:]
    written = sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*"))
    assert written[0] == "afile" and all(name.startswith("rank0") for name in written[1:])
    assert len(list((tmp_path / "rank0").glob("*.json"))) == 1


def test_a_problem_only_rank_0_sees_stops_every_spawned_worker(tmp_path):
    """The manual launch with two --device_ids: the CSV only rank 0 writes has another header;
    both workers stop at once, each with its [rank N] line, and nothing is written."""
    foreign = tmp_path / "f.csv"
    foreign.write_bytes(FOREIGN_CSV)
    proc = child([*RUN, "--batch-size", "4", "--output-dir", str(tmp_path / "out"),
                  "--csv-file", str(foreign), "--distributed_dataparallel", "--rank", "0",
                  "--world-size", "1", "--dist-backend", "gloo", "--dist-url",
                  f"tcp://127.0.0.1:{free_port()}", "--device_ids", "0,1"])
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 2, stderr[-3000:]
    lines = sorted(line for line in stderr.splitlines() if line)
    assert len(lines) == 2 and "Traceback" not in stderr, stderr
    assert lines[0].startswith("[rank 0] error: --csv-file") and "different CSV header" in lines[0]
    assert lines[1].startswith("[rank 1] error: rank 0 cannot run")
    assert foreign.read_bytes() == FOREIGN_CSV and not list(tmp_path.rglob("*.json"))


# ---------------------------------------------------------------- issue 38: untrusted result files

# What a stranger's result file may carry in its names: OSC 0 (retitle the window), OSC 52
# (write the clipboard), ED (clear the screen), a C1 CSI, DEL, a bidirectional override.
TERMINAL_ATTACKS = ("\x1b]0;owned\x07", "\x1b]52;c;aGk=\x07", "\x1b[2J", "\x9b2J", "\x7f",
                    "\u202e")


def hostile_result(name: str, device: str = "AMD EPYC", **keys) -> dict:
    """A schema-valid result whose model and device are named ``name`` and ``device`` (its
    time of its own, so that two of them are two results)."""
    document = stored_result({"network": name}, **keys)
    document["Name"] = name
    document["model"] = {**document["model"], "name": name}
    second = next(_SECONDS) % 60
    document["env"] = {**document["env"], "device_name": device, "cpu": device,
                       "time_utc": f"2026-11-24T20:35:{second:02d}+00:00"}
    return document


_SECONDS = itertools.count()


def write_results(directory: Path, documents: dict[str, dict]) -> Path:
    directory.mkdir(exist_ok=True)
    for file_name, document in documents.items():
        (directory / file_name).write_text(json.dumps(document))
    return directory


def report_of(capfd, *argv):
    from microbench.report import command
    return run_main(capfd, *argv, main=command.main)


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


# ---------------------------------------------------------------- issue 38: workers that cannot start

def wait_gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("layout", ["v1", "v2"])
def test_the_cgroups_pids_limit_is_read(tmp_path, layout):
    folder = tmp_path / ("pids/job" if layout == "v1" else "job")
    folder.mkdir(parents=True)
    (folder / "pids.max").write_text("400\n")
    (folder / "pids.current").write_text("12\n")
    (tmp_path / "cgroup").write_text("4:memory:/x\n8:pids:/job\n" if layout == "v1"
                                     else "0::/job\n")
    room, why = process.process_headroom(str(tmp_path / "cgroup"), str(tmp_path))
    assert room == 388 and "pids.max is 400" in why
    (folder / "pids.max").write_text("max\n")                # no limit
    assert process.process_headroom(str(tmp_path / "cgroup"), str(tmp_path)) is None


DATA_RUN = [*RUN, "--data", "loader", "--data-images", "8"]


def test_more_loader_workers_than_the_process_limit_allows_are_refused_first(tmp_path, capfd,
                                                                           monkeypatch):
    monkeypatch.setattr(process, "process_headroom",
                        lambda *a: (388, "the cgroup's pids.max is 400, 12 in use"))
    ran = run_main(capfd, *DATA_RUN, "--workers", "1024", "--data-cache", str(tmp_path / "c"),
                   "--output-dir", str(tmp_path / "out"))
    assert_one_line_error(ran, 4, "1024 loader workers cannot start")
    assert "pids.max is 400" in ran.stderr and "--workers" in ran.stderr
    assert "Building" not in ran.stdout and not (tmp_path / "out").exists()


def refuse_starts_after(monkeypatch, allowed: int, error: BaseException) -> list:
    """Every multiprocessing start after the first ``allowed`` fails with ``error`` (a fork
    refused by a process limit, which root's ``ulimit -u`` cannot show); the started ones."""
    from multiprocessing.process import BaseProcess
    real_start, started = BaseProcess.start, []

    def start(self):
        if len(started) >= allowed:
            raise error
        real_start(self)
        started.append(self.pid)
    monkeypatch.setattr(BaseProcess, "start", start)
    return started


@pytest.mark.parametrize("error", [BlockingIOError(errno.EAGAIN, "Resource temporarily "
                                                   "unavailable"),
                                   OSError(errno.ENOMEM, "Cannot allocate memory")],
                         ids=["EAGAIN", "ENOMEM"])
def test_a_loader_worker_that_cannot_start_ends_the_run_with_no_worker_left(tmp_path, capfd,
                                                                          monkeypatch, error):
    import multiprocessing
    started = refuse_starts_after(monkeypatch, 2, error)
    ran = run_main(capfd, *DATA_RUN, "--workers", "4", "--data-cache", str(tmp_path / "c"),
                   "--output-dir", str(tmp_path / "out"))
    assert_one_line_error(ran, 4, "cannot start 4 loader workers")
    assert "use fewer --workers" in ran.stderr
    assert len(started) == 2 and not [pid for pid in started if alive(pid)]
    assert multiprocessing.active_children() == []


def test_a_trial_worker_that_cannot_start_is_one_line(tmp_path, capfd, monkeypatch):
    refuse_starts_after(monkeypatch, 0, BlockingIOError(errno.EAGAIN, "Resource temporarily "
                                                        "unavailable"))
    ran = run_main(capfd, *RUN, "--repeat", "2", "--output-dir", str(tmp_path / "out"))
    assert_one_line_error(ran, 4, "cannot start the worker process of trial 1")


LOADER_LEFT_OPEN = """
import sys, torch
from microbench.platform import process
from microbench.data.loader import _worker_init       # the workers ignore SIGTERM
data = torch.utils.data.TensorDataset(torch.zeros(64, 2), torch.zeros(64))
batches = iter(torch.utils.data.DataLoader(data, batch_size=4, num_workers=2,
                                           worker_init_fn=_worker_init))
next(batches)
print(*[worker.pid for worker in batches._workers], flush=True)
raise SystemExit(7)         # a failure that leaves the loader open: the exit must not hang
"""


def test_a_run_that_ends_with_its_loader_open_leaves_no_worker_and_does_not_hang():
    child_process = spawn([sys.executable, "-c", LOADER_LEFT_OPEN], cwd=ROOT,
                          env={**os.environ, **CHILD_ENV}, stdout=subprocess.PIPE, text=True)
    out, _ = child_process.communicate(timeout=120)
    workers = [int(pid) for pid in out.split()]
    assert child_process.returncode == 7 and len(workers) == 2
    assert all(wait_gone(pid, 10) for pid in workers)


# ---------------------------------------------------------------- issue 38: a worker outliving its parent

ORPHANING_PARENT = """
import os, pickle, signal, sys, multiprocessing
from microbench.platform import process
context = multiprocessing.get_context("spawn")
worker = context.Process(target=process.orphan_safe_worker,
                         args=(os.getpid(), "time:sleep", pickle.dumps((600,))))
worker.start()
print(worker.pid, flush=True)
if sys.argv[1] == "later":              # the worker is past its start, sleeping
    import time; time.sleep(3)
os.kill(os.getpid(), signal.SIGKILL)    # the parent dies without stopping its worker
"""


@pytest.mark.parametrize("when", ["while-starting", "later"])
def test_a_trial_worker_whose_parent_dies_exits_quietly(when):
    parent = spawn([sys.executable, "-c", ORPHANING_PARENT, when], cwd=ROOT,
                   env={**os.environ, **CHILD_ENV}, stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE, text=True)
    out, err = parent.communicate(timeout=120)
    [worker] = [int(pid) for pid in out.split()]
    assert parent.returncode == -signal.SIGKILL, err
    # A generous bound: a busy machine slows the worker's start, not its watch of the parent.
    assert wait_gone(worker, 60), "the orphaned worker went on"


def test_a_worker_started_after_its_parent_died_exits_at_once():
    ran = subprocess.run([sys.executable, "-c", "from microbench.platform import process; "
                          "process.die_with_parent(1); print('went on')"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0 and ran.stdout == "" and ran.stderr == ""


# ---------------------------------------------------------------- issue 38: full disks

@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (root can mount one; skipped where that is not allowed), and a way to
    fill it up to ``left`` free bytes."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                          capture_output=True)
    if made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")

    def fill(left: int = 0) -> None:
        free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
        with open(mount / "filler", "wb") as stream:
            with contextlib.suppress(OSError):
                stream.write(b"\0" * max(0, free - left))
    try:
        yield mount, fill
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def leftovers(root: Path) -> list[str]:
    return [name for name in os.listdir(root) if name.startswith((cache.BUILDING_PREFIX,
                                                                   writing.TEMPORARY_PREFIX))]


@pytest.mark.parametrize("defence", ["checked-first", "reserved", "written"])
def test_a_token_corpus_on_a_full_disk_is_exit_4_and_leaves_nothing(small_disk, monkeypatch,
                                                                    defence):
    root, fill = small_disk
    if defence != "checked-first":                   # each later defence alone
        monkeypatch.setattr(cache, "check_room", lambda *a: None)
    if defence == "written":
        monkeypatch.setattr(cache, "_reserve", lambda *a: None)
    with pytest.raises(CannotWrite) as refused:
        cache.ensure_token_corpus(str(root), vocab_size=50, tokens=400_000)   # 1.6 MB
    assert refused.value.exit_code == 4
    assert ("GB are free" if defence == "checked-first" else "No space left") in str(refused.value)
    assert leftovers(root) == []


def test_a_language_run_whose_corpus_does_not_fit_is_one_line(small_disk, tmp_path, capfd):
    root, fill = small_disk
    # 4,096 sequences of 256 tokens: a 4 MB corpus against a 1 MiB disk (a longer sequence
    # only made the model-alone warm-up before it minutes longer on 2 cores).
    ran = run_main(capfd, "--network", "llama_tiny", "--batch-size", "2", "--seq-len", "256",
                   "--iterations", "1", "--warmup", "1", "--device", "cpu", "--data", "loader",
                   "--data-cache", str(root), "--output-dir", str(tmp_path / "out"))
    assert_one_line_error(ran, 4, "cannot make a corpus of")
    assert leftovers(root) == []


def test_an_image_set_larger_than_the_free_space_is_refused_first(small_disk, tmp_path, capfd):
    root, _ = small_disk
    ran = run_main(capfd, *DATA_RUN[:-1], "100000", "--data-cache", str(root),
                   "--output-dir", str(tmp_path / "out"))
    assert_one_line_error(ran, 4, "cannot make 100,000 jpeg images")
    assert "--data-images" in ran.stderr and leftovers(root) == []


def test_an_image_set_that_fills_the_disk_midway_is_exit_4(small_disk, monkeypatch):
    root, fill = small_disk
    monkeypatch.setattr(cache, "check_room", lambda *a: None)
    with pytest.raises(CannotWrite, match="No space left"):
        cache.ensure_image_set(str(root), "png", count=400, side=64)
    assert leftovers(root) == []


@pytest.mark.parametrize("output", ["--html", "--plot", "json", "csv"])
def test_report_outputs_on_a_full_disk_are_exit_4_with_no_temporary(small_disk, tmp_path, capfd,
                                                                    output):
    root, fill = small_disk
    results = write_results(tmp_path / "r", {"a.json": hostile_result("resnet18"),
                                             "b.json": hostile_result("resnet50")})
    fill(left=0)
    target = str(root / ("out.html" if output == "--html" else "out.png"))
    if output in ("--html", "--plot"):
        ran = report_of(capfd, str(results), output, target)
        assert_error_line = "cannot write"
    else:                                                # a run's own JSON or CSV
        ran = run_main(capfd, *RUN, "--output-dir", str(root / "o"),
                       *(["--csv-file", str(root / "runs.csv")] if output == "csv" else []))
        assert_error_line = "cannot write"
    assert ran.returncode == 4, ran.stderr
    assert [line for line in ran.stderr.splitlines() if line.startswith("error")] \
        and assert_error_line in ran.stderr and "Traceback" not in ran.stderr
    assert leftovers(root) == [] and sorted(os.listdir(root)) == ["filler"]   # no empty dir


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


@pytest.mark.parametrize("b, text", [
    ("'--nhwc", "cannot split it into flags"),
    # Inside --ab no abbreviation is taken at all (issue 46), a refused flag's included.
    ("--output-fil x.json", "abbreviations are not taken"),
    ("--rer x.json", "abbreviations are not taken"),
    ("--comp x.json", "abbreviations are not taken"), ("--rep 3", "abbreviations are not taken"),
    ("--repeat=3", "B may not change")])
def test_ab_flags_that_cannot_be_split_or_abbreviate_a_refused_flag_are_one_line(b, text,
                                                                                 tmp_path, capfd):
    ran = run_main(capfd, *RUN, "--output-dir", str(tmp_path / "out"), "--ab", b)
    assert_one_line_error(ran, 2, text)
    assert ran.stderr.endswith("\n") and not (tmp_path / "out").exists()


# ---------------------------------------------------------------- issue 38: --data-dir

def test_a_data_dir_of_empty_images_is_refused_before_the_model_is_built(tmp_path, capfd):
    images = tmp_path / "images"
    images.mkdir()
    for index in range(3):
        (images / f"{index}.jpg").write_bytes(b"")
    ran = run_main(capfd, *RUN, "--data", "folder", "--data-dir", str(images),
                   "--output-dir", str(tmp_path / "out"))
    assert_one_line_error(ran, 2, "all of its 3 image files are empty")
    assert "Building" not in ran.stdout and not (tmp_path / "out").exists()


def test_images_reached_through_links_out_of_the_data_dir_are_named(tmp_path):
    from microbench.data import folder
    made = cache.ensure_image_set(str(tmp_path / "cache"), "png", count=2, side=16)
    images = tmp_path / "images"
    images.mkdir()
    inside, outside = made.file_paths()
    (images / "inside.png").write_bytes(Path(inside).read_bytes())
    (images / "outside.png").symlink_to(outside)
    listing = folder.scan_folder(str(images), 2**20)
    assert len(listing.paths) == 2
    assert listing.outside == ((str(images / "outside.png"), os.path.realpath(outside)),)


def spec_of(*argv: str):
    from microbench.plan import cli
    from microbench.plan.spec import resolve
    return resolve(cli.to_plan(cli.parse_args([*RUN, *argv])).configs[0])


@pytest.mark.parametrize("argv, offered, not_offered", [
    ((), ["--mode inference", "--amp"], []),
    (("--mode", "inference"), ["--amp"], ["--mode inference"]),
    (("--mode", "inference", "--precision", "bf16"), [], ["--mode inference", "--amp"])])
def test_out_of_memory_advice_offers_only_what_changes_something(argv, offered, not_offered):
    from microbench.drivers.benchmark import out_of_memory
    text = str(out_of_memory(spec_of(*argv)))
    assert "smaller --batch-size" in text
    assert all(flag in text for flag in offered) and not any(f in text for f in not_offered)
