"""The sixth hostile round (issue 65), mechanisms 6, 10, 11 and 12 with the notes beside them:
a setting that took no effect never splits a configuration; too many open files is a limit
(one line, exit 4); every result name, --output-file's too, goes through the one claim; the
install advice holds for any version torch and torchvision may have (nightlies, release
candidates, local builds, old torchvisions), quotes its requirements and names ``ulimit -v``.

(Part of the hostile-input tests, split from one file by what is attacked.)"""
from __future__ import annotations

import csv
import errno
import json
import os
import re
import resource
import shlex
import subprocess
import sys
from dataclasses import asdict

import pytest
from packaging.specifiers import SpecifierSet

from conftest import (ROOT, SCRIPT, alive, assert_one_line_error, nightly_result, run_main,
                      stored_result)
from microbench.plan import cli
from microbench.platform import install_pair, process, writing
from microbench.platform.errors import MissingEnvironment
from microbench.report import command as report_command
from microbench.settings import identity
from microbench.settings.config import SCHEMA
from support.hostile import (CHILD_ENV, DATA_RUN, RUN, assert_disk_unchanged,
                             refuse_starts_after, snapshot)
from support.hostile import no_launcher_environment  # noqa: F401 (autouse: this module's)


# ================================================================ 6. ineffective flags

NIGHTS = 10


def _history(folder, given: dict, step: float = 0.85) -> None:
    """2 * NIGHTS nights of one configuration, ``step`` of the speed from night NIGHTS on, when
    the setting(s) ``given`` (that take no effect) start being given."""
    folder.mkdir()
    for night in range(2 * NIGHTS):
        after = night >= NIGHTS
        document = nightly_result(100.0 * (step if after else 1.0) * (1 + 0.001 * (night % 3)),
                                  night, given if after else {}, label=f"n{night}")
        (folder / f"night{night}.json").write_text(json.dumps(document))


# (a setting given where it takes no effect, as a stored config holds it): the two, and
# one of every other kind that acts only under another setting.
INEFFECTIVE = [
    {"fp8_recipe": "rowwise"},                                  # without --precision fp8
    {"mode": "inference", "quant_layout": "rowwise"},           # without --quantize
    {"compile_options": {"mode": "max-autotune"}},              # without --compile
    {"reshard_after_forward": False},                           # under --parallel ddp
    {"mode": "inference", "opt_step": 4},                       # outside training
    {"prompt_len": 64, "gen_len": 8},                           # outside --mode generate
    {"profiler_schedule": [3, 3, 3]},                           # without --kineto
    {"trials": "in-process"},                                   # with one trial
    {"workers": 8, "decode": "gpu", "pin_memory": False},      # with --data synthetic
]


def _flags(given: dict) -> str:
    return ",".join(sorted(given))


