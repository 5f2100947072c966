"""Command line -> a :class:`~microbench.settings.config.Plan` of frozen BenchConfigs.

Flags keep the older tool's spellings (``--batch-size``, ``--fp16 1``, ``--compileContext``,
``--distributed_dataparallel``...) beside kebab-case aliases. Every flag is declared once: a
setting's by its field (:mod:`microbench.settings.config`: spelling, destination, default, type,
range, help and --help section), a flag of the invocation that is no setting by its row of
:data:`PLAN_FLAGS`; :func:`build_parser` only walks the two, so ``to_config``, ``--rerun`` and the
preset read the declaration the parser was built from. Argv is parsed once (:func:`parse_args`).
Validation happens here, so a bad value fails before any model is built: one line on stderr,
exit 2.
"""
from __future__ import annotations

import argparse
import itertools
import math
import os
import shlex
import sys
from dataclasses import asdict, replace
from typing import Any, Iterable, Sequence

from microbench import __version__
from microbench.models import names
from microbench.settings import identity, kinds, mesh
from microbench.settings.precision import from_older_flags, lookup
from microbench.plan import rerun
from microbench.settings.argtypes import (MAX_BATCH, MAX_MEMORY_GB, HelpFormatter,
                                          OneLineParser, bounded_int, choices, finite_float,
                                          path_text)
from microbench.settings.compile_options import COMPILE_MODES, parse_compile_context
from microbench.settings.config import (AB_ROUNDS, DERIVED, INVERSE, SCHEMA, VALUE, ABPlan,
                                        BenchConfig, Plan, as_command_line, field_of_dest,
                                        measured_fields, replayed_fields, spelled, sweep_axes,
                                        validate)
from microbench.settings.flags import GROUPS, Flag, in_help_order
from microbench.platform import gpu_presence
from microbench.platform.errors import UsageError

# The terms --help and the summaries use, explained on one page (issue 56: jargon before any
# explanation); each is an anchor of docs/glossary.md (tests/plan/test_cli.py checks).
GLOSSARY_TERMS = ("MFU", "MBU", "TTFT", "ITL", "CV", "p90", "prediction interval",
                  "confidence interval", "inductor", "gloo", "NCCL", "AMP", "TF32",
                  "channels-last", "CUDA graphs", "DDP", "FSDP")
EPILOG = (f"Terms ({', '.join(GLOSSARY_TERMS)}): docs/glossary.md. Every flag by purpose: "
          f"docs/flags.md. Exit codes: docs/guarantees.md.")
DESCRIPTION = ("Benchmark PyTorch training and inference of a model on a GPU (ROCm or CUDA) or "
               "the CPU: warm-up apart, device-event timing, every sample kept.")

