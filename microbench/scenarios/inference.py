"""Inference: the forward pass in inference mode, with the model in ``eval()``.

Example::

    scenario = Inference(config, model)
    work = scenario.build(spec, wrap=None, count_flops=True)
"""
from __future__ import annotations

from typing import Callable

import torch

from microbench.steps import workload
from microbench.scenarios.base import Scenario
from microbench.scenarios.feeding import PipelineFed
from microbench.scenarios.views import RunView, Work


class Inference(PipelineFed, Scenario):
    mode = "inference"

    def build(self, spec: RunView, wrap: Callable[[torch.nn.Module], torch.nn.Module] | None,
              count_flops: bool) -> Work:
        return workload.build(spec, wrap, count_flops, training=False)
