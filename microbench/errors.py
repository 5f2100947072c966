"""Expected failures and their exit codes (docs/architecture.md, "Errors").

Raise one of these with a message that says what was wrong and what to do; the entry script prints
it as one line on stderr, without a traceback, and exits with its code. Anything else is a bug and
exits 1 with a traceback.
"""

EXIT_UNEXPECTED = 1
EXIT_USAGE = 2
EXIT_OUT_OF_MEMORY = 3
EXIT_MISSING_ENVIRONMENT = 4
EXIT_REGRESSION = 5
# The codes of expected failures, each reported by one line where it happened.
EXPECTED_EXIT_CODES = (EXIT_USAGE, EXIT_OUT_OF_MEMORY, EXIT_MISSING_ENVIRONMENT, EXIT_REGRESSION)


class BenchmarkError(Exception):
    exit_code = EXIT_UNEXPECTED


class UsageError(BenchmarkError):
    """Bad flags, bad values, bad files named by the user."""
    exit_code = EXIT_USAGE


class OutOfMemory(BenchmarkError):
    exit_code = EXIT_OUT_OF_MEMORY


class MissingEnvironment(BenchmarkError):
    """No GPU where one was asked for, a missing optional dependency."""
    exit_code = EXIT_MISSING_ENVIRONMENT


class Regression(BenchmarkError):
    """--compare found throughput below the baseline by more than the tolerance (a CI gate)."""
    exit_code = EXIT_REGRESSION