class TestIneffectiveFlags:
    @pytest.mark.parametrize("given", [g for g in INEFFECTIVE if "mode" not in g], ids=_flags)
    def test_the_history_keeps_one_series_and_finds_the_slowdown(self, given, tmp_path, capfd):
        _history(tmp_path / "nightly", given)
        ran = run_main(capfd, str(tmp_path / "nightly"), "--history", "--by", "label",
                       main=report_command.main)
        assert ran.returncode == 5, (ran.stdout[-2000:], ran.stderr)
        assert "REGRESSION: slower by 15." in ran.stdout
        assert ran.stdout.count("confirmed change") == 1

    @pytest.mark.parametrize("given", INEFFECTIVE, ids=_flags)
    def test_a_stored_result_differing_only_in_it_is_the_same_configuration(self, given):
        base = {"mode": given["mode"]} if "mode" in given else {}
        ours = identity.of_document(stored_result(base))
        theirs = identity.of_document(stored_result(given))
        assert identity.differences(ours, theirs, identity.naming_fields()) == []
        assert identity.key(ours, identity.GATE) == identity.key(theirs, identity.GATE)

    @pytest.mark.parametrize("given, under", [
        ({"fp8_recipe": "rowwise"}, {"precision": "fp8"}),
        ({"quant_layout": "rowwise"}, {"mode": "inference", "quantize": "int8wo"}),
        ({"compile_options": {"mode": "max-autotune"}}, {"compile": True}),
        ({"reshard_after_forward": False}, {"parallel": "fsdp"}),
        ({"opt_step": 4}, {"mode": "training"}),
        ({"gen_len": 8}, {"mode": "generate"}),
        ({"workers": 8}, {"data": "loader"}),
    ], ids=lambda value: _flags(value))
    def test_where_it_takes_effect_it_is_another_configuration(self, given, under):
        ours = identity.of_document(stored_result(under))
        theirs = identity.of_document(stored_result({**under, **given}))
        assert identity.differing_names(ours, theirs, identity.naming_fields()) == list(given)

    @pytest.mark.parametrize("given", INEFFECTIVE, ids=_flags)
    def test_the_reports_rows_show_it_as_not_applied(self, given):
        from microbench.store.entry import entries_of
        [entry] = entries_of(stored_result(given), "given.json")
        shown = {name: entry.settings.get(name.replace("_", "-"), None) for name in given
                 if name != "mode" and name.replace("_", "-") in entry.settings}
        assert set(shown.values()) <= {None}

    def test_every_setting_of_the_rule_is_a_setting_and_the_data_rows_match_the_pipeline(self):
        from microbench.settings import data_settings
        named = {name for names, _, _ in identity.ONLY_UNDER for name in names}
        assert named <= set(SCHEMA)
        data = set(identity.ONLY_UNDER[-3][0])
        assert data == {name for name in data_settings.PIPELINE_FIELDS if SCHEMA[name].replayed}

    def test_a_sweeps_row_where_the_flag_does_nothing_is_that_rows_plain_configuration(self):
        plan = cli.to_plan(cli.parse_args(["--precision", "bf16,fp8", "--fp8-recipe", "rowwise"]))
        bf16, fp8 = (identity.took_effect(asdict(config)) for config in plan.configs)
        plain = cli.to_config(cli.parse_args(["--precision", "bf16"]))
        fields = [name for name in identity.naming_fields() if name in SCHEMA]
        assert [bf16[name] for name in fields] == [identity.took_effect(asdict(plain))[name]
                                                   for name in fields]
        assert fp8["fp8_recipe"] == "rowwise"

    @pytest.mark.parametrize("b, named", [
        ("--fp8-recipe rowwise", "--fp8-recipe acts only with --precision fp8"),
        ("--profiler-schedule 2,2,2", "--profiler-schedule acts only with --kineto"),
    ])
    def test_an_ab_whose_b_differs_only_in_it_is_refused_first(self, b, named, tmp_path, capfd):
        before = snapshot(tmp_path)
        ran = run_main(capfd, *RUN, "--output-dir", str(tmp_path / "out"), "--ab", b)
        assert_one_line_error(ran, 2, named)
        assert_disk_unchanged(tmp_path, before)

    @pytest.mark.parametrize("flags", [["--fp8-recipe", "rowwise"],
                                       ["--profiler-schedule", "3,3,3"]])
    def test_compare_takes_a_baseline_run_without_the_flag(self, flags, tmp_path, capfd):
        out = tmp_path / "out"
        first = run_main(capfd, *RUN, "--output-dir", str(out), "--output-file", "base")
        assert first.returncode == 0, first.stderr
        ran = run_main(capfd, *RUN, *flags, "--output-dir", str(out), "--output-file", "new",
                       "--compare", str(out / "base.json"), "--fail-if", "never")
        assert ran.returncode == 0, ran.stderr
        assert "another configuration" not in ran.stdout + ran.stderr
        assert "Comparison with" in ran.stdout


# ================================================================ 10. too many open files

EMFILE = OSError(errno.EMFILE, "Too many open files")
ENFILE = OSError(errno.ENFILE, "Too many open files in system")


def _raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as raised:          # noqa: BLE001 (a traceback to read)
        return raised