# The flags of an invocation that are no setting (a setting's flag is its field's, in
# settings/config.py): what it asks besides the runs (--version, --list-networks), where its
# settings come from (--rerun), the older precision spellings and --compile-mode that become
# settings (``sets``), and the plan's sweeps, capacity search and comparisons. --help lists
# each in its section after the settings', unless it names the flag it comes ``before``.
PLAN_FLAGS = (
    Flag("--version", None, action="version", version=f"%(prog)s {__version__}",
         help="show program's version number and exit"),
    Flag("--list-networks", "model", action="store_true", before="batch_size",
         help="print the model names and exit"),
    Flag("--rerun", "model", type=path_text, metavar="RESULT.json",
         help="repeat the run a result file stores: its configuration, as flags, with the flags "
              "given here added or replacing them (output locations and the launch are this "
              "invocation's)"),
    Flag("--fp16", "precision", type=int, choices=(0, 1), default=0, before="tf32",
         sets=("precision",),
         help="1: whole network in FP16 (norm layers FP32) with FP32 master weights"),
    Flag("--amp", "precision", action="store_true", before="tf32", sets=("precision",),
         help="automatic mixed precision: autocast (+ gradient scaling for fp16)"),
    Flag("--amp-dtype", "precision", choices=("fp16", "bf16"), default="fp16", before="tf32",
         sets=("precision",),
         help="autocast type for --amp; bf16 needs no gradient scaling"),
    Flag("--amp-opt-level", "precision", type=int, choices=(0, 1, 2, 3), before="tf32",
         sets=("precision",),
         help="older APEX level, mapped: 0 fp32, 1 --amp, 2 and 3 --fp16 1"),
    Flag("--compile-mode", "sweeps", type=choices(COMPILE_MODES), metavar="M[,M]",
         sets=("compile", "compile_options"),
         help="compile modes to run: none, default, reduce-overhead, max-autotune, "
              "max-autotune-no-cudagraphs"),
    Flag("--find-max-batch", "sweeps", action="store_true",
         help="find the largest batch that fits (doubling, then bisecting), and benchmark it"),
    Flag("--memory-budget-gb", "sweeps", type=finite_float(0, MAX_MEMORY_GB), metavar="GB",
         help="with --find-max-batch: on a GPU, cap PyTorch's allocator as if the GPU had only "
              "this much memory; on the CPU (where it is required), the process's peak "
              "resident memory"),
    Flag("--max-batch-limit", "sweeps", type=bounded_int(1, MAX_BATCH),
         default=Plan.max_batch_limit, metavar="N",
         help="with --find-max-batch: stop growing at this batch"),
    Flag("--batch-granularity", "sweeps", type=bounded_int(1, MAX_BATCH),
         default=Plan.batch_granularity, metavar="N",
         help="with --find-max-batch: stop bisecting at a multiple of N (1: the exact largest "
              "batch, at the cost of more probes)"),
    Flag("--compare", "sweeps", type=path_text, metavar="BASELINE.json",
         help="compare with a result of the same configuration (both sides' trials where they "
              "have them); exit 5 when throughput dropped beyond --tolerance and "
              "significantly; a failed gate never replaces the baseline"),
    Flag("--tolerance", "sweeps", type=finite_float(0, 100, low_inclusive=True),
         default=Plan.tolerance_pct, metavar="PCT",
         help="the smallest throughput change that matters to --compare and --ab, in percent "
              "(0 to 100; default: 5): a regression is a drop beyond it whose 95%% interval "
              "excludes no change; within it on the whole interval is 'same within N%%'"),
    Flag("--ab", "sweeps", metavar="FLAGS",
         help=f"A/B: run this command (A) and the same command with FLAGS added or replacing "
              f"(B), alternating A B A B for --repeat rounds (default: {AB_ROUNDS}), each "
              f"trial a fresh process; prints the ratio B/A, its 95%% interval and faster, "
              f"slower or no difference detected (e.g. --ab \"--nhwc\")"),
    Flag("--fail-if", "sweeps", choices=("slower", "never"),
         help="exit 5 when --ab finds B slower, or when --compare finds a significant "
              "regression (slower: the default of --compare; never: report only; --ab reports "
              "only unless given)"),
    Flag("--compare-any-config", "sweeps", action="store_true",
         help="compare with a baseline of another configuration anyway (refused otherwise), "
              "printing what differs"),
    Flag("--plot", "sweeps", type=path_text, metavar="FILE.png",
         help="plot a sweep: throughput and memory against batch size, or bars per "
              "configuration; the suffix names the format (png, svg, pdf...)"),
)


def build_parser() -> argparse.ArgumentParser:
    """The parser, walking the declarations: every setting's flag and :data:`PLAN_FLAGS`, each
    added to its --help section in the order --help lists them."""
    parser = OneLineParser(description=DESCRIPTION, epilog=EPILOG,
                           formatter_class=HelpFormatter)
    sections: dict[str | None, Any] = {None: parser, **{key: parser.add_argument_group(title)
                                                        for key, title in GROUPS.items()}}
    declared = [item.as_flag() for item in SCHEMA.values()]
    for flag in in_help_order([*filter(None, declared), *PLAN_FLAGS]):
        flag.add_to(sections[flag.group])
    return parser


