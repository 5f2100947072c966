"""``python3 -m microbench.ops``: the op bench (the same as the ``microbench-ops`` command)."""
import sys

from microbench.platform.process import microbench_ops

sys.exit(microbench_ops())
