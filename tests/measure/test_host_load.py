"""The host's load around the timed region (measure/host_load.py), read from a fake /proc: no
sleep, nothing of this machine's own load. Clock ticks are 100 a second, as on Linux."""
from __future__ import annotations

import pytest

from microbench.measure import host_load
from microbench.measure.host_load import HostLoad, Probe

SELF = 4000


class FakeHost:
    """A /proc folder under ``root`` that a test rewrites between the probe's two readings,
    with the load average, the cores and the clock the probe is given."""

    def __init__(self, root, cores=(2, 2)):
        self.root, self.cores = root, cores
        self.root.mkdir(exist_ok=True)
        self.now, self.load = 0.0, (0.2, 0.3, 0.4)

    def process(self, pid, command, ticks, parent=1, started=100, child_ticks=0,
                cmdline="python3\0x.py\0"):
        folder = self.root / str(pid)
        folder.mkdir(exist_ok=True)
        utime, stime = ticks - ticks // 4, ticks // 4
        fields = (["S", str(parent)] + ["0"] * 9 + [str(utime), str(stime), str(child_ticks), "0"]
                  + ["20", "0", "1", "0", str(started)] + ["0"] * 20)
        (folder / "stat").write_text(f"{pid} ({command}) {' '.join(fields)}\n")
        (folder / "cmdline").write_text(cmdline)

    def gone(self, pid):
        for name in ("stat", "cmdline"):
            (self.root / str(pid) / name).unlink()
        (self.root / str(pid)).rmdir()

    def cpu(self, busy, steal=0, uptime_s=None):
        # user nice system idle iowait irq softirq steal guest guest_nice
        (self.root / "stat").write_text(f"cpu  {busy} 0 0 99999 7 0 0 {steal} 0 0\n"
                                        f"cpu0 1 2 3 4 5 6 7 8 9 10\n")
        if uptime_s is not None:
            (self.root / "uptime").write_text(f"{uptime_s:.2f} 1000.00\n")

    def probe(self, **kwargs) -> Probe:
        return Probe(proc=str(self.root), loadavg=lambda: self.load,
                     cores=lambda: self.cores, clock=lambda: self.now, ticks_per_s=100,
                     pid=SELF, **kwargs)


@pytest.fixture
def host(tmp_path):
    return FakeHost(tmp_path / "proc")


def loaded_host(host: FakeHost) -> HostLoad:
    """10 s timed on 2 cores beside another python3 that took 97% of a core and a stress
    process 40% (and sshd 3%); this process and its loader worker are the run's own."""
    host.process(SELF, "python3", 500)
    host.process(SELF + 1, "pt_data_worker", 100, parent=SELF)
    host.process(77, "python3", 1000)
    host.process(88, "stress", 0)
    host.process(99, "sshd", 5)
    host.cpu(busy=10_000, uptime_s=50.0)
    host.load = (5.1, 4.0, 3.0)
    probe = host.probe()
    start = probe.read()
    host.now += 10.0
    host.process(SELF, "python3", 500 + 1900)                  # this process: 1.9 cores
    host.process(SELF + 1, "pt_data_worker", 100 + 600, parent=SELF)
    host.process(77, "python3", 1000 + 970)
    host.process(88, "stress", 400)
    host.process(99, "sshd", 5 + 30)
    host.cpu(busy=10_000 + 1900 + 600 + 970 + 400 + 30, uptime_s=60.0)
    host.load = (4.8, 4.1, 3.0)
    return probe.between(start, probe.read())


# ---------------------------------------------------------------- reading

def test_a_loaded_host_names_its_load_and_its_busiest_other_processes(host):
    load = loaded_host(host)
    assert (load.cores, load.start[0], load.end[0], load.window_s) == (2, 5.1, 4.8, 10.0)
    assert load.others_cpu_percent == pytest.approx(140.0)       # 970 + 400 + 30 ticks in 10 s
    assert [(b.command, b.pid, round(b.cpu_percent)) for b in load.busiest] == [
        ("python3", 77, 97), ("stress", 88, 40), ("sshd", 99, 3)]
    assert load.run_processes == 2 and load.loaded
    assert load.text() == ("5.1 on 2 cores at start, 4.8 at end; other processes used 140% of "
                           "a core while timed: python3 97%, stress 40%, sshd 3%")
    assert load.cause("in trial 2 of 3") == (
        "the host was loaded (in trial 2 of 3: load average 5.1 on 2 cores at start, 4.8 at "
        "end; other processes used 140% of a core while timed: python3 97%, stress 40%, "
        "sshd 3%)")


