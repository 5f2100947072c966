"""--help is what users read of the four commands: each command's text, at a terminal 100
columns wide, is the text in tests/fixtures/help/ byte for byte (issue 63: the main parser is
built from the settings' declarations, and building it so must not change a word of it)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT

HELP = ROOT / "tests" / "fixtures" / "help"
COMMANDS = ("microbench", "microbench-ops", "microbench-report", "microbench-node")


def live_help(name: str) -> str:
    """The command's --help as its console script prints it (argv[0] is the command's name)."""
    program = (f"import sys; sys.argv[0] = {name!r}\n"
               f"from microbench import commands\n"
               f"sys.exit(commands.{name.replace('-', '_')}())")
    env = {**os.environ, "COLUMNS": "100", "LINES": "50"}
    process = subprocess.run([sys.executable, "-c", program, "--help"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60)
    assert process.returncode == 0 and process.stderr == "", process.stderr
    return process.stdout


@pytest.mark.parametrize("name", COMMANDS)
def test_help_is_the_stored_text(name):
    stored = (HELP / f"{name}.txt").read_text()
    assert live_help(name) == stored, (f"{name} --help changed; if on purpose, write "
                                       f"tests/fixtures/help/ again (its README.md)")
