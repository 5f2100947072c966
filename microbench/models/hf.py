"""Optional Hugging Face architectures, built from a config with random weights (no download).

Any causal language model that `transformers` knows by its `model_type` ("llama", "gpt2",
"mistral", "qwen2", ...) can be benchmarked: the config comes from `AutoConfig.for_model`, with
the user's `key=value` overrides, and the model from `AutoModelForCausalLM.from_config`, which
initialises weights randomly and never touches the network. `transformers` is imported only
here, and only when asked for, so the rest of the benchmark runs without it.

Usage::

    from microbench.models.hf import build_hf_model, hf_max_positions, hf_vocab_size, parse_model_kwargs

    overrides = parse_model_kwargs(["hidden_size=256", "num_hidden_layers=2",
                                    "num_attention_heads=4", "intermediate_size=512"])
    model, config = build_hf_model("llama", overrides)
    tokens = torch.randint(0, hf_vocab_size(config), (2, 64))
    logits = model(tokens).logits              # -> (2, 64, vocab_size)
    print(hf_max_positions(config))            # e.g. 2048, or None when the config sets no limit
"""

from __future__ import annotations

import contextlib
import difflib
import logging
from types import ModuleType

import torch
from torch import nn

from microbench.platform import process
from microbench.platform.errors import UsageError
from microbench.models.hf_overrides import checked_overrides, parse_literal

__all__ = ["build_hf_model", "hf_max_positions", "hf_vocab_size", "parse_model_kwargs",
           "parse_value"]

# Config attributes that hold the longest sequence, in the order different model families use them.
_POSITION_ATTRIBUTES = ("max_position_embeddings", "n_positions", "max_sequence_length",
                        "seq_length", "n_ctx", "max_seq_len")


def parse_value(text: str) -> object:
    """A Python literal when `text` is one ("2", "1e-5", "[1, 2]", "True"), else the string."""
    return parse_literal(text, "value")


def parse_model_kwargs(items: list[str]) -> dict[str, str]:
    """Split `key=value` strings into a dict of raw strings (values parsed later, per key)."""
    kwargs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise UsageError(f"model argument {item!r} is not of the form key=value; write it like "
                             "hidden_size=1024.")
        if key in kwargs:
            raise UsageError(f"model argument {key!r} is given twice; pass each key once.")
        kwargs[key] = value
    return kwargs


def _import_transformers() -> ModuleType:
    """transformers, or one line, exit 4: not installed, or failing inside its own import
    (process.import_optional)."""
    return process.import_optional("transformers", "Hugging Face models (hf:)",
                                   "install it with: pip install transformers")


def _check_model_type(transformers: ModuleType, model_type: str) -> None:
    known = list(transformers.CONFIG_MAPPING.keys())
    if model_type in known:
        return
    close = difflib.get_close_matches(model_type, known, n=5)
    hint = f"did you mean {', '.join(close)}?" if close else "see transformers.CONFIG_MAPPING"
    raise UsageError(f"transformers {transformers.__version__} has no model type {model_type!r}; "
                     f"{hint}")


def build_hf_model(model_type: str, overrides: dict[str, str]) -> tuple[nn.Module, object]:
    """(model, config): a randomly initialised causal LM of `model_type` with config overrides."""
    config = hf_config(model_type, overrides)
    return hf_model(config), config


def hf_config(model_type: str, overrides: dict[str, str]) -> object:
    """The default config of `model_type` with the `key=value` overrides applied (no download),
    each checked against the config first (`microbench.models.hf_overrides`: type, range, names)."""
    transformers = _import_transformers()
    _check_model_type(transformers, model_type)
    kwargs = checked_overrides(transformers, model_type, overrides)   # nothing evaluated
    try:
        return transformers.AutoConfig.for_model(model_type, **kwargs)
    except Exception as error:          # noqa: BLE001 - whatever transformers refuses with
        # Building a config computes nothing heavy: any error it raises is its refusal of the
        # values (TypeError, ValueError, or huggingface_hub's StrictDataclass validation
        # errors, which subclass neither: "hidden size (65) is not a multiple of the number
        # of attention heads (2)"), so it is a usage error of those values, in one line.
        reason = " ".join(str(error).split()) or type(error).__name__
        raise UsageError(f"transformers rejected the {model_type} config overrides {kwargs}: "
                         f"{reason}; fix or drop those model arguments.") from None


