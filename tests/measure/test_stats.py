"""microbench.measure.stats on fake data with known answers, and its properties for any samples."""
import math

import pytest
from hypothesis import given, settings, strategies as st

from microbench.measure import stats
from microbench.measure.stats import DiscardPolicy, StoppingRule, TrialStats, gate, paired_ab

T2 = 4.302652729911275          # t(0.975, 2)
T4 = 2.7764451051977987         # t(0.975, 4)

positive = st.floats(min_value=1e-3, max_value=1e7, allow_nan=False, allow_infinity=False)
samples = st.lists(positive, min_size=2, max_size=12)


def test_headline_is_the_geometric_mean_with_t_intervals_on_logs():
    spread = TrialStats((100.0, 100 * math.exp(0.1), 100 * math.exp(-0.1)))
    assert spread.headline == pytest.approx(100.0)
    assert spread.ci95 == pytest.approx((100 * math.exp(-T2 * 0.1 / math.sqrt(3)),
                                         100 * math.exp(T2 * 0.1 / math.sqrt(3))))
    assert spread.prediction95 == pytest.approx((100 * math.exp(-T2 * 0.1 * math.sqrt(4 / 3)),
                                                 100 * math.exp(T2 * 0.1 * math.sqrt(4 / 3))))
    assert spread.method == stats.CI_METHOD
    document = spread.to_dict()
    assert document["headline_statistic"] == "geometric mean of the trials"
    assert document["prediction95_low"] == pytest.approx(spread.prediction95[0])


def test_the_issue_two_trials_give_a_positive_interval():
    """The issue's CPU case: 3.885 images/s, median of 2 trials, 95% CI -19.18 to 26.95."""
    spread = TrialStats((1.80, 5.97))
    low, high = spread.ci95
    assert 0 < low < spread.headline < high


def test_one_trial_has_no_interval_and_says_so():
    spread = TrialStats((42.0,))
    assert spread.headline == 42.0 and spread.ci95 is None and spread.prediction95 is None
    assert spread.method == stats.ONE_TRIAL
    assert spread.to_dict()["ci95_low"] is None


@pytest.mark.parametrize("bad", [(), (1.0, 0.0), (1.0, -2.0), (1.0, math.nan), (math.inf,)])
def test_non_positive_throughputs_are_refused(bad):
    with pytest.raises(ValueError):
        TrialStats(bad)


@settings(max_examples=200, deadline=None)
@given(samples)
def test_intervals_are_positive_and_contain_the_headline(values):
    spread = TrialStats(tuple(values))
    low, high = spread.ci95
    p_low, p_high = spread.prediction95
    assert 0 < p_low <= low <= spread.headline <= high <= p_high
    assert min(values) * (1 - 1e-9) <= spread.headline <= max(values) * (1 + 1e-9)


@settings(max_examples=100, deadline=None)
@given(samples, positive)
def test_intervals_scale_with_the_unit(values, factor):
    """Throughput in other units (images vs tokens) moves every figure by the same factor."""
    one, other = TrialStats(tuple(values)), TrialStats(tuple(v * factor for v in values))
    assert other.headline == pytest.approx(one.headline * factor, rel=1e-9)
    assert other.ci95[0] == pytest.approx(one.ci95[0] * factor, rel=1e-9)


# ---------------------------------------------------------------- A/B

def test_ab_faster_slower_and_no_difference_on_known_ratios():
    a = [100.0, 90.0, 110.0, 95.0, 105.0]          # drifting device: pairing removes it
    faster = paired_ab(a, [x * r for x, r in zip(a, (1.10, 1.12, 1.09, 1.11, 1.10))])
    assert faster.verdict == "faster" and faster.ratio == pytest.approx(1.104, abs=0.002)
    assert faster.ci95[0] > 1
    slower = paired_ab(a, [x * 0.9 for x in a][:4] + [a[4] * 0.91])
    assert slower.verdict == "slower" and slower.ci95[1] < 1
    same = paired_ab(a, [x * r for x, r in zip(a, (1.01, 0.99, 1.02, 0.98, 1.0))])
    assert same.verdict == "same within 5%"
    assert 0.95 < same.ci95[0] < 1 < same.ci95[1] < 1.05
    unsure = paired_ab(a, [x * r for x, r in zip(a, (1.2, 0.8, 1.1, 0.9, 1.0))])
    assert unsure.verdict == "no difference detected" and unsure.ci95[0] < 0.95
    document = faster.to_dict()
    assert document["verdict"] == "faster" and len(document["ci95"]) == 2
    assert document["a"] == a


