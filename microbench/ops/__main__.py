"""``python3 -m microbench.ops``: the op bench (the same as the ``microbench-ops`` command)."""
import sys

from microbench.commands import microbench_ops

sys.exit(microbench_ops())