def _check(config: BenchConfig) -> BenchConfig:
    """Rules that hold for every configuration, swept or not, read from the flags alone."""
    validate(config)
    return config


def _check_kinds(configs: Sequence[BenchConfig]) -> None:
    """The rules of each configuration's kind of run, its input data, strategy and precision,
    from the flags alone: first below torch (``settings/kinds.py``, for the kinds it knows), so
    that a refused combination answers without torch and torchvision (seconds, tens on a
    loaded machine: issues 45 and 64); then, once every rule has passed, through the registered
    scenarios and strategies (microbench.scenarios imports torch), which adds the rules of a
    kind or strategy registered above."""
    for config in configs:
        kind = kinds.KINDS.get(config.mode)
        if kind is not None:
            kinds.check(config, kind)
            _check_generation_fits(config, kind)
    from microbench import scenarios
    for config in configs:
        scenarios.check(config)


def _check_generation_fits(config: BenchConfig, kind: kinds.Kind) -> None:
    """A prompt and generation longer than the model's positions, where the flags tell them (a
    llama preset, --seq-len): refused here, before torch (issue 64), in the generate
    scenario's words; the scenario checks every model again once built."""
    model = names.language_positions(config.network, config.seq_len) \
        if kind.decodes_tokens else None
    if model is not None:
        kinds.GenerationShape.fitted(config.prompt_len, config.gen_len, *model)


def _refuse_fp8_on_cpu(configs: Sequence[BenchConfig]) -> None:
    """--precision fp8 training with --device cpu: steps.low_precision.check refuses it after
    the device probe (and any device the flags do not name), here before torch's import (issue
    64: 30 s on a loaded machine for this one line). The other kinds of run refuse FP8 from the
    flags alone (use --quantize), the line to show first (scenarios' rules)."""
    for config in configs:
        if config.precision == "fp8" and config.mode == "training" and \
                config.device.partition(":")[0] == "cpu":
            raise UsageError(FP8_ON_CPU)


FP8_ON_CPU = ("--precision fp8 needs FP8 matrix units, and the CPU has no FP8 matrix units: use "
              "--precision amp-bf16 here")


def refuse_fp8_without_gpu(args: argparse.Namespace) -> None:
    """FP8 training on --device auto where the installed torch can see no GPU, refused before
    its import (:mod:`~microbench.platform.gpu_presence`). Apart from :func:`to_plan`, which
    reads the flags alone: the entry point calls this first; elsewhere the device probe
    refuses it. Every FP8 configuration comes from --precision (no older flag or preset
    chooses it), and a sweep's training rows from --mode."""
    if "fp8" in (args.precision or ()) and "training" in args.mode and \
            args.device == "auto" and gpu_presence.none_visible():
        raise UsageError(FP8_ON_CPU)


def _from_args(args: argparse.Namespace) -> dict:
    """Every field the command line sets directly, by its schema (derived fields excluded)."""
    values = {}
    for name, item in SCHEMA.items():
        if item.kind == DERIVED:
            continue
        value = getattr(args, item.dest)
        if item.axis and item.kind == VALUE:
            value = value[0] if value else None
        elif item.kind == INVERSE:
            value = not value
        elif isinstance(value, list):
            value = tuple(value)
        values[name] = value
    return values


def to_config(args: argparse.Namespace) -> BenchConfig:
    """The configuration of a single run (the first value of any list flag), every rule checked."""
    config = _config(args)
    _check_kinds([config])
    return config


