"""The history of stored results (store/history.py, with store/provenance.py's fields): series by
run identity (two workloads never mixed), their order (time or --label), what changed at a
change (the torch version named where a step coincides with it; a flag; a clock that wanders
ranked below), what stayed the same, and the regression the check fails on."""
import math
import random

import pytest

from conftest import nightly_result
from microbench.store import history, provenance
from microbench.store.entry import entries_of

NIGHTS = 20


def entries(documents) -> list:
    return [entry for night, document in enumerate(documents)
            for entry in entries_of(document, f"night{night}.json")]


def levels(before: float, after: float, noise: float = 0.01, seed: int = 0,
           nights: int = NIGHTS) -> list[float]:
    rng = random.Random(seed)
    return [100.0 * (before if night < nights else after) * math.exp(rng.gauss(0, noise))
            for night in range(2 * nights)]


def torch_step(values, config=None) -> list[dict]:
    """A history whose torch version changes at night NIGHTS."""
    return [nightly_result(value, night, config,
                           {"torch": "2.15.0" if night >= NIGHTS else "2.14.1"})
            for night, value in enumerate(values)]


def test_a_step_with_a_torch_change_names_torch_first():
    past = history.history(entries(torch_step(levels(1.0, 0.9))))
    [series] = past.series
    [step] = series.steps
    assert abs(step.change.index - NIGHTS) <= 1
    first = step.changed[0]
    assert (first.name, first.before, first.after) == ("torch", "2.14.1", "2.15.0")
    assert first.steadiness == history.HELD
    assert "CUDA" in step.unchanged and "torch" not in step.unchanged
    assert step.levels[0] == pytest.approx(100, rel=0.02)
    assert step.levels[1] == pytest.approx(90, rel=0.02)


def test_a_flag_that_changed_with_the_speed_comes_before_a_version_that_wandered():
    """--cudnn-benchmark switched at the step and held; the SM clock wandered on both sides."""
    rng = random.Random(1)
    documents = []
    for night, value in enumerate(levels(1.0, 1.2)):
        document = nightly_result(value, night, {"cudnn_benchmark": night >= NIGHTS})
        document["telemetry"] = {"available": True, "source": "nvml", "energy_j": None,
                                 "joules_per_item": None, "samples": [],
                                 "stats": {"sm_clock_mhz": {"min": 1, "median":
                                                            rng.choice([1700, 1980]),
                                                            "max": 2000}}}
        documents.append(document)
    [step] = history.history(entries(documents)).series[0].steps
    names = [shift.name for shift in step.changed]
    assert names[0] == "--cudnn-benchmark"
    if "SM clock [MHz]" in names:
        assert step.changed[names.index("SM clock [MHz]")].steadiness == history.WANDERS


def test_two_workloads_are_never_mixed():
    """resnet18 and resnet50, and batch 2 and 4, each a series of its own even when their
    nights interleave and one of them steps."""
    documents = []
    for night, value in enumerate(levels(1.0, 0.8)):
        documents.append(nightly_result(value, night))
        documents.append(nightly_result(50.0, night, {"network": "resnet50"}))
        documents[-1]["model"]["name"] = "resnet50"
        documents.append(nightly_result(30.0, night, {"batch_size": 4}))
        documents[-1]["Mini batch size [img/gpu]"] = 4
    past = history.history(entries(documents))
    assert len(past.series) == 3
    for series in past.series:
        assert len({entry.settings["network"] for entry in series.entries}) == 1
        assert len({entry.settings["batch"] for entry in series.entries}) == 1
        assert len(series.entries) == 2 * NIGHTS
    stepped = [series for series in past.series if series.steps]
    assert [series.entries[0].settings["network"] for series in stepped] == ["resnet18"]


def test_another_device_model_is_another_series_a_flag_is_not():
    documents = [nightly_result(100.0, night, {"cudnn_benchmark": night % 2 == 0},
                                {"device_name": "AMD EPYC" if night < 10 else "MI300X"})
                 for night in range(20)]
    past = history.history(entries(documents))
    assert sorted(len(series.entries) for series in past.series) == [10, 10]


