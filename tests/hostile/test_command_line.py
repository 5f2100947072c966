"""The contract for what a user types: every flag and argument of the three commands (the
model benchmark's table of cases, the op bench's, --model-kwargs of hf: models, the report's),
argv bytes that are not UTF-8, --ab's B flags (none abbreviated; output-only flags make no B),
the generate loop's edges (--prompt-len, --gen-len), --model-kwargs transformers refuses, a sweep
that names one configuration twice, and the out-of-memory advice. Each case: the documented
exit code, one line on stderr, no traceback, the disk left as it was.

(Part of the hostile-input tests, split from one file by what is attacked.)"""
from __future__ import annotations

import importlib.abc
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from conftest import HISTORY, ROOT, assert_one_line_error, run_main, stored_result
from microbench.plan import cli
from microbench.platform import inputs
from microbench.platform.errors import UsageError
from microbench.store import collection
from support.hostile import (FAST, FOREIGN_CSV, HEADER, OPS_RUN, RUN, assert_disk_unchanged,
                             bound_socket, directories_under, snapshot, stored)
from support.hostile import no_launcher_environment  # noqa: F401 (autouse: this module's)


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
STORED_MODEL = stored_result()["model"]


def result_limit(size: int):
    """The largest result file read, lowered for the test (1 GiB is too large to write)."""
    return lambda monkeypatch: monkeypatch.setattr(inputs, "MAX_RESULT_BYTES", size)


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


# ---------------------------------------------------------------- issue 46: the generate loop's edges

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


# ---------------------------------------------------------------- issue 46: model kwargs transformers refuses

def test_model_kwargs_that_transformers_refuses_are_one_line_exit_2(capfd):
    pytest.importorskip("transformers")
    small = ["num_hidden_layers=1", "intermediate_size=64", "vocab_size=128"]
    for kwargs in (["hidden_size=65", "num_attention_heads=2"],
                   ["hidden_size=64", "num_attention_heads=4", "num_key_value_heads=3"]):
        ran = run_main(capfd, "--network", "hf:llama", "--model-kwargs", *kwargs, *small,
                       "--mode", "inference", "--batch-size", "1", "--seq-len", "8",
                       "--iterations", "1", "--warmup", "1", "--no-files", "--device", "cpu")
        assert_one_line_error(ran, 2, "transformers")


# ---------------------------------------------------------------- issue 46: a sweep naming one configuration twice

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


# ---------------------------------------------------------------- issue 46 and 57: what --ab takes

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


class TestABMeasuresSomething:
    """Mechanism 6: only flags that change what is measured make a B."""

    @pytest.mark.parametrize("flags", ("--quiet", "--csv-file other.csv", "--no-files",
                                       "--output-dir elsewhere", "--peak-tflops 5",
                                       "--peak-bandwidth 900", "--dist-timeout 60",
                                       "--quiet --csv-file o.csv --output-dir e"))
    def test_output_only_b_is_a(self, flags):
        with pytest.raises(UsageError, match="B would be A"):
            cli.to_plan(cli.parse_args(["--network", "resnet18", "--ab", flags]))

    def test_a_measured_flag_makes_a_b(self):
        assert cli.to_plan(cli.parse_args(["--network", "resnet18", "--ab", "--nhwc --quiet"])).ab
