#!/usr/bin/env python3
"""``--precision fp8`` and ``--quantize`` beside tight loops written directly on torchao, in one
job on one GPU (issue 36).

* **FP8 training.** llama_1b, compiled, AMP-BF16 against FP8 (tensorwise and rowwise): this
  tool's CLI beside a loop written directly on torchao's Float8 API (``convert_to_float8_training``
  on the same model, the same layers: every linear but the output head; ``torch.compile``; BF16
  autocast; the tool's SGD). PASS when the tool's FP8 tokens/s is at least 0.97x the loop's and
  its speedup over BF16 is within 3% of the loop's.
* **Quantized decode.** llama_1b generation at batch 1 and 16, BF16 against ``--quantize int8wo``
  and ``int4wo``: the tool's decode tokens/s beside a loop that applies the same torchao config
  with ``quantize_`` and compiles the decode step with CUDA graphs (``reduce-overhead``,
  ``fullgraph``), as gpt-fast does. PASS at 0.97x the loop's.

The tool and the loop run as separate processes, alternated config by config (tool, loop, tool,
loop...). Every tool run prints its accuracy line, which this script copies into its table.
A deadline stops it from starting jobs it cannot finish; those are listed as not run.

    python3 benchmarks/precision_vs_torchao.py OUT --part training --deadline-s 540
    python3 benchmarks/precision_vs_torchao.py OUT --part decode --deadline-s 540
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NETWORK = "llama_1b"
TRAIN = dict(batch=4, seq=1024, iterations=12, warmup=4)
# Three warm-up iterations: reduce-overhead records its CUDA graphs in the first ones, and the
# tool refuses fewer.
DECODE = dict(prompt=128, gen=128, iterations=4, warmup=3)
TRAIN_PRECISIONS = (("amp-bf16", None), ("fp8", "tensorwise"), ("fp8", "rowwise"))
QUANTIZE = ("none", "int8wo", "int4wo")
DECODE_BATCHES = (1, 16)


# ------------------------------------------------------------------ the tight loops (workers)

def _arch(seq: int):
    sys.path.insert(0, str(REPO))
    from microbench.models import registry as models
    return models.resolve(NETWORK, models.ModelOptions(seq_len=seq)).llama_config


def train_worker(recipe: str | None, out: str) -> None:
    """llama_1b training written directly on torchao's Float8 API (recipe None: AMP-BF16)."""
    import torch
    from microbench.models.archs import llama
    torch.manual_seed(0)
    device = torch.device("cuda")
    arch = _arch(TRAIN["seq"])
    model = llama.build(arch, "sdpa").to(device).train()
    if recipe is not None:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe),
                                   module_filter_fn=lambda module, fqn: fqn != "output")
    model = torch.compile(model)
    tokens = torch.randint(0, arch.vocab_size, (TRAIN["batch"], TRAIN["seq"] + 1),
                           device=device)
    inputs, target = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4,
                                foreach=True)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(inputs)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(),
                                                     target.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    losses = [float(step()) for _ in range(TRAIN["warmup"])]
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(TRAIN["iterations"]):
        step()
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3
    tokens_per_s = TRAIN["iterations"] * TRAIN["batch"] * TRAIN["seq"] / seconds
    Path(out).write_text(json.dumps({"tokens_per_s": tokens_per_s, "first_losses": losses}))


def decode_worker(quantize: str, batch: int, out: str) -> None:
    """llama_1b decode, gpt-fast style, with torchao's quantize_ applied directly."""
    import torch
    from microbench.models.archs import llama
    torch.manual_seed(0)
    device = torch.device("cuda")
    arch = _arch(None)
    model = llama.build(arch, "sdpa").to(device).to(torch.bfloat16).eval()
    if quantize != "none":
        from torchao.quantization import (Int4WeightOnlyConfig, Int8WeightOnlyConfig,
                                          quantize_)
        config = (Int8WeightOnlyConfig() if quantize == "int8wo" else
                  Int4WeightOnlyConfig(group_size=128, int4_packing_format="tile_packed_to_4d"))
        quantize_(model, config)
    positions = DECODE["prompt"] + DECODE["gen"] - 1
    cache = model.make_cache(batch, positions, device=device, dtype=torch.bfloat16)
    prompt = torch.randint(0, arch.vocab_size, (batch, DECODE["prompt"]), device=device)
    prefill = torch.compile(lambda p: llama.prefill(model, p, cache), fullgraph=True)
    decode = torch.compile(lambda t, pos: llama.decode_step(model, t, pos, cache),
                           mode="reduce-overhead", fullgraph=True)

    def generate(marks=None):
        with torch.inference_mode():
            token = prefill(prompt).clone()
            position = torch.tensor([DECODE["prompt"]], device=device)
            if marks:
                marks[0].record()
            for _ in range(DECODE["gen"] - 1):
                token = decode(token, position).clone()
                position += 1
            if marks:
                marks[1].record()

    for _ in range(DECODE["warmup"]):
        generate()
    torch.cuda.synchronize()
    decode_s = 0.0
    for _ in range(DECODE["iterations"]):
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        generate(marks)
        torch.cuda.synchronize()
        decode_s += marks[0].elapsed_time(marks[1]) / 1e3
    steps = DECODE["iterations"] * (DECODE["gen"] - 1)
    Path(out).write_text(json.dumps({"decode_tokens_per_s": batch * steps / decode_s}))


