"""TorchTensorOpsBench: operator-level benchmark (see README.md); shares timing with microbench."""