def _config(args: argparse.Namespace) -> BenchConfig:
    """:func:`to_config` without its kind of run's rules (those import torch)."""
    names.check(args.network)          # a typo refused before torch is imported
    compile_options, compile_notes = parse_compile_context(args.compile_context)
    if args.compile_context and not args.compile:
        raise UsageError("--compileContext needs --compile")
    for name in ("output_file", "csv_file", "output_dir", "plot", "profiler_output"):
        value = getattr(args, name)
        if value is not None and not value.strip():
            raise UsageError(f"--{name.replace('_', '-')} must not be empty")
    if args.output_file is not None:
        _check_file_name(args.output_file)
    precision, precision_notes = _precision(args)
    if any(name != "none" for name in args.quantize) and not args.precision \
            and precision == "fp32" and "precision" not in args.explicit:
        # Quantization starts from BF16 weights (torchao's and gpt-fast's baseline), and so
        # does the unquantized row of a --quantize sweep.
        precision = "bf16"
        precision_notes = [*precision_notes, "--quantize quantizes BF16 weights: --precision "
                                             "bf16 chosen (give --precision to choose another)"]
    config = BenchConfig(
        **_from_args(args), precision=precision, tf32=bool(args.tf32),
        compile_options=compile_options, explicit=tuple(sorted(args.explicit)),
        notes=tuple(args.spelling_notes + precision_notes + compile_notes))
    if args.rerun is not None:
        # What runs: the stored settings with the flags given now in their place.
        effective = as_command_line(spelled(config, replayed_fields()))
        config = replace(config, notes=(f"--rerun {args.rerun} runs: {effective}",
                                        *args.rerun_notes, *config.notes))
    return _check(config)


def _check_file_name(name: str) -> None:
    """--output-file is a name inside --output-dir: results stay where the user said they go
    (a name like ../../x.json or /etc/x would write elsewhere)."""
    separators = {"/", "\\", os.sep} | ({os.altsep} if os.altsep else set())
    if any(sep in name for sep in separators) or name in (".", "..") or os.path.isabs(name):
        raise UsageError(f"--output-file {name!r} must be a file name, not a path: put the "
                         f"directory in --output-dir")
    if "\0" in name:
        raise UsageError("--output-file must not hold a NUL character")


def _precision(args: argparse.Namespace) -> tuple[str, list[str]]:
    """The precision mode of the first configuration: --precision, else the older flags."""
    if args.precision:
        if args.fp16 or args.amp or args.tf32 or args.amp_opt_level is not None:
            raise UsageError("--precision replaces --fp16, --amp, --tf32 and --amp-opt-level: "
                             "use one or the other")
        return lookup(args.precision[0]).name, []
    return from_older_flags(args.fp16, args.amp, args.amp_dtype,
                                            args.amp_opt_level, bool(args.tf32))


# Far above any sweep a person means to run in one invocation (each configuration builds its
# model and runs warm-up and timing); a list of 20,000 batch sizes is a mistake.
MAX_SWEEP_CONFIGURATIONS = 1000


def _sweep_values(args: argparse.Namespace) -> list[dict]:
    """One dict of changes per configuration: the product of the sweep axes' lists, in the
    order the schema nests them (network outermost, the batch size innermost)."""
    if args.compile_mode and (args.compile or args.compile_context):
        raise UsageError("--compile-mode replaces --compile and --compileContext: use one")
    axes = [_axis_changes(args, name) for name in sweep_axes()]
    count = math.prod(len(axis) for axis in axes)
    if count > MAX_SWEEP_CONFIGURATIONS:        # first: the lists as typed are the mistake
        raise UsageError(f"the lists given make a sweep of {count:,} configurations, more than "
                         f"the {MAX_SWEEP_CONFIGURATIONS:,} one invocation runs: split it into "
                         f"several invocations")
    for name, axis in zip(sweep_axes(), axes):
        _refuse_repeated_value(args, name, axis)
    return [{key: value for part in combination for key, value in part.items()}
            for combination in itertools.product(*axes)]


