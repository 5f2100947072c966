"""``--parallel ddp``: the whole model on every rank, gradients all-reduced by PyTorch's
DistributedDataParallel; everything this tool knows of DDP is here.

Its options are DistributedDataParallel's keywords: three have flags of their own, the older
spellings (``--ddp-bucket-cap-mb``, ``--ddp-static-graph``, ``--ddp-gradient-as-bucket-view``),
and the others are given in ``--ddp-options``, a dict checked against ``OPTIONS`` (its flag
side, ``settings/strategy_flags.ReplicatedFlags``, below torch). A new keyword is its word in
that allow-list (and its line in docs/flags.md); ``--preset fast`` chooses
:data:`Replicated.PRESET`.

Example::

    --ddp-options "{'broadcast_buffers': False}"    # DDP(..., broadcast_buffers=False)
"""
from __future__ import annotations

import torch

from microbench.platform import devices
from microbench.scenarios.strategy import Strategy, Wrap
from microbench.settings.strategy_flags import ReplicatedFlags
from microbench.scenarios.views import RunView, SummaryView


class Replicated(ReplicatedFlags, Strategy):
    """DDP: the whole model on every rank, gradients all-reduced."""

    replicates = True
    # Gradients as views of the communication buckets (no copy) and a static graph (the
    # reducer's order learned once): what measured fastest under DDP (plan/preset.py).
    PRESET = {"gradient_as_bucket_view": True, "static_graph": True}

    def wrapper(self, spec: RunView) -> Wrap | None:
        """Each rank's model in DistributedDataParallel with this run's options, for a kind of
        run that steps an optimizer (there are no gradients to all-reduce otherwise)."""
        if not spec.scenario.updates_weights:
            return None
        options, device = self.options(spec.config), spec.device

        def wrap(model: torch.nn.Module) -> torch.nn.Module:
            from torch.nn.parallel import DistributedDataParallel
            return DistributedDataParallel(model, device_ids=devices.rank_device_ids(device),
                                           **options)
        return wrap

    def console_rows(self, summary: SummaryView) -> list[tuple[str, str]]:
        return [("Parallel", f"DDP over {summary.world_size} ranks (whole model on each)")]
