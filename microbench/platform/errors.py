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
EXIT_FLAGGED = 6                # microbench-node: a GPU or a link flagged (the check itself ran)
EXIT_HANGUP = 129               # 128 + SIGHUP: the terminal or the SSH session went away
EXIT_INTERRUPTED = 130          # 128 + SIGINT, what shells report for Ctrl-C
EXIT_QUIT = 131                 # 128 + SIGQUIT, Ctrl-\ at a terminal
EXIT_TERMINATED = 143           # 128 + SIGTERM, what SLURM and Kubernetes send
# The codes of expected failures, each reported by one line where it happened.
EXPECTED_EXIT_CODES = (EXIT_USAGE, EXIT_OUT_OF_MEMORY, EXIT_MISSING_ENVIRONMENT, EXIT_REGRESSION,
                       EXIT_HANGUP, EXIT_INTERRUPTED, EXIT_QUIT, EXIT_TERMINATED)


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


class CannotWrite(MissingEnvironment):
    """A result file could not be written after the run (disk full, quota, file-size limit, a
    permission changed under us): the environment lacks what the run needs, so exit 4. The
    previous file is left as it was."""


class Regression(BenchmarkError):
    """--compare found throughput below the baseline by more than the tolerance (a CI gate)."""
    exit_code = EXIT_REGRESSION


class DistributedFailure(BenchmarkError):
    """Another rank died, or rendezvous or a collective timed out: not a bug of this process,
    so one line (what happened, what to check) instead of a traceback; exit 1."""
    exit_code = EXIT_UNEXPECTED


class ReportedFailure(BenchmarkError):
    """A failure reported with the exit code of the failure it stands for."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code

    def __reduce__(self):                # picklable, for the manual launch's spawned workers
        return type(self), (str(self), self.exit_code)


class SweepFailed(ReportedFailure):
    """Every row of a sweep failed; the exit code is that of the first row's failure."""


class RankFailed(ReportedFailure):
    """Another rank found a problem before the run; every rank exits with its code."""


class Terminated(BaseException):
    """SIGTERM (or SIGHUP, SIGQUIT: ``signal_name``), raised like KeyboardInterrupt so that
    ``finally`` blocks run and temporary files go; a BaseException so that no ``except
    Exception`` (a sweep's row) swallows it. ``exit_code`` is the shell's 128 + the signal."""

    def __init__(self, signal_name: str = "SIGTERM", exit_code: int = EXIT_TERMINATED):
        super().__init__(signal_name, exit_code)
        self.signal_name, self.exit_code = signal_name, exit_code
