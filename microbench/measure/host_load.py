"""The host's load around the timed region: the load average against the cores, and what the
other processes took of the CPU meanwhile (issue 64).

A benchmark's own numbers cannot tell a slow device from a busy host: on a 2-core host with
other work running (load average 5.1) a CPU run took 112 s instead of 8.9 s at a CV of 15%,
and its warnings blamed the device. So every process reads the host twice, just before its
timed region and just after it, never inside it (the timed region holds the steps and nothing
else), and :class:`HostLoad` says what the host was doing in between:

* the load average (``os.getloadavg``: the runnable and waiting tasks, averaged over 1, 5 and
  15 minutes) at both ends, against ``os.cpu_count()`` (the load average counts the whole
  host; the CPUs this process may use, ``os.sched_getaffinity``, are recorded beside it);
* what the other processes used of the CPU over the timed region, in percent of one core: the
  host's busy time (``/proc/stat``'s first line: user, nice, system, irq and softirq ticks;
  processes that started and ended inside the region counted too) less this run's own
  processes' (``/proc/<pid>/stat``'s utime, stime, cutime and cstime, proc(5)), and the
  busiest of them by name (the top :data:`SHOWN`, each over the same region);
* "this run's processes" are this process and everything below it (the input pipeline's
  workers, the compiler's), and, for a worker the tool spawned (a trial's, a rank of the manual
  launch: multiprocessing's ``--multiprocessing-fork`` command line), its parent and what is
  below that; under torchrun or srun, the launcher's process above the rank too (the other
  ranks on this host are the same job, not load).

:attr:`HostLoad.loaded` is the verdict the noise and drift warnings name: the other processes
took at least :data:`BUSY_PERCENT` of a core while the load average, at either end, was at
least the core count. Both, because a busy process beside idle cores takes nothing from the
benchmark, and a CPU run's own threads fill the cores by themselves (the load average alone
blames nobody). A region shorter than :data:`LEAST_TICKS` clock ticks is not judged (shares
are counted in whole ticks). Where ``/proc`` is missing (macOS) or unreadable, the other
processes are unknown, said so, and never blamed; where the load average is unknown
(no ``getloadavg``), likewise.

Example::

    probe = Probe.for_launcher(spec.launch.launcher)
    start = probe.read()            # just before the timed region
    ...                             # the timed region
    load = probe.between(start, probe.read())
    load.loaded, load.text(), load.to_dict()
"""
from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from microbench.platform import safe_text

# The other processes together took at least half a core over the timed region.
BUSY_PERCENT = 50.0
# The load average at either end reached the core count: the runnable work filled every core.
FULL_LOAD_PER_CORE = 1.0
# A region shorter than this many clock ticks (0.5 s at Linux's 100 a second) blames nobody:
# a share is counted in whole ticks, so a shorter region's shares are too coarse to judge.
LEAST_TICKS = 50
# The busiest other processes named (JSON and console), each at least LEAST_SHOWN_PERCENT.
SHOWN = 3
LEAST_SHOWN_PERCENT = 1.0
# /proc/stat's first line: user nice system idle iowait irq softirq steal (guest time is inside
# user and nice already). Busy is what ran; idle and iowait did not; steal is a hypervisor's.
_BUSY_FIELDS = (0, 1, 2, 5, 6)
_STEAL_FIELD = 7
# The command line of a process multiprocessing's spawn (or forkserver) started.
_SPAWNED_MARK = "--multiprocessing-fork"
# A launcher whose process is the parent of this host's ranks.
LAUNCHERS_ABOVE_RANKS = ("torchrun", "slurm")


@dataclass(frozen=True)
class Process:
    """One process as ``/proc/<pid>/stat`` describes it (times in clock ticks)."""

    pid: int
    parent: int
    command: str                 # field 2, without its parentheses; escaped for a terminal
    ticks: int                   # utime + stime
    child_ticks: int             # cutime + cstime: its children that ended and were waited for
    started: int                 # ticks after boot


