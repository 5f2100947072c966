"""The operator-level benchmark (TorchTensorOpsBench): single PyTorch ops timed with device
events, with bytes moved, FLOPs, achieved GB/s and TFLOP/s, and their share of the datasheet peak.

* :mod:`.catalog` -- the ops, their shapes, costs (bytes, FLOPs) and builders;
* :mod:`.runner`  -- checks, memory pre-check, warm-up, per-call timing, rates;
* :mod:`.report`  -- result rows, the console table, JSON and CSV;
* :mod:`.peaks`   -- the measured peaks: this bench's matmul and copy run as a probe, which a
  model run takes as its second MFU/MBU denominator;
* :mod:`.cli`     -- the command line (``microbench-ops``, ``python3 -m microbench.ops``).
"""
