"""micro_benchmarking_pytorch: honest PyTorch training and inference benchmarks on GPUs and CPUs."""

__version__ = "1.0.0"
