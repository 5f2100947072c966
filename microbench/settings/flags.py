"""A flag as argparse takes it and ``--help`` shows it, declared once (issue 63).

A setting's flag is declared by its field (:func:`microbench.settings.config.setting`: spelling,
type, range, help and group beside its default), a flag of the invocation that sets no field by
its row of ``microbench.plan.cli.PLAN_FLAGS``; both are a :class:`Flag`, and the parser is built
by walking them in :func:`in_help_order`. Nothing here imports torch: ``--help`` answers
without it (issue 45).

Example::

    Flag("--rerun", "model", type=path_text, metavar="RESULT.json", help="repeat the run ...")
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

# --help's sections, in the order it shows them: a flag names its section by key.
GROUPS = {
    "model": "model and workload",
    "timing": "timing",
    "precision": "precision (--precision names the mode; --fp16, --amp, --amp-dtype, "
                 "--amp-opt-level and --tf32 are the older spellings of the same modes)",
    "fast": "the fast path",
    "layout": "memory layout and compilation",
    "device": "device",
    "output": "output",
    "language": "language models (llama_tiny, llama_medium, llama_1b, hf:<model_type>)",
    "data": "Input data (is the GPU waiting for data? --data loader or folder feeds each step "
            "from a DataLoader and measures the loader alone and the model alone beside it)",
    "distributed": "multi-GPU and multi-node (torchrun and srun need none of the manual flags)",
    "sharding": "sharded training (FSDP2), activation checkpointing and the optimizer",
    "profiling": "profiling (never inside the timed statistics: separate passes or excluded "
                 "iterations)",
    "sweeps": "sweeps, capacity and comparisons (lists in --network, --batch-size, --mode, "
              "--precision, --quantize, --seq-len, --attention, --decode and --workers sweep "
              "too)",
}


@dataclass(frozen=True)
class Flag:
    """One flag: ``add_argument``'s words, its --help section (``group``: a key of
    :data:`GROUPS`; None: the parser's own, beside ``-h``) and, where its section lists it out
    of declaration order, the destination it comes ``before``. ``sets``: the config fields a
    flag of the invocation sets (the older precision flags set the precision), which a preset
    must then leave as given."""

    spelling: str
    group: str | None
    help: str
    aliases: tuple[str, ...] = ()
    dest: str | None = None
    default: Any = None
    type: Callable[[str], Any] | None = None
    choices: Sequence[Any] | None = None
    metavar: str | None = None
    nargs: str | None = None
    action: str | None = None
    version: str | None = None
    before: str | None = None
    sets: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.group is not None and self.group not in GROUPS:
            raise ValueError(f"{self.spelling}: no --help section {self.group!r} in GROUPS")

    @property
    def name(self) -> str:
        """Its destination: the one given, else argparse's own from the spelling."""
        return self.dest or self.spelling.lstrip("-").replace("-", "_")

    def add_to(self, container: argparse._ActionsContainer) -> None:
        words = dict(dest=self.name, help=self.help, default=self.default, type=self.type,
                     choices=self.choices, metavar=self.metavar, nargs=self.nargs,
                     action=self.action, version=self.version)
        container.add_argument(self.spelling, *self.aliases,
                               **{key: value for key, value in words.items() if value is not None})


def in_help_order(flags: Iterable[Flag]) -> list[Flag]:
    """``flags`` in the order --help lists them, which is also the order of its usage line:
    section by section (the parser's own first, then :data:`GROUPS`' order), each section in
    declaration order, but a flag with ``before`` just ahead of the flag it names."""
    flags = list(flags)
    ordered = [flag for flag in flags if flag.before is None]
    for flag in flags:
        if flag.before is not None:
            ordered.insert([other.name for other in ordered].index(flag.before), flag)
    place = {group: index for index, group in enumerate((None, *GROUPS))}
    return sorted(ordered, key=lambda flag: place[flag.group])
