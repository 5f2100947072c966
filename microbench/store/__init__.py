"""Stored results read back: the published schema and the checked reader of result documents."""