# ------------------------------------------------------------------ the driver

def _run(command: list[str], log: Path, timeout: float) -> int:
    timeout = max(timeout, 1.0)
    with log.open("w") as stream:
        try:
            return subprocess.run(command, stdout=stream, stderr=subprocess.STDOUT, cwd=REPO,
                                  timeout=timeout, env=_environment()).returncode
        except subprocess.TimeoutExpired:
            return 124


def _environment() -> dict:
    """This checkout first on the path, beside whatever the caller put there (carried wheels)."""
    paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "PYTHONUNBUFFERED": "1"}


def _tool_train(out: Path, precision: str, recipe: str | None, timeout: float) -> dict:
    name = f"train_{precision}_{recipe or 'none'}"
    command = [sys.executable, "micro_benchmarking_pytorch.py", "--network", NETWORK,
               "--seq-len", str(TRAIN["seq"]), "--batch-size", str(TRAIN["batch"]),
               "--precision", precision, "--compile", "--iterations", str(TRAIN["iterations"]),
               "--warmup", str(TRAIN["warmup"]), "--output-dir", str(out / "tool"),
               "--output-file", name]
    if recipe:
        command += ["--fp8-recipe", recipe]
    return _tool_result(command, out / f"{name}.log", out / "tool" / f"{name}.json", timeout,
                        lambda document: document["throughput"]["tokens_per_s"])


def _tool_decode(out: Path, quantize: str, batch: int, timeout: float) -> dict:
    name = f"decode_{quantize}_b{batch}"
    command = [sys.executable, "micro_benchmarking_pytorch.py", "--network", NETWORK,
               "--mode", "generate", "--precision", "bf16", "--quantize", quantize,
               "--batch-size", str(batch), "--prompt-len", str(DECODE["prompt"]),
               "--gen-len", str(DECODE["gen"]), "--compile-mode", "reduce-overhead",
               "--iterations", str(DECODE["iterations"]), "--warmup", str(DECODE["warmup"]),
               "--output-dir", str(out / "tool"), "--output-file", name]
    return _tool_result(command, out / f"{name}.log", out / "tool" / f"{name}.json", timeout,
                        lambda document: document["generation"]["decode_tokens_per_s"])


def _tool_result(command, log: Path, path: Path, timeout: float, rate) -> dict:
    code = _run(command, log, timeout)
    if code != 0 or not path.exists():
        return {"rate": None, "error": f"exit {code}, see {log.name}"}
    document = json.loads(path.read_text())
    accuracy = document.get("accuracy") or {}
    mbu = ((document.get("generation") or {}).get("mbu"))
    flops = document.get("flops") or {}
    return {"rate": rate(document), "accuracy": accuracy, "mbu": mbu,
            "bytes_read": ((document.get("generation") or {}).get("decode_bandwidth") or {})
            .get("bytes_read"),
            "mfu": flops.get("mfu"), "mfu_bf16": (flops.get("second_peak") or {}).get("mfu"),
            "fp8_share": flops.get("fp8_flops_share"), "notes": document.get("notes", [])}


def _loop(out: Path, args: list[str], name: str, timeout: float) -> dict:
    result = out / f"loop_{name}.json"
    code = _run([sys.executable, __file__, "--worker", *args, str(result)],
                out / f"loop_{name}.log", timeout)
    if code != 0 or not result.exists():
        return {"rate": None, "error": f"exit {code}, see loop_{name}.log"}
    return json.loads(result.read_text())


def _accuracy_text(accuracy: dict) -> str:
    if not accuracy:
        return ""
    if accuracy.get("kind") == "loss":
        return (f"max loss diff {accuracy['max_loss_difference']:.2%}"
                if accuracy.get("max_loss_difference") is not None else accuracy.get("note", ""))
    return (f"logits err {accuracy['relative_error']:.2%}, greedy agree "
            f"{accuracy['top1_agreement']:.1%}")


def training(out: Path, deadline: float, end: float, recipes) -> list[dict]:
    rows = []
    for precision, recipe in TRAIN_PRECISIONS:
        if recipe is not None and recipe not in recipes:
            continue
        if time.monotonic() > deadline:
            rows.append({"precision": precision, "recipe": recipe, "not_run": "deadline"})
            continue
        tool = _tool_train(out, precision, recipe, end - time.monotonic())
        loop = _loop(out, ["train", recipe or "none"], f"train_{recipe or 'bf16'}",
                     end - time.monotonic())
        rows.append({"precision": precision, "recipe": recipe, "tool": tool,
                     "loop": {"rate": loop.get("tokens_per_s"), **loop}})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def decode(out: Path, deadline: float, end: float, batches, quantizers) -> list[dict]:
    rows = []
    for batch in batches:
        for quantize in quantizers:
            if time.monotonic() > deadline:
                rows.append({"quantize": quantize, "batch": batch, "not_run": "deadline"})
                continue
            tool = _tool_decode(out, quantize, batch, end - time.monotonic())
            loop = _loop(out, ["decode", quantize, str(batch)], f"decode_{quantize}_b{batch}",
                         end - time.monotonic())
            rows.append({"quantize": quantize, "batch": batch, "tool": tool,
                         "loop": {"rate": loop.get("decode_tokens_per_s"), **loop}})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def _ratio(a, b):
    return a / b if a and b else None


