"""The reference for sharded LLaMA training: the plainest FSDP2 loop, nothing of the tool's.

    torchrun --nproc-per-node N -m benchmarks.fsdp_tight_loop --model llama3_3b --seq-len 4096 \
        --batch 2 [--compile] [--steps 10 --warmup 4] [--profile DIR] [--json FILE]

Issue 44: the tool's eager `--parallel fsdp` step ran 13-15% slower than this kind of loop.
Only the shapes come from the tool (its preset table); the model is written here the way
torchtitan's Llama 3 is: `nn.RMSNorm`, rotary embeddings on real cos/sin tables in the
activations' dtype, `scaled_dot_product_attention(..., enable_gqa=True)`, SwiGLU; FSDP2's
`fully_shard` on each block and on the root with `MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32)` and no autocast; `torch.utils.checkpoint` around each block (full
activation checkpointing); AdamW (foreach); the loss on FP32 logits as torchtitan takes it;
random tokens. Throughput is on the tool's basis: tokens over the summed time of the timed
steps, each timed with device events, no host synchronisation between them.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils.checkpoint import checkpoint

from microbench.models.llama_config import PRESETS


class Block(nn.Module):
    def __init__(self, c) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        self.attention_norm = nn.RMSNorm(c.hidden_size, eps=c.norm_eps)
        self.wq = nn.Linear(c.hidden_size, c.num_heads * c.head_dim, bias=False)
        self.wk = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=False)
        self.wv = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=False)
        self.wo = nn.Linear(c.num_heads * c.head_dim, c.hidden_size, bias=False)
        self.ffn_norm = nn.RMSNorm(c.hidden_size, eps=c.norm_eps)
        self.w1 = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.w3 = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.w2 = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def _rotate(self, x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        h = self.attention_norm(x)
        q = self.wq(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.wo(out.transpose(1, 2).reshape(b, s, -1))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Model(nn.Module):
    def __init__(self, c, seq_len: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(Block(c) for _ in range(c.num_layers))
        self.norm = nn.RMSNorm(c.hidden_size, eps=c.norm_eps)
        self.output = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        inv_freq = c.rope_theta ** (-torch.arange(0, c.head_dim, 2).double() / c.head_dim)
        angles = torch.outer(torch.arange(seq_len).double(), inv_freq).repeat(1, 2)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)
        self.checkpointed = True

    def forward(self, tokens):
        x = self.embed(tokens)
        cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
        for layer in self.layers:
            x = (checkpoint(layer, x, cos, sin, use_reentrant=False) if self.checkpointed
                 else layer(x, cos, sin))
        return self.output(self.norm(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama3_3b", choices=sorted(PRESETS))
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=2, help="sequences per GPU")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--compile", action="store_true", help="torch.compile each block")
    parser.add_argument("--no-checkpointing", action="store_true")
    parser.add_argument("--profile", metavar="DIR", help="profile 2 steps after the timed ones")
    parser.add_argument("--json", metavar="FILE", help="rank 0 writes its figures here")
    args = parser.parse_args()

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(device)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)

    config = PRESETS[args.model]
    with torch.device("meta"):
        model = Model(config, args.seq_len)
    model.checkpointed = not args.no_checkpointing
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        if args.compile:
            layer.compile()
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    model.to_empty(device=device)
    torch.manual_seed(rank)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.fill_(1.0)
            else:
                nn.init.normal_(param, std=0.02)
        inv_freq = config.rope_theta ** (-torch.arange(0, config.head_dim, 2, device=device)
                                         .double() / config.head_dim)
        angles = torch.outer(torch.arange(args.seq_len, device=device).double(), inv_freq)
        model.cos.copy_(angles.repeat(1, 2).cos())
        model.sin.copy_(angles.repeat(1, 2).sin())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    tokens = torch.randint(config.vocab_size, (args.batch, args.seq_len + 1), device=device)
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step() -> torch.Tensor:
        logits = model(inputs)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(args.steps + 1)]
    events[0].record()
    for i in range(args.steps):
        loss = step()
        events[i + 1].record()
    torch.cuda.synchronize()
    times = [a.elapsed_time(b) / 1000 for a, b in zip(events, events[1:])]
    # The tool's basis: the slowest rank's summed time.
    total = torch.tensor(sum(times), device=device)
    dist.all_reduce(total, op=dist.ReduceOp.MAX)
    tokens_per_gpu = args.batch * args.seq_len * args.steps / total.item()
    figures = {"model": args.model, "gpus": world, "seq_len": args.seq_len, "batch": args.batch,
               "compile": args.compile, "tokens_per_s_per_gpu": tokens_per_gpu,
               "median_step_s": statistics.median(times), "step_s": times,
               "loss": loss.item(), "peak_gib": torch.cuda.max_memory_allocated() / 2**30}
    if args.profile:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(2):
                step()
            torch.cuda.synchronize()
        if rank == 0:
            os.makedirs(args.profile, exist_ok=True)
            table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=40)
            with open(os.path.join(args.profile, "loop_ops.txt"), "w") as handle:
                handle.write(table)
    if rank == 0:
        print(f"tight loop: {args.model} seq {args.seq_len} batch {args.batch} x {world} GPU, "
              f"{'compiled' if args.compile else 'eager'}: {tokens_per_gpu:,.0f} tokens/s per "
              f"GPU (median step {figures['median_step_s'] * 1000:.1f} ms, peak "
              f"{figures['peak_gib']:.1f} GiB)", flush=True)
        if args.json:
            with open(args.json, "w") as handle:
                json.dump(figures, handle, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
