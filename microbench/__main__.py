"""``python3 -m microbench``: the model benchmark (the same as the ``microbench`` command)."""
import sys

from .process import microbench

sys.exit(microbench())
