#!/usr/bin/env python3
"""TorchTensorOpsBench's entry point, kept where users call it; it runs the op bench of the
``microbench`` package (installed as the ``microbench-ops`` command).

    python3 TorchTensorOpsBench/torch_tensor_ops_bench.py --op matmul --dtype bf16
    cd TorchTensorOpsBench && python3 torch_tensor_ops_bench.py --run-compute-ops

From a checkout, ``microbench`` beside this file is a link to the repository's package, so the
script runs from anywhere without installing and without touching ``sys.path``.
"""
import sys

from microbench.commands import microbench_ops

if __name__ == "__main__":
    sys.exit(microbench_ops())