def _refuse_repeated_value(args: argparse.Namespace, name: str, axis: list[dict]) -> None:
    """A list that names one value twice (``--batch-size 8,8``, ``--precision amp,amp-fp16``)
    would run one configuration twice as two rows: refused here, before torch is imported. A
    model named by its name and by an alias is the runner's to find (the model resolved)."""
    if all(change not in axis[:index] for index, change in enumerate(axis)):
        return
    # compile's list is --compile-mode's (a plan-level flag), every other axis its own flag's.
    flag, dest = (("--compile-mode", "compile_mode") if name == "compile"
                  else (SCHEMA[name].flag, SCHEMA[name].dest))
    given = ",".join(map(str, getattr(args, dest)))
    raise UsageError(f"the sweep lists one configuration twice ({flag} {given}); give each "
                     f"value once (--repeat N measures one configuration N times)")


def _axis_changes(args: argparse.Namespace, name: str) -> list[dict]:
    """The changes one sweep axis makes, one per value of its list (None: not given)."""
    if name == "precision":
        return [_precision_change(value) for value in args.precision or [None]]
    if name == "compile":
        return [_compile_change(mode) for mode in args.compile_mode or [None]]
    return [{name: value} for value in getattr(args, SCHEMA[name].dest) or [None]]


def _precision_change(name: str | None) -> dict:
    if name is None:
        return {}
    row = lookup(name)
    return dict(precision=row.name, tf32=row.tf32)


def _compile_change(mode: str | None) -> dict:
    if mode is None:
        return {}
    return dict(compile=mode != "none",
                compile_options={} if mode in ("none", "default") else {"mode": mode})


def to_plan(args: argparse.Namespace) -> Plan:
    """The plan of this invocation; every rule that the flags alone decide is checked before
    torch is imported (:func:`_check_kinds` comes last)."""
    base = _config(args)
    configs = tuple(_check(replace(base, **change)) for change in _sweep_values(args))
    if args.ab is not None and "repeat" not in args.explicit:
        configs = tuple(replace(config, repeat=AB_ROUNDS) for config in configs)
    plan = _checked_plan(args, base, configs)
    b_configs = [plan.ab.config] if plan.ab is not None else []
    _refuse_fp8_on_cpu([*configs, *b_configs])
    _refuse_uneven_mesh([*configs, *b_configs])
    _check_kinds([base, *configs, *b_configs])
    return plan


def _refuse_uneven_mesh(configs: Sequence[BenchConfig]) -> None:
    """--parallel hsdp over a world size its shard group does not divide, refused from the
    launcher's variables before torch's import (issue 62; resolve refuses the manual launch's,
    whose world is known only there). A training run's: under another mode --parallel is
    refused on its own."""
    for config in configs:
        if config.mode == "training":
            mesh.refuse_before_torch(config, os.environ)


def _checked_plan(args: argparse.Namespace, base: BenchConfig,
                  configs: tuple[BenchConfig, ...]) -> Plan:
    """The plan, with the rules between its flags checked."""
    plan = Plan(configs=configs, find_max_batch=args.find_max_batch,
                memory_budget_gb=args.memory_budget_gb, max_batch_limit=args.max_batch_limit,
                batch_granularity=args.batch_granularity,
                compare=args.compare, tolerance_pct=args.tolerance,
                compare_any_config=args.compare_any_config, plot=args.plot,
                ab=_ab_plan(args, configs), fail_if=args.fail_if)
    if plan.is_sweep and args.output_file:
        raise UsageError("--output-file names one file, but a sweep writes one result per "
                         "configuration: drop it")
    if (plan.is_sweep or args.find_max_batch) and base.max_noise_pct is not None:
        raise UsageError("--max-noise takes one configuration, not a sweep or --find-max-batch")
    if args.fail_if and not (args.compare or args.ab is not None):
        raise UsageError("--fail-if goes with --compare or --ab")
    if args.compare_any_config and not args.compare:
        raise UsageError("--compare-any-config goes with --compare")
    if plan.is_sweep and (args.compare or args.find_max_batch):
        raise UsageError("--compare and --find-max-batch take one configuration, not a sweep")
    if args.memory_budget_gb is not None and not args.find_max_batch:
        raise UsageError("--memory-budget-gb goes with --find-max-batch")
    if args.plot and not plan.is_sweep:
        raise UsageError("--plot draws a sweep, and this is one configuration: give a list to "
                         "--batch-size, --network, --mode, --precision, --compile-mode or "
                         "--workers")
    return plan