@dataclass(frozen=True)
class Snapshot:
    """The host at one moment (not stored: :class:`HostLoad` is what two of them say)."""

    at_s: float                                    # the probe's clock
    load: tuple[float, float, float] | None        # 1, 5 and 15 minutes; None: unknown
    processes: Mapping[int, Process] | None        # None: unknown (``unknown`` says why)
    busy_ticks: int | None = None                  # /proc/stat: every CPU's busy ticks
    steal_ticks: int | None = None
    uptime_ticks: float | None = None              # /proc/uptime, in ticks
    unknown: str | None = None


@dataclass(frozen=True)
class Busy:
    """Another process and its share of one core over the timed region."""

    command: str
    pid: int
    cpu_percent: float

    def to_dict(self) -> dict:
        return {"command": self.command, "pid": self.pid, "cpu_percent": self.cpu_percent}


def _load_dict(load: tuple[float, float, float] | None) -> dict | None:
    if load is None:
        return None
    return dict(zip(("load_1m", "load_5m", "load_15m"), load))


@dataclass(frozen=True)
class HostLoad:
    """What the host was doing while one process was timed."""

    cores: int | None                              # os.cpu_count(): what the load counts on
    usable_cores: int | None                       # the CPUs this process may run on
    start: tuple[float, float, float] | None       # load averages (1, 5, 15 min) before
    end: tuple[float, float, float] | None         # and after the timed region
    window_s: float                                # between the two readings
    others_cpu_percent: float | None = None        # every other process, % of one core
    steal_percent: float | None = None             # a hypervisor's, % of one core
    busiest: tuple[Busy, ...] = ()
    unknown: str | None = None                     # why the other processes are unknown
    run_processes: int = 1                         # this run's processes seen (itself too)
    judged: bool = True                            # the region was long enough to judge

    @property
    def peak_load(self) -> float | None:
        known = [load[0] for load in (self.start, self.end) if load is not None]
        return max(known) if known else None

    @property
    def loaded(self) -> bool:
        """Other processes took at least :data:`BUSY_PERCENT` of a core while the runnable
        work filled every core (the load average at either end at least the core count);
        False wherever either is unknown."""
        peak = self.peak_load
        if peak is None or not self.cores or self.others_cpu_percent is None \
                or not self.judged:
            return False
        return (self.others_cpu_percent >= BUSY_PERCENT
                and peak / self.cores >= FULL_LOAD_PER_CORE)

    def text(self) -> str:
        """One line: ``5.1 on 2 cores at start, 4.8 at end; other processes used 140% of a
        core while timed: python3 97%, sshd 2%``."""
        cores = "? cores" if not self.cores else \
            f"{self.cores} core{'s' * (self.cores != 1)}"
        if self.usable_cores and self.cores and self.usable_cores < self.cores:
            cores += f" ({self.usable_cores} usable by this process)"
        start, end = (_load_text(load) for load in (self.start, self.end))
        return f"{start} on {cores} at start, {end} at end; {self.others_text()}"

    def others_text(self) -> str:
        if self.others_cpu_percent is None:
            return f"other processes: unknown ({self.unknown or 'not read'})"
        text = f"other processes used {_percent(self.others_cpu_percent)} of a core while timed"
        if self.busiest:
            text += ": " + ", ".join(f"{busy.command} {_percent(busy.cpu_percent)}"
                                     for busy in self.busiest)
        if self.steal_percent is not None and self.steal_percent >= LEAST_SHOWN_PERCENT:
            text += f"; the hypervisor stole {_percent(self.steal_percent)} of a core"
        return text

    def cause(self, where: str = "") -> str:
        """The words a warning names the host with: ``the host was loaded (load average ...)``,
        ``where`` (``in trial 2 of 3``) first in the parentheses when given."""
        return f"the host was loaded ({where + ': ' if where else ''}load average {self.text()})"

    def to_dict(self) -> dict:
        return {"cores": self.cores, "usable_cores": self.usable_cores,
                "start": _load_dict(self.start), "end": _load_dict(self.end),
                "window_s": self.window_s, "others_cpu_percent": self.others_cpu_percent,
                "steal_percent": self.steal_percent,
                "busiest": [busy.to_dict() for busy in self.busiest],
                "processes_unknown": self.unknown, "run_processes": self.run_processes,
                "judged": self.judged, "loaded": self.loaded}


