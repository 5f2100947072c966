"""Inference: the forward pass in inference mode, with the model in ``eval()``.

Example::

    scenario = Inference(config, model)
    work = scenario.build(spec, wrap=None, count_flops=True)
"""
from __future__ import annotations

from microbench.steps import workload
from microbench.scenarios.base import Scenario
from microbench.scenarios.feeding import PipelineFed


class Inference(PipelineFed, Scenario):
    mode = "inference"

    def build(self, spec, wrap, count_flops: bool):
        return workload.build(spec, wrap, count_flops, training=False)
