"""What the run is doing while it does it: one line per phase (building, compiling, warming up,
timing, a sweep row, a batch-size probe).

On a terminal the line carries an elapsed-time counter that moves once a second, so a compile
that takes minutes does not look like a hang, and ends with the phase's duration. Anywhere else
(a log file, a pipe, CI) each phase is one plain line when it starts, and a phase still running
adds a plain line every 10 seconds saying for how long (``Compiling... still running, 20 s``):
nothing is redrawn, so logs stay readable, and a log of a slow compile does not look like a hang
(issue 64: 37.8 s of warm-up printed nothing).

On a terminal the line is drawn by rich's ``Live`` display (it redraws in place, and a label
longer than the terminal is wide is folded and redrawn whole instead of leaving broken lines).
This module keeps the ticking thread itself, rather than rich's auto-refresh, so that a phase
started with ``tick=False`` (the timed region) has no thread at all, on a terminal or not, and
so that a stream that stops taking writes ends the ticking quietly; the caller meets the error
on its own next write.

Example::

    activity = Activity(sys.stdout)
    activity.start("Compiling and warming up (compilation can take minutes)")
    ...
    activity.start("Timing 20 iterations")      # ends the previous phase
    ...
    activity.finish()
"""
from __future__ import annotations

import io
import threading
import time
from typing import Callable, TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text

from microbench.platform import safe_text


def is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):     # a closed or exotic stream
        return False


class _Discard(io.TextIOBase):
    """Where the lines go when standard output is closed (``sys.stdout`` is None under ``>&-``):
    nowhere, without failing the run."""

    def write(self, text: str) -> int:
        return len(text)


class _LineConsole(Console):
    """rich's console for the live line, leaving the cursor shown: rich hides it while a
    display is live, and a run killed in the middle of a phase would leave the terminal
    without one."""

    def show_cursor(self, show: bool = True) -> bool:
        return False


class Activity:
    """One phase at a time on ``out``; live on a terminal, plain lines elsewhere.

    ``clock`` and ``live`` are injectable for tests; the ticking thread calls :meth:`render`,
    which tests call directly instead of waiting for the thread.
    """

    TICK_S = 1.0            # a terminal's redraw
    PLAIN_TICK_S = 10.0     # a log's "still running" line

    def __init__(self, out: TextIO, clock: Callable[[], float] = time.monotonic,
                 live: bool | None = None, tick: bool = True):
        self.out, self.clock = (_Discard() if out is None else out), clock
        self.live = is_terminal(out) if live is None else live
        self._tick = tick
        self._label: str | None = None
        self._final: str | None = None
        self._started = 0.0
        self._display: Live | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def ticking(self) -> bool:
        """Whether a thread is redrawing the line now (never in a phase started tick=False)."""
        return self._thread is not None

    def start(self, label: str, announce: bool = True, tick: bool = True) -> None:
        """Begin a phase (ending the one before it). ``announce=False``: off a terminal, print
        nothing now and let :meth:`finish`'s outcome be the phase's one line (and the "still
        running" lines, if it runs that long). ``tick=False``: nothing more is written until the
        phase ends, on a terminal or not: no thread runs (the timed region, where nothing else
        may run on the host)."""
        self.finish()
        # A phase may name a path or a model (the data cache's "making PATH"): escaped here,
        # once for every line this writes, so none of it acts on the terminal.
        label = safe_text.terminal(label)
        with self._lock:
            self._label, self._final, self._started = label, None, self.clock()
            if self.live:
                self._display = self._open_display()
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
                self._final = outcome or "done"
                self._close_display()
            elif outcome:
                self.out.write(f"{self._label}: {outcome}\n")
                self.out.flush()
            self._label = None

    def clear(self) -> None:
        """End the current phase leaving no line of its own (the caller prints the outcome in
        its own format, e.g. a table row)."""
        self._stop_ticking()
        with self._lock:
            if self._label is not None and self._display is not None:
                self._display.transient = True      # rich erases a transient display's lines
                self._close_display()
            self._label = None

    def render(self) -> None:
        """Redraw the live line with the current elapsed time; off a terminal, write a line
        saying the phase is still running and for how long."""
        with self._lock:
            if self._label is not None and self._display is not None:
                self._display.refresh()
            elif self._label is not None and not self.live:
                elapsed = _clock_text(self.clock() - self._started)
                self.out.write(f"{self._label}... still running, {elapsed}\n")
                self.out.flush()

    def _open_display(self) -> Live:
        console = _LineConsole(file=self.out, force_terminal=True, force_jupyter=False,
                               highlight=False, markup=False, emoji=False)
        display = Live(console=console, auto_refresh=False, redirect_stdout=False,
                       redirect_stderr=False, get_renderable=self._line)
        display.start(refresh=True)
        return display

    def _close_display(self) -> None:
        display, self._display = self._display, None
        if display is not None:
            display.stop()                            # draws the final line, then a newline
        self.out.flush()

    def _line(self) -> Text:
        elapsed = _clock_text(self.clock() - self._started)
        tail = f"{self._final} in {elapsed}" if self._final else elapsed
        return Text(f"{self._label}... {tail}")

    def _stop_ticking(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.TICK_S if self.live else self.PLAIN_TICK_S):
            try:
                self.render()
            except (OSError, ValueError):        # the stream closed or stopped taking writes
                return

    def __enter__(self) -> "Activity":
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None and not self.live:
            self._label = None             # the error line says what happened
        self.finish("failed" if exc[0] is not None else None)


def _clock_text(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest:02d} s"
