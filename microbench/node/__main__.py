"""``python3 -m microbench.node`` is ``microbench-node``."""
import sys

from microbench.commands import microbench_node

sys.exit(microbench_node())
