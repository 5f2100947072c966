"""What the NVML and amdsmi sources share: importing the library (a missing one is a one-line
:class:`~microbench.platform.errors.MissingEnvironment`), a query of one field of this GPU that gives None
when the library raises its own error, and turning the library's values into floats and text.

Example::

    nvml = import_library("pynvml", "telemetry: nvidia-ml-py not installed ...")

    class NvmlSource(LibrarySource):
        def __init__(self, nvml):
            self._error, self._handle = nvml.NVMLError, nvml.nvmlDeviceGetHandleByIndex(0)
            self.power_mw = self._query(nvml.nvmlDeviceGetPowerUsage)   # None if unsupported
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Callable

from microbench.platform.errors import MissingEnvironment


def import_library(name: str, missing: str) -> ModuleType:
    """The module ``name``; MissingEnvironment(``missing``) when it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise MissingEnvironment(missing) from error


class LibrarySource:
    """A query of one field of this device that gives None when the library raises its own
    error (NVMLError NotSupported, AmdSmiException), never a crash. Subclasses set ``_error``
    (the library's exception type) and ``_handle`` (the library's handle of the GPU)."""

    _error: type[BaseException]
    _handle: Any

    def _try(self, function: Callable, *args: Any) -> Any:
        try:
            return function(*args)
        except self._error:
            return None

    def _query(self, function: Callable | None, *args: Any) -> Any:
        return None if function is None else self._try(function, self._handle, *args)


def as_float(value: Any) -> float | None:
    """A number as a float; None for anything else (a missing field, "N/A", a flag)."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def as_text(value: Any) -> str:
    """Old pynvml releases return bytes where new ones return str."""
    return value.decode() if isinstance(value, bytes) else str(value)
