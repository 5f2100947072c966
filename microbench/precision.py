"""Numeric precision policies: fp32, tf32, fp16 (whole network), amp-fp16 and amp-bf16.

* ``fp32``      IEEE FP32 everywhere; TF32 is switched off for matmuls and convolutions.
* ``tf32``      FP32 tensors, with matmuls and convolutions allowed to use TF32 (``--tf32 1``).
* ``fp16``      the network in FP16, norm layers in FP32, FP32 master weights (``--fp16 1``).
* ``amp-fp16``  autocast to FP16 with gradient scaling (``--amp``).
* ``amp-bf16``  autocast to BF16; BF16 has FP32's range and needs no scaler (``--amp --amp-dtype bf16``).

TF32 is an explicit choice because PyTorch's own default allows it for cuDNN convolutions but not
for matmuls, so an unqualified "FP32" number would mix the two.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from .errors import UsageError


@dataclass(frozen=True)
class Precision:
    name: str                           # fp32 | tf32 | fp16 | amp-fp16 | amp-bf16
    label: str                          # what the "Dtype:" summary line prints
    model_dtype: torch.dtype            # parameters and inputs
    autocast_dtype: torch.dtype | None  # None: no autocast
    master_weights: bool                # FP32 master copies for an FP16 model
    grad_scaling: bool                  # torch.amp.GradScaler
    tf32: bool

    def autocast(self, device: torch.device):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=self.autocast_dtype)


def _policy(name: str, tf32: bool) -> Precision:
    half, bf16, fp32 = torch.float16, torch.bfloat16, torch.float32
    table = {
        "fp32": ("FP32", fp32, None, False, False),
        "tf32": ("TF32", fp32, None, False, False),
        "fp16": ("FP16", half, None, True, False),
        "amp-fp16": ("AMP-FP16", fp32, half, False, True),
        "amp-bf16": ("AMP-BF16", fp32, bf16, False, False),
    }
    label, model_dtype, autocast_dtype, master, scaling = table[name]
    return Precision(name, label, model_dtype, autocast_dtype, master, scaling, tf32)


# APEX's opt levels (O0..O3) mapped onto native modes. O2 ("almost FP16": FP16 model, FP32 norm
# layers and master weights) is exactly --fp16 1. O3 (pure FP16, norms too) is mapped to the same,
# since FP16 batch-norm statistics are not a mode anyone benchmarks deliberately.
AMP_OPT_LEVELS = {0: "fp32", 1: "amp-fp16", 2: "fp16", 3: "fp16"}


def resolve(fp16: int, amp: bool, amp_dtype: str, amp_opt_level: int | None,
            tf32: bool) -> tuple[Precision, list[str]]:
    """The policy for the precision flags, and notes to print about how they were read."""
    notes: list[str] = []
    if fp16 and amp:
        raise UsageError("--fp16 1 and --amp are different modes: choose one "
                         "(--fp16 1 runs the whole network in FP16; --amp uses autocast)")
    if amp_opt_level is not None:
        if fp16 or amp:
            raise UsageError("--amp-opt-level cannot be combined with --fp16 1 or --amp: "
                             "it selects the precision mode by itself")
        name = AMP_OPT_LEVELS[amp_opt_level]
        notes.append(f"--amp-opt-level {amp_opt_level} (APEX O{amp_opt_level}) is mapped to "
                     f"native precision mode '{name}'; APEX itself is not used")
    elif fp16:
        name = "fp16"
    elif amp:
        name = "amp-bf16" if amp_dtype == "bf16" else "amp-fp16"
    else:
        name = "tf32" if tf32 else "fp32"
    if amp_dtype == "bf16" and not amp:
        notes.append("--amp-dtype bf16 has no effect without --amp")
    return _policy(name, tf32), notes


def for_config(config) -> tuple[Precision, list[str]]:
    """The policy (and notes) for a BenchConfig's precision flags."""
    return resolve(config.fp16, config.amp, config.amp_dtype, config.amp_opt_level, config.tf32)


def apply_tf32(enabled: bool) -> None:
    """Allow or forbid TF32 for CUDA matmuls and cuDNN/MIOpen convolutions, process-wide."""
    if hasattr(torch.backends, "fp32_precision"):        # PyTorch >= 2.9
        mode = "tf32" if enabled else "ieee"
        torch.backends.cuda.matmul.fp32_precision = mode
        torch.backends.cudnn.conv.fp32_precision = mode
    else:
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled
