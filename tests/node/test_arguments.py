"""microbench-node's flags of issue 52, checked in-process before torch is imported: a
--baseline that is not a node check's document and a --save-baseline that would overwrite the
result are one line (exit 2)."""
from __future__ import annotations

import json

import pytest

from microbench.node import arguments
from microbench.platform.errors import UsageError


def _validated(*argv: str):
    args = arguments.build_parser().parse_args(list(argv))
    arguments.validate(args)
    return args


def test_baseline_flags_are_checked_before_the_run(tmp_path):
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"schema_version": 2, "results": []}))
    with pytest.raises(UsageError, match="--baseline"):
        _validated("--baseline", str(tmp_path / "missing.json"))
    with pytest.raises(UsageError, match="--save-baseline must not be empty"):
        _validated("--save-baseline", " ")
    with pytest.raises(UsageError, match="--save-baseline names the file of --json"):
        _validated("--json", str(result), "--save-baseline", str(result))
    assert _validated("--save-baseline", str(tmp_path / "b.json")).save_baseline.endswith(
        "b.json")


def test_a_document_of_another_kind_is_no_baseline(tmp_path):
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps({"schema_version": 2, "rows": [], "env": {}}))
    with pytest.raises(UsageError, match="--baseline"):
        _validated("--baseline", str(sweep))


@pytest.mark.parametrize("how", ["same path", "another spelling", "hard link", "symbolic link"])
def test_a_saved_baseline_never_replaces_the_baseline_it_is_judged_against(tmp_path, how):
    """--baseline X --save-baseline X replaced X silently (issue 65): refused, X as it was."""
    baseline = tmp_path / "h100.json"
    baseline.write_text('{"kept": true}')
    saved = {"same path": baseline, "another spelling": tmp_path / "." / "h100.json",
             "hard link": tmp_path / "hard.json", "symbolic link": tmp_path / "soft.json"}[how]
    if how == "hard link":
        saved.hardlink_to(baseline)
    elif how == "symbolic link":
        saved.symlink_to(baseline)
    with pytest.raises(UsageError, match="--save-baseline names the file of --baseline"):
        _validated("--baseline", str(baseline), "--save-baseline", str(saved))
    assert baseline.read_text() == '{"kept": true}'


def test_the_baseline_is_read_once_and_the_check_is_judged_against_that_reading(monkeypatch,
                                                                                 tmp_path):
    """--baseline was read twice, by the flags' check and again by the run (issue 63): a file
    replaced in between judged the node against another baseline than the one checked."""
    from microbench.node import check, reference
    reads, judged = [], []
    monkeypatch.setattr(reference, "load", lambda path: reads.append(path) or f"read {path}")
    monkeypatch.setattr(check, "run", lambda args, argv, stored: judged.append(stored) or 0)
    argv = ["--baseline", str(tmp_path / "b.json")]
    assert arguments._run(arguments.build_parser().parse_args(argv), argv) == 0
    assert reads == [str(tmp_path / "b.json")] and judged == [f"read {reads[0]}"]
