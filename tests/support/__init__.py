"""Helpers the tests share (importable as ``support.*``: conftest.py puts tests/ on sys.path).

Not named test_*.py, so pytest collects nothing here."""
