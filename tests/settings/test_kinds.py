"""A generation's lengths and whether they fit the model (settings/kinds.py): the defaults a
model's length leaves, and the refusals, each one line naming what to pass."""
import pytest

from microbench.models import names
from microbench.platform.errors import UsageError
from microbench.settings.kinds import GenerationShape


@pytest.mark.parametrize("prompt, generated, positions, expected", [
    (None, None, 8192, (128, 128)),         # the defaults
    (None, None, 128, (64, 65)),            # a short model: half the prompt, the rest generated
    (500, None, 1000, (500, 128)),
    (None, 10, 128, (64, 10)),
    (100, 29, 128, (100, 29)),              # 128 positions exactly: the last token not fed back
])
def test_the_lengths_given_or_what_the_model_leaves(prompt, generated, positions, expected):
    shape = GenerationShape.fitted(prompt, generated, "m", positions)
    assert (shape.prompt_len, shape.gen_len) == expected
    assert shape.positions <= positions


@pytest.mark.parametrize("prompt, generated, words", [
    (500, 100, "a 500-token prompt and 100 generated tokens need 599 positions, but m has 128: "
               "pass --seq-len 599 or shorter --prompt-len/--gen-len"),
    (100, 30, "need 129 positions"),
    (128, None, "a 128-token prompt leaves m's 128 positions no room for a decode step: pass "
                "--seq-len 129 or a shorter --prompt-len"),
    (300, None, "no room for a decode step: pass --seq-len 301"),
    (None, 1, "--gen-len 1 generates only the prefill's token"),
])
def test_a_generation_the_model_cannot_hold_is_refused_in_one_line(prompt, generated, words):
    with pytest.raises(UsageError) as refused:
        GenerationShape.fitted(prompt, generated, "m", 128)
    assert words in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("network, seq_len, expected", [
    ("llama_tiny", None, ("llama_tiny", 128)),
    ("LLAMA_TINY", 64, ("llama_tiny", 64)),
    ("llama3_8b", None, ("llama3_8b", 8192)),
    ("hf:gpt2", 32, ("hf:gpt2", 32)),
    ("hf:gpt2", None, None),                # its config's to tell, after torch
    ("resnet50", 64, None),                 # not a language model: the scenario says so
])
def test_the_flags_tell_a_language_models_positions_without_torch(network, seq_len, expected):
    assert names.language_positions(network, seq_len) == expected
