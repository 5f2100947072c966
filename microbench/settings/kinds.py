"""What the flags alone can tell of each kind of run, and every rule they break alone, below
torch (issue 64: these refusals waited seconds for torch's import, tens on a loaded machine).

A kind of run is its scenario (``scenarios/<mode>.py``); what the flags' rules need of it is a
:class:`Kind`: whether an optimizer steps, whether ``--data loader|folder`` can feed its steps,
whether it decodes tokens. :data:`KINDS` holds the kinds of ``settings/config.MODES`` (each
scenario's class flags are held to its row by ``tests/test_structure.py``), so that the plan
runs :func:`check` before torch is imported; ``scenarios.check`` runs the same rules with the
registered scenario's own flags (a kind registered above, which this table does not know).

The rules, each declared once: a kind's own (:func:`check_kind`: ``--opt-step``,
``--prompt-len``/``--gen-len``; whether a generation fits its model, :meth:`GenerationShape.fitted`,
where the flags tell the model's length), low precision's (:func:`check_low_precision`: FP8 is
training, ``--quantize`` inference and generate, on half-precision weights), the input
pipeline's (``settings/data_settings.check_flags``) and the parallel strategies'
(``settings/strategy_flags.check``).

Example::

    check(config, KINDS[config.mode])       # UsageError (exit 2), one line
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from microbench.platform.errors import UsageError
from microbench.settings import data_settings, strategy_flags
from microbench.settings.config import BenchConfig

# A generation of one token is its prefill alone: the decode loop needs at least one step. The
# prefill makes the first token; every figure of generation but the time to first token
# (inter-token latency, decode tokens/s, MBU, the attribution) is of the decode steps.
MIN_GEN_LEN = 2
# A generation's lengths where --prompt-len/--gen-len are not given (a shorter model: what fits).
DEFAULT_PROMPT_LEN = 128
DEFAULT_GEN_LEN = 128


@dataclass(frozen=True)
class GenerationShape:
    """How long the prompt is and how many tokens each sequence generates."""

    prompt_len: int
    gen_len: int

    @property
    def positions(self) -> int:
        """KV-cache slots used: the last generated token is never fed back."""
        return self.prompt_len + self.gen_len - 1

    @classmethod
    def fitted(cls, prompt_len: int | None, gen_len: int | None, model: str,
               model_positions: int) -> "GenerationShape":
        """The lengths given, or the defaults a model of ``model_positions`` leaves; refused in
        one line where they need more positions than the model has. The plan asks this before
        torch where the flags tell the model's length (a llama preset, or --seq-len), the
        generate scenario for every model."""
        prompt = prompt_len or min(DEFAULT_PROMPT_LEN, model_positions // 2)
        generated = gen_len or min(DEFAULT_GEN_LEN, model_positions - prompt + 1)
        shape = cls(prompt, generated)
        if not gen_len and generated < MIN_GEN_LEN:     # the prompt left no decode step
            needed = cls(prompt, MIN_GEN_LEN).positions
            raise UsageError(f"a {prompt}-token prompt leaves {model}'s {model_positions} "
                             f"positions no room for a decode step: pass --seq-len {needed} "
                             f"or a shorter --prompt-len")
        check_gen_len(generated)        # given, the plan refused it already
        if prompt < 1 or shape.positions > model_positions:
            raise UsageError(f"a {prompt}-token prompt and {generated} generated tokens need "
                             f"{shape.positions} positions, but {model} has "
                             f"{model_positions}: pass --seq-len {shape.positions} or shorter "
                             f"--prompt-len/--gen-len")
        return shape


@dataclass(frozen=True)
class Kind:
    """What the flags' rules need of a kind of run (its scenario's class flags)."""

    mode: str
    updates_weights: bool = False          # an optimizer steps (DDP wraps the model)
    feeds_input_pipeline: bool = False     # --data loader|folder can feed its steps
    decodes_tokens: bool = False           # token by token: --prompt-len and --gen-len


KINDS: dict[str, Kind] = {kind.mode: kind for kind in (
    Kind("training", updates_weights=True, feeds_input_pipeline=True),
    Kind("inference", feeds_input_pipeline=True),
    Kind("generate", decodes_tokens=True))}


def check(config: BenchConfig, kind: Kind,
          strategies: Mapping[str, strategy_flags.StrategyFlags] = strategy_flags.FLAGS) -> None:
    """Every rule of ``config`` that its flags break alone, for its kind of run (one line, exit
    2). ``strategies``: the strategies' flag sides (below torch), or every registered one."""
    check_kind(config, kind)
    data_settings.check_flags(config, kind.mode, kind.feeds_input_pipeline)
    strategy_flags.check(config, kind.updates_weights, strategies)
    check_low_precision(config, kind.updates_weights)


def check_kind(config: BenchConfig, kind: Kind) -> None:
    """Settings that do not apply to this kind of run."""
    if config.opt_step > 1 and not kind.updates_weights:
        raise UsageError("--opt-step applies to training only")
    if (config.prompt_len or config.gen_len) and not kind.decodes_tokens:
        raise UsageError("--prompt-len and --gen-len apply to --mode generate")
    if config.gen_len:
        check_gen_len(config.gen_len)


def check_gen_len(generated: int) -> None:
    """A generation that times decode steps: the one given, or the one a model's length left
    (``scenarios/generate.py``)."""
    if generated < MIN_GEN_LEN:
        raise UsageError(f"--gen-len {generated} generates only the prefill's token: no "
                         f"decode step to time; pass --gen-len {MIN_GEN_LEN} or more (the "
                         f"time to first token is measured in every generation)")


def check_low_precision(config: BenchConfig, updates_weights: bool) -> None:
    """FP8 is training's, quantized weights inference's and generation's, quantized from
    half-precision weights (``steps/low_precision.py`` converts them)."""
    if config.precision == "fp8" and not updates_weights:
        raise UsageError("--precision fp8 is FP8 training (torchao's Float8Linear); for "
                         "inference and generate use --quantize float8dq or float8wo")
    if config.quantize != "none" and updates_weights:
        raise UsageError("--quantize applies to --mode inference and generate; training in FP8 "
                         "is --precision fp8")
    if config.quantize != "none" and config.precision not in ("bf16", "fp16"):
        raise UsageError(f"--quantize quantizes half-precision weights, not "
                         f"--precision {config.precision}: give --precision bf16 (or leave "
                         f"--precision out)")