# ---------------------------------------------------------------- parsing argv, once

class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


def _given(parser: argparse.ArgumentParser, words: Sequence[str]) -> dict[str, Any]:
    """The destinations ``words`` set, parsed with every check: a namespace whose every
    destination starts unset keeps argparse from filling in defaults, so what is set was given."""
    defaults = vars(parser.parse_args([]))
    namespace = argparse.Namespace(**{dest: _UNSET for dest in defaults})
    parsed = vars(parser.parse_args(list(words), namespace=namespace))
    return {dest: value for dest, value in parsed.items() if value is not _UNSET}


def _fields_given(dests: Iterable[str]) -> set[str]:
    """The config fields the given destinations set (a preset must not overrule them)."""
    sets = {flag.name: flag.sets for flag in PLAN_FLAGS}
    fields = set()
    for dest in dests:
        fields |= set(sets.get(dest, ()))
        if (field := field_of_dest(dest)) is not None:
            fields.add(field)
    return fields


# The destinations B may not set (each run of --ab repeats them, or they name A's files).
_AB_REFUSED = frozenset({"ab", "compare", "repeat", "rerun", "output_file"})


def _ab_plan(args: argparse.Namespace, configs: tuple[BenchConfig, ...]):
    """--ab's B: the same command line with FLAGS added or replacing, parsed as A's was."""
    if args.ab is None:
        return None
    try:
        words = shlex.split(args.ab)
    except ValueError as error:                  # an unclosed quote: "'--nhwc"
        raise UsageError(f"--ab {args.ab!r}: cannot split it into flags ({error}); quote B's "
                         f"flags as one word, e.g. --ab \"--batch-size 128\"") from None
    if not words:
        raise UsageError("--ab needs the flags that make B, e.g. --ab \"--nhwc\"")
    if len(configs) > 1 or args.compare or args.find_max_batch or args.output_file:
        raise UsageError("--ab takes one configuration: no sweep, --compare, "
                         "--find-max-batch or --output-file")
    _refuse_abbreviations(words, args.ab)
    if _AB_REFUSED & set(_given(build_parser(), words)):
        raise UsageError(f"--ab {args.ab!r}: B may not change --repeat, --rerun, --compare, "
                         f"--output-file or --ab")
    b_args = parse_args([*args.argv, *words])
    changes = _sweep_values(b_args)
    if len(changes) > 1:
        raise UsageError(f"--ab {args.ab!r} makes B a sweep: give one value")
    b_config = _check(replace(_config(b_args), **changes[0], repeat=configs[0].repeat))
    if replace(b_config, explicit=(), notes=()) == replace(configs[0], explicit=(), notes=()):
        raise UsageError(f"--ab {args.ab!r} changes no setting: B would be A")
    if _measured(b_config) == _measured(configs[0]):
        unused = "; ".join(f"{SCHEMA[name].flag} acts only with {under}"
                           for name, under in identity.without_effect(asdict(b_config)))
        raise UsageError(f"--ab {args.ab!r} changes nothing that is measured "
                         f"({unused or 'only where results go or how they are shown'}): "
                         f"B would be A")
    if configs[0].max_noise_pct is not None:
        raise UsageError("--ab measures --repeat rounds: drop --max-noise")
    return ABPlan(args.ab, b_config, fail_if_slower=args.fail_if == "slower")


