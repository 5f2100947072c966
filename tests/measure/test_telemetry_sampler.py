"""The sampler, driven by a fake clock and a fake wait: samples at start, per tick and at stop,
a failing source, misuse; no sleeps."""
from __future__ import annotations

import threading

import pytest

from microbench.platform.errors import UsageError
from microbench.measure.telemetry import Sampler
from support.telemetry_fakes import ScriptedSource


class FakeTime:
    """A clock that moves only when wait() is called; wait() ends the loop after ``ticks``."""

    def __init__(self, ticks: int):
        self.now = 100.0
        self.ticks_left = ticks
        self.exhausted = threading.Event()
        self.timeouts = []

    def clock(self) -> float:
        return self.now

    def wait(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        self.now += timeout
        if self.ticks_left == 0:
            self.exhausted.set()
            return True
        self.ticks_left -= 1
        return False


def test_sampler_collects_the_expected_samples_deterministically():
    fake = FakeTime(ticks=5)
    source = ScriptedSource()
    sampler = Sampler(source, interval_s=0.25, clock=fake.clock, wait=fake.wait)
    sampler.start()
    assert fake.exhausted.wait(timeout=10)      # the thread has run its five ticks (no sleep)
    samples = sampler.stop()
    # One at start, one per tick, one final: times from the fake clock, not the source.
    assert len(samples) == 7 and source.reads == 7
    assert [s.t_s for s in samples] == [100.0, 100.25, 100.5, 100.75, 101.0, 101.25, 101.5]
    assert fake.timeouts == [0.25] * 6 and sampler.error is None


def test_sampler_default_wait_stops_at_once_and_rejects_misuse():
    source = ScriptedSource()
    sampler = Sampler(source, interval_s=3600.0)   # the stop event ends the hour-long wait
    sampler.start()
    assert len(sampler.stop()) == 2
    with pytest.raises(UsageError):
        sampler.stop()
    with pytest.raises(UsageError):
        Sampler(source, interval_s=0)


def test_sampler_survives_a_failing_source():
    class Failing(ScriptedSource):
        def read(self):
            raise RuntimeError("sensor gone")

    fake = FakeTime(ticks=3)
    sampler = Sampler(Failing(), clock=fake.clock, wait=fake.wait)
    sampler.start()
    assert sampler.stop() == [] and sampler.error == "RuntimeError: sensor gone"


def test_sample_now_drives_the_sampler_by_hand():
    fake = FakeTime(ticks=0)
    sampler = Sampler(ScriptedSource(), clock=fake.clock, wait=fake.wait)
    fake.now = 5.0
    sampler.sample_now()
    fake.now = 6.0
    sampler.sample_now()
    assert [s.t_s for s in sampler.samples] == [5.0, 6.0]
