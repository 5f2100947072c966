"""Statistics and clocks, against hand-computed values and a scripted fake clock (no sleeps)."""
import math

import numpy as np
import pytest
import torch

from microbench.drivers.benchmark import warm_up
from microbench.scenarios.base import timed_loop
from microbench.measure.timing import HostRecorder, Measurement, make_recorder, time_calls


class FakeClock:
    """Returns scripted timestamps in seconds, one per call."""

    def __init__(self, stamps):
        self._stamps = iter(stamps)

    def __call__(self):
        return next(self._stamps)


def test_statistics_match_hand_computed_values():
    m = Measurement([10.0, 12.0, 11.0, 13.0, 14.0])
    assert m.count == 5
    assert m.mean == pytest.approx(12.0)
    assert m.median == pytest.approx(12.0)
    assert m.std == pytest.approx(math.sqrt(2.5))          # sample std, n - 1
    assert (m.min, m.max) == (10.0, 14.0)
    assert m.cv == pytest.approx(math.sqrt(2.5) / 12.0)
    assert m.total_ms == pytest.approx(60.0)


def test_percentiles_match_numpy_linear_interpolation():
    samples = [3.1, 9.4, 1.2, 7.7, 5.5, 2.9, 8.8, 4.4, 6.1, 0.5, 10.2]
    m = Measurement(samples)
    for q, value in ((90, m.p90), (95, m.p95), (99, m.p99), (50, m.median)):
        assert value == pytest.approx(float(np.percentile(samples, q)))
    assert m.iqr == pytest.approx(float(np.percentile(samples, 75) - np.percentile(samples, 25)))


def test_single_sample_has_zero_spread_and_empty_is_nan():
    assert Measurement([5.0]).std == 0.0
    assert math.isnan(Measurement([]).mean)


def test_noisy_flag_follows_cv_threshold():
    assert not Measurement([100.0, 101.0, 99.0]).is_noisy
    assert Measurement([100.0, 150.0, 50.0]).is_noisy


def test_merge_keeps_every_sample():
    merged = Measurement.merge([Measurement([1.0, 2.0]), Measurement([3.0])])
    assert merged.samples_ms == (1.0, 2.0, 3.0)


def test_host_recorder_intervals_from_fake_clock():
    recorder = HostRecorder(4, FakeClock([1.000, 1.010, 1.025, 1.045]))
    for _ in range(4):
        recorder.mark()
    assert recorder.intervals_ms() == pytest.approx([10.0, 15.0, 20.0])


def test_cpu_device_uses_host_clock():
    assert isinstance(make_recorder(torch.device("cpu"), 2), HostRecorder)


def test_timed_loop_times_each_step_and_keeps_outputs():
    clock = FakeClock([0.0, 0.002, 0.005, 0.009])
    outputs = iter([torch.tensor(1.0), torch.tensor(2.0), torch.tensor(3.0)])
    timed = timed_loop(lambda: next(outputs), 3, torch.device("cpu"), time_fn=clock)
    assert timed.times.samples_ms == pytest.approx((2.0, 3.0, 4.0))
    assert [float(x) for x in timed.outputs] == [1.0, 2.0, 3.0] and timed.detail is None


def test_time_calls_excludes_the_between_hook():
    # Each call: mark (start), fn, mark (end); the flush between calls happens before the start.
    clock = FakeClock([0.0, 0.001, 0.100, 0.103])
    flushes = []
    m = time_calls(lambda: None, 2, torch.device("cpu"), between=lambda: flushes.append(1),
                   time_fn=clock)
    assert m.samples_ms == pytest.approx((1.0, 3.0))
    assert len(flushes) == 2


def test_warm_up_reports_total_and_first_iteration():
    clock = FakeClock([10.0, 12.5, 13.0])
    calls = []
    total, first = warm_up(lambda: calls.append(1), 3, torch.device("cpu"), clock=clock)
    assert (total, first) == (pytest.approx(3.0), pytest.approx(2.5))
    assert len(calls) == 3
    assert warm_up(lambda: None, 0, torch.device("cpu")) == (0.0, None)


def test_phase_marks_split_each_iteration_into_three_that_add_up():
    """A fake step that marks after 'forward' and 'backward': 2+3+1 ms, then 4+5+2 ms."""
    from microbench.steps.workload import PhaseMarks
    clock = FakeClock([0.0, 0.002, 0.005, 0.006, 0.010, 0.015, 0.017])
    phases = PhaseMarks()

    def step():
        phases.mark()
        phases.mark()

    timed = timed_loop(step, 2, torch.device("cpu"), time_fn=clock, phases=phases)
    forward, backward, optimizer = (times for _, times in timed.detail.items())
    assert forward.samples_ms == pytest.approx((2.0, 4.0))
    assert backward.samples_ms == pytest.approx((3.0, 5.0))
    assert optimizer.samples_ms == pytest.approx((1.0, 2.0))
    assert timed.times.samples_ms == pytest.approx((6.0, 11.0))
    phases.mark()                         # outside the loop the marks do nothing
