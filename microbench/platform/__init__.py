"""The platform every layer stands on: the device, processes and ranks, errors and exit codes,
checked reads of input files and whole-file writes, and text for the console (escaped text,
units, tables, the live progress line)."""
