"""The telemetry report from scripted samples: statistics, the clock-drop and throttle warnings,
energy by counter or estimated, per item, the JSON block and CSV cells, and combining reports."""
from __future__ import annotations

import json

import pytest

from microbench.measure.telemetry import (ENERGY_COUNTER, ENERGY_TRAPEZOID, SM_CLOCK_DROP_WARN,
                                          Sample, TelemetryReport, combine, energy_counter_vs_power,
                                          summarize)
from support.telemetry_fakes import ScriptedSource


def _series(clocks=(), powers=(), energies=(), reasons=(), step=1.0):
    n = max(len(clocks), len(powers), len(energies), len(reasons))
    pick = lambda values, i: values[i] if i < len(values) else None   # noqa: E731
    return [Sample(t_s=i * step, sm_clock_mhz=pick(clocks, i), power_w=pick(powers, i),
                   energy_j=pick(energies, i), throttle_reasons=pick(reasons, i)) for i in range(n)]


def test_a_15_percent_clock_drop_gives_exactly_one_warning_and_exact_median():
    samples = _series(clocks=[2000.0, 2000.0, 1700.0, 1900.0, 1800.0], reasons=[()] * 5)
    report = summarize(samples, ScriptedSource(), items=100, timed_s=4.0)
    clock = report.stat("sm_clock_mhz")
    assert (clock.min, clock.median, clock.max) == (1700.0, 1900.0, 2000.0)
    assert report.sm_clock_drop == pytest.approx(0.15)
    warnings = report.warnings()
    assert len(warnings) == 1 and "SM clock fell 15.0%" in warnings[0]
    assert "1700 of 2000 MHz" in warnings[0] and report.throttled is False


def test_a_small_drop_is_quiet_and_the_threshold_is_named():
    assert SM_CLOCK_DROP_WARN == 0.10
    report = summarize(_series(clocks=[2000.0, 1820.0]), ScriptedSource(), items=1, timed_s=1.0)
    assert report.sm_clock_drop == pytest.approx(0.09) and report.warnings() == []
    # Without a device maximum, the highest sample is the reference, and the report says so.
    unknown_max = ScriptedSource(max_sm_clock_mhz=None)
    report = summarize(_series(clocks=[1000.0, 800.0]), unknown_max, items=1, timed_s=1.0)
    assert report.sm_clock_reference == "highest sample"
    assert report.sm_clock_drop == pytest.approx(0.2)


def test_a_throttle_reason_during_timing_gives_the_throttle_warning():
    reasons = [(), ("sw_power_cap",), ("sw_power_cap", "hw_slowdown")]
    samples = _series(clocks=[2000.0] * 3, reasons=reasons)
    report = summarize(samples, ScriptedSource(), items=10, timed_s=2.0)
    assert report.throttle_reasons_seen == ("hw_slowdown", "sw_power_cap")
    assert report.warnings() == ["telemetry: throttling during timing: hw_slowdown, sw_power_cap"]
    assert report.throttled is True


def test_energy_per_item_from_the_counter_is_exact():
    samples = _series(powers=[400.0, 600.0, 500.0], energies=[1000.0, 1250.0, 1500.0])
    report = summarize(samples, ScriptedSource(), items=100, timed_s=2.0)
    assert report.energy_basis == ENERGY_COUNTER and not report.energy_estimated
    assert report.energy_j == 500.0
    assert report.joules_per_item == 5.0 and report.items_per_joule == 0.2
    # The counter against power x time: (400+600)/2 + (600+500)/2 = 1050 J over the same span.
    assert report.power_energy_j == 1050.0
    assert energy_counter_vs_power(report) == 500.0 / 1050.0


def test_without_a_counter_the_trapezoid_is_exact_and_labelled_estimated():
    # Power rising linearly 100 -> 200 W over 2 s, sampled every 0.5 s: exactly 300 J.
    samples = _series(powers=[100.0, 125.0, 150.0, 175.0, 200.0], step=0.5)
    report = summarize(samples, ScriptedSource(), items=60, timed_s=2.0)
    assert report.energy_j == 300.0 and report.energy_basis == ENERGY_TRAPEZOID
    assert report.energy_estimated and "estimated" in report.energy_basis
    assert report.joules_per_item == 5.0 and report.items_per_joule == 0.2
    assert energy_counter_vs_power(report) is None
    # A counter that stood still or went back (reset) is not trusted.
    stuck = summarize(_series(powers=[100.0, 100.0], energies=[5.0, 5.0]), ScriptedSource(), 1, 1.0)
    assert stuck.energy_basis == ENERGY_TRAPEZOID and stuck.counter_energy_j is None


