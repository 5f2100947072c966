#!/usr/bin/env python3
"""Benchmark PyTorch training and inference on a GPU (ROCm or CUDA) or the CPU.

    python3 micro_benchmarking_pytorch.py --network resnet50 --batch-size 64 --iterations 20
    python3 micro_benchmarking_pytorch.py --network resnet50 --amp --nhwc --mode inference
    torchrun --nproc-per-node 4 micro_benchmarking_pytorch.py --network resnet50 --batch-size 256

The older tool's entry point, kept where users and workshop guides call it; it runs
:func:`microbench.main.main` (installed as the ``microbench`` command), importing it under
:func:`microbench.platform.process.entry` so that Ctrl-C or SIGTERM during the imports prints one line.
"""
import sys

from microbench.commands import microbench

if __name__ == "__main__":
    sys.exit(microbench())
