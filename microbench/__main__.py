"""``python3 -m microbench``: the model benchmark (the same as the ``microbench`` command)."""
import sys

from microbench.platform.process import microbench

sys.exit(microbench())
