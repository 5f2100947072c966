"""Numeric precision modes: one table, one row per mode.

Every place that needs to know about precision reads this table: the CLI's ``--precision``
choices, the older flags (``--fp16 1``, ``--amp``, ``--amp-dtype``, ``--amp-opt-level``,
``--tf32 1``) that map onto a row, the workload (dtypes, autocast, gradient scaling, master
weights) and the MFU peak lookup (``peak_key``, a column of :mod:`microbench.measure.flops`' table).

* ``fp32``      IEEE FP32 everywhere; TF32 is switched off for matmuls and convolutions.
* ``tf32``      FP32 tensors, with matmuls and convolutions allowed to use TF32.
* ``fp16``      the network in FP16, norm layers in FP32 (``fp16util``). Training steps FP32
                master copies of the weights; inference and generation keep no master copies:
                the FP16 weights are all there is.
* ``bf16``      the same in BF16: parameters, buffers, activations and a generation's KV cache
                in BF16, no autocast (what inference servers and gpt-fast run). Training steps
                FP32 master copies of the weights, as ``fp16`` does, but without loss scaling
                (BF16 has FP32's exponent range); inference and generation keep no copies.
* ``amp-fp16``  autocast to FP16 with dynamic gradient scaling.
* ``amp-bf16``  autocast to BF16 over FP32 weights; BF16 has FP32's range and needs no scaler.
* ``fp8``       ``amp-bf16`` with the linear layers' matmuls in FP8 (torchao's Float8 training,
                ``--fp8-recipe``: :mod:`microbench.steps.low_precision`); convolutions, norms and attention stay
                in BF16. MFU divides by the FP8 peak, and by the BF16 peak beside it.

timm's spellings ``--precision float16|bfloat16|float32`` are read as ``fp16``, ``bf16`` and
``fp32`` (``cli.TIMM_SPELLINGS``).

TF32 is an explicit choice because PyTorch's own default allows it for cuDNN convolutions but not
for matmuls, so an unqualified "FP32" number would mix the two.

Example::

    policy = lookup("amp-bf16")
    with policy.autocast(device):
        loss = model(inputs).sum()
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from microbench.platform.errors import UsageError

if TYPE_CHECKING:
    import torch

# torch is imported where a dtype is asked for, not here: the command line reads this table
# for --precision's choices and help, and answers --help and refusals before torch is imported
# (issue 45). The dtypes are named as torch names them (torch.float16).


@dataclass(frozen=True)
class Precision:
    name: str                           # the table key, e.g. "amp-bf16"
    label: str                          # what the "Dtype:" summary line prints
    model_dtype_name: str               # parameters and inputs: "float32", "bfloat16"...
    autocast_dtype_name: str | None     # None: no autocast
    master_weights: bool                # FP32 master copies of a half model (training only)
    grad_scaling: bool                  # torch.amp.GradScaler
    peak_key: str                       # the column of the datasheet peak table MFU divides by
    older_flags: str                    # the older tool's spelling(s) of this mode
    tf32: bool = False                  # FP32 matmuls and convolutions may use TF32
    fp8: bool = False                   # linear layers converted to torchao's Float8Linear
    # The peak MFU is also shown against (fp8: the BF16 peak the rest of the model runs at).
    second_peak_key: str | None = None

    @property
    def model_dtype(self) -> torch.dtype:
        import torch
        return getattr(torch, self.model_dtype_name)

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        import torch
        return None if self.autocast_dtype_name is None else getattr(torch,
                                                                     self.autocast_dtype_name)

    def autocast(self, device: torch.device):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        import torch
        return torch.autocast(device_type=device.type, dtype=self.autocast_dtype)

    @property
    def is_half(self) -> bool:
        """FP16 or BF16 does the bulk of the arithmetic."""
        return self.model_dtype_name != "float32" or self.autocast_dtype_name is not None


_HALF, _BF16, _FP32 = "float16", "bfloat16", "float32"

# FP32 convolutions and GEMMs run on AMD's matrix cores (MFMA) where they exist, so "fp32"
# divides by the FP32 matrix rate, which falls back to the vector rate on NVIDIA (no FP32
# tensor-core path with TF32 off); see microbench/measure/flops.py.
TABLE = (
    Precision("fp32", "FP32", _FP32, None, False, False, "fp32_matrix",
              "the default; --amp-opt-level 0"),
    Precision("tf32", "TF32", _FP32, None, False, False, "tf32", "--tf32 1", tf32=True),
    Precision("fp16", "FP16", _HALF, None, True, False, "fp16",
              "--fp16 1; --amp-opt-level 2 or 3"),
    Precision("bf16", "BF16", _BF16, None, True, False, "bf16",
              "new; timm's --precision bfloat16"),
    Precision("amp-fp16", "AMP-FP16", _FP32, _HALF, False, True, "fp16",
              "--amp; --amp-opt-level 1"),
    Precision("amp-bf16", "AMP-BF16", _FP32, _BF16, False, False, "bf16",
              "--amp --amp-dtype bf16"),
    Precision("fp8", "FP8", _FP32, _BF16, False, False,
              "fp8", "new; needs torchao and a GPU with FP8 matrix units", fp8=True,
              second_peak_key="bf16"),
)
PRECISIONS = {row.name: row for row in TABLE}
ALIASES = {"amp": "amp-fp16"}
CHOICES = tuple(PRECISIONS) + tuple(ALIASES)


def modes_help() -> str:
    """Each mode with its older spelling, for --precision's help."""
    return "; ".join(f"{row.name} ({row.older_flags})" for row in TABLE)


