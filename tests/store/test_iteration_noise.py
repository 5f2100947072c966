"""The rule for a comparison with one trial on a side (issue 64): a ratio inside the band the
runs' own iteration spread allows is within noise and fails no gate; beyond it the point ratio
decides as before; with trials on both sides Welch's test is left alone."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from conftest import nightly_result
from microbench.measure import stats
from microbench.store import iteration_noise
from microbench.store.entry import ab_entries


def entry(cv=None, samples=()):
    """What the rule reads of a stored result: its figures (the CV) and its samples."""
    return SimpleNamespace(figures={"cv": cv}, samples_ms=tuple(samples))


# The runs: iteration CVs of 32% and 75% on a loaded 2-core host.
NOISY = (entry(0.32), entry(0.75))
TIGHT = (entry(0.01), entry(0.01))


def test_the_band_is_95_percent_of_one_iteration_ratio_of_each_run():
    band = iteration_noise.NoiseBand((0.32, 0.75))
    spread = math.sqrt(math.log1p(0.32 ** 2) + math.log1p(0.75 ** 2))
    assert band.high == pytest.approx(math.exp(1.959964 * spread))
    assert band.low == pytest.approx(1 / band.high)
    assert band.text == "0.236-4.243 (iteration CV 32% and 75%)"


@pytest.mark.parametrize("current", [111.6, 71.1])      # the 1.116, and 28.9% slower
def test_a_one_trial_ratio_inside_the_noise_is_within_noise_and_no_regression(current):
    verdict = iteration_noise.ruled(stats.gate([100.0], [current], 5.0), NOISY)
    assert verdict.verdict == iteration_noise.WITHIN_NOISE and not verdict.regression
    assert verdict.to_dict()["verdict"] == iteration_noise.WITHIN_NOISE
    assert verdict.to_dict()["regression"] is False
    assert verdict.to_dict()["noise_band"]["iteration_cv"] == [0.32, 0.75]
    text = iteration_noise.words(verdict.comparison, NOISY)
    assert text.startswith("within noise (one trial on a side") and "--repeat 2" in text
    assert "faster" not in text and "slower" not in text


def test_the_same_ratio_with_tight_samples_is_still_a_regression():
    verdict = iteration_noise.ruled(stats.gate([100.0], [71.1], 5.0), TIGHT)
    assert verdict.verdict == "slower" and verdict.regression
    text = iteration_noise.words(verdict.comparison, TIGHT)
    assert text.startswith("slower (one trial on a side: the point ratio, noise not tested), "
                           "beyond 0.973-1.028")
    assert text.count("noise not tested") == 1


def test_trials_on_both_sides_are_left_to_welchs_test():
    verdict = stats.gate([100.0, 101.0, 99.0], [80.0, 81.0, 79.0], 5.0)
    assert iteration_noise.ruled(verdict, NOISY) is verdict and verdict.regression
    assert iteration_noise.words(verdict.comparison, NOISY) == verdict.comparison.text


def test_without_a_spread_on_either_side_the_point_ratio_decides_and_says_so():
    verdict = iteration_noise.ruled(stats.gate([100.0], [71.1], 5.0), (entry(), entry()))
    assert verdict.regression
    assert iteration_noise.words(verdict.comparison, (entry(), entry())) == verdict.comparison.text
    assert stats.POINT_RATIO in verdict.comparison.text


def test_a_side_without_a_cv_takes_it_from_its_samples_and_one_without_either_adds_none():
    samples = (10.0, 20.0, 30.0)
    assert iteration_noise.iteration_cv(entry(samples=samples)) == pytest.approx(10.0 / 20.0)
    band = iteration_noise.band_of((entry(samples=samples), entry()))
    assert band.cvs == pytest.approx((0.5,))


@pytest.mark.parametrize("cv", [math.nan, -0.1, math.inf])
def test_a_cv_that_is_no_spread_is_not_read(cv):
    assert iteration_noise.iteration_cv(entry(cv)) is None


def test_a_huge_cv_gives_a_wide_band_of_short_words():
    band = iteration_noise.NoiseBand((1e300,))
    assert band.holds(1e4) and len(band.text) < 80


def test_an_ab_of_one_round_inside_the_sides_noise_is_worded_within_noise():
    """The report's A/B rows: B's footnote says within noise, from the sides' own results."""
    sides = {side: nightly_result(throughput, 0) for side, throughput in
             (("a", 100.0), ("b", 111.6))}
    summary = {"ab": {"ratio": 1.116, "ci95": None, "verdict": "faster", "rounds": 1,
                      "a": [100.0], "b": [111.6], "flags_b": "--nhwc"}}
    for side, cv in (("a", 0.32), ("b", 0.75)):
        sides[side]["timing"]["stats"]["cv"] = cv
    note = ab_entries(summary, "ab.json", sides)[1].note
    assert "over 1 rounds: within noise (one trial on a side" in note
    for document in sides.values():
        document["timing"]["stats"]["cv"] = 0.01
    note = ab_entries(summary, "ab.json", sides)[1].note
    assert "over 1 rounds: faster (one trial on a side: the point ratio, noise not tested), " \
           "beyond" in note
