"""Baselines read back: ``--compare BASELINE.json`` (the :class:`Gate`) and ``--scaling-baseline
FILE.json``, each refused (exit 2) when it is another configuration, before anything runs.

Below both the drivers (the runner reads the baselines right after resolving the run) and the
output (``--compare`` prints against the gate), so neither reaches into the other. What counts
as the same configuration is :mod:`microbench.settings.identity`'s; reading a result file is
:mod:`microbench.store.stored`'s; its figures are read through :mod:`microbench.store.entry`, the
one model of a stored result (the report's, the sweep's and ``--compare``'s).

Example::

    gate = read_gate("results/base.json", 5.0, spec)     # before the run
    baseline_img_s = scaling_baseline("results/one_gpu.json", spec)
"""
from __future__ import annotations

from dataclasses import dataclass

from microbench.platform import safe_text
from microbench.platform.errors import UsageError
from microbench.settings import identity
from microbench.store.entry import Entry, entries_of
from microbench.store.figures import gate_figures
from microbench.store.stored import load_result


@dataclass(frozen=True)
class Gate:
    """``--compare``: the baseline result, read before anything is written, and the tolerance."""

    path: str
    tolerance_pct: float
    baseline: dict                     # the document (its configuration: settings.identity)
    any_config: bool = False           # --compare-any-config: another configuration, said so
    fail: bool = True                  # --fail-if never: report a regression, exit 0

    @property
    def entry(self) -> Entry:
        """The baseline's figures, read as every reader of a stored result reads them."""
        return entries_of(self.baseline, self.path)[0]


def read_gate(path: str, tolerance_pct: float, spec, any_config: bool = False,
              fail: bool = True) -> Gate:
    """``--compare``'s baseline, read before the run, refusing another configuration now so
    that it does not cost the user the run (``any_config``: compared anyway, said so;
    ``fail`` False: --fail-if never)."""
    gate = Gate(path, tolerance_pct, load_result(path, "--compare"), any_config, fail)
    differ = check_same_configuration(identity.of_spec(spec), gate.baseline, path, any_config)
    if differ:
        print(safe_text.terminal(f"Note: --compare-any-config: {path} is another "
                                 f"configuration ({'; '.join(differ)}); compared anyway"))
    return gate


def check_same_configuration(ours: dict, baseline: dict, path: str,
                             any_config: bool = False) -> list[str]:
    """What differs between the two configurations; refused (exit 2) unless ``any_config``."""
    differ = identity.differences(ours, identity.of_document(baseline), identity.GATE)
    if differ and not any_config:
        raise UsageError(f"--compare {path} is another configuration: {'; '.join(differ)} "
                         f"(--compare-any-config compares anyway)")
    return differ


def scaling_baseline(path: str, spec) -> float:
    """Single-device throughput from a result JSON, refusing another configuration (the same
    work per device: network, mode, precision, per-device batch, input size, layout, compile
    setting, device model...), or the efficiency would compare different work."""
    document = load_result(path, "--scaling-baseline")
    entry = entries_of(document, path)[0]
    devices = entry.settings.get("devices")
    if devices != 1:
        raise UsageError(f"--scaling-baseline {path} is a {devices}-device result; "
                         f"give a single-device run of the same configuration")
    differ = identity.differences(identity.of_spec(spec), identity.of_document(document),
                                  identity.WORK)
    if differ:
        raise UsageError(f"--scaling-baseline {path} differs in {'; '.join(differ)}")
    return entry.figures["items_per_s"]


def metrics(entry: Entry) -> dict[str, float | None]:
    """--compare's table: the figures the registry names for it (``gate``, in its order), as
    store.entry reads them (None: not recorded)."""
    return {figure.gate: entry.figures.get(figure.key) for figure in gate_figures()
            if figure.gate}


def trial_values(entry: Entry) -> tuple[float, ...]:
    """A result's trial throughputs where it has two or more, else its headline; in the
    entry's unit (tokens/s for a language model), which both sides of a gate share."""
    if len(entry.trial_values) >= 2:
        return entry.trial_values
    return (entry.figures["throughput"],)
