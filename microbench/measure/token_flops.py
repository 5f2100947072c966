"""Training FLOPs per token of a decoder-only transformer on torchtitan's basis, and MFU on it.

The tool's own MFU divides FLOPs counted by PyTorch's FlopCounterMode on the real step
(:mod:`microbench.measure.flops`). LLM training results are usually quoted on an analytic basis instead;
torchtitan's is the one to put a result beside its published numbers. torchtitan
(pytorch/torchtitan, ``torchtitan/models/utils.py``, ``get_dense_model_nparams_and_flops``, which
its Llama 3 model uses) computes, for sequence length T::

    FLOPs per token = 6 x N_matmul + 6 x L x H x (2 x d_head) x T
                    = 6 x N_matmul + 12 x L x H x d_head x T

* ``6 x N_matmul``: a multiply-add is 2 FLOPs, and each weight takes part in one matmul in the
  forward and two in the backward (Kaplan et al., "Scaling Laws for Neural Language Models",
  arXiv:2001.08361, Section 2.1). N_matmul is every parameter (norm gains included, as torchtitan
  counts ``model.parameters()``) except the token embedding, a lookup; a tied embedding stays in,
  since the output head's matmul uses it (torchtitan since May 2026, its PR #3225; it used to
  subtract the embedding in both cases).
* the attention term: per layer, Q K^T and (attention x V) each cost 2 x H x d_head x T FLOPs per
  token in the forward and twice that in the backward. torchtitan writes it ``6 x L x H x
  head_dims x T`` with ``head_dims = 2 x d_head`` (the q/k and v head widths summed), that is 12,
  not 6 as the issue that asked for this module wrote; this module follows torchtitan's code.
  Causal masking is not discounted and FlashAttention's recomputation is not counted (both
  torchtitan's stated convention), nor is activation checkpointing's.

MFU on this basis is FLOPs per token x tokens per second of one device / that device's dense
peak (torchtitan divides its per-GPU tokens/s by the per-GPU bf16 peak). Example::

    flops = llama_flops(llama.PRESETS["llama3_8b"], seq_len=8192)
    print(flops.per_token)                         # 57,914,449,920
    use = TokenUtilization(flops, tokens_per_s=5762.0, peak=peak_choice)
    print(use.mfu)                                 # 0.337 on an H100 SXM (989.5 TFLOP/s)
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from microbench.models.archs.llama import LlamaConfig, parameter_count
from microbench.measure.flops import PeakChoice

BASIS = ("torchtitan: 6 x matmul parameters + 12 x layers x heads x head_dim x sequence length "
         "FLOPs per token")


@dataclass(frozen=True)
class TokenFlops:
    """Training FLOPs of one token on torchtitan's basis, with the numbers they come from."""

    matmul_parameters: int
    num_layers: int
    num_heads: int
    head_dim: int
    seq_len: int

    @property
    def dense(self) -> int:
        return 6 * self.matmul_parameters

    @property
    def attention(self) -> int:
        return 12 * self.num_layers * self.num_heads * self.head_dim * self.seq_len

    @property
    def per_token(self) -> int:
        return self.dense + self.attention

    def to_dict(self) -> dict:
        return {"flops_per_token": self.per_token, "matmul_parameters": self.matmul_parameters,
                "dense_flops_per_token": self.dense, "attention_flops_per_token": self.attention,
                "seq_len": self.seq_len, "basis": BASIS}


def llama_flops(config: LlamaConfig, seq_len: int | None = None) -> TokenFlops:
    """From a LLaMA's shape alone (no model needed); `seq_len` defaults to the config's."""
    embedding = 0 if config.tie_embeddings else config.vocab_size * config.hidden_size
    return TokenFlops(matmul_parameters=parameter_count(config) - embedding,
                      num_layers=config.num_layers, num_heads=config.num_heads,
                      head_dim=config.head_dim, seq_len=seq_len or config.max_seq_len)


def model_flops(model: nn.Module, num_layers: int, num_heads: int, head_dim: int,
                seq_len: int) -> TokenFlops:
    """From a built model's parameters, as torchtitan counts them (any model, e.g. hf: ones).

    Embeddings (every ``nn.Embedding``: token and, where a model has them, learned positions)
    are lookups; an embedding whose weight an ``nn.Linear`` shares (a tied output head) stays
    counted. Works on the meta device and on FSDP's DTensors (their numel is the whole one).
    """
    parameters = sum(p.numel() for p in model.parameters())      # shared ones counted once
    linear_weights = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    lookups = {id(m.weight): m.weight.numel() for m in model.modules()
               if isinstance(m, nn.Embedding) and id(m.weight) not in linear_weights}
    return TokenFlops(matmul_parameters=parameters - sum(lookups.values()),
                      num_layers=num_layers, num_heads=num_heads, head_dim=head_dim,
                      seq_len=seq_len)


@dataclass(frozen=True)
class TokenUtilization:
    """Achieved TFLOP/s and MFU of one device on torchtitan's basis, at `tokens_per_s` of that
    device (the run's headline rate divided by the number of devices)."""

    flops: TokenFlops
    tokens_per_s: float
    peak: PeakChoice

    @property
    def achieved_tflops(self) -> float:
        return self.flops.per_token * self.tokens_per_s / 1e12

    @property
    def mfu(self) -> float | None:
        """None where the peak is unknown (the CPU, an unlisted GPU): never a guess."""
        return self.achieved_tflops / self.peak.tflops if self.peak.tflops else None

    def to_dict(self) -> dict:
        return {**self.flops.to_dict(), "tokens_per_s_per_device": self.tokens_per_s,
                "achieved_tflops": self.achieved_tflops, "peak_tflops": self.peak.tflops,
                "peak_source": self.peak.source, "mfu": self.mfu}
