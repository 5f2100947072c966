#!/usr/bin/env python3
"""Does the harness add anything measurable? The tool's measurement against a hand-written loop.

For each configuration, in one process on one GPU, this runs the tool's own code path
(``microbench.drivers.benchmark.run``, exactly what the CLI runs) and a minimal loop written out by hand
that does the same work: same model, precision, layout and optimizer, timed the plain way
(synchronise, perf_counter, N steps, synchronise). Rounds alternate tool and loop so clock and
temperature drift hit both; the median throughput of each side gives the ratio tool / loop.
A ratio of 1.00 means the harness costs nothing; the target is >= 0.98.

    python3 -m benchmarks.harness_overhead --batch-size 128 --iterations 30 --rounds 3 \
        --output harness.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torchvision

import fp16util
from microbench.drivers import benchmark
from microbench.plan import cli
from microbench.platform import devices, environment
from microbench.settings import precision as precision_mod
from microbench.plan.spec import resolve
from microbench.output.summary import Summary, trial_of_process

CONFIGS = {
    "fp32": [],
    "amp": ["--amp"],
    "fp16": ["--fp16", "1"],
    "amp+nhwc": ["--amp", "--nhwc"],
    "amp+nhwc+compile": ["--amp", "--nhwc", "--compile"],
}


def tool_throughput(flags: list[str], mode: str, batch: int, iterations: int, warmup: int,
                    device: torch.device, env: dict) -> float:
    plan = cli.to_plan(cli.parse_args(
        ["--network", "resnet50", "--mode", mode, "--batch-size", str(batch), "--iterations",
         str(iterations), "--warmup", str(warmup), "--no-files", "--device", str(device),
         *flags]))
    spec = resolve(plan.configs[0])
    return Summary(spec, env, [trial_of_process(spec, env, benchmark.run(spec))]).throughput


def hand_loop_throughput(flags: list[str], mode: str, batch: int, iterations: int, warmup: int,
                         device: torch.device) -> float:
    """The same work written out plainly, as a user would in a notebook."""
    fp16, amp, nhwc, compiled = "--fp16" in flags, "--amp" in flags, "--nhwc" in flags, \
        "--compile" in flags
    precision_mod.apply_tf32(False)                        # the tool's default: IEEE FP32
    torch.manual_seed(0)
    model = torchvision.models.resnet50().to(device)
    x = torch.randn(batch, 3, 224, 224, device=device)
    y = torch.randint(0, 1000, (batch,), device=device)
    if fp16:
        fp16util.network_to_half(model)
        x = x.half()
    if nhwc:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    model.train(mode == "training")
    run = torch.compile(model) if compiled else model
    sgd = lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4)
    if fp16:
        master = fp16util.MasterWeightOptimizer(model, sgd)
    else:
        optimizer = sgd(model.parameters())
        scaler = torch.amp.GradScaler("cuda", enabled=amp)

    def train_step():
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = torch.nn.functional.cross_entropy(run(x), y)
        if fp16:
            master.backward(loss)
            master.step()
            master.zero_grad()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)

    def infer_step():
        with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            run(x)

    step = train_step if mode == "training" else infer_step
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iterations):
        step()
    torch.cuda.synchronize()
    return batch * iterations / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--modes", default="training,inference")
    parser.add_argument("--output", default="harness_overhead.json")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("needs a GPU", file=sys.stderr)
        return 4
    device, _ = devices.select("cuda")
    devices.activate(device)
    env = environment.describe(device)
    rows = []
    for mode in args.modes.split(","):
        for name in args.configs.split(","):
            flags = CONFIGS[name]
            tool, loop = [], []
            for _ in range(args.rounds):
                tool.append(tool_throughput(flags, mode, args.batch_size, args.iterations,
                                            args.warmup, device, env))
                loop.append(hand_loop_throughput(flags, mode, args.batch_size, args.iterations,
                                                 args.warmup, device))
                torch.cuda.empty_cache()
            row = {"mode": mode, "config": name, "tool_img_s": tool, "loop_img_s": loop,
                   "ratio": statistics.median(tool) / statistics.median(loop)}
            rows.append(row)
            print(f"{mode:<10} {name:<18} tool {statistics.median(tool):9.1f} img/s  "
                  f"loop {statistics.median(loop):9.1f} img/s  ratio {row['ratio']:.3f}",
                  flush=True)
    Path(args.output).write_text(json.dumps({"env": env.to_dict(), "batch_size": args.batch_size,
                                             "iterations": args.iterations, "rounds": args.rounds,
                                             "rows": rows}, indent=2))
    worst = min(row["ratio"] for row in rows)
    print(f"worst ratio {worst:.3f} (target >= 0.98)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
