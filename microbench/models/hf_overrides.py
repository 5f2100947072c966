"""``--model-kwargs`` of ``hf:<model_type>`` models checked against that model type's config,
before anything is built: one line and exit 2 for a value the config cannot take.

A value is a literal (``ast.literal_eval``, bounded in length: nothing is evaluated, no name is
looked up) or else a bare word. It is checked against the default config of the model type
(``CONFIG_MAPPING[model_type]()``, no download):

* the key must be a setting of the config (an attribute of its default instance, an alias of its
  ``attribute_map``, or an argument of its ``__init__``); a typo gets close matches;
* the value must have the type of the default: an integer where the default is an integer (a bool
  is not), a number where it is a float, True or False where it is a bool, a word where it is a
  string; a list or dict where the default is one, of scalars (the value's length bounds
  their number); anything scalar where the
  default is None;
* numbers are finite and bounded (:data:`MAX_INT`, :data:`MAX_FLOAT`): sizes and counts
  (``hidden_size``, ``num_hidden_layers``, ``intermediate_size``...) are positive, probabilities
  (``*dropout``, ``*_prob``) within [0, 1], epsilons positive;
* an activation (``hidden_act``, ``activation_function``...) must be one transformers knows
  (``transformers.activations.ACT2FN``), never something like ``__import__``.

Example::

    values = checked_overrides(transformers, "llama", {"hidden_size": "256", "hidden_act": "silu"})
    # {"hidden_size": 256, "hidden_act": "silu"}
"""
from __future__ import annotations

import ast
import difflib
import inspect
from typing import Any, Collection
import math
import re
from types import ModuleType

from microbench.platform.errors import UsageError

# Far above any model a device holds (a hidden size of 16 million), far below what would make
# transformers allocate without end; MAX_FLOAT bounds initializer ranges, rope thetas and the like
# (Llama 3's rope_theta is 500,000).
MAX_INT = 2**24
MAX_FLOAT = 1e9
MAX_VALUE_CHARS = 256               # also bounds a list's or dict's items
# JSON/YAML spellings command-line users type; literal_eval only knows True/False/None.
_WORDS = {"true": True, "false": False, "none": None, "null": None}
_WORD = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_SIZE = re.compile(r"(^|_)(size|sizes|layers|heads|experts|positions|embeddings|dim|embd|ctx"
                   r"|layer|head|inner|length|window)$|^(num|n)_")
_PROBABILITY = re.compile(r"(dropout|_prob|pdrop)$")
_EPSILON = re.compile(r"(eps|epsilon)$")
_ACTIVATION = re.compile(r"(^|_)(act|activation|activation_function|hidden_act)$")


def parse_literal(text: str, key: str) -> object:
    """A Python literal when ``text`` is one ("2", "1e-5", "[1, 2]", "True"), else the word."""
    if len(text) > MAX_VALUE_CHARS:
        raise UsageError(f"model argument {key}: the value is {len(text):,} characters long; "
                         f"at most {MAX_VALUE_CHARS}")
    stripped = text.strip()
    if stripped.lower() in _WORDS:
        return _WORDS[stripped.lower()]
    try:
        return ast.literal_eval(stripped)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return stripped


def _known_settings(config_class: type[Any]) -> dict[str, object]:
    """Every setting of ``config_class`` and its default value (None where only the signature
    names it)."""
    defaults = {name: value for name, value in vars(config_class()).items()
                if not name.startswith("_")}
    for name, parameter in inspect.signature(config_class.__init__).parameters.items():
        if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY) \
                and name != "self" and name not in defaults:
            default = parameter.default
            defaults[name] = None if default is inspect.Parameter.empty else default
    for alias, target in getattr(config_class, "attribute_map", {}).items():
        defaults.setdefault(alias, defaults.get(target))
    return defaults


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_number(key: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"model argument {key}={_shown(value)}: must be a finite number")
    limit = MAX_INT if isinstance(value, int) else MAX_FLOAT
    if abs(value) > limit:
        raise UsageError(f"model argument {key}={_shown(value)}: at most {limit:,g} in "
                         f"magnitude")
    if _PROBABILITY.search(key) and not 0 <= value <= 1:
        raise UsageError(f"model argument {key}={value}: a probability, from 0 to 1")
    if (_SIZE.search(key) or _EPSILON.search(key)) and value <= 0:
        raise UsageError(f"model argument {key}={value}: must be positive")


def _check_scalar(key: str, value: object, default: object) -> None:
    """``value`` against the type of ``default`` (any scalar where the default is None)."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise UsageError(f"model argument {key}={_shown(value)}: must be true or false")
    elif isinstance(default, int):
        if value is None and _SIZE.search(key):          # a size the model is built from
            raise UsageError(f"model argument {key}=None: a size or count must be a number")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise UsageError(f"model argument {key}={_shown(value)}: must be an integer "
                             f"(at most {MAX_INT:,})")
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UsageError(f"model argument {key}={_shown(value)}: must be a number")
    elif isinstance(default, str) and not isinstance(value, str):
        raise UsageError(f"model argument {key}={_shown(value)}: must be a word")
    if default is None and not isinstance(value, (bool, int, float, str, type(None))):
        raise UsageError(f"model argument {key}={_shown(value)}: must be a number, a word, "
                         f"true, false or none")
    if isinstance(value, str) and not _WORD.fullmatch(value):
        raise UsageError(f"model argument {key}={_shown(value)}: a word of letters, digits, "
                         f"'_', '.' or '-' is expected")
    _check_number(key, value)


def _check_value(key: str, value: object, default: object, activations: Collection[str]) -> None:
    if _ACTIVATION.search(key) and isinstance(default, str):
        if value not in activations:
            raise UsageError(f"model argument {key}={_shown(value)}: not an activation "
                             f"transformers knows; choose one of {', '.join(sorted(activations))}")
        return
    if isinstance(default, (list, tuple, dict)):
        if not isinstance(value, type(default) if not isinstance(default, tuple) else list):
            raise UsageError(f"model argument {key}={_shown(value)}: must be a "
                             f"{type(default).__name__} literal")
        items = list(value.values()) if isinstance(value, dict) else list(value)
        for item in items + (list(value) if isinstance(value, dict) else []):
            _check_scalar(key, item, None)
        return
    _check_scalar(key, value, default)


def checked_overrides(transformers: ModuleType, model_type: str,
                      raw: dict[str, str]) -> dict[str, object]:
    """The overrides as values the config of ``model_type`` takes; UsageError otherwise."""
    from transformers.activations import ACT2FN
    config_class = transformers.CONFIG_MAPPING[model_type]
    known = _known_settings(config_class)
    values = {}
    for key, text in raw.items():
        if key not in known or key.startswith("_"):
            close = difflib.get_close_matches(key, list(known), n=3)
            hint = f"did you mean {', '.join(close)}?" if close else "see the config's fields"
            raise UsageError(f"model argument {key!r} is not a setting of the {model_type} "
                             f"config ({config_class.__name__}); {hint}")
        value = parse_literal(text, key) if isinstance(text, str) else text
        _check_value(key, value, known[key], ACT2FN)
        values[key] = value
    return values
