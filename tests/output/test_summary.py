"""The Summary's words about the host (issue 64): the noise and drift warnings name the host's
load where it is the likely cause, say what they said before where it is not, and the JSON
and the console carry every trial's and rank's reading. Summaries of fake trials, no run."""
from __future__ import annotations

from types import SimpleNamespace

from microbench.measure.flops import PeakChoice
from microbench.measure.host_load import Busy, HostLoad
from microbench.measure.results import ProcessResult, RankRecord, Trial
from microbench.measure.timing import Measurement
from microbench.output import files
from microbench.output.summary import Summary

NOISY = [10.0, 14.0, 10.0, 14.0]             # CV 19.2%
STEADY = [10.0, 10.0, 10.0, 10.0]

LOADED = HostLoad(cores=2, usable_cores=2, start=(5.1, 4.0, 3.0), end=(4.8, 4.0, 3.0),
                  window_s=10.0, others_cpu_percent=140.0,
                  busiest=(Busy("python3", 77, 97.0), Busy("stress", 88, 40.0)))
IDLE = HostLoad(cores=2, usable_cores=2, start=(0.9, 0.5, 0.4), end=(1.0, 0.5, 0.4),
                window_s=10.0, others_cpu_percent=2.0, busiest=(Busy("sshd", 99, 1.5),))
LOADED_TEXT = ("the host was loaded (load average 5.1 on 2 cores at start, 4.8 at end; other "
               "processes used 140% of a core while timed: python3 97%, stress 40%)")
NOISY_BEFORE = ("coefficient of variation 19.2% exceeds 5%: timings are noisy; run more "
                "--iterations, make sure nothing else uses the device, and check clocks and "
                "temperature")


def spec(distributed=False):
    return SimpleNamespace(launch=SimpleNamespace(distributed=distributed, rank=0),
                           scaling_baseline_img_s=None, notes=(), peak=PeakChoice(None, "test"),
                           scenario=SimpleNamespace(units_per_item=1, counts_tokens=False),
                           model=SimpleNamespace(tokens_per_item=None, item="image"),
                           config=SimpleNamespace(compile=False, warmup=5), batch_size=4)


def trial(samples, *loads):
    """A trial whose ranks 0, 1, ... read ``loads`` (the reporting process is rank 0)."""
    result = ProcessResult(times=Measurement(samples), losses=[], warmup_s=0.0,
                           first_iteration_s=None, peak_allocated_mb=None,
                           peak_reserved_mb=None, parameters=1, host_load=loads[0])
    return Trial(result, tuple(RankRecord(rank, rank, "h", "cpu", 4, tuple(samples), None, None,
                                          host_load=load) for rank, load in enumerate(loads)))


def test_a_noisy_run_on_a_loaded_host_names_the_load_as_the_likely_cause():
    [warning] = Summary(spec(), {}, [trial(NOISY, LOADED)]).warnings()
    assert warning == ("coefficient of variation 19.2% exceeds 5%: timings are noisy; the "
                       f"likely cause: {LOADED_TEXT}; run when the host is idle, run more "
                       "--iterations, and check clocks and temperature")


def test_a_noisy_run_on_an_idle_host_says_what_it_always_said():
    assert Summary(spec(), {}, [trial(NOISY, IDLE)]).warnings() == [NOISY_BEFORE]
    assert Summary(spec(), {}, [trial(NOISY, None)]).warnings() == [NOISY_BEFORE]


def test_a_steady_run_on_a_loaded_host_warns_of_nothing():
    assert Summary(spec(), {}, [trial(STEADY, LOADED)]).warnings() == []


def test_trials_that_drift_on_a_loaded_host_name_the_load_and_the_trials():
    # Trials of 400, 364 and 400 images/s: 5.4% apart, their pooled iterations within 5%.
    trials = [trial(STEADY, IDLE), trial([11.0] * 4, LOADED), trial(STEADY, IDLE)]
    [drift] = Summary(spec(), {}, trials).warnings()
    assert drift == ("the 3 trials differ by 5.4% (CV of their throughputs): likely because "
                     "the host was loaded (in trial 2 of 3: load average 5.1 on 2 cores at "
                     "start, 4.8 at end; other processes used 140% of a core while timed: "
                     "python3 97%, stress 40%), not because the device's speed drifted")
    idle = [trial(STEADY, IDLE), trial([11.0] * 4, IDLE), trial(STEADY, IDLE)]
    assert Summary(spec(), {}, idle).warnings() == [
        "the 3 trials differ by 5.4% (CV of their throughputs): the device's speed drifted "
        "between trials"]


def test_under_ddp_the_rank_whose_host_was_loaded_is_named():
    summary = Summary(spec(distributed=True), {}, [trial(NOISY, IDLE, LOADED)])
    assert summary.loaded_host == LOADED_TEXT.replace("(load", "(on the host of rank 1: load")
    assert summary.host_load is IDLE                    # the reporting process's own


def test_the_trials_the_host_was_loaded_in_are_counted():
    summary = Summary(spec(), {}, [trial(NOISY, LOADED), trial(NOISY, LOADED)])
    assert summary.loaded_host.startswith("the host was loaded (in all 2 trials: load average")
    summary = Summary(spec(), {}, [trial(NOISY, LOADED), trial(NOISY, IDLE), trial(NOISY, LOADED)])
    assert summary.loaded_host.startswith("the host was loaded (in trials 1, 3 of 3: load")


def test_the_json_keeps_the_host_load_of_the_run_and_of_each_trial():
    summary = Summary(spec(), {}, [trial(NOISY, LOADED), trial(NOISY, IDLE)])
    assert summary.host_load is summary.result.host_load
    assert [files._trial_document(t)["host_load"]["loaded"] for t in summary.trials] == [
        True, False]
    assert files._host_load(None) is None