def test_ab_known_interval():
    a = [100.0, 100.0, 100.0]
    b = [100 * math.exp(0.1 + d) for d in (0.0, 0.05, -0.05)]
    result = paired_ab(a, b)
    half = T2 * 0.05 / math.sqrt(3)
    assert result.ci95 == pytest.approx((math.exp(0.1 - half), math.exp(0.1 + half)))


def test_ab_one_round_is_the_point_ratio_and_says_so():
    result = paired_ab([100.0], [200.0])
    assert result.ratio == pytest.approx(2.0) and result.ci95 is None
    assert result.verdict == "faster" and "one round" in result.method
    assert "point ratio, noise not tested" in result.comparison.text
    assert paired_ab([100.0], [102.0]).verdict == "no difference detected"


def test_ab_refuses_unpaired():
    with pytest.raises(ValueError):
        paired_ab([1.0, 2.0], [1.0])


# ---------------------------------------------------------------- the gate

def test_gate_regression_needs_the_drop_beyond_tolerance_and_significance():
    baseline = [100.0, 101.0, 99.0, 100.5, 99.5]
    clear = gate(baseline, [80.0, 81.0, 79.0], tolerance_pct=5)
    assert clear.regression and clear.verdict == "slower" and clear.p_value < 0.05
    assert clear.ci95[0] < clear.ratio < clear.ci95[1] < 1
    noisy = gate([100.0, 140.0, 70.0], [90.0, 60.0, 120.0], tolerance_pct=5)
    assert noisy.drop_pct > 5 and not noisy.regression
    assert noisy.verdict == "no difference detected"
    small = gate(baseline, [97.0, 97.2, 96.9], tolerance_pct=5)
    assert small.significant and not small.regression and small.verdict == "same within 5%"


def test_gate_on_one_sample_a_side_uses_the_point_ratio_and_says_so():
    verdict = gate([100.0], [90.0], tolerance_pct=5)
    assert verdict.regression and verdict.p_value is None and verdict.ci95 is None
    assert "point ratio, noise not tested" in verdict.comparison.text
    assert not gate([100.0, 101.0], [97.0], tolerance_pct=5).regression
    assert gate([100.0], [90.0], tolerance_pct=5).to_dict()["drop_pct"] == pytest.approx(10)
    # A change of +2,122% is not "within tolerance": faster, on the point ratio.
    assert gate([10.0], [222.2], tolerance_pct=5).verdict == "faster"


# ---------------------------------------------------------------- the shared wording

@pytest.mark.parametrize("ratio, interval, words", [
    (1.20, (1.10, 1.31), "faster (interval 1.100-1.310)"),
    (0.80, (0.76, 0.84), "slower (interval 0.760-0.840)"),
    (1.01, (0.97, 1.04), "same within 5% (interval 0.970-1.040)"),
    # 400x wide: not "the same", whatever its centre.
    (0.22, (0.01, 4.07), "no difference detected (interval 0.010-4.070)"),
    (0.05, (0.00042, 6.2), "no difference detected (interval 0.00042-6.200)"),
    (24.46, (0.21, 2910.51), "no difference detected (interval 0.210-2,911)"),
    # Real but smaller than the tolerance, the interval reaching beyond it: not called faster.
    (1.04, (1.01, 1.08), "no difference detected (interval 1.010-1.080)"),
    # Beyond the tolerance on the point, but the interval holds 1.
    (1.10, (0.98, 1.23), "no difference detected (interval 0.980-1.230)"),
    (0.5, None, "slower (one trial on a side: the point ratio, noise not tested)"),
    (1.02, None, "no difference detected (one trial on a side: the point ratio, noise not "
                 "tested)"),
])
def test_each_verdict_from_the_ratio_and_its_interval(ratio, interval, words):
    from microbench.measure.stats import compared
    assert compared(ratio, interval, 5).text == words


