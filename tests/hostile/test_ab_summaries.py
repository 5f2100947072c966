"""A/B summaries are strangers' files too (issue 46): the sides a summary names are read only
beside it, by base name; the command --rerun suggests keeps every string of the file one shell
word; a summary whose figures contradict each other is refused; and a summary's name tells its
two sides apart. In-process.

(Part of the hostile-input tests, split from one file by what is attacked.)"""
from __future__ import annotations

import copy
import json
import os
import shlex

import pytest
from hypothesis import assume, given, settings, strategies as st

from conftest import run_main
from microbench.platform.errors import UsageError
from microbench.store import schema
from support.hostile import FAST, ab_summary, report_of, result_named, write_ab
from support.hostile import no_launcher_environment  # noqa: F401 (autouse: this module's)


# ---------------------------------------------------------------- an A/B summary's sides

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


# ---------------------------------------------------------------- the command --rerun suggests

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


# ---------------------------------------------------------------- an A/B summary's figures

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


# ---------------------------------------------------------------- an A/B summary's name

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
