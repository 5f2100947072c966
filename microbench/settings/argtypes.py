"""Argument types and the parser class both commands share (``microbench``, ``microbench-ops``).

Every flag value is checked here before anything else sees it: integers are bounded, floats are
finite and bounded, lists are comma-separated and non-empty. A usage error is one line and exit 2
(docs/architecture.md, "Errors"). This module imports nothing heavy, so the op bench's command
does not load the model benchmark (torchvision) to parse its flags.

Example::

    parser = OneLineParser(formatter_class=HelpFormatter)
    parser.add_argument("--iterations", type=bounded_int(1, MAX_ITERATIONS), default=20)
"""
from __future__ import annotations

import argparse
import ast
import math
from typing import Any, Callable, NoReturn, Sequence

from microbench.platform.errors import EXIT_USAGE
from microbench.platform import safe_text
from microbench.platform.inputs import printable, text_problem
from microbench.platform.process import env_rank_prefix


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line, exit 2 (docs/architecture.md, "Errors")."""

    def error(self, message: str) -> NoReturn:
        # argparse and the types quote a value as typed ("invalid choice: 'a<LF>b'"): the whole
        # line goes through the one escaping, so a line break or ESC in it is shown, not obeyed.
        line = f"{env_rank_prefix()}{self.prog}: error: {message} (see --help)"
        self.exit(EXIT_USAGE, f"{safe_text.terminal(line)}\n")

# Upper bounds far above any real run; a larger value is a typo, and would reach torch as an
# attempt to allocate petabytes, an integer overflow or a loop that never ends.
MAX_ITERATIONS = 10**7
MAX_WARMUP = 10**6
MAX_BATCH = 2**20
MAX_IMAGE_SIZE = 16384
MAX_SEED = 2**63 - 1                # torch.manual_seed takes 64 bits
MAX_RANKS = 2**20
MAX_DEVICE_INDEX = 1023
MAX_DIST_TIMEOUT_S = 10**7          # 115 days: still a finite timedelta for every backend
# Below a second no rendezvous completes (processes connect over TCP and agree on their
# settings first), so every run would end in a timeout: refused, not accepted as "positive".
MIN_DIST_TIMEOUT_S = 1.0
MAX_BUCKET_CAP_MB = 10**6
MAX_MEMORY_GB = 10**6
MAX_PEAK_TFLOPS = 10**7
MAX_PEAK_BANDWIDTH = 10**7          # GB/s
MAX_PROFILER_STEPS = 10**4
MAX_TRIALS = 1000
MAX_TELEMETRY_MS = 60_000
MAX_SEQ_LEN = 2**20
MAX_VOCAB = 2**24
# The input pipeline's: more loader processes than any host has cores, more batches in flight
# per worker than any memory holds, a generated set larger than a disk's worth.
MAX_WORKERS = 1024
MAX_PREFETCH = 1024
MAX_DATA_IMAGES = 10**7


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high]."""
    def parse(text: str) -> int:
        value = _int(text)
        if not low <= value <= high:
            what = {1: "a positive integer", 0: "zero or more"}.get(low, f"at least {low}")
            raise argparse.ArgumentTypeError(f"must be {what}, at most {high:,}; got {text}")
        return value
    return parse


def finite_float(low: float, high: float, low_inclusive: bool = False) -> Callable[[str], float]:
    """An argparse type, the one check of every float flag: a number (float() also takes 'nan'
    and 'inf', which no flag means), finite, above ``low`` (or equal, if ``low_inclusive``) and
    at most ``high``."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got '{text}'") from None
        above = value >= low if low_inclusive else value > low
        if not (math.isfinite(value) and above and value <= high):
            what = ("zero or more" if low == 0 and low_inclusive else
                    "positive" if low == 0 else f"above {low:g}")
            raise argparse.ArgumentTypeError(f"must be a finite number, {what}, at most "
                                             f"{high:g}; got {text}")
        return value
    return parse


positive_int = bounded_int(1, MAX_BATCH)


def name_list(text: str) -> list[str]:
    """A comma-separated list of non-empty names."""
    parts = [part.strip() for part in text.split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(f"empty name in '{text}'")
    return parts


def positive_ints(text: str) -> list[int]:
    return [positive_int(part) for part in text.split(",")]


def list_of(parse_one: Callable[[str], int]) -> Callable[[str], list[int]]:
    return lambda text: [parse_one(part) for part in text.split(",")]


class Choices:
    """A comma-separated list, each value one of ``allowed`` (what the parser takes, for checks
    against the schema)."""

    def __init__(self, allowed: Sequence[str]) -> None:
        self.allowed = tuple(allowed)

    def __call__(self, text: str) -> list[str]:
        values = name_list(text)
        for value in values:
            if value not in self.allowed:
                raise argparse.ArgumentTypeError(f"invalid choice '{value}' (choose from "
                                                 f"{', '.join(self.allowed)})")
        return values


def choices(allowed: Sequence[str]) -> Choices:
    """A comma-separated list, each value one of ``allowed``."""
    return Choices(allowed)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got '{text}'") from None


class HelpFormatter(argparse.HelpFormatter):
    """Each default shown once, spelled as the user would type it (``64``, ``1,2,2``), and
    none for switches (off unless given) or where the help text already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (default is None or default is False or default == () or default == argparse.SUPPRESS
                or not action.option_strings or "default" in text.lower()):
            return text
        return f"{text} (default: {_as_typed(default)})"


