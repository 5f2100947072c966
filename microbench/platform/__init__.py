"""The platform: the device, processes and ranks, errors and exit codes, checked reads of input
files."""