def _load_text(load: tuple[float, float, float] | None) -> str:
    return "unknown" if load is None else f"{load[0]:.1f}"


def _percent(value: float) -> str:
    return f"{value:.0f}%"


def _cores() -> tuple[int | None, int | None]:
    usable = None
    if hasattr(os, "sched_getaffinity"):
        try:
            usable = len(os.sched_getaffinity(0))
        except OSError:
            usable = None
    return os.cpu_count(), usable


def _loadavg() -> tuple[float, float, float] | None:
    try:
        one, five, fifteen = os.getloadavg()
        return one, five, fifteen
    except (AttributeError, OSError):       # no getloadavg (Windows), or it cannot tell
        return None


def _ticks_per_s() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):
        return 100                          # Linux's USER_HZ on every architecture it runs on


@dataclass
class Probe:
    """Reads the host (:meth:`read`) and puts two readings in words (:meth:`between`).

    Everything it reads is injectable: ``proc`` (a fake ``/proc`` folder in tests), the load
    average, the core counts, the clock, the clock ticks and this process's id; ``launched``
    says a launcher's process (torchrun's agent, srun's step) is above this host's ranks."""

    proc: str = "/proc"
    loadavg: Callable[[], tuple[float, float, float] | None] = _loadavg
    cores: Callable[[], tuple[int | None, int | None]] = _cores
    clock: Callable[[], float] = time.monotonic
    ticks_per_s: int = field(default_factory=_ticks_per_s)
    pid: int = field(default_factory=os.getpid)
    launched: bool = False

    @classmethod
    def for_launcher(cls, launcher: str) -> "Probe":
        return cls(launched=launcher in LAUNCHERS_ABOVE_RANKS)

    # ------------------------------------------------------------ one reading

    def read(self) -> Snapshot:
        at = self.clock()
        load = self.loadavg()
        processes, unknown = self._processes()
        busy, steal = self._cpu_ticks()
        return Snapshot(at_s=at, load=load, processes=processes, busy_ticks=busy,
                        steal_ticks=steal, uptime_ticks=self._uptime_ticks(), unknown=unknown)

    def _text(self, *parts: str) -> str | None:
        try:
            with open(os.path.join(self.proc, *parts), encoding="utf-8",
                      errors="replace") as file:
                return file.read(1 << 16)
        except (OSError, ValueError):
            return None

    def _processes(self) -> tuple[dict[int, Process] | None, str | None]:
        try:
            names = os.listdir(self.proc)
        except OSError as error:
            return None, (f"no {self.proc}" if isinstance(error, FileNotFoundError)
                          else f"{self.proc} unreadable: {error.strerror or error}")
        processes = {}
        for name in names:
            if name.isdigit():
                process = parse_stat(self._text(name, "stat"))
                if process is not None:
                    processes[process.pid] = process
        if self.pid not in processes:           # /proc of another system, or not procfs
            return None, f"{self.proc} does not list this process"
        return processes, None

    def _cpu_ticks(self) -> tuple[int | None, int | None]:
        text = self._text("stat")
        if not text or not text.startswith("cpu "):
            return None, None
        try:
            values = [int(value) for value in text.split("\n", 1)[0].split()[1:]]
            busy = sum(values[index] for index in _BUSY_FIELDS)
        except (ValueError, IndexError):
            return None, None
        return busy, values[_STEAL_FIELD] if len(values) > _STEAL_FIELD else None

    def _uptime_ticks(self) -> float | None:
        text = self._text("uptime")
        try:
            return float(text.split()[0]) * self.ticks_per_s if text else None
        except (ValueError, IndexError):
            return None

    def _spawned(self, pid: int) -> bool:
        text = self._text(str(pid), "cmdline")
        return text is not None and _SPAWNED_MARK in text.split("\0")

    # ------------------------------------------------------------ two readings

    def root(self, processes: Mapping[int, Process]) -> int:
        """The process whose descendants are this run (the module's docstring says which)."""
        root, seen = self.pid, set()
        while root in processes and root not in seen and self._spawned(root):
            seen.add(root)
            root = processes[root].parent
        if self.launched and root in processes and processes[root].parent > 1:
            root = processes[root].parent
        return root

    def between(self, start: Snapshot, end: Snapshot) -> HostLoad:
        cores, usable = self.cores()
        window = max(end.at_s - start.at_s, 0.0)
        made = functools.partial(HostLoad, cores=cores, usable_cores=usable, start=start.load,
                                 end=end.load, window_s=window)
        if start.processes is None or end.processes is None or window <= 0:
            why = start.unknown or end.unknown or "no time between the readings"
            return made(unknown=why)
        ours = family(self.root(end.processes), start.processes, end.processes)
        ticks = window * self.ticks_per_s
        gained = {pid: _gained(start, end, pid) for pid in end.processes}
        own = sum(gained[pid] for pid in ours if pid in gained) + sum(
            _child_gained(start, end, pid) for pid in ours)
        others = {pid: value for pid, value in gained.items() if pid not in ours}
        if start.busy_ticks is not None and end.busy_ticks is not None:
            all_others = max(end.busy_ticks - start.busy_ticks - own, 0)
        else:                                   # /proc/stat unreadable: the processes seen
            all_others = sum(others.values())
        steal = (None if start.steal_ticks is None or end.steal_ticks is None
                 else 100.0 * max(end.steal_ticks - start.steal_ticks, 0) / ticks)
        ranked = sorted(others.items(), key=lambda item: (-item[1], item[0]))
        busiest = tuple(Busy(end.processes[pid].command, pid, 100.0 * value / ticks)
                        for pid, value in ranked[:SHOWN]
                        if 100.0 * value / ticks >= LEAST_SHOWN_PERCENT)
        return made(others_cpu_percent=100.0 * all_others / ticks,
                        steal_percent=steal, busiest=busiest, run_processes=len(ours),
                        judged=ticks >= LEAST_TICKS)