def test_missing_quantities_stay_none():
    empty = [Sample(t_s=0.0), Sample(t_s=1.0)]
    report = summarize(empty, ScriptedSource(max_sm_clock_mhz=None), items=5, timed_s=1.0)
    assert report.stat("power_w") is None
    assert report.energy_j is None and report.energy_basis is None
    assert report.joules_per_item is None and report.sm_clock_drop is None
    assert report.stat("sm_clock_mhz") is None and report.throttled is None


def test_report_dict_is_plain_json_with_samples():
    samples = [Sample(t_s=10.0 + i, sm_clock_mhz=1980.0, memory_clock_mhz=2619.0, power_w=300.0 + i,
                      temperature_c=60.0, utilization_pct=99.0, throttle_reasons=("sw_power_cap",),
                      energy_j=100.0 + 300.0 * i) for i in range(3)]
    report = summarize(samples, ScriptedSource(), items=6, timed_s=2.0)
    data = report.to_dict()
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert data["available"] is True and data["energy_basis"] == "counter"
    assert data["samples"][0]["t_s"] == 0.0 and data["samples"][2]["t_s"] == 2.0
    assert data["samples"][1]["throttle_reasons"] == ["sw_power_cap"]
    assert data["stats"]["power_w"] == {"min": 300.0, "median": 301.0, "max": 302.0}
    assert data["warnings"] == report.warnings() and data["joules_per_item"] == 100.0
    assert report.stat("sm_clock_mhz").median == 1980.0 and report.energy_j == 600.0
    assert report.throttled is True



# ---------------------------------------------------------------------------------------------
# Combining the reports of several ranks or trials.


def _report(energies=(), powers=(), clocks=(), reasons=(), items=10, max_clock=2000.0):
    samples = _series(clocks=clocks, powers=powers, energies=energies, reasons=reasons)
    return summarize(samples, ScriptedSource(max_sm_clock_mhz=max_clock), items=items,
                     timed_s=1.0)


def test_combine_sums_energy_and_items_and_pools_the_samples():
    first = _report(energies=[0.0, 100.0], clocks=[2000.0, 1900.0], reasons=[(), ()])
    second = _report(energies=[50.0, 350.0], clocks=[1980.0, 1700.0],
                     reasons=[(), ("sw_power_cap",)], items=20)
    both = combine([first, second])
    assert both.energy_j == 400.0 and both.energy_basis == ENERGY_COUNTER
    assert both.items == 30 and both.timed_s == 2.0
    assert both.joules_per_item == pytest.approx(400.0 / 30)
    assert len(both.samples) == 4 and both.stat("sm_clock_mhz").min == 1700.0
    assert both.sm_clock_drop == pytest.approx(0.15)
    assert both.throttle_reasons_seen == ("sw_power_cap",) and both.throttled is True
    assert both.device_label == "2 measurements (test GPU, ...)"


def test_combine_never_sums_part_of_the_energy_and_keeps_an_estimate_labelled():
    counter = _report(energies=[0.0, 100.0])
    estimated = _report(powers=[100.0, 100.0])               # 1 s at 100 W, no counter
    unknown = _report(clocks=[2000.0, 2000.0])               # neither counter nor power
    mixed = combine([counter, estimated])
    assert mixed.energy_j == 200.0 and mixed.energy_basis == ENERGY_TRAPEZOID
    assert mixed.energy_estimated
    partial = combine([counter, unknown])
    assert partial.energy_j is None and partial.energy_basis is None
    assert partial.joules_per_item is None


def test_combine_measures_the_drop_against_the_highest_reference_and_names_its_kind():
    no_maximum = _report(clocks=[2100.0, 2050.0], max_clock=None)   # "highest sample": 2100
    with_maximum = _report(clocks=[1500.0, 1500.0], max_clock=2000.0)
    both = combine([with_maximum, no_maximum])
    assert both.max_sm_clock_mhz == 2100.0 and both.sm_clock_reference == "highest sample"
    assert both.sm_clock_drop == pytest.approx(1 - 1500.0 / 2100.0)
    assert "below its highest sample (1500 of 2100 MHz)" in both.warnings()[0]


def test_combine_without_telemetry_keeps_the_reason():
    off = TelemetryReport.unavailable("telemetry: off (--telemetry-interval 0)")
    assert combine([off, TelemetryReport.unavailable("other")]) is off
    measured = _report(energies=[0.0, 10.0])
    assert combine([off, measured]) is measured
