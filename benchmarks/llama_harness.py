#!/usr/bin/env python3
"""Two checks of the tool against itself and against a plain loop, in one process on one GPU:

1. **Harness overhead on a transformer.** The tool's own measurement of LLaMA training (exactly
   what the CLI runs, through ``microbench.drivers.benchmark.run``) against a minimal hand-written loop of
   the same model, precision, attention and optimizer, timed the plain way (synchronise,
   perf_counter, N steps, synchronise). Target: tool / loop >= 0.98.
2. **Cost of the phase events.** Training with the forward / backward / optimizer split against
   the same run with ``--no-phases``. Target: under 1% (ratio >= 0.99).

Rounds alternate A/B/A/B so that drift of clocks and temperature hits both sides; each side
reports the median of its rounds.

    python3 -m benchmarks.llama_harness --rounds 3 --output results/llama_harness.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from microbench.drivers import benchmark
from microbench.plan import cli
from microbench.platform import devices, environment
from microbench.models.archs import llama
from microbench.platform import writing
from microbench.plan.spec import resolve
from microbench.output.summary import Summary, trial_of_process

HARNESS = {"llama_tiny": 8, "llama_medium": 16}            # network: batch size
PHASES = {"resnet50": ["--batch-size", "128", "--amp", "--nhwc"],
          "llama_medium": ["--batch-size", "16", "--precision", "amp-bf16"]}


def tool_throughput(argv: list[str], env: dict) -> float:
    plan = cli.to_plan(cli.parse_args([*argv, "--no-files", "--telemetry-interval", "0"]))
    spec = resolve(plan.configs[0])
    result = benchmark.run(spec)
    return Summary(spec, env, [trial_of_process(spec, env, result)]).throughput


def hand_loop_throughput(network: str, batch: int, iterations: int, warmup: int,
                         device: torch.device) -> float:
    """LLaMA training written out as in a notebook: bf16 autocast, SGD, next-token loss."""
    torch.manual_seed(0)
    config = llama.PRESETS[network]
    model = llama.build(config, "sdpa").to(device).train()
    tokens = torch.randint(0, config.vocab_size, (batch, config.max_seq_len + 1), device=device)
    inputs, target = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4,
                                foreach=True)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(inputs)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    devices.synchronize(device)
    start = time.perf_counter()
    for _ in range(iterations):
        step()
    devices.synchronize(device)
    return batch * iterations / (time.perf_counter() - start)


def alternate(a, b, rounds: int, device: torch.device) -> tuple[list[float], list[float]]:
    first, second = [], []
    for _ in range(rounds):
        first.append(a())
        devices.empty_cache(device)
        second.append(b())
        devices.empty_cache(device)
    return first, second


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", default="llama_harness.json")
    parser.add_argument("--device", default="cuda", help="cpu only to check the script")
    parser.add_argument("--networks", default=None, help="comma-separated subset (a CPU check)")
    args = parser.parse_args()
    if args.device != "cpu" and not torch.cuda.is_available():
        print("needs a GPU", file=sys.stderr)
        return 4
    device, _ = devices.select(args.device)
    devices.activate(device)
    env = environment.describe(device)
    timing = ["--iterations", str(args.iterations), "--warmup", str(args.warmup)]
    rows = []
    chosen = set(args.networks.split(",")) if args.networks else None
    for network, batch in HARNESS.items():
        if chosen and network not in chosen:
            continue
        tool_argv = ["--network", network, "--batch-size", str(batch), "--precision", "amp-bf16",
                     "--device", str(device), *timing]
        tool, loop = alternate(lambda: tool_throughput(tool_argv, env),
                               lambda: hand_loop_throughput(network, batch, args.iterations,
                                                            args.warmup, device), args.rounds,
                               device)
        rows.append(report("harness", network, "tool", tool, "hand loop", loop, 0.98))
    for network, flags in PHASES.items():
        if chosen and network not in chosen:
            continue
        argv = ["--network", network, *flags, "--device", str(device), *timing]
        with_phases, without = alternate(lambda: tool_throughput(argv, env),
                                         lambda: tool_throughput([*argv, "--no-phases"], env),
                                         args.rounds, device)
        rows.append(report("phase events", network, "with phases", with_phases, "without",
                           without, 0.99))
    writing.write_json(args.output, {"env": env.to_dict(), "iterations": args.iterations,
                                     "rounds": args.rounds, "rows": rows})
    return 0


def report(check: str, network: str, a_name: str, a: list[float], b_name: str, b: list[float],
           target: float) -> dict:
    ratio = statistics.median(a) / statistics.median(b)
    print(f"{check:<13} {network:<13} {a_name} {statistics.median(a):9.1f}  {b_name} "
          f"{statistics.median(b):9.1f} items/s  ratio {ratio:.3f} (target >= {target})  "
          f"rounds {[round(x, 1) for x in a]} vs {[round(x, 1) for x in b]}", flush=True)
    return {"check": check, "network": network, a_name: a, b_name: b, "ratio": ratio,
            "target": target}


if __name__ == "__main__":
    sys.exit(main())
