"""The engine of ``--mode generate``: prefill a prompt, then decode tokens one at a time with a KV
cache.

One iteration generates ``gen_len`` tokens for each of ``batch`` concurrent sequences: a prefill
of the ``prompt_len``-token prompt gives the first token (its time is the time to first token),
then ``gen_len - 1`` decode steps give one token each (their times are the inter-token latencies).
The KV cache is static and allocated once; positions live in a device tensor advanced in place,
so no step waits for the host and every decode step has the same shapes (``torch.compile``
captures it once). The timed loop records one device event after the prefill and after every
decode step, and reads them after the loop, like every other timed region.

Example::

    work = build(spec, model)
    times = timed_generation(work, iterations=10, device=spec.device)
    times.prefill.median, times.decode.p99, times.e2e.mean
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from .. import flops
from ..archs import llama
from ..results import GenerationTimes
from ..timing import Measurement, make_recorder


@dataclass(frozen=True)
class GenerationShape:
    """How long the prompt is and how many tokens each sequence generates."""

    prompt_len: int
    gen_len: int

    @property
    def positions(self) -> int:
        """KV-cache slots used: the last generated token is never fed back."""
        return self.prompt_len + self.gen_len - 1


class GenerationWorkload:
    """The model, prompt and cache of a generation run, and its prefill and decode steps."""

    phases = None               # no forward/backward split in generation

    def __init__(self, model: nn.Module, eager_model: nn.Module, prompt: torch.Tensor,
                 cache: llama.KVCache, shape: GenerationShape, autocast,
                 flops_per_iteration: int | None):
        self.model, self.eager_model, self.prompt, self.cache = model, eager_model, prompt, cache
        self.shape, self.autocast = shape, autocast
        self.parameters = sum(p.numel() for p in eager_model.parameters())
        self.flops_per_iteration = flops_per_iteration
        self.input_pos = torch.zeros(1, dtype=torch.long, device=prompt.device)

    def prefill(self) -> torch.Tensor:
        """The prompt into the cache; the first generated token of each sequence."""
        self.input_pos.fill_(self.shape.prompt_len)          # on the device: no sync
        with torch.inference_mode(), self.autocast:
            return llama.prefill(self.model, self.prompt, self.cache)

    def decode(self, token: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode(), self.autocast:
            following = llama.decode_step(self.model, token, self.input_pos, self.cache)
        self.input_pos += 1
        return following

    def step(self) -> None:
        """One whole generation (warm-up and profiler passes run this)."""
        token = self.prefill()
        for _ in range(self.shape.gen_len - 1):
            token = self.decode(token)


def build(spec, model: nn.Module, wrap: Callable[[nn.Module], nn.Module] | None = None,
          count_flops: bool = True) -> GenerationWorkload:
    """``model`` is the prepared eager model of ``spec`` (a RunSpec in generate mode)."""
    model.eval()
    precision, shape = spec.precision, spec.scenario.shape
    cache_dtype = precision.autocast_dtype or precision.model_dtype
    cache = model.make_cache(spec.batch_size, shape.positions, device=spec.device,
                             dtype=cache_dtype)
    prompt = spec.model.make_prompt(spec.batch_size, shape.prompt_len, spec.device,
                                    spec.config.seed)
    work = GenerationWorkload(model, model, prompt, cache, shape, precision.autocast(spec.device),
                              None)
    if count_flops:
        work.flops_per_iteration = flops.count_step_flops(work.step)
    if wrap is not None:
        work.model = wrap(model)
    return work


def timed_generation(work: GenerationWorkload, iterations: int, device: torch.device,
                     time_fn: Callable[[], float] | None = None) -> GenerationTimes:
    """``iterations`` generations with a device event after the prefill and each decode step."""
    marks_per_iteration = work.shape.gen_len
    recorder = make_recorder(device, iterations * marks_per_iteration + 1, time_fn)
    recorder.mark()
    for _ in range(iterations):
        token = work.prefill()
        recorder.mark()
        for _ in range(work.shape.gen_len - 1):
            token = work.decode(token)
            recorder.mark()
    return split_generation_times(recorder.intervals_ms(), marks_per_iteration)


def split_generation_times(intervals_ms: list[float], per_iteration: int) -> GenerationTimes:
    """Cut the event intervals into prefills, decode steps and whole generations."""
    iterations = [intervals_ms[i:i + per_iteration]
                  for i in range(0, len(intervals_ms), per_iteration)]
    return GenerationTimes(prefill=Measurement(it[0] for it in iterations),
                           decode=Measurement(s for it in iterations for s in it[1:]),
                           e2e=Measurement(sum(it) for it in iterations))