class TestOpenFileLimits:
    @pytest.mark.parametrize("error", [EMFILE, ENFILE], ids=["EMFILE", "ENFILE"])
    def test_a_loader_worker_out_of_descriptors_is_one_line_and_no_worker_is_left(
            self, error, tmp_path, capfd, monkeypatch):
        import multiprocessing
        started = refuse_starts_after(monkeypatch, 1, error)
        ran = run_main(capfd, *DATA_RUN, "--workers", "3", "--data-cache", str(tmp_path / "c"),
                       "--output-dir", str(tmp_path / "out"))
        assert_one_line_error(ran, 4, "cannot start 3 loader workers: too many open files")
        assert ("fs.file-max" if error is ENFILE else "ulimit -n is") in ran.stderr
        assert not [pid for pid in started if alive(pid)]
        assert multiprocessing.active_children() == []
        assert not (tmp_path / "out").exists()

    def test_a_trial_workers_pipe_out_of_descriptors_is_one_line(self, tmp_path, capfd,
                                                                 monkeypatch):
        import multiprocessing.connection

        def no_pipe(duplex=True):
            raise OSError(errno.EMFILE, "Too many open files")
        monkeypatch.setattr(multiprocessing.connection, "Pipe", no_pipe)
        ran = run_main(capfd, *RUN, "--repeat", "2", "--output-dir", str(tmp_path / "out"))
        assert_one_line_error(ran, 4, "cannot start the worker process of trial 1: too many "
                                      "open files")
        assert not (tmp_path / "out").exists()

    @pytest.mark.parametrize("error", [
        ENFILE,
        OSError("Caught OSError in DataLoader worker process 0.\nOriginal Traceback (most "
                "recent call last):\n  ...\nOSError: [Errno 24] Too many open files: '/x'\n"),
        RuntimeError("received 0 items of ancdata"),
    ], ids=["ENFILE", "loader-text", "ancdata"])
    def test_anywhere_in_the_run_it_is_one_line_exit_4(self, error, capfd, monkeypatch):
        from microbench.drivers import benchmark

        def run(spec, **kwargs):
            raise error
        monkeypatch.setattr(benchmark, "run", run)
        ran = run_main(capfd, *RUN, "--no-files")
        assert_one_line_error(ran, 4, "too many open files")

    def test_an_emfile_not_raised_by_a_start_is_still_a_limit_and_names_the_hard_one(
            self, monkeypatch):
        monkeypatch.setattr(process.resource, "getrlimit", lambda which: (64, 4096))
        limit = process.limit_reached(_raised(OSError(errno.EMFILE, "Too many open files")))
        assert isinstance(limit, MissingEnvironment) and limit.exit_code == 4
        assert "ulimit -n is 64, up to 4096 allowed" in str(limit)
        assert "\n" not in str(limit)

    @pytest.mark.parametrize("errno_", [errno.EMFILE, errno.ENFILE])
    @pytest.mark.parametrize("where", ["open", "read"])
    def test_a_report_out_of_descriptors_is_one_line_not_every_file_skipped(
            self, errno_, where, tmp_path, capfd, monkeypatch):
        from microbench.platform import inputs
        result = tmp_path / "r.json"
        result.write_text(json.dumps(nightly_result(100.0, 0)))

        def refused(*args, **kwargs):
            raise OSError(errno_, os.strerror(errno_))
        monkeypatch.setattr(inputs, {"open": "open_unblocked", "read": "_read_at_most"}[where],
                            refused)
        ran = run_main(capfd, str(tmp_path), main=report_command.main)
        assert_one_line_error(ran, 4, "open files")
        assert "skipped" not in ran.stdout

    def test_other_errnos_stay_what_they_were(self):
        assert process.limit_reached(_raised(OSError(errno.ENOENT, "No such file"))) is None
        assert not process.out_of_descriptors(OSError(errno.EACCES, "[Errno 24] in a name"))


# ================================================================ 11. every name claimed

class TestEveryResultNameIsClaimed:
    def _claimed_by_a_live_run(self, out, name: str) -> None:
        # Another run of this host, alive (this test's parent), holds the name now.
        (out / f".{name}{writing._CLAIM_SUFFIX}").write_text(f"{os.getppid()} {writing._HOST}")

    @pytest.mark.parametrize("held", [None, b'{"foreign": true}'], ids=["new", "existing"])
    def test_output_file_claimed_by_another_run_goes_to_the_next_name(self, held, tmp_path,
                                                                      capfd):
        out = tmp_path / "out"
        out.mkdir()
        if held is not None:
            (out / "mine.json").write_bytes(held)
        self._claimed_by_a_live_run(out, "mine.json")
        before = snapshot(out)
        ran = run_main(capfd, *RUN, "--output-dir", str(out), "--output-file", "mine")
        assert ran.returncode == 0, ran.stderr
        assert "claimed by another run" in ran.stdout and "mine-2.json" in ran.stdout
        after = snapshot(out)
        assert {name: after[name] for name in before} == before   # the other's name untouched
        assert (out / "mine-2.json").exists()
        with open(out / "benchmark_summary.csv", newline="") as stream:
            rows = list(csv.DictReader(stream))
        assert [row["json_file"] for row in rows] == [str(out / "mine-2.json")]
        assert not list(out.glob(".mine-2.json*"))                   # ours given back

    def test_without_a_claim_output_file_still_replaces_another_configurations(self, tmp_path,
                                                                              capfd):
        out = tmp_path / "out"
        first = run_main(capfd, *RUN, "--output-dir", str(out), "--output-file", "mine",
                         "--batch-size", "4")
        assert first.returncode == 0, first.stderr
        ran = run_main(capfd, *RUN, "--output-dir", str(out), "--output-file", "mine")
        assert ran.returncode == 0, ran.stderr
        assert "--output-file names it, so this run's result replaces it" in ran.stdout
        assert json.loads((out / "mine.json").read_text())["Mini batch size [img/gpu]"] == 2
        assert not (out / "mine-2.json").exists()
        assert not [p for p in os.listdir(out) if p.endswith(writing._CLAIM_SUFFIX)]


