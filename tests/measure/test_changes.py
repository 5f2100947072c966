"""Change points of synthetic nightly series (seeded noise, multiplicative as a GPU's is): a step
of three times the noise found within one result of where it is, a 3% step inside 2% noise
found, a single outlier night never a change, a slow drift reported only in its direction, and
the gate's test deciding what is confirmed."""
import math
import random

import pytest

from microbench.measure import changes

NIGHTS = 30


def noisy(levels, noise: float, seed: int) -> list[float]:
    """A night per level, each ``level * exp(N(0, noise))``."""
    rng = random.Random(seed)
    return [100.0 * level * math.exp(rng.gauss(0.0, noise)) for level in levels]


def step(fraction: float, noise: float, seed: int, before: int = NIGHTS,
         after: int = NIGHTS) -> list[float]:
    return noisy([1.0] * before + [1.0 + fraction] * after, noise, seed)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("fraction", [-0.03, 0.03, -0.10])
def test_a_step_of_three_times_the_noise_is_found_within_one_result(seed, fraction):
    found = changes.changes(step(fraction, abs(fraction) / 3, seed))
    assert len(found) == 1
    assert abs(found[0].index - NIGHTS) <= 1
    low, high = found[0].verdict.ci95
    assert low <= 1 + fraction <= high or abs(found[0].verdict.ratio - 1 - fraction) < 0.01


@pytest.mark.parametrize("seed", range(3))
def test_a_three_percent_step_inside_two_percent_noise_is_found(seed):
    found = changes.changes(step(-0.03, 0.02, seed))
    assert [abs(change.index - NIGHTS) <= 2 for change in found] == [True]
    assert found[0].verdict.verdict == "slower"


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("night", [1, NIGHTS, 2 * NIGHTS - 1])
def test_a_single_outlier_night_is_not_a_change(seed, night):
    values = noisy([1.0] * 2 * NIGHTS, 0.02, seed)
    values[night] *= 0.7
    assert changes.changes(values) == []


@pytest.mark.parametrize("seed", range(3))
def test_flat_noise_has_no_change(seed):
    assert changes.changes(noisy([1.0] * 3 * NIGHTS, 0.02, seed)) == []


@pytest.mark.parametrize("seed", range(3))
def test_a_slow_drift_is_reported_only_in_its_direction(seed):
    """10% lost over 60 nights in 2% noise: no night is a step, but the level falls; whatever is
    reported is slower, never a faster change the noise made up."""
    levels = [1.0 - 0.1 * night / (2 * NIGHTS) for night in range(2 * NIGHTS)]
    found = changes.changes(noisy(levels, 0.02, seed))
    assert all(change.verdict.ratio < 1 for change in found)
    assert len(found) <= 3


def test_a_drift_within_the_noise_is_no_change():
    levels = [1.0 - 0.02 * night / (2 * NIGHTS) for night in range(2 * NIGHTS)]
    assert changes.changes(noisy(levels, 0.02, 7)) == []


def test_two_steps_are_both_found_and_each_is_tested_between_its_neighbours():
    values = noisy([1.0] * 20 + [0.9] * 20 + [1.0] * 20, 0.01, 3)
    found = changes.changes(values)
    assert [change.index for change in found] == [20, 40]
    assert (found[0].start, found[0].stop, found[1].start, found[1].stop) == (0, 40, 20, 60)
    assert [change.verdict.verdict for change in found] == ["slower", "faster"]


def test_a_step_needs_two_runs_on_each_side():
    """The newest night alone below the others is one sample: the gate cannot judge its noise,
    so it is not (yet) a change; two nights are."""
    values = noisy([1.0] * 20, 0.01, 1)
    assert changes.changes(values + [80.0]) == []
    assert [change.index for change in changes.changes(values + [80.0, 80.5])] == [20]


def test_short_and_constant_series():
    assert changes.changes([100.0, 90.0, 80.0]) == []
    assert changes.changes([100.0] * 10) == []
    found = changes.changes([100.0] * 5 + [90.0] * 5)
    assert [change.index for change in found] == [5]


def test_the_noise_estimate_ignores_one_step():
    logs = [math.log(value) for value in step(-0.2, 0.01, 0)]
    assert changes.noise(logs) == pytest.approx(0.01, rel=0.35)
