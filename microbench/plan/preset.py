"""``--preset fast``: the levers that measured fastest, chosen per model family and device.

A preset is a set of ordinary settings, never a hidden mode: :func:`apply` fills in the settings
the user did not give on the command line, and :func:`as_flags` spells the result as the flags
that reproduce the run without the preset (printed, and stored in the result's config). Explicit
flags always win.

What "fast" picks, and why (numbers in docs/results.md, "The fast path"):

* channels-last memory format for image models: convolutions run NHWC kernels (cuDNN, MIOpen);
* mixed precision in BF16 where the GPU has BF16 matrix units (no GradScaler, so no host sync
  per step), FP16 with dynamic scaling elsewhere;
* the fused SGD kernel, which also takes the AMP scale and inf check on the device;
* ``torch.compile``; for training on GPUs in ``reduce-overhead`` mode, whose CUDA (HIP) graphs
  replay each step's hundreds of kernel launches at once: resnet50 bf16 on an H200 went from
  4609-5766 to 6375-6437 img/s and from 68-96% to 100% GPU utilization, and on two H200s under
  DDP from 66% to 93.5% scaling efficiency (the default mode's split DDP graphs left the GPUs
  waiting on the host). Inference and the CPU compile in the default mode.
  ``max-autotune-no-cudagraphs`` compiled for more than seven minutes there without finishing,
  too long for a preset;
* ``cudnn.benchmark`` (MIOpen's find mode on ROCm): convolution algorithms measured, not guessed;
* under DDP, gradients as views of the communication buckets and a static graph (the choices
  of each strategy are its own: ``PRESET`` in ``scenarios/ddp.py``).

Generation (``--mode generate``) is bound by reading the weights once per decode step, so there
the preset stores them in BF16 (``--precision bf16``; FP16 where the GPU has no BF16 matrix
units), with no autocast re-casting FP32 weights every token, and compiles the prefill and the
decode step apart in ``reduce-overhead`` mode, so each decode step replays as one CUDA (HIP)
graph (issue 21: autocast over FP32 weights, compiled without graphs, ran 91 tokens/s where
gpt-fast's BF16 captured step ran 773 on the same H200). ``cudnn.benchmark`` is left alone:
a language model has no convolutions.

On the CPU the preset keeps FP32 (BF16 autocast is slow without AMX) and compiles in the
default mode: it buys only ``torch.compile`` (and channels-last), whose compile takes minutes
on a few cores, so :func:`cpu_note` says so before the run starts (issue 56: ``--preset fast
--mode generate`` compiled for over 5 minutes on a 2-core Xeon without a word).

Example::

    config = apply(config, models.resolve("resnet50"), device=torch.device("cuda"),
                   world_size=1, training=True)
    print(as_flags(config))
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from microbench.settings.config import (PRESET_FIELDS, PRESETS,  # noqa: F401 (PRESETS: here too)
                                        SCHEMA, as_command_line, spelled)
from microbench.platform.devices import is_gpu
from microbench.scenarios import parallel
from microbench.scenarios.strategy import Strategy

if TYPE_CHECKING:
    from microbench.settings.config import BenchConfig
    from microbench.models.family import ModelFamily



def _bf16_matrix_units(device: torch.device) -> bool:
    """BF16 tensor/matrix cores: NVIDIA Ampere (sm_80) and newer, AMD CDNA 2 (MI200) and newer;
    torch.cuda.is_bf16_supported answers for both."""
    return torch.cuda.is_bf16_supported()


def fast_choices(model: ModelFamily, device: torch.device, world_size: int, training: bool,
                 half_weights: bool = False, strategy: Strategy | None = None) -> dict:
    """The settings --preset fast stands for on this device, for this model
    (``half_weights``: the kind of run is generation, see the module's text; ``strategy``:
    the --parallel strategy's own choices, the default --parallel's if None)."""
    vision = not model.reads_tokens                 # images in: convolutions take channels-last
    graphs = is_gpu(device) and (training or half_weights)
    choices: dict = {"compile": True,
                     "compile_options": {"mode": "reduce-overhead"} if graphs else {}}
    if vision:
        choices["nhwc"] = True
    if not is_gpu(device):
        return choices
    bf16 = _bf16_matrix_units(device)
    if half_weights:
        choices.update(precision="bf16" if bf16 else "fp16")
    else:
        choices.update(precision="amp-bf16" if bf16 else "amp-fp16", cudnn_benchmark=True)
    if training:
        choices["optimizer_impl"] = "fused"
    strategy = strategy or parallel.named(SCHEMA["parallel"].default)
    choices.update(strategy.preset_choices(training, world_size))
    return choices


def apply(config: BenchConfig, model: ModelFamily, device: torch.device, world_size: int,
          training: bool, half_weights: bool = False):
    """``config`` with the preset's choices for every setting the user did not give
    (``training``: the kind of run steps an optimizer; ``half_weights``: it generates)."""
    if config.preset is None:
        return config
    strategy = parallel.named(config.parallel)
    choices = strategy.adjust_preset(config, fast_choices(model, device, world_size, training,
                                                          half_weights, strategy))
    kept = {key: value for key, value in choices.items() if key not in config.explicit}
    return replace(config, **kept)


def cpu_note(config: BenchConfig, device: torch.device) -> str | None:
    """What the preset buys on the CPU and what its compile costs; None on a GPU or without
    the preset."""
    if config.preset is None or is_gpu(device):
        return None
    bought = " and ".join(name for name, chosen in (("torch.compile", config.compile),
                                                    ("channels-last", config.nhwc)) if chosen)
    if not bought:
        return None
    cost = (" Compiling takes minutes on a few cores before the first timed iteration the "
            "first time (the prefill and the decode step compile apart in --mode generate; "
            "inductor's disk cache makes the next run's seconds); --compile-mode none keeps the "
            "rest of the preset without it (docs/fast-path.md)"
            if config.compile else "")
    return (f"on the CPU --preset {config.preset} buys only {bought}: it keeps FP32 (BF16 "
            f"autocast is slow without AMX) and has no CUDA graphs to replay.{cost}")


def as_flags(config: BenchConfig) -> str:
    """The settings a preset may choose, as the flags that reproduce them (FP32 left unsaid)."""
    words = [word for word in spelled(config, PRESET_FIELDS) if word != "--precision=fp32"]
    return as_command_line(words)
