"""benchmarks/node_check.sh (run by hand on GPUs) parses, and refuses bad arguments in one line
with exit 2 before it starts anything."""
from __future__ import annotations

import subprocess

from conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "node_check.sh"


def test_the_script_parses_and_refuses_bad_arguments(tmp_path):
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    for args in ([], ["4"], ["x", str(tmp_path)], ["1", str(tmp_path)],
                 ["4", str(tmp_path), "--fast"], ["4", str(tmp_path), "--reduced", "x"]):
        ran = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                             timeout=30)
        assert ran.returncode == 2 and len(ran.stderr.strip().splitlines()) == 1, ran.stderr
    assert not any(tmp_path.iterdir())