# What a model's forward raises on a config its layers cannot run (shapes that do not fit:
# num_key_value_heads=3 beside 4 heads); NotImplementedError (an op with no meta kernel) is
# not among them: that says nothing of the config, and the real run decides.
_CONFIG_FAILURES = (RuntimeError, ValueError, TypeError, IndexError, KeyError, AssertionError)


@contextlib.contextmanager
def _quiet_imports():
    """The model classes' first import (torchao's integration, where it is installed) makes
    torch log a deprecation per enum it registers ("... is an Enum subclass ..."): library
    noise that would turn this check's one-line refusal into three lines."""
    logger = logging.getLogger("torch.utils._pytree")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def check_runs(config: object, overrides: dict[str, str]) -> None:
    """Refuse, before anything is built, overrides that transformers accepts in the config but
    whose model cannot run (``num_key_value_heads=3`` with 4 heads fails in its first
    attention): the model is made on the meta device (no memory, no compute) and given two
    tokens. Only configs with overrides are checked: transformers' own defaults run."""
    if not overrides:
        return
    transformers = _import_transformers()
    model_type = getattr(config, "model_type", "?")
    error = _meta_failure(transformers, config)
    if error is None:
        return
    # Some models cannot run on the meta device at all (a mixture of experts' grouped matmul
    # wants BF16, a hybrid's cache): only a failure the same model without the overrides does
    # not have is the overrides' doing.
    try:
        defaults = transformers.AutoConfig.for_model(model_type, num_hidden_layers=1)
    except Exception:                   # noqa: BLE001 - no default to compare with: say nothing
        return
    if _meta_failure(transformers, defaults) is not None:
        return
    reason = " ".join(str(error).split())[:300] or type(error).__name__
    raise UsageError(f"transformers cannot run the {model_type} model these config overrides "
                     f"make ({', '.join(f'{k}={v}' for k, v in overrides.items())}): {reason}; "
                     f"fix or drop those model arguments.")


def _meta_failure(transformers: ModuleType, config: object) -> BaseException | None:
    """What the model of ``config``, made on the meta device, raises on two tokens (None when
    it runs, or fails only for want of a meta kernel)."""
    try:
        with _quiet_imports(), torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config)
            model(torch.zeros(1, 2, dtype=torch.long))
    except NotImplementedError:
        return None
    except _CONFIG_FAILURES as error:
        return error
    return None


def hf_model(config: object, attention: str | None = None) -> nn.Module:
    """A randomly initialised causal LM for `config`; `attention` is transformers'
    attn_implementation ("eager" or "sdpa"), None for its own default."""
    transformers = _import_transformers()
    model_type = getattr(config, "model_type", "?")
    kwargs = {"attn_implementation": attention} if attention else {}
    try:
        model = transformers.AutoModelForCausalLM.from_config(config, **kwargs)
    except ValueError as error:
        # Raised for model types without a causal-LM head (encoders such as "bert", vision models).
        raise UsageError(f"model type {model_type!r} has no causal language model in transformers "
                         f"{transformers.__version__} ({error}); choose a decoder such as llama, "
                         "gpt2 or mistral.") from error
    return model


def _text_config(config: object) -> object:
    """Multimodal configs keep the language model's fields in a sub-config."""
    get_text_config = getattr(config, "get_text_config", None)
    return get_text_config() if callable(get_text_config) else config


def hf_vocab_size(config: object) -> int:
    """Token ids must be below this."""
    vocab = getattr(_text_config(config), "vocab_size", None) or getattr(config, "vocab_size", None)
    if not isinstance(vocab, int) or vocab <= 0:
        raise UsageError(f"the {type(config).__name__} has no vocab_size; pass one as a model "
                         "argument, e.g. vocab_size=32000.")
    return vocab


def hf_max_positions(config: object) -> int | None:
    """The longest sequence the config allows, or None when it sets no limit."""
    for source in (_text_config(config), config):
        for name in _POSITION_ATTRIBUTES:
            value = getattr(source, name, None)
            if isinstance(value, int) and value > 0:
                return value
    return None