def test_a_tolerance_of_zero_calls_any_interval_clear_of_1_a_change():
    from microbench.measure.stats import compared
    assert compared(1.03, (1.01, 1.05), 0).verdict == "faster"
    assert compared(1.0, (0.99, 1.01), 0).verdict == "no difference detected"


@pytest.mark.parametrize("baseline, current, verdict", [
    ((100.0, 101.0, 99.0), (80.0, 81.0, 79.0), "slower"),
    ((100.0, 101.0, 99.0), (120.0, 121.0, 119.0), "faster"),
    ((100.0, 101.0, 99.0), (100.5, 99.5, 100.0), "same within 5%"),
    ((100.0, 180.0, 40.0), (60.0, 200.0, 90.0), "no difference detected"),
])
def test_the_report_compare_and_ab_word_the_same_trials_alike(baseline, current, verdict):
    """Synthetic trials through each caller's path give one verdict: the report's row against
    its baseline, --compare's gate, and --ab (paired by round)."""
    from microbench.output.table import trial_verdict
    assert trial_verdict(baseline, current).verdict == verdict
    assert gate(baseline, current, 5).verdict == verdict
    if verdict != "no difference detected":          # pairing changes a noisy one's interval
        assert paired_ab(baseline, current).verdict == verdict


@settings(max_examples=100, deadline=None)
@given(samples, samples, st.floats(min_value=0, max_value=50))
def test_gate_never_fails_a_run_no_slower_than_the_tolerance(baseline, current, tolerance):
    verdict = gate(baseline, current, tolerance)
    if verdict.drop_pct <= tolerance:
        assert not verdict.regression


# ---------------------------------------------------------------- --max-noise

class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_max_noise_stops_when_the_interval_is_narrow_enough():
    rule = StoppingRule(max_noise_pct=1.0, max_trials=20, clock=FakeClock())
    for value in (100.0, 100.2, 99.9):
        assert rule.reason() is None
        rule.add(value)
    assert rule.reason().startswith("noise target met")


def test_max_noise_stops_at_max_trials_and_says_the_noise_left():
    rule = StoppingRule(max_noise_pct=0.1, max_trials=4, clock=FakeClock())
    for value in (100.0, 120.0, 90.0):
        rule.add(value)
        assert rule.reason() is None
    rule.add(110.0)
    assert rule.reason().startswith("--max-trials 4 reached; the 95% CI's half-width is still")


def test_max_noise_stops_at_the_time_limit_on_a_fake_clock():
    clock = FakeClock()
    rule = StoppingRule(max_noise_pct=0.1, max_trials=100, time_limit_s=60, clock=clock)
    rule.add(100.0)
    clock.now = 59.9
    assert rule.reason() is None
    clock.now = 60.0
    assert rule.reason().startswith("--time-limit 60 s reached after 1 trials")


# ---------------------------------------------------------------- throttling

class FakeTelemetry:
    def __init__(self, drop=None, reasons=()):
        self.sm_clock_drop, self.throttle_reasons_seen = drop, reasons


def test_throttle_flags_a_clock_below_three_quarters_or_a_reason():
    assert stats.throttle_reason(None) is None
    assert stats.throttle_reason(FakeTelemetry(drop=0.2)) is None
    assert stats.throttle_reason(FakeTelemetry(drop=0.3)) == "SM clock fell to 70% of its maximum"
    assert "sw_thermal" in stats.throttle_reason(FakeTelemetry(reasons=("sw_thermal",)))


def test_discard_policy_is_bounded_and_keeps_what_it_discarded():
    policy = DiscardPolicy(max_reruns=2)
    hot = FakeTelemetry(drop=0.5)
    assert not policy.rerun(0, FakeTelemetry(drop=0.0))
    assert policy.rerun(1, hot) and policy.rerun(1, hot)
    assert not policy.rerun(1, hot) and policy.exhausted
    assert policy.discarded == [(1, "SM clock fell to 50% of its maximum")] * 2