def test_the_json_block_keeps_every_reading(host):
    document = loaded_host(host).to_dict()
    assert document["start"] == {"load_1m": 5.1, "load_5m": 4.0, "load_15m": 3.0}
    assert document["busiest"][0] == {"command": "python3", "pid": 77, "cpu_percent": 97.0}
    assert (document["cores"], document["usable_cores"], document["loaded"],
            document["processes_unknown"], document["steal_percent"]) == (2, 2, True, None, 0.0)


def test_only_the_top_three_of_at_least_one_percent_are_named(host):
    host.process(SELF, "python3", 0)
    for pid, ticks in ((10, 50), (11, 40), (12, 30), (13, 20), (14, 0)):
        host.process(pid, f"p{pid}", 0)
    probe = host.probe()
    start = probe.read()
    host.now = 10.0
    for pid, ticks in ((10, 50), (11, 40), (12, 30), (13, 20), (14, 5)):
        host.process(pid, f"p{pid}", ticks)
    load = probe.between(start, probe.read())
    assert [b.command for b in load.busiest] == ["p10", "p11", "p12"]


def test_a_process_started_while_timed_counts_whole_and_a_reused_pid_is_new(host):
    host.process(SELF, "python3", 0)
    host.process(50, "old", 1000, started=100)
    host.cpu(busy=0, uptime_s=10.0)                       # 1000 ticks after boot
    probe = host.probe()
    start = probe.read()
    host.now = 10.0
    host.process(50, "cc1", 300, started=1500)            # pid 50 ended; a compiler took it
    host.process(60, "make", 200, started=1200)
    host.process(70, "missed", 900, started=500)          # older than the first reading: unseen
    load = probe.between(start, probe.read())
    assert [(b.command, round(b.cpu_percent)) for b in load.busiest] == [("cc1", 30),
                                                                           ("make", 20)]


def test_a_command_is_read_whole_and_made_safe_for_a_terminal(host):
    host.process(SELF, "python3", 0)
    host.process(31, "a (b) c\x1b]0;x", 0)
    probe = host.probe()
    start = probe.read()
    host.now = 10.0
    host.process(31, "a (b) c\x1b]0;x", 100)
    [busy] = probe.between(start, probe.read()).busiest
    assert busy.command == "a (b) c\\x1b]0;x" and busy.cpu_percent == 10.0


def test_parse_stat_refuses_what_is_not_a_stat_line():
    assert host_load.parse_stat(None) is None
    assert host_load.parse_stat("") is None
    assert host_load.parse_stat("12 (x) S 1 2") is None
    assert host_load.parse_stat("not a pid (x) " + "0 " * 40) is None


# ---------------------------------------------------------------- this run's own processes

def test_this_process_and_everything_below_it_are_never_others(host):
    host.process(SELF, "python3", 0)
    host.process(SELF + 1, "worker", 0, parent=SELF)
    host.process(SELF + 2, "cc1plus", 0, parent=SELF + 1)
    probe = host.probe()
    start = probe.read()
    host.now = 10.0
    host.process(SELF + 1, "worker", 900, parent=SELF)
    host.process(SELF + 2, "cc1plus", 900, parent=SELF + 1)
    host.process(SELF + 3, "new_worker", 900, parent=SELF, started=10**9)
    load = probe.between(start, probe.read())
    assert load.busiest == () and load.run_processes == 4


def test_a_spawned_worker_leaves_out_its_parent_and_its_siblings(host):
    """A trial's worker (multiprocessing's spawn): the parent that started it and what else is
    below it are the same run."""
    host.process(10, "bash", 0)
    host.process(20, "python3", 0, parent=10)                      # the benchmark
    host.process(SELF, "python3", 0, parent=20,
                 cmdline="python3\0-c\0from multiprocessing.spawn import spawn_main\0"
                         "--multiprocessing-fork\0")
    host.process(30, "python3", 0, parent=20)                      # a sibling of the run
    host.process(40, "stress", 0, parent=10)                       # the shell's other job
    probe = host.probe()
    start = probe.read()
    host.now = 10.0
    for pid, parent in ((20, 10), (30, 20), (40, 10)):
        host.process(pid, {20: "python3", 30: "python3", 40: "stress"}[pid], 500, parent=parent)
    load = probe.between(start, probe.read())
    assert [b.command for b in load.busiest] == ["stress"]


