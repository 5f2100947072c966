"""Sharded data parallelism with FSDP2 (``torch.distributed.fsdp.fully_shard``).

Every rank holds a 1/world-size shard (dim 0) of each parameter, of its gradient and of its
optimizer state. Before a block runs, its parameters are all-gathered; after its backward, its
gradients are reduce-scattered. So a model whose weights, gradients and AdamW state do not fit
one device trains on several (a Llama 3.1 8B needs about 128 GB for FP32 weights, gradients and
AdamW moments: 64 GB a rank on two). The same engine runs with one process (world size 1), where
it should cost nothing against plain training.

What `shard` does, following the FSDP2 documentation and torchtitan's Llama 3 recipe:

* one FSDP unit per transformer block (`microbench.steps.blocks`), then the root (the embedding, the
  final norm and the output head, grouped);
* ``reshard_after_forward``: a block's gathered parameters are freed after its forward and
  gathered again for its backward (less memory, one more all-gather per block); the root's and
  the last block's stay gathered, since the backward needs them at once (the documentation's
  advice for the root; torchtitan keeps its last block too);
* mixed precision through ``MixedPrecisionPolicy``, from the run's row of
  :mod:`microbench.settings.precision` (`mixed_precision`): ``amp-bf16`` computes with BF16 copies of the
  parameters and reduces gradients in FP32 (or BF16, ``reduce_dtype="bf16"``), while the sharded
  master weights and the optimizer stay FP32; ``fp32`` and ``tf32`` keep FP32 parameters. The
  row's autocast stays on, so the loss runs in FP32 as in a plain ``amp-bf16`` run (the norms
  accumulate in FP32 inside their fused kernel either way); unlike it, the residual stream is
  BF16 (the embedding's output). Autocast over parameters FSDP already cast costs nothing the
  tight loop of ``benchmarks/fsdp_tight_loop.py`` does not pay (issue 44: with the model's
  fused RMSNorm, BF16 rotary embeddings and grouped heads in the attention kernel, the eager
  step ran at 1.02-1.03x that loop with autocast, 1.02x without). The FP16 modes are refused:
  FSDP's FP16 gradients would need a sharded gradient scaler.

The model is built on the meta device, sharded, and only then given memory (`materialize`), so no
rank ever holds the whole model.

Example (under torchrun, or in one process: `process_group` forms a one-rank group)::

    with sharding.process_group(device):
        model = llama.build_on_meta("llama3_8b")
        activation_checkpointing.apply(model, "selective")
        plan = sharding.shard(model, device, precision.lookup("amp-bf16"), name="llama3_8b")
        sharding.materialize(model, device, lambda m: llama.initialize(m, seed=0))
        optimizer = optim.make_optimizer(model.parameters(), "adamw", "auto")
        ...                                       # train as usual: forward, backward, step
        print(plan.describe(), sharding.local_state_bytes(model, optimizer))
"""
from __future__ import annotations

import contextlib
import datetime
import math
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from microbench.steps.blocks import transformer_blocks
from microbench.platform.devices import is_gpu
from microbench.platform.errors import MissingEnvironment, UsageError
from microbench.settings.precision import Precision

M = TypeVar("M", bound=nn.Module)

FLAG = "--parallel fsdp"
REDUCE_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class ShardPlan:
    """How a model was sharded, for the configuration echo and the result."""

    world_size: int
    blocks: int
    reshard_after_forward: bool
    param_dtype: str            # the dtype blocks compute with: "bf16" or "fp32"
    reduce_dtype: str           # the dtype gradients are reduce-scattered in
    # The device mesh fully_shard ran on: (ranks,) shards over every rank; (replicas, shards)
    # shards inside each group of `shards` ranks and replicates across groups (HSDP).
    mesh: tuple[int, ...] = ()
    parallel: str = "fsdp"      # the strategy that sharded: fsdp, or hsdp on a 2-D mesh

    @property
    def shards(self) -> int:
        """Ranks each parameter is split over."""
        return self.mesh[-1] if self.mesh else self.world_size

    def describe(self) -> str:
        reshard = ("freed after forward, gathered again for backward (the last block's kept)"
                   if self.reshard_after_forward else "kept gathered from forward to backward")
        over = (f"{self.world_size} rank{'s' if self.world_size > 1 else ''}"
                if len(self.mesh) < 2 else
                f"{self.world_size} ranks: {mesh_text(self.mesh)}")
        return (f"FSDP2 over {over}: {self.blocks} blocks + root; block parameters {reshard}; "
                f"compute in {self.param_dtype.upper()}, gradients reduced in "
                f"{self.reduce_dtype.upper()}, master weights and optimizer state FP32")

    def to_dict(self) -> dict:
        return {"parallel": self.parallel, "world_size": self.world_size, "blocks": self.blocks,
                "reshard_after_forward": self.reshard_after_forward,
                "param_dtype": self.param_dtype, "reduce_dtype": self.reduce_dtype,
                "mesh_shape": list(self.mesh or (self.world_size,))}