# ================================================================ 12. install advice

def _command_of(line: str) -> list[str]:
    """The advice's pip command as the shell splits it."""
    start = line.index("pip install")
    words = shlex.split(line[start:].partition(" (where")[0])
    return words


NIGHTLIES = ["2.15.0.dev20261101+cu130", "2.16.0.dev20270301+rocm7.1", "2.15.0.dev20261101+cpu",
             "2.17.0.dev20270915+xpu"]
CANDIDATES = ["2.14.0rc2+cu130", "2.13.0rc1+rocm6.4", "2.15.0rc3+cpu"]


class TestInstallAdviceForAnyVersion:
    @pytest.mark.parametrize("torch", NIGHTLIES + CANDIDATES)
    def test_a_pre_release_gets_its_channel_and_a_pin_pip_matches(self, torch):
        line = install_pair.advice(torch, "0.20.0+cu124", "operator torchvision::nms does not "
                                                          "exist")
        words = _command_of(line)
        build = torch.partition("+")[2]
        channel = "nightly" if ".dev" in torch else "test"
        assert "--pre" in words
        assert words[words.index("--index-url") + 1] == (f"{install_pair.PYTORCH_INDEX}/"
                                                         f"{channel}/{build}")
        release = torch.partition("+")[0]
        assert f"torch=={torch}" in words          # its own build, label and all
        [vision] = [word for word in words if word.startswith("torchvision==")]
        minor = int(release.split(".")[1]) + 15
        # torchvision's own pre-release of that channel, as the index holds it.
        tag = re.search(r"\.dev\d+|rc\d+", release)[0]
        theirs = f"0.{minor}.0{tag}+{build}"
        assert SpecifierSet(vision.removeprefix("torchvision")).contains(theirs, prereleases=True)

    @pytest.mark.parametrize("torch", ["2.14.0rc2", "2.15.0.dev20261101", "2.6.0a0+git1234",
                                       "2.14.1+custom", "2.14.1+cu130.local", "2.14.1+rocmfork"])
    def test_a_version_no_index_is_known_to_serve_gets_no_index_command(self, torch):
        line = install_pair.advice(torch, "0.29.1", "undefined symbol")
        assert "pip install" not in line and "where this torch" in line
        assert "mirror" not in line

    @pytest.mark.parametrize("build", ["custom", "cuda_local", "cupy7", "rocmfork", "cpuonly",
                                       "git1234"])
    def test_a_local_suffix_is_called_a_local_build(self, build):
        line = install_pair.advice(f"2.14.1+{build}", "0.29.1+cu130", "x")
        assert f"torch is a local build (+{build})" in line

    @pytest.mark.parametrize("vision, named", [
        ("0.2.2", "0.2.2 is not the one released with torch 2.14.1 (0.29)"),
        ("0.4.0", "0.4.0 is not the one released with torch 2.14.1 (0.29)"),
        ("1.0.0", "1.0.0 is not the one released with torch 2.14.1 (0.29)"),
        ("0.9.1", "0.9.1 is released with torch 1.8, not 2.14.1"),
        ("0.14.1", "0.14.1 is released with torch 1.13, not 2.14.1"),
        ("0.26.0", "0.26.0 is released with torch 2.11, not 2.14.1")])
    def test_any_torchvision_names_a_real_torch_release_or_none(self, vision, named):
        line = install_pair.advice("2.14.1+cu130", f"{vision}+cu130", "x")
        assert f"torchvision {named}" in line
        assert not re.search(r"\d\.-\d", line)

    def test_a_torch_one_gets_its_own_torchvision(self):
        words = _command_of(install_pair.advice("1.13.1+cu117", "0.15.0+cu117", "x"))
        assert "torchvision==0.14.*" in words

    @pytest.mark.parametrize("torch", ["2.14.1+cu130", "2.13.0", "2.15.0.dev20261101+cpu",
                                       "3.0.0+rocm7.0", "1.13.1"])
    def test_every_requirement_is_quoted_for_every_shell(self, torch):
        line = install_pair.advice(torch, "0.2.0", "x")
        command = line[line.index("pip install"):]
        assert all(command[at + 1] == '"' for at, char in enumerate(command) if char == "*")
        assert re.findall(r'"(torch(?:vision)?==[^"]+)"', command)

    def test_under_ulimit_v_the_limit_is_named_not_a_reinstall(self, monkeypatch):
        monkeypatch.setattr(process.resource, "getrlimit",
                            lambda which: (300000 * 1024, resource.RLIM_INFINITY))
        for package, text in (("torch", "libtorch_cuda.so: failed to map segment from shared "
                                        "object"),
                              ("torchvision", "_C.so: cannot map zero-fill pages"),
                              ("torch", "")):
            code = compile(f"raise {'OSError(%r)' % text if text else 'MemoryError()'}",
                           f"/site-packages/{package}/__init__.py", "exec")
            with pytest.raises(MissingEnvironment) as refused:
                with process.imports_checked():
                    exec(code)
            message = str(refused.value)
            assert "ulimit -v is 300000 KiB" in message and package in message
            assert "reinstall torch" not in message and "does not work with" not in message

    def test_a_static_tls_failure_is_not_taken_for_memory(self):
        code = compile("raise OSError('libgomp.so.1: cannot allocate memory in static TLS "
                       "block')", "/site-packages/torch/__init__.py", "exec")
        error = _raised_in(code)
        assert process.short_of_memory(error) is None

    def test_a_real_address_space_limit_at_import_is_one_line_exit_4(self, tmp_path):
        def limited():
            resource.setrlimit(resource.RLIMIT_AS, (500_000 * 1024, resource.RLIM_INFINITY))
        ran = subprocess.run([sys.executable, str(SCRIPT), *RUN, "--no-files"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120, preexec_fn=limited,
                             env={**os.environ, **CHILD_ENV})
        assert_one_line_error(ran, 4, "ulimit -v is 500000 KiB")
        assert "reinstall" not in ran.stderr.replace("reinstalling does not help", "")


    def test_the_historys_libraries_short_of_address_space_are_named_too(self, monkeypatch):
        """scipy, ruptures, numpy and matplotlib load libraries as torch does: a failure for
        want of address space is the limit's one line, whichever of them raised it."""
        monkeypatch.setattr(process.resource, "getrlimit",
                            lambda which: (300000 * 1024, resource.RLIM_INFINITY))
        for package in ("scipy", "ruptures", "numpy", "matplotlib"):
            code = compile("raise ImportError('_core.so: failed to map segment from shared "
                           "object')", f"/site-packages/{package}/__init__.py", "exec")
            with pytest.raises(MissingEnvironment, match=f"{package} could not load its "
                                                         f"libraries within the address-space "
                                                         f"limit \\(ulimit -v is 300000 KiB"):
                with process.imports_checked():
                    exec(code)

    @pytest.mark.parametrize("limit, given, threads", [
        (300000 * 1024, None, "1"), (300000 * 1024, "4", "4"), (resource.RLIM_INFINITY, None,
                                                                None)])
    def test_under_ulimit_v_openblas_loads_with_one_thread(self, monkeypatch, limit, given,
                                                           threads):
        """At 300 MB scipy's OpenBLAS span in its load for minutes, deaf to SIGTERM, where
        one thread loads or fails at once; a user's own setting is kept."""
        monkeypatch.setattr(process.resource, "getrlimit",
                            lambda which: (limit, resource.RLIM_INFINITY))
        if given is None:
            monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
        else:
            monkeypatch.setenv("OPENBLAS_NUM_THREADS", given)
        process.blas_within_address_limit()
        assert os.environ.get("OPENBLAS_NUM_THREADS") == threads

    @pytest.mark.slow
    def test_the_history_under_a_small_address_space_is_one_line_exit_4(self, tmp_path):
        from benchmarks.history_scale import write_files
        write_files(tmp_path, 40, 2)

        def limited():
            resource.setrlimit(resource.RLIMIT_AS, (300_000 * 1024, resource.RLIM_INFINITY))
        env = {key: value for key, value in os.environ.items()
               if key != "OPENBLAS_NUM_THREADS"}
        ran = subprocess.run([sys.executable, "-m", "microbench.report", "--history",
                              str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                             timeout=120, preexec_fn=limited, env=env)
        # Here scipy's libraries do not fit 300 MB (the one line, exit 4); where a smaller
        # build of them would, the history runs. Never a hang (it span for minutes before,
        # deaf to SIGTERM) and never a traceback.
        if ran.returncode == 4:
            assert_one_line_error(ran, 4, "ulimit -v is 300000 KiB")
        else:
            assert ran.returncode in (0, 5) and "Traceback" not in ran.stderr, ran.stderr

def _raised_in(code) -> BaseException:
    try:
        exec(code)
    except BaseException as error:           # noqa: BLE001 (a traceback to read)
        return error
    raise AssertionError("nothing raised")
