"""``python3 -m microbench.report``: many result files as one table (the same as the
``microbench-report`` command)."""
import sys

from microbench.commands import microbench_report

sys.exit(microbench_report())
