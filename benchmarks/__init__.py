"""GPU proof scripts that check the tool against hand-written loops and the hardware.

Run the Python ones from the repository root as modules (``python3 -m benchmarks.NAME``), the
shell ones as ``bash benchmarks/NAME.sh``; docs/results.md has every command and its numbers.
"""
