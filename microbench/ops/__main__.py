"""``python3 -m microbench.ops``: the op bench (the same as the ``microbench-ops`` command)."""
import sys

from .cli import main

sys.exit(main())
