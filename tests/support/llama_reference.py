"""Greedy decode loops the tests check the benchmark's decoding against: one with a KV cache
(the same prefill and decode steps the generate scenario times, in a plain loop) and one that
recomputes the whole sequence every step. Test code only: the benchmark's own decode loop is
:mod:`microbench.scenarios.decoding`."""
from __future__ import annotations

import torch

from microbench.models.archs.llama import KVCache, Llama, decode_step, prefill
from microbench.platform.errors import UsageError


def _greedy(logits: torch.Tensor) -> torch.Tensor:
    """argmax of the last position: (batch, 1) token ids (as the benchmark's decode steps)."""
    return logits[:, -1].argmax(dim=-1, keepdim=True)


def _check_lengths(prompt: torch.Tensor, gen_len: int, limit: int) -> None:
    if not (isinstance(gen_len, int) and not isinstance(gen_len, bool) and gen_len > 0):
        raise UsageError(f"the number of tokens to generate must be a positive integer, "
                         f"got {gen_len!r}.")
    # The last generated token is never fed back, so P + gen_len - 1 positions are used.
    needed = prompt.shape[1] + gen_len - 1
    if needed > limit:
        raise UsageError(f"a prompt of {prompt.shape[1]} tokens plus {gen_len} generated needs "
                         f"{needed} positions but only {limit} are available; shorten the prompt "
                         "or generation, or pass a larger --seq-len.")


@torch.no_grad()
def generate(model: Llama, prompt: torch.Tensor, gen_len: int,
             cache: KVCache | None = None) -> torch.Tensor:
    """Greedy generation with a KV cache: (batch, gen_len) new tokens after `prompt` (batch, P)."""
    batch, prompt_len = prompt.shape
    if cache is None:
        cache = model.make_cache(batch, min(prompt_len + gen_len, model.config.max_seq_len),
                                 device=prompt.device)
    if cache.batch != batch:
        raise UsageError(f"the KV cache holds {cache.batch} sequences but the prompt has {batch}; "
                         "allocate the cache with the prompt's batch size.")
    _check_lengths(prompt, gen_len, cache.max_len)
    out = torch.empty(batch, gen_len, dtype=torch.long, device=prompt.device)
    token = prefill(model, prompt, cache)
    out[:, :1] = token
    input_pos = torch.tensor([prompt_len], dtype=torch.long, device=prompt.device)
    for i in range(1, gen_len):
        token = decode_step(model, token, input_pos, cache)
        out[:, i:i + 1] = token
        input_pos += 1   # in place, on the device: no host sync and no new shapes per step
    return out


@torch.no_grad()
def generate_without_cache(model: Llama, prompt: torch.Tensor, gen_len: int) -> torch.Tensor:
    """Greedy generation that recomputes the whole sequence each step."""
    _check_lengths(prompt, gen_len, model.config.max_seq_len)
    tokens = prompt
    for _ in range(gen_len):
        tokens = torch.cat([tokens, _greedy(model(tokens))], dim=1)
    return tokens[:, prompt.shape[1]:]


def hand_count(vocab, hidden, layers, heads, kv_heads, ffn, tied) -> int:
    """Parameter count written out matrix by matrix, independently of parameter_count."""
    head_dim = hidden // heads
    matrices = [
        (vocab, hidden),                    # token embedding
        *[(hidden, heads * head_dim),       # wq
          (hidden, kv_heads * head_dim),    # wk
          (hidden, kv_heads * head_dim),    # wv
          (heads * head_dim, hidden),       # wo
          (hidden, ffn), (hidden, ffn),     # SwiGLU gate and up
          (ffn, hidden)] * layers,          # SwiGLU down
    ]
    if not tied:
        matrices.append((hidden, vocab))    # output head
    vectors = (2 * layers + 1) * hidden     # two RMSNorms per layer and the final one
    return sum(rows * cols for rows, cols in matrices) + vectors
