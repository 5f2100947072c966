"""Library chatter kept off the terminal: what PyTorch's profiler (Kineto), inductor and DeepSpeed
print about themselves while they work, which says nothing about the benchmark.

Seen on the CPU and on GPUs: Kineto's ``USDT: ... profiler_start`` and ``gpuGetDeviceCount
failed with code 35`` (a CUDA build of PyTorch on a machine without a GPU), DeepSpeed's
``[WARNING] Setting accelerator to CPU`` at import, inductor's ``No CUDA runtime is found``,
and torch.profiler's ``Profiler clears events at the end of each cycle``. They come from C++
(file descriptor 2 directly) as much as from Python, so :func:`captured` redirects the file
descriptors themselves around the call that makes them, then passes on every line that is not
known chatter, on the stream it was written to. Nothing unknown is hidden: an error message, a
traceback or a new warning still reaches the user.

``MICROBENCH_LIBRARY_OUTPUT=all`` turns the filter off (everything is passed on).

Example::

    with captured():
        import deepspeed.profiling.flops_profiler
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from typing import Iterator, TextIO

# One pattern per kind of chatter; a line matching any of them is dropped.
KNOWN_CHATTER = tuple(re.compile(pattern) for pattern in (
    r"^USDT:",                                          # Kineto's tracepoints
    r"gpuGetDeviceCount failed",                        # Kineto on a machine without a GPU
    r"Setting accelerator to CPU",                      # DeepSpeed's accelerator probe
    r"No CUDA runtime is found",                        # inductor's cpp_extension probe
    r"Profiler clears events at the end of each cycle",  # torch.profiler's schedule
    r"skipping cudagraphs due to",                      # inductor: compile_watch reports it
    r"^\s*warnings\.warn\(|^\s*_warn_once\(",           # the source line a warning repeats
))

ENV_SWITCH = "MICROBENCH_LIBRARY_OUTPUT"


def is_chatter(line: str) -> bool:
    return any(pattern.search(line) for pattern in KNOWN_CHATTER)


def kept_lines(text: str) -> str:
    """``text`` without the known chatter (all of it when the filter is switched off)."""
    if os.environ.get(ENV_SWITCH, "").lower() == "all":
        return text
    return "".join(line for line in text.splitlines(keepends=True) if not is_chatter(line))


@contextlib.contextmanager
def captured(stdout: bool = False) -> Iterator[None]:
    """Filter what is written to standard error (and standard output, if ``stdout``) by
    anything in this process, C++ included, while the block runs. Use it where our own output
    does not go to the captured streams at the same time (a progress line writes to stdout, so
    blocks that run while one ticks capture stderr only)."""
    streams = [(sys.stderr, 2)] + ([(sys.stdout, 1)] if stdout else [])
    with contextlib.ExitStack() as stack:
        for stream, fd in streams:
            stack.enter_context(_redirected(stream, fd))
        yield


@contextlib.contextmanager
def _redirected(stream: TextIO, fd: int) -> Iterator[None]:
    try:
        target = stream.fileno()
    except (AttributeError, OSError, ValueError):    # not backed by a descriptor (a test's
        target = None                                # StringIO): Python-level writes only
    if target is None or target != fd:
        yield
        return
    stream.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), fd)
        try:
            yield
        finally:
            stream.flush()
            os.dup2(saved, fd)
            os.close(saved)
            sink.seek(0)
            text = kept_lines(sink.read().decode(errors="replace"))
            if text:
                stream.write(text)
                stream.flush()