def mesh_text(mesh: Sequence[int]) -> str:
    """'2 replicas x 2 shards' of a hybrid mesh's shape."""
    replicas, shards = mesh
    return (f"{replicas} replica{'s' if replicas > 1 else ''} x {shards} "
            f"shard{'s' if shards > 1 else ''}")


@dataclass(frozen=True)
class StateBytes:
    """What this rank holds of the training state between steps, measured from its tensors."""

    parameters: int             # its shards of the parameters (FP32 master weights)
    optimizer: int              # its shards of the optimizer state (momentum, AdamW moments)

    @property
    def total(self) -> int:
        return self.parameters + self.optimizer

    def to_dict(self) -> dict:
        return {"parameter_bytes": self.parameters, "optimizer_state_bytes": self.optimizer,
                "basis": "this rank's shards, measured from its tensors"}


def _fsdp():
    """FSDP2's public API: torch.distributed.fsdp.fully_shard exists from PyTorch 2.6."""
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:
        raise MissingEnvironment(f"{FLAG} needs PyTorch 2.6 or later (torch.distributed.fsdp."
                                 f"fully_shard); this is {torch.__version__}: upgrade PyTorch "
                                 f"or use --parallel ddp") from None
    return fully_shard, MixedPrecisionPolicy


def mixed_precision(precision: Precision, reduce_dtype: str = "fp32"):
    """FSDP2's MixedPrecisionPolicy for a row of the precision table."""
    _, MixedPrecisionPolicy = _fsdp()
    if reduce_dtype not in REDUCE_DTYPES:
        raise UsageError(f"gradient reduce dtype {reduce_dtype!r}: choose one of "
                         f"{', '.join(REDUCE_DTYPES)}")
    if precision.model_dtype == torch.float16 or precision.autocast_dtype == torch.float16:
        raise UsageError(f"{FLAG} does not run --precision {precision.name}: FP16 gradients need "
                         f"loss scaling, which FSDP's sharded gradients do not get here; use "
                         f"--precision amp-bf16 (or fp32, tf32)")
    if precision.master_weights:
        raise UsageError(f"{FLAG} does not run --precision {precision.name}: its FP32 master "
                         f"weights are not sharded here; use --precision amp-bf16 (FSDP keeps "
                         f"FP32 shards and gathers BF16 parameters)")
    param_dtype = torch.bfloat16 if precision.autocast_dtype == torch.bfloat16 else None
    # cast_forward_inputs=False: a block's floating inputs (RoPE's cos/sin tables) keep their
    # FP32, as in torchtitan; the parameters alone are cast.
    return MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=REDUCE_DTYPES[reduce_dtype],
                                cast_forward_inputs=False)