def test_series_are_ordered_by_time_or_by_label_digits_as_numbers():
    documents = [nightly_result(100.0 + night, 40 - night, label=f"n{night}")
                 for night in range(12)]
    by_time = history.history(entries(documents)).series[0]
    assert [entry.label for entry in by_time.entries][:3] == ["n11", "n10", "n9"]
    by_label = history.history(entries(documents), history.BY_LABEL).series[0]
    assert [entry.label for entry in by_label.entries][:3] == ["n0", "n1", "n2"]
    assert by_label.entries[-1].label == "n11"


def test_results_without_what_the_order_needs_are_left_out_on_one_line():
    documents = [nightly_result(100.0, night, label="n1" if night else None)
                 for night in range(4)]
    past = history.history(entries(documents), history.BY_LABEL)
    assert len(past.series[0].entries) == 3
    assert past.lines == ["history: left out 1 result(s): no --label (--by label)"]


def test_the_newest_below_a_confirmed_slowdown_is_a_regression():
    past = history.history(entries(torch_step(levels(1.0, 0.9))), tolerance_pct=5.0)
    verdict = past.series[0].regression
    assert verdict is not None and verdict.ratio == pytest.approx(0.9, rel=0.02)


@pytest.mark.parametrize("after, tolerance", [(1.1, 5.0), (0.97, 5.0), (0.9, 15.0)])
def test_faster_or_within_the_tolerance_is_no_regression(after, tolerance):
    past = history.history(entries(torch_step(levels(1.0, after))), tolerance_pct=tolerance)
    assert past.series[0].steps and past.series[0].regression is None


def test_a_slowdown_that_recovered_is_no_regression():
    values = levels(1.0, 0.9) + [100.0 * (1 + 0.005 * (night % 3)) for night in range(6)]
    documents = [nightly_result(value, night) for night, value in enumerate(values)]
    past = history.history(entries(documents))
    assert [step.change.verdict.verdict for step in past.series[0].steps] == ["slower",
                                                                             "faster"]
    assert past.series[0].regression is None


def test_what_changed_lists_differences_and_sameness():
    before = entries([nightly_result(100.0, 0, env={"driver": "550.1"})])
    after = entries([nightly_result(90.0, 1, {"iterations": 50}, {"driver": "560.2"})])
    shifts, unchanged = history.what_changed(before, after)
    assert [shift.name for shift in shifts] == ["--iterations", "driver"]
    assert "torch" in unchanged and "driver" not in unchanged


def loaded(document: dict, load_1m: float, others: float) -> dict:
    """``document`` with the host's load around its timed region, on 2 cores."""
    document["host_load"] = {"cores": 2, "usable_cores": 2,
                             "start": {"load_1m": load_1m, "load_5m": 1.0, "load_15m": 1.0},
                             "end": None, "window_s": 3.0, "others_cpu_percent": others,
                             "steal_percent": None, "busiest": [], "processes_unknown": None,
                             "run_processes": 1, "judged": True,
                             "loaded": others >= 50 and load_1m >= 2}
    return document


def test_a_step_where_the_host_became_loaded_names_the_hosts_load():
    """Issue 64: a slowdown that came with a loaded host says so; the load average per core
    is kept to one digit (it varies from run to run)."""
    documents = [loaded(nightly_result(value, night), 5.1 if night >= NIGHTS else 0.2,
                        140.0 if night >= NIGHTS else 3.0)
                 for night, value in enumerate(levels(1.0, 0.6))]
    [step] = history.history(entries(documents)).series[0].steps
    shifts = {shift.name: (shift.before, shift.after) for shift in step.changed}
    assert shifts["host loaded"] == (False, True)
    assert shifts["host load [per core]"] == (0.1, 3.0)
    assert "torch" in step.unchanged


def test_every_field_has_a_kind_and_the_flags_leave_out_the_identity():
    assert {kind for _, kind, _ in provenance.FIELDS} <= set(provenance.KINDS)
    assert "cudnn_benchmark" in provenance.FLAGS and "iterations" in provenance.FLAGS
    for identity_setting in ("network", "batch_size", "precision", "compile", "parallel",
                             "output_dir", "label"):
        assert identity_setting not in provenance.FLAGS


def test_series_that_differ_in_a_setting_the_title_leaves_out_name_it():
    documents = [nightly_result(100.0, night, {"optimizer": optimizer})
                 for night in range(4) for optimizer in ("sgd", "adamw")]
    titles = sorted(series.title for series in history.history(entries(documents)).series)
    assert titles[0].endswith("· optimizer adamw") and titles[1].endswith("· optimizer sgd")
