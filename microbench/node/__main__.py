"""``python3 -m microbench.node`` is ``microbench-node``."""
import sys

from microbench.platform.process import microbench_node

sys.exit(microbench_node())
