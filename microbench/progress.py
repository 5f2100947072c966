"""What the run is doing while it does it: one line per phase (building, compiling, warming up,
timing, a sweep row, a batch-size probe).

On a terminal the line carries an elapsed-time counter that moves once a second, so a compile
that takes minutes does not look like a hang, and ends with the phase's duration. Anywhere else
(a log file, a pipe, CI) each phase is one plain line when it starts and nothing moves: logs stay
readable and diffable.

Example::

    activity = Activity(sys.stdout)
    activity.start("Compiling and warming up (compilation can take minutes)")
    ...
    activity.start("Timing 20 iterations")      # ends the previous phase
    ...
    activity.finish()
"""
from __future__ import annotations

import threading
import time
from typing import Callable, TextIO


def is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):     # a closed or exotic stream
        return False


class Activity:
    """One phase at a time on ``out``; live on a terminal, plain lines elsewhere.

    ``clock`` and ``live`` are injectable for tests; the ticking thread calls :meth:`render`,
    which tests call directly instead of waiting for the thread.
    """

    TICK_S = 1.0

    def __init__(self, out: TextIO, clock: Callable[[], float] = time.monotonic,
                 live: bool | None = None, tick: bool = True):
        self.out, self.clock = out, clock
        self.live = is_terminal(out) if live is None else live
        self._tick = tick and self.live
        self._label: str | None = None
        self._started = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, label: str, announce: bool = True, tick: bool = True) -> None:
        """Begin a phase (ending the one before it). ``announce=False``: off a terminal, print
        nothing now and let :meth:`finish`'s outcome be the phase's one line. ``tick=False``:
        on a terminal too, the line is drawn once and not redrawn until the phase ends (the
        timed region, where nothing else may run on the host)."""
        self.finish()
        with self._lock:
            self._label, self._started = label, self.clock()
            if self.live:
                self._write_live()
            elif announce:
                self.out.write(f"{label}...\n")
                self.out.flush()
        if self._tick and tick:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="microbench-progress",
                                            daemon=True)
            self._thread.start()

    def finish(self, outcome: str | None = None) -> None:
        """End the current phase: on a terminal its line keeps the time it took (and
        ``outcome``, e.g. 'fits'); elsewhere ``outcome`` alone is printed, if given."""
        self._stop_ticking()
        with self._lock:
            if self._label is None:
                return
            if self.live:
                self._write_live(final=outcome or "done")
            elif outcome:
                self.out.write(f"{self._label}: {outcome}\n")
                self.out.flush()
            self._label = None

    def clear(self) -> None:
        """End the current phase leaving no line of its own (the caller prints the outcome in
        its own format, e.g. a table row)."""
        self._stop_ticking()
        with self._lock:
            if self._label is not None and self.live:
                self.out.write("\r\x1b[K")
                self.out.flush()
            self._label = None

    def render(self) -> None:
        """Redraw the live line with the current elapsed time."""
        with self._lock:
            if self._label is not None and self.live:
                self._write_live()

    def _stop_ticking(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def _write_live(self, final: str | None = None) -> None:
        elapsed = self.clock() - self._started
        tail = f"{final} in {_clock_text(elapsed)}\n" if final else _clock_text(elapsed)
        # \r returns to the line's start; \x1b[K clears what a longer earlier text left.
        self.out.write(f"\r\x1b[K{self._label}... {tail}")
        self.out.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.TICK_S):
            self.render()

    def __enter__(self) -> "Activity":
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is not None and not self.live:
            self._label = None             # the error line says what happened
        self.finish("failed" if exc[0] is not None else None)


def _clock_text(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest:02d} s"
