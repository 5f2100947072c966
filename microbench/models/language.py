"""The language-model family: LLaMA presets written here and Hugging Face architectures.

A :class:`LanguageModelSpec` is configured for one run like a vision spec (the registry in
:mod:`microbench.models.registry` holds both) and offers the same interface: build the model, make a batch,
take the loss. A batch is ``batch x seq_len`` random token ids; the target is the same sequence
shifted by one token (next-token prediction), so training is the usual causal-LM cross-entropy.
An item is a sequence, and ``tokens_per_item`` turns sequences per second into tokens per second.

* ``llama_tiny``, ``llama_medium``, ``llama_1b``: :mod:`microbench.models.archs.llama` presets;
  ``--seq-len``, ``--vocab-size``, ``--kv-heads`` and ``--attention`` override them.
* ``hf:<model_type>``: the default config of any causal LM that ``transformers`` knows
  (``AutoConfig.for_model``), with ``--model-kwargs key=value ...`` overrides and random weights;
  ``--attention`` may be ``eager`` or ``sdpa`` (transformers' ``attn_implementation``).

Example::

    spec = models.resolve("llama_tiny", ModelOptions(seq_len=256, attention="eager"))
    inputs, target = spec.make_batch(8, device)
    loss = spec.loss(spec.build().to(device)(inputs), target)
"""
from __future__ import annotations

from typing import Any

from dataclasses import dataclass, replace

import torch
from torch import nn

from microbench.models.archs import llama
from microbench.platform.errors import UsageError
from microbench.settings.model_options import ModelOptions
from microbench.models.names import HF_PREFIX

DEFAULT_ATTENTION = "sdpa"
# A Hugging Face config's own context can be 128k tokens; a benchmark's default is a short one.
HF_DEFAULT_SEQ_LEN = 512
HF_ATTENTIONS = ("eager", "sdpa")       # what transformers' attn_implementation takes everywhere