# torchao's FP8 training recipes (microbench/steps/low_precision.py runs them): --fp8-recipe's
# choices. Weight quantization (--quantize, --quant-layout) is microbench.settings.quantization.
FP8_RECIPES = ("tensorwise", "rowwise")

# APEX's opt levels (O0..O3) mapped onto native modes. O2 ("almost FP16": FP16 model, FP32 norm
# layers and master weights) is exactly --fp16 1. O3 (pure FP16, norms too) is mapped to the same,
# since FP16 batch-norm statistics are not a mode anyone benchmarks deliberately.
AMP_OPT_LEVELS = {0: "fp32", 1: "amp-fp16", 2: "fp16", 3: "fp16"}


def lookup(name: str, tf32: bool = False) -> Precision:
    """The row for a mode name or alias; ``tf32`` also allows TF32 outside autocast."""
    row = PRECISIONS.get(ALIASES.get(name, name))
    if row is None:
        raise UsageError(f"unknown precision '{name}' (choose from {', '.join(CHOICES)})")
    return replace(row, tf32=row.tf32 or tf32)


def from_older_flags(fp16: int, amp: bool, amp_dtype: str, amp_opt_level: int | None,
                     tf32: bool) -> tuple[str, list[str]]:
    """The mode the older precision flags select, and notes on how they were read."""
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
    return name, notes


def apply_tf32(enabled: bool) -> None:
    """Allow or forbid TF32 for GPU matmuls and cuDNN/MIOpen convolutions, process-wide."""
    import torch
    if hasattr(torch.backends, "fp32_precision"):        # PyTorch >= 2.9
        mode = "tf32" if enabled else "ieee"
        torch.backends.cuda.matmul.fp32_precision = mode
        # torch's stubs lack cudnn.conv, which PyTorch >= 2.9 has (checked above)
        torch.backends.cudnn.conv.fp32_precision = mode  # type: ignore[attr-defined]
    else:
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled


def tf32_allowed(kind: str) -> bool:
    """Whether FP32 ``"matmul"``s or cuDNN/MIOpen ``"conv"``olutions may use TF32 right now.

    Reads the API that :func:`apply_tf32` writes: PyTorch 2.9 refuses to read the older
    ``allow_tf32`` flags once the newer ``fp32_precision`` ones have been set.
    """
    import torch
    if hasattr(torch.backends, "fp32_precision"):
        node = (torch.backends.cuda.matmul if kind == "matmul"    # stubs lack cudnn.conv
                else torch.backends.cudnn.conv)  # type: ignore[attr-defined]
        if node.fp32_precision in ("tf32", "ieee"):
            return node.fp32_precision == "tf32"
    # "none" (inherit) or an older PyTorch: the older flags hold the effective default.
    return bool(torch.backends.cuda.matmul.allow_tf32 if kind == "matmul"
                else torch.backends.cudnn.allow_tf32)
