"""``python3 -m microbench``: the model benchmark (the same as the ``microbench`` command)."""
import sys

from microbench.commands import microbench

sys.exit(microbench())