def _as_typed(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(_as_typed(item) for item in value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).replace("%", "%%")



def path_text(text: str) -> str:
    """An argparse type, the one check of every path flag: a name that is valid text. Bytes that
    are not UTF-8 arrive as lone surrogates (PEP 383); such a name could not be printed, stored
    in a result or written as a CSV cell, and the run would be lost at its end, so it is refused
    before anything runs (microbench.platform.inputs.text_problem)."""
    problem = text_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"'{printable(text)}': {problem}")
    return text


# torch.distributed's init methods (init_process_group's init_method): a TCP store at a host and
# port, the launcher's environment variables, or a file on a shared file system.
DIST_URL_SCHEMES = ("tcp", "env", "file")


def dist_url(text: str) -> str:
    """An argparse type for --dist-url: ``tcp://HOST:PORT``, ``env://`` or ``file:///PATH``,
    checked before the run (anything else ends in torch's RuntimeError after the model is
    built)."""
    text = path_text(text)
    scheme, separator, rest = text.partition("://")
    if not separator or scheme not in DIST_URL_SCHEMES:
        raise argparse.ArgumentTypeError(
            f"'{text}': the scheme must be one of tcp://HOST:PORT, env:// or file:///PATH "
            f"(torch.distributed's init methods)")
    if scheme == "tcp":
        address = rest.split("?", 1)[0].split("/", 1)[0]
        host, colon, port = address.rpartition(":")
        if not (colon and host and port.isdigit() and 1 <= int(port) <= 65535):
            raise argparse.ArgumentTypeError(f"'{text}': tcp:// takes HOST:PORT, a port from "
                                             f"1 to 65535 (e.g. tcp://10.0.0.1:29500)")
    if scheme == "file" and not rest.startswith("/"):
        raise argparse.ArgumentTypeError(f"'{text}': file:// takes an absolute path "
                                         f"(file:///shared/rendezvous)")
    return text


def profiler_schedule(text: str) -> tuple[int, int, int]:
    """An argparse type for --profiler-schedule: ``WAIT,WARMUP,ACTIVE`` steps of torch.profiler."""
    try:
        wait, warmup, active = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be WAIT,WARMUP,ACTIVE like 1,2,2, got '{text}'") \
            from None
    if wait < 0 or warmup < 0 or active < 1 or max(wait, warmup, active) > MAX_PROFILER_STEPS:
        raise argparse.ArgumentTypeError(f"needs WAIT >= 0, WARMUP >= 0 and ACTIVE >= 1, each "
                                         f"at most {MAX_PROFILER_STEPS}")
    return wait, warmup, active


def device_ids(text: str) -> tuple[int, ...]:
    """An argparse type for --device_ids: distinct GPU indices, comma-separated."""
    try:
        ids = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated GPU indices like 0,1, "
                                         f"got '{text}'") from None
    if len(set(ids)) != len(ids) or min(ids) < 0 or max(ids) > MAX_DEVICE_INDEX:
        raise argparse.ArgumentTypeError(f"must list distinct non-negative indices, got '{text}'")
    return ids


def zero_or_one(text: str) -> bool:
    """A switch spelled as a value, ``0`` or ``1`` (the older tool's ``--fp16 1`` style)."""
    if text.strip() not in ("0", "1"):
        raise argparse.ArgumentTypeError(f"must be 0 or 1, got '{text}'")
    return text.strip() == "1"


# A strategy's keyword dict (--ddp-options): short, flat, scalar values; its keys and values are
# checked by the strategy that takes them (scenarios/<strategy>.py, its allow-list).
MAX_KEYWORD_DICT_CHARS = 1024


def keyword_dict(text: str) -> dict:
    """An argparse type: a Python dict literal of keyword arguments, ``"{'static_graph': True}"``,
    read by ``ast.literal_eval`` only (never run, as --compileContext is), bounded in length
    before it is parsed; keys are identifiers, values booleans, numbers or short strings
    ('True' and 'False' read as booleans, which the older tool's bool(str) did not)."""
    if len(text) > MAX_KEYWORD_DICT_CHARS:
        raise argparse.ArgumentTypeError(f"is {len(text)} characters long; at most "
                                         f"{MAX_KEYWORD_DICT_CHARS}")
    try:
        value = ast.literal_eval(text.strip()) if text.strip() else {}
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        raise argparse.ArgumentTypeError(f"must be a Python dict literal such as "
                                         f"\"{{'static_graph': True}}\", got: "
                                         f"{printable(text[:200])}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a dict, got {type(value).__name__}")
    read = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise argparse.ArgumentTypeError(f"keys are keyword names, got {key!r}")
        if isinstance(item, str) and item.strip().lower() in ("true", "false"):
            item = item.strip().lower() == "true"
        if not isinstance(item, (bool, int, float, str)) or (
                isinstance(item, str) and len(item) > 64):
            raise argparse.ArgumentTypeError(f"'{key}' takes a boolean, a number or a short "
                                             f"word, got {printable(repr(item)[:80])}")
        read[key] = item
    return read


# A label is a short name shown in tables and chart ticks, not a document.
MAX_LABEL_CHARS = 120


def label_problem(text: str) -> str | None:
    """Why ``text`` is no label (the rule --label and the history's reader share), or None."""
    if not text or len(text) > MAX_LABEL_CHARS or not text.isprintable() or text != text.strip():
        return (f"a label is 1 to {MAX_LABEL_CHARS} printable characters on one line "
                f"(e.g. nightly-2026-11-27)")
    return None


def label_text(text: str) -> str:
    """An argparse type for --label: valid text of one printable line, at most
    :data:`MAX_LABEL_CHARS` characters (it is shown in the history's tables and chart)."""
    text = path_text(text).strip()
    problem = label_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"'{printable(text[:MAX_LABEL_CHARS])}': {problem}")
    return text