def test_under_a_launcher_the_other_ranks_of_this_host_are_the_run(host):
    host.process(10, "torchrun", 0)
    host.process(SELF, "python3", 0, parent=10)
    host.process(SELF + 1, "python3", 0, parent=10)                # rank 1
    host.process(50, "stress", 0)
    probe = host.probe(launched=True)
    start = probe.read()
    host.now = 10.0
    host.process(SELF + 1, "python3", 800, parent=10)
    host.process(50, "stress", 300)
    load = probe.between(start, probe.read())
    assert [b.command for b in load.busiest] == ["stress"]
    unlaunched = host.probe().between(start, host.probe().read())
    assert [b.command for b in unlaunched.busiest] == ["python3", "stress"]
    assert Probe.for_launcher("torchrun").launched and not Probe.for_launcher("single").launched


# ---------------------------------------------------------------- unknown, and not blamed

def test_without_proc_the_other_processes_are_unknown_and_never_blamed(tmp_path):
    probe = Probe(proc=str(tmp_path / "missing"), loadavg=lambda: (9.0, 9.0, 9.0),
                  cores=lambda: (2, None), clock=iter([0.0, 10.0]).__next__)
    load = probe.between(probe.read(), probe.read())
    assert load.others_cpu_percent is None and load.busiest == () and not load.loaded
    assert load.text() == ("9.0 on 2 cores at start, 9.0 at end; other processes: unknown "
                           f"(no {tmp_path / 'missing'})")
    assert load.to_dict()["processes_unknown"] == f"no {tmp_path / 'missing'}"


def test_a_proc_that_does_not_list_this_process_is_not_read(host):
    host.process(77, "python3", 0)
    probe = host.probe()
    load = probe.between(probe.read(), probe.read())
    assert load.unknown == f"{host.root} does not list this process"


def test_without_a_load_average_nothing_is_blamed(host):
    host.load = None
    host.process(SELF, "python3", 0)
    host.process(77, "python3", 0)
    probe = host.probe()
    start = probe.read()
    host.now = 10.0
    host.process(77, "python3", 1000)
    load = probe.between(start, probe.read())
    assert load.others_cpu_percent == 100.0 and not load.loaded
    assert load.text().startswith("unknown on 2 cores at start, unknown at end;")


def test_without_proc_stat_the_others_are_the_processes_seen(host):
    host.process(SELF, "python3", 0)
    host.process(77, "python3", 0)
    probe = host.probe()
    start = probe.read()
    host.now = 10.0
    host.process(SELF, "python3", 2000)
    host.process(77, "python3", 600)
    assert probe.between(start, probe.read()).others_cpu_percent == 60.0


def test_fewer_usable_cores_are_said_beside_the_hosts():
    load = HostLoad(cores=64, usable_cores=8, start=(3.0, 3.0, 3.0), end=(3.0, 3.0, 3.0),
                    window_s=10.0, others_cpu_percent=0.0)
    assert load.text().startswith("3.0 on 64 cores (8 usable by this process) at start")


@pytest.mark.parametrize("others, start, end, window_ticks, loaded", [
    (137.0, 5.1, 4.8, 1000, True),      # the host
    (60.0, 1.5, 2.0, 1000, True),       # the load reached the cores at the end
    (2.0, 2.1, 2.0, 1000, False),       # a CPU run's own threads fill the cores: nobody else
    (97.0, 10.0, 10.0, 1000, False),    # on 64 cores: a busy process beside idle ones
    (40.0, 5.0, 5.0, 1000, False),      # less than half a core taken
    (137.0, 5.1, 4.8, 40, False),       # 0.4 s: too short to judge
])
def test_the_verdict_needs_others_busy_and_the_cores_full(others, start, end, window_ticks,
                                                          loaded):
    cores = 64 if start == 10.0 else 2
    load = HostLoad(cores=cores, usable_cores=cores, start=(start, 0.0, 0.0),
                    end=(end, 0.0, 0.0), window_s=window_ticks / 100,
                    others_cpu_percent=others, judged=window_ticks >= host_load.LEAST_TICKS)
    assert load.loaded is loaded


def test_steal_is_said_when_a_hypervisor_took_time(host):
    host.process(SELF, "python3", 0)
    host.cpu(busy=0, steal=0)
    probe = host.probe()
    start = probe.read()
    host.now = 10.0
    host.cpu(busy=0, steal=250)
    load = probe.between(start, probe.read())
    assert load.steal_percent == 25.0
    assert load.text().endswith("; the hypervisor stole 25% of a core")
