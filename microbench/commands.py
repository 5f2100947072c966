"""The four commands' entry points (``pyproject.toml``'s scripts, ``python -m``, the wrapper
scripts): each imports its command's module by name through :func:`microbench.platform.process.entry`,
which owns the process (signals, exit codes) before any heavy import.

They live here, at the package's root with the other entry points, because they name the top
layers (``main``, ``ops.cli``, ``report.command``, ``node.arguments``): the layer test reads these names as imports.
"""
from __future__ import annotations

from microbench.platform.process import entry


def microbench() -> int:
    """The ``microbench`` command."""
    return entry("microbench.main")


def microbench_ops() -> int:
    """The ``microbench-ops`` command."""
    return entry("microbench.ops.cli")


def microbench_report() -> int:
    """The ``microbench-report`` command."""
    return entry("microbench.report.command")


def microbench_node() -> int:
    """The ``microbench-node`` command."""
    return entry("microbench.node.arguments")
