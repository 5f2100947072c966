"""Activation checkpointing of a language model's transformer blocks: none, full or selective.

Training keeps the activations of the forward pass for the backward pass; checkpointing keeps
fewer and recomputes the rest during the backward pass, trading compute for memory. Each block
is wrapped with PyTorch's ``checkpoint_wrapper`` (non-reentrant ``torch.utils.checkpoint``):

* ``none``       every activation is kept (no wrapper).
* ``full``       a block keeps only its input; its whole forward is recomputed in the backward.
* ``selective``  per-operator selective checkpointing
                 (``torch.utils.checkpoint.create_selective_checkpoint_contexts``) with the
                 policy torchtitan applies by default (its ``SelectiveAC``, "op" mode): the
                 outputs of the attention kernels (or of the explicit formula's batched
                 matmuls) and of every other projection in a block are kept, and everything
                 else (the other projections, norms, RoPE, SwiGLU's elementwise ops) is
                 recomputed. In a LLaMA block the kept projections are wq, wv, w1 and w2, the
                 recomputed ones wk, wo and w3, in BF16 and in FP8 alike; under FP8 the
                 absolute maxima its scales come from are kept too, as torchtitan keeps them.

Recomputation is not useful work: MFU keeps the model's FLOPs, as torchtitan does, so
checkpointing shows as a lower MFU at the same batch (or as a larger batch that fits). FLOPs
counted by running the step (``flops.count_iteration_flops``) on a checkpointed model include the
recomputation, so count them before `apply`. Apply it to the plain module, before FSDP's
``fully_shard``, ``torch.compile`` or DDP.

Example::

    wrapped = apply(model, "selective", name="llama_tiny")    # -> the number of blocks wrapped
"""
from __future__ import annotations

import functools

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from microbench.steps.blocks import transformer_blocks
from microbench.platform.errors import UsageError

MODES = ("none", "full", "selective")

FLAG = "--activation-checkpointing"


def apply(model: nn.Module, mode: str, name: str = "this model") -> int:
    """Wrap every transformer block of `model` in place for `mode`; the number wrapped."""
    if mode not in MODES:
        raise UsageError(f"{FLAG} {mode!r}: choose one of {', '.join(MODES)}")
    if mode == "none":
        return 0
    blocks = transformer_blocks(model, name, f"{FLAG} {mode}")
    _stop_caching_keys_and_values(model)
    for index, block in enumerate(blocks):
        blocks.replace(index, checkpoint_wrapper(block) if mode == "full"
                       else checkpoint_wrapper(block, context_fn=_selective_contexts))
    return len(blocks)


def _stop_caching_keys_and_values(model: nn.Module) -> None:
    """A Hugging Face model fills a KV cache in every forward by default, training included; a
    recomputed block would append to it again and differ from its forward (checkpointing raises).
    transformers itself turns the cache off when its own gradient checkpointing is on."""
    config = getattr(model, "config", None)
    if config is not None and getattr(config, "use_cache", False):
        config.use_cache = False


def _ops(*names: str) -> frozenset:
    """The default overloads of the aten ops this PyTorch has among `names`."""
    found = (getattr(torch.ops.aten, name, None) for name in names)
    return frozenset(op.default for op in found if op is not None)


# Attention kernels: the most expensive ops of a block to recompute, so always kept.
_ATTENTION = _ops("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                  "_scaled_dot_product_cudnn_attention",
                  "_scaled_dot_product_flash_attention_for_cpu",
                  "_scaled_dot_product_fused_attention_overrideable")
# Batched matmuls (the explicit attention formula, "eager"): kept too, as torchtitan keeps every
# compute-intensive op (its list comes from the compiler's partitioner) but the projections.
_BATCHED_MATMULS = _ops("bmm", "baddbmm")
# The projections: every other one is kept (the first, third, ...), the others recomputed.
# torchao's FP8 layers reach the policy as mm on its Float8 tensors (the policy sees an op
# before a tensor subclass turns it into _scaled_mm), so FP8 keeps the same ones as BF16.
_PROJECTIONS = _ops("mm", "addmm", "linear")
# The absolute maxima FP8 scales are computed from (torchao's tensorwise amax): kept, as
# torchtitan keeps them, so the recomputation neither reduces again nor rescales differently.
_SCALE_MAXIMA = _ops("max")


def _selective_contexts():
    """A fresh policy per checkpointed call: projections are counted within one call, once in
    the forward and once in the recomputation, so both make the same choice for the same op."""
    return create_selective_checkpoint_contexts(functools.partial(_policy, {False: 0, True: 0}))


def _policy(projections_seen: dict, ctx, op, *args, **kwargs) -> CheckpointPolicy:
    if op in _PROJECTIONS:
        projections_seen[ctx.is_recompute] += 1
        keep = projections_seen[ctx.is_recompute] % 2 == 1
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE
    if op in _ATTENTION or op in _BATCHED_MATMULS or op in _SCALE_MAXIMA:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE
