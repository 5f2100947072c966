"""What the op bench's flags accept, known without torch: ``microbench-ops --help`` and a
refused flag answer in a fraction of a second (issue 45), where the catalog (the ops
themselves) and the runner import torch. ``tests/ops/test_runner.py`` checks these names
against the catalog.

Example::

    "matmul" in OP_NAMES, DTYPE_NAMES      # True, ('fp32', 'fp16', 'bf16')
"""
from __future__ import annotations

OP_TYPES = ("binary", "unary", "reduction", "sparse", "compute")
DTYPE_NAMES = ("fp32", "fp16", "bf16")
# The old tool's generic shape for binary, unary and reduction ops.
GENERIC_SHAPE = "64-1024-1024"
# Every op of the catalog (catalog.known_op_names()).
OP_NAMES = ("add", "argmax", "argmin", "bmm", "conv2d", "copy", "div", "eq", "exp", "layer_norm",
            "matmul", "max", "mean", "mul", "norm", "prod", "relu", "scaled_mm", "sdpa",
            "softmax", "sqrt", "std", "sub", "sum", "tanh", "var")

MIB = 1 << 20
# The flush buffer: twice the last-level cache, and never less than this floor, which covers a
# cache that the device does not report (MI300's 256 MB Infinity Cache, twice over). Zeroing
# 512 MiB takes 0.17 ms on an H100 (measured), untimed.
FLUSH_FLOOR_BYTES = 512 * MIB
# Without the flush, a spin of this long is queued before each timed call: far above the host
# dispatch of one eager op (7-9 us on the H100 host we measured), so the call is queued before
# its start event fires. The host then runs ahead of the GPU and the margin grows.
DEFAULT_QUEUED_DELAY_MS = 0.5