def shard(model: nn.Module, device: torch.device, precision: Precision, *,
          reshard_after_forward: bool = True, reduce_dtype: str = "fp32",
          name: str = "this model", mesh: tuple[int, ...] | None = None,
          parallel: str = "fsdp", **keywords: object) -> ShardPlan:
    """Apply fully_shard to each transformer block of `model`, then to the root, in place
    (``keywords``: fully_shard's other keywords for each block, --fsdp-options). ``mesh``: the
    device mesh's shape, (world size,) by default; (replicas, shards) is hybrid sharding, FSDP2
    on a 2-D mesh: each parameter sharded over the consecutive ranks of a row (a node, under
    torchrun), replicated down the columns, its gradients reduce-scattered in the row and
    all-reduced down the column (``parallel``: the strategy's name, for the plan).

    Needs a process group (torchrun's, or `process_group`'s one-rank group) and, on a GPU, the
    rank's device set as current. Call it on the plain module: after activation checkpointing,
    before torch.compile; on the meta device, then `materialize`.
    """
    fully_shard, _ = _fsdp()
    if not dist.is_initialized():
        raise RuntimeError("sharding.shard needs a process group: launch with torchrun, or wrap "
                           "the run in sharding.process_group(device)")
    blocks = transformer_blocks(model, name, FLAG)
    policy = mixed_precision(precision, reduce_dtype)
    from torch.distributed.device_mesh import init_device_mesh
    shape = mesh or (dist.get_world_size(),)
    if math.prod(shape) != dist.get_world_size() or len(shape) not in (1, 2):
        raise ValueError(f"a device mesh of {shape} does not hold the "
                         f"{dist.get_world_size()} ranks of this job")
    names = ("shard",) if len(shape) == 1 else ("replicate", "shard")
    device_mesh = init_device_mesh(device.type, shape, mesh_dim_names=names)
    last = len(blocks) - 1
    for index, block in enumerate(blocks):
        # The last block's backward is the first to run, right after the forward (through the
        # root's norm, head and loss): freeing its parameters would only gather them again at
        # once, so it keeps them, as torchtitan's recipe does (the root's stay for the same
        # reason).
        fully_shard(block, mesh=device_mesh, mp_policy=policy,
                    reshard_after_forward=reshard_after_forward and index < last, **keywords)
    fully_shard(model, mesh=device_mesh, mp_policy=policy, reshard_after_forward=False)
    compute = "bf16" if policy.param_dtype == torch.bfloat16 else "fp32"
    return ShardPlan(world_size=dist.get_world_size(), blocks=len(blocks),
                     reshard_after_forward=reshard_after_forward, param_dtype=compute,
                     reduce_dtype=reduce_dtype, mesh=tuple(shape), parallel=parallel)


def materialize(model: M, device: torch.device, initialize: Callable[[M], None]) -> None:
    """Give a model built on the meta device its memory on `device`, then its values.

    After `shard`, each rank allocates only its own shards. ``initialize(model)`` must fill every
    parameter and buffer (``to_empty`` leaves them uninitialised), e.g.
    ``lambda m: llama.initialize(m, seed)``, which also writes sharded parameters correctly.
    """
    model.to_empty(device=device)
    with torch.no_grad():
        initialize(model)


def local_parameter_count(model: nn.Module) -> int:
    """Elements of the parameters this rank holds (its shards, for a sharded model)."""
    return sum(_local(p).numel() for p in model.parameters())


def local_state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
                      ) -> StateBytes:
    """Bytes of parameters and optimizer state this rank holds. The optimizer's state exists
    after its first step (PyTorch creates it lazily), so measure after warm-up."""
    parameters = sum(_nbytes(_local(p)) for p in model.parameters())
    state = 0
    if optimizer is not None:
        state = sum(_nbytes(_local(value)) for per_parameter in optimizer.state.values()
                    for value in per_parameter.values() if isinstance(value, torch.Tensor))
    return StateBytes(parameters=parameters, optimizer=state)


def _local(tensor: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


@contextlib.contextmanager
def process_group(device: torch.device, timeout_s: float = 600.0) -> Iterator[None]:
    """The launcher's process group if one exists; otherwise a one-rank group for the duration
    (in-process store: no port, no rendezvous), so FSDP runs with a single process too."""
    if dist.is_initialized():
        yield
        return
    # NCCL (RCCL on ROCm) is bound to the run's GPU, whichever thread calls it later.
    timeout = datetime.timedelta(seconds=timeout_s)
    if is_gpu(device):
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1,
                                timeout=timeout, device_id=device)
    else:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                                timeout=timeout)
    try:
        yield
    finally:
        dist.destroy_process_group()