def _gained(start: Snapshot, end: Snapshot, pid: int) -> int:
    """Ticks ``pid`` ran between the readings: its own since the first, all of them if it
    started after it (a new process, or a reused pid); 0 where that cannot be told."""
    now, before = (end.processes or {})[pid], (start.processes or {}).get(pid)
    if before is not None and before.started == now.started:
        return max(now.ticks - before.ticks, 0)
    if start.uptime_ticks is not None and now.started >= start.uptime_ticks - 1:
        return now.ticks
    return 0


def _child_gained(start: Snapshot, end: Snapshot, pid: int) -> int:
    """Ticks of ``pid``'s children that ended between the readings (their own entries gone)."""
    now, before = (end.processes or {}).get(pid), (start.processes or {}).get(pid)
    if now is None or before is None or before.started != now.started:
        return 0
    return max(now.child_ticks - before.child_ticks, 0)


def family(root: int, *tables: Mapping[int, Process]) -> set[int]:
    """``root`` and every process below it in any of ``tables``."""
    children: dict[int, set[int]] = {}
    for table in tables:
        for process in table.values():
            children.setdefault(process.parent, set()).add(process.pid)
    found, pending = set(), [root]
    while pending:
        pid = pending.pop()
        if pid not in found:
            found.add(pid)
            pending.extend(children.get(pid, ()))
    return found


def parse_stat(text: str | None) -> Process | None:
    """A process from the text of its ``/proc/<pid>/stat``; None where it is not one (gone
    between the listing and the read, or not that format). The command sits in parentheses
    and may hold spaces and parentheses itself, so the fields after it are read from the last
    ``)`` (proc(5): pid (comm) state ppid ... utime stime cutime cstime ... starttime)."""
    if not text or "(" not in text or ")" not in text:
        return None
    head, _, tail = text.rpartition(")")
    pid_text, _, command = head.partition("(")
    fields = tail.split()
    try:
        return Process(pid=int(pid_text), parent=int(fields[1]),
                       command=safe_text.terminal(command),
                       ticks=int(fields[11]) + int(fields[12]),
                       child_ticks=int(fields[13]) + int(fields[14]), started=int(fields[19]))
    except (ValueError, IndexError):
        return None
