"""torch's and torchao's log records are counted and kept in the result, not printed raw."""
import json
import logging

from conftest import TINY, run_main
from microbench.measure import library_log

PYTREE = ("<enum 'KernelPreference'> is an Enum subclass and is now natively supported by "
          "torch.compile as an opaque value type")


def test_a_watch_takes_torchs_and_torchaos_records_off_the_console(capfd, monkeypatch):
    monkeypatch.delenv("TORCH_LOGS", raising=False)
    import torch  # noqa: F401  (torch's logging sets up its stderr handlers)
    watch = library_log.LibraryLogWatch()
    capfd.readouterr()
    with watch.during():
        logging.getLogger("torch.utils._pytree").warning("%s", PYTREE)
        logging.getLogger("torch.utils._pytree").warning("%s", PYTREE)
        logging.getLogger("torchao.quantization").warning("int4 layout is deprecated")
        logging.getLogger("torch.utils._pytree").info("not a warning: left as it was")
    assert capfd.readouterr().err == ""
    report = watch.report()
    assert report.count == 3
    assert report.lines == (f"torch.utils._pytree WARNING: {PYTREE}",
                            "torchao.quantization WARNING: int4 layout is deprecated")
    logging.getLogger("torch.utils._pytree").warning("after the block: shown")
    assert "after the block: shown" in capfd.readouterr().err
    both = library_log.combine([report, None, library_log.LibraryLog(1, report.lines[:1])])
    assert both.count == 4 and both.lines == report.lines


def test_a_warning_from_cpp_or_python_during_the_run_is_kept_too(capfd):
    """TORCH_WARN reaches Python as a warning: kept with the records, not printed raw."""
    import warnings
    watch = library_log.LibraryLogWatch()
    capfd.readouterr()
    with watch.during():
        warnings.warn("TypedStorage is deprecated", RuntimeWarning)   # UserWarning: ignored here
    assert capfd.readouterr().err == ""
    assert watch.report().lines == ("RuntimeWarning: TypedStorage is deprecated",)


def test_torch_logs_asked_for_are_shown_and_still_counted(capfd, monkeypatch):
    monkeypatch.setenv("TORCH_LOGS", "+dynamo")
    import torch  # noqa: F401
    watch = library_log.LibraryLogWatch()
    capfd.readouterr()
    with watch.during():
        logging.getLogger("torch.utils._pytree").warning("asked for")
    assert "asked for" in capfd.readouterr().err and watch.report().count == 1


def test_only_records_known_to_say_nothing_are_not_to_act_on():
    assert not library_log.actionable(f"torch.utils._pytree WARNING: {PYTREE}")
    assert not library_log.actionable("torch.utils.cpp_extension WARNING: No CUDA runtime is "
                                      "found, using CUDA_HOME='/usr/local/cuda'")
    assert library_log.actionable("torchao.quantization WARNING: int4 layout is deprecated")
    kept = library_log.LibraryLog(3, (f"torch.utils._pytree WARNING: {PYTREE}",
                                      "RuntimeWarning: x"))
    assert kept.to_act_on() == ("RuntimeWarning: x",)


def test_a_run_keeps_library_warnings_in_its_json_and_shows_those_to_act_on(
        capfd, monkeypatch, tmp_path):
    """As torchao's import does at the start of a --quantize run: warnings logged while the
    model is built go to the JSON, not raw to stderr; the console shows only the one a user
    can act on (issue 56: the pytree line was a newcomer's first question)."""
    monkeypatch.delenv("TORCH_LOGS", raising=False)
    from microbench.models import registry
    spec = registry.lookup("squeezenet1_1")
    build = spec._builder
    deprecated = "torchao.quantization WARNING: int4 layout is deprecated " + "x" * 80

    def logging_build(size):
        logging.getLogger("torch.utils._pytree").warning("%s", PYTREE)
        logging.getLogger("torchao.quantization").warning("%s", deprecated.split(": ", 1)[1])
        return build(size)
    monkeypatch.setattr(registry, "lookup",
                        lambda name: registry.replace(spec, _builder=logging_build))
    ran = run_main(capfd, "--network", "squeezenet1_1", "--mode", "inference", *TINY,
                   "--image-size", "64", "--quiet", "--output-dir", str(tmp_path))
    assert ran.returncode == 0, ran.stderr
    assert "Enum subclass" not in ran.stderr + ran.stdout
    [row] = [line for line in ran.stdout.splitlines() if "Library log" in line]
    assert row.startswith("  Library log           : 1 to read of 2 records (all in the JSON, "
                          "library_log); first: torchao.quantization WARNING: int4 layout")
    assert row.endswith("...") and len(row) <= 180
    [path] = tmp_path.glob("*.json")
    assert json.loads(path.read_text())["library_log"] == {
        "count": 2, "lines": [f"torch.utils._pytree WARNING: {PYTREE}", deprecated]}