def report(train_rows: list[dict], decode_rows: list[dict]) -> str:
    lines = []
    if train_rows:
        lines += ["| precision | tool tokens/s | loop tokens/s | tool/loop | tool speedup | "
                  "loop speedup | MFU (FP8 peak / BF16 peak) | FP8 FLOPs | accuracy | verdict |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        base = next((r for r in train_rows if r.get("recipe") is None and "tool" in r), None)
        for row in train_rows:
            label = row["precision"] + (f" {row['recipe']}" if row.get("recipe") else "")
            if "not_run" in row:
                lines.append(f"| {label} | not run ({row['not_run']}) |||||||||")
                continue
            tool, loop = row["tool"], row["loop"]
            ratio = _ratio(tool["rate"], loop["rate"])
            tool_up = _ratio(tool["rate"], base["tool"]["rate"]) if base else None
            loop_up = _ratio(loop["rate"], base["loop"]["rate"]) if base else None
            verdict = ""
            if row.get("recipe") and ratio is not None and tool_up and loop_up:
                ok = ratio >= 0.97 and abs(tool_up / loop_up - 1) <= 0.03
                verdict = "PASS" if ok else "FAIL"
            mfu = (f"{tool.get('mfu') or 0:.1%} / {tool.get('mfu_bf16') or 0:.1%}"
                   if tool.get("mfu_bf16") else (f"{tool['mfu']:.1%}" if tool.get("mfu") else ""))
            share = f"{tool['fp8_share']:.1%}" if tool.get("fp8_share") else ""
            lines.append(f"| {label} | {_num(tool['rate'])} | {_num(loop['rate'])} | "
                         f"{_num(ratio, 3)} | {_num(tool_up, 3)} | {_num(loop_up, 3)} | {mfu} | "
                         f"{share} | {_accuracy_text(tool.get('accuracy'))} | "
                         f"{verdict or tool.get('error') or loop.get('error') or ''} |")
    if decode_rows:
        lines += ["", "| batch | quantize | tool decode tok/s | loop decode tok/s | tool/loop | "
                      "vs BF16 (tool) | MBU | bytes read | accuracy | verdict |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for row in decode_rows:
            if "not_run" in row:
                lines.append(f"| {row['batch']} | {row['quantize']} | not run |||||||")
                continue
            tool, loop = row["tool"], row["loop"]
            base = next((r for r in decode_rows if r.get("batch") == row["batch"]
                         and r.get("quantize") == "none" and "tool" in r), None)
            ratio = _ratio(tool["rate"], loop["rate"])
            speed = _ratio(tool["rate"], base["tool"]["rate"]) if base else None
            verdict = ("PASS" if ratio >= 0.97 else "FAIL") if ratio is not None else \
                (tool.get("error") or loop.get("error") or "")
            mbu = f"{tool['mbu']:.1%}" if tool.get("mbu") else ""
            lines.append(f"| {row['batch']} | {row['quantize']} | {_num(tool['rate'])} | "
                         f"{_num(loop['rate'])} | {_num(ratio, 3)} | {_num(speed, 3)} | {mbu} | "
                         f"{tool.get('bytes_read') or ''} | "
                         f"{_accuracy_text(tool.get('accuracy'))} | {verdict} |")
    return "\n".join(lines)


def _num(value, digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        kind, *rest = sys.argv[2:]
        if kind == "train":
            train_worker(None if rest[0] == "none" else rest[0], rest[1])
        else:
            decode_worker(rest[0], int(rest[1]), rest[2])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--part", choices=("training", "decode", "all"), default="all")
    parser.add_argument("--deadline-s", type=float, default=3600.0,
                        help="start no tool/loop pair after this many seconds")
    parser.add_argument("--end-s", type=float, default=7200.0,
                        help="stop any job still running after this many seconds")
    parser.add_argument("--recipes", default="tensorwise,rowwise")
    parser.add_argument("--batches", default=",".join(map(str, DECODE_BATCHES)))
    parser.add_argument("--quantize", default=",".join(QUANTIZE))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    deadline, end = start + args.deadline_s, start + args.end_s
    train_rows = (training(args.out, deadline, end, args.recipes.split(","))
                  if args.part in ("training", "all") else [])
    decode_rows = (decode(args.out, deadline, end, [int(b) for b in args.batches.split(",")],
                          args.quantize.split(","))
                   if args.part in ("decode", "all") else [])
    text = report(train_rows, decode_rows)
    (args.out / "precision_vs_torchao.md").write_text(text + "\n")
    (args.out / "precision_vs_torchao.json").write_text(json.dumps(
        {"training": train_rows, "decode": decode_rows}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