@dataclass(frozen=True)
class LanguageModelSpec:
    """A causal language model and its token inputs, at one sequence length."""

    name: str
    seq_len: int
    vocab_size: int
    attention: str = DEFAULT_ATTENTION
    llama_config: llama.LlamaConfig | None = None     # the LLaMA presets
    hf_type: str | None = None                         # hf:<model_type>
    hf_overrides: tuple[str, ...] = ()

    family = "language"
    reads_tokens = True
    item = "sequence"
    channels_last = None                   # token ids have no memory format to change
    loss_name = "next-token cross-entropy"

    def __reduce__(self):
        # A spawned worker rebuilds the spec from its name and options (configure checks them).
        return _configured, (self.name, ModelOptions(
            seq_len=self.seq_len, vocab_size=self.vocab_size, attention=self.attention,
            kv_heads=self.llama_config.num_kv_heads if self.llama_config else None,
            model_kwargs=self.hf_overrides))

    @property
    def tokens_per_item(self) -> int:
        return self.seq_len

    @property
    def input_size(self) -> int:
        """Tokens per sequence (what --seq-len sets)."""
        return self.seq_len

    @property
    def num_classes(self) -> int:
        return self.vocab_size

    @property
    def can_generate(self) -> bool:
        """--mode generate runs the LLaMA written here (its static KV cache) and hf: decoders
        (transformers' StaticCache; a model type without one is refused when built)."""
        return True

    # ------------------------------------------------------------ configuring

    def configure(self, options: ModelOptions) -> "LanguageModelSpec":
        if options.image_size is not None:
            raise UsageError(f"--image-size applies to vision models; {self.name} reads "
                             f"token sequences: use --seq-len")
        attention = options.attention or DEFAULT_ATTENTION
        if self.llama_config is not None:
            return self._configure_llama(self.llama_config, options, attention)
        return self._configure_hf(options, attention)

    def _configure_llama(self, base: llama.LlamaConfig, options: ModelOptions,
                         attention: str) -> "LanguageModelSpec":
        if options.model_kwargs:
            raise UsageError(f"--model-kwargs applies to hf:<model_type> models; {self.name} "
                             f"takes --seq-len, --vocab-size and --kv-heads")
        if attention not in llama.ATTENTION_IMPLS:
            raise UsageError(f"--attention {attention}: choose one of "
                             f"{', '.join(llama.ATTENTION_IMPLS)}")
        arch = base.with_overrides(options.seq_len, options.vocab_size, options.kv_heads)
        return replace(self, seq_len=arch.max_seq_len, vocab_size=arch.vocab_size,
                       attention=attention, llama_config=arch)

    def _configure_hf(self, options: ModelOptions, attention: str) -> "LanguageModelSpec":
        from microbench.models import hf
        if options.kv_heads is not None:
            raise UsageError("--kv-heads applies to the llama_* presets; for hf: models set "
                             "the config's own field with --model-kwargs (e.g. "
                             "num_key_value_heads=4)")
        if attention not in HF_ATTENTIONS:
            raise UsageError(f"--attention {attention} pins a PyTorch kernel, which only the "
                             f"llama_* presets can do; hf: models take "
                             f"{' or '.join(HF_ATTENTIONS)}")
        overrides = hf.parse_model_kwargs(list(options.model_kwargs))
        if options.vocab_size is not None:
            overrides["vocab_size"] = str(options.vocab_size)
        config = hf.hf_config(self._hf_type(), overrides)       # checks the overrides now
        hf.check_runs(config, overrides)
        limit = hf.hf_max_positions(config)
        seq_len = options.seq_len or min(HF_DEFAULT_SEQ_LEN, limit or HF_DEFAULT_SEQ_LEN)
        if limit is not None and seq_len > limit:
            raise UsageError(f"--seq-len {seq_len} exceeds the {limit} positions of "
                             f"{self.name}'s config; raise max_position_embeddings with "
                             f"--model-kwargs or use a shorter --seq-len")
        return replace(self, seq_len=seq_len, vocab_size=hf.hf_vocab_size(config),
                       attention=attention,
                       hf_overrides=tuple(f"{k}={v}" for k, v in overrides.items()))

    def check(self) -> None:
        """Configured specs are already valid; nothing depends on the batch."""

    def check_attention(self, device: torch.device, dtype: torch.dtype) -> None:
        """Refuse a pinned attention backend that cannot run this model here (exit 2)."""
        if self.llama_config is not None:
            llama.check_attention(self.attention, device, dtype, self.llama_config.head_dim)

    # ------------------------------------------------------------ running

    def build(self) -> nn.Module:
        if self.llama_config is not None:
            return llama.build(self.llama_config, self.attention)
        from microbench.models import hf
        overrides = hf.parse_model_kwargs(list(self.hf_overrides))
        return hf.hf_model(hf.hf_config(self._hf_type(), overrides), self.attention)

    def _hf_type(self) -> str:
        """The hf: model type of a spec that is not a LLaMA preset (every spec is one or the
        other: ``hf_spec`` and ``presets`` make them)."""
        if self.hf_type is None:
            raise ValueError(f"{self.name} is neither a LLaMA preset nor an hf: model")
        return self.hf_type

    def input_shape(self, batch_size: int) -> tuple[int, ...]:
        return (batch_size, self.seq_len)

    def make_batch(self, batch_size: int, device: torch.device, dtype: torch.dtype | None = None,
                   seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids (batch, seq_len) and their next tokens; ``dtype`` does not apply to ids."""
        generator = torch.Generator(device="cpu").manual_seed(seed)
        tokens = torch.randint(0, self.vocab_size, (batch_size, self.seq_len + 1),
                               generator=generator)
        return tokens[:, :-1].contiguous().to(device), tokens[:, 1:].contiguous().to(device)

    def make_prompt(self, batch_size: int, prompt_len: int, device: torch.device,
                    seed: int = 0) -> torch.Tensor:
        generator = torch.Generator(device="cpu").manual_seed(seed)
        return torch.randint(0, self.vocab_size, (batch_size, prompt_len),
                             generator=generator).to(device)

    @staticmethod
    def logits(output: Any) -> torch.Tensor:
        return output.logits if hasattr(output, "logits") else output

    def loss(self, output: Any, target: torch.Tensor) -> torch.Tensor:
        logits = self.logits(output)
        return nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())

    # ------------------------------------------------------------ describing

    def parameter_count(self) -> int | None:
        """Closed form for the LLaMA presets (no model needed); None for hf: models."""
        return llama.parameter_count(self.llama_config) if self.llama_config else None

    def describe(self) -> str:
        if self.llama_config is None:
            return (f"{self.name} (language, transformers {self.hf_type}, sequence "
                    f"{self.seq_len}, vocab {self.vocab_size}, attention {self.attention})")
        arch = self.llama_config
        return (f"{self.name} (language, {arch.num_layers} layers, hidden {arch.hidden_size}, "
                f"{arch.num_heads} heads / {arch.num_kv_heads} kv, sequence {self.seq_len}, "
                f"vocab {self.vocab_size}, attention {self.attention})")



def _configured(name: str, options: ModelOptions) -> LanguageModelSpec:
    base = hf_spec(name[len(HF_PREFIX):]) if name.startswith(HF_PREFIX) else presets()[name]
    return base.configure(options)


def presets() -> dict[str, LanguageModelSpec]:
    return {name: LanguageModelSpec(name, arch.max_seq_len, arch.vocab_size, llama_config=arch)
            for name, arch in llama.PRESETS.items()}


def hf_spec(model_type: str) -> LanguageModelSpec:
    """The unconfigured spec of ``hf:<model_type>`` (configure reads transformers' config)."""
    if not model_type:
        raise UsageError("--network hf: needs a model type, e.g. hf:llama or hf:gpt2")
    return LanguageModelSpec(f"{HF_PREFIX}{model_type}", seq_len=0, vocab_size=0,
                             hf_type=model_type)