def _measured(config: BenchConfig) -> dict:
    """The settings of ``config`` that change what is measured: an output flag (--quiet,
    --csv-file, --no-files), a denominator (--peak-tflops) or a setting that takes no effect
    here (--fp8-recipe without --precision fp8: identity.ONLY_UNDER) makes no B."""
    used = identity.took_effect(asdict(config))
    return {name: used[name] for name in measured_fields()}


def _refuse_abbreviations(words: list[str], flags: str) -> None:
    """B's flags spelled whole: argparse would take ``--output-d X`` for ``--output-dir X`` (or
    ``--rer`` for ``--rerun``), and B would run as something its author did not write; inside
    --ab a word that only starts a flag's name is refused, naming the flags it could be."""
    known = build_parser()._option_string_actions
    for word in words:
        flag = word.partition("=")[0]
        if not flag.startswith("--") or flag == "--" or flag in known:
            continue
        candidates = sorted(name for name in known if name.startswith(flag))
        if candidates:
            raise UsageError(f"--ab {flags!r}: {flag} is not a flag (abbreviations are not "
                             f"taken inside --ab): spell it whole, e.g. "
                             f"{', '.join(candidates[:3])}")


def _joined_ab(argv: list[str]) -> list[str]:
    """``--ab --nhwc`` as ``--ab=--nhwc``: argparse would read B's flags as this command's."""
    joined, words = [], iter(argv)
    for word in words:
        if word == "--ab":
            following = next(words, None)
            joined.append("--ab" if following is None else f"--ab={following}")
        else:
            joined.append(word)
    return joined


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse argv once: the defaults, under the flags a --rerun result stores, under the flags
    given now. ``args.explicit`` holds the config fields given (stored or typed)."""
    argv = _joined_ab(sys.argv[1:] if argv is None else list(argv))
    without_ab = [word for word in argv if not word.startswith("--ab=") and word != "--ab"]
    argv, spelling_notes = _own_spellings(argv)
    parser = build_parser()
    given = _given(parser, argv)
    stored: dict = {}
    notes: list[str] = []
    if given.get("rerun") is not None:
        path = given["rerun"]
        words, notes = rerun.flags_of(path)
        stored = _given(parser, words)
        stored.pop("rerun", None)
    args = argparse.Namespace(**{**vars(parser.parse_args([])), **stored, **given})
    args.explicit = _fields_given({*stored, *given})
    args.rerun_notes, args.spelling_notes = notes, spelling_notes
    args.argv = without_ab             # --ab parses B from these and its own flags
    return args


# timm's benchmark.py spellings that users type from habit: flag -> (our flag, value map).
TIMM_SPELLINGS = {
    "-m": ("--network", {}),
    "-b": ("--batch-size", {}),
    "--num-bench-iter": ("--iterations", {}),
    "--bench": ("--mode", {"train": "training", "inference": "inference"}),
    "--precision": ("--precision", {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}),
}


def _own_spellings(argv: list[str]) -> tuple[list[str], list[str]]:
    """argv with timm's spellings replaced by this tool's own, and a note for each, so that
    what ran is shown in the flags this tool documents."""
    words, notes, index = [], [], 0
    while index < len(argv):
        word = argv[index]
        flag, equals, given = word.partition("=")
        if flag in TIMM_SPELLINGS and (equals or index + 1 < len(argv)):
            ours, values = TIMM_SPELLINGS[flag]
            if not equals:
                index, given = index + 1, argv[index + 1]
            # A list (a sweep's "bfloat16,fp32") is read value by value.
            value = ",".join(values.get(part, part) for part in given.split(","))
            words += [ours, value]
            if (flag, given) != (ours, value):      # our own flag with our own values: no note
                notes.append(f"{flag} {given} is timm's spelling: read as {ours} {value}")
        else:
            words.append(word)
        index += 1
    return words, notes
