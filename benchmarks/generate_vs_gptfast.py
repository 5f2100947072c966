"""This tool's `--mode generate` beside gpt-fast's own model, in one job on one GPU.

gpt-fast (pytorch-labs/gpt-fast) is the reference for how fast a compiled PyTorch decoder can
generate: BF16 weights, a static KV cache held in module buffers, and the one-token decode step
compiled on its own with CUDA graphs (``mode="reduce-overhead"``, ``fullgraph=True``). This
script drives gpt-fast's ``model.py`` (from a checkout whose path you give; nothing of it is
copied here) with a small timing harness written for this comparison, and runs this tool's CLI on
the same shape, alternating the two sides round by round so that drift of a shared, noisy
machine falls on both.

Shape: llama_1b (hidden 2048, 22 layers, 32 heads, 4 kv heads, FFN 5632, vocabulary 32000),
random weights, prompt 128 tokens, 128 generated tokens (one from the prefill, 127 decode steps),
greedy (argmax) on both sides.

Usage (on a GPU machine, logs and JSON under OUT)::

    python3 benchmarks/generate_vs_gptfast.py OUT /path/to/gpt-fast --batches 1,16 --rounds 3

It prints, per batch size and compile setting, the median over rounds of each side's decode
tokens/s, inter-token latency p50 and time to first token, the ratio of this tool to gpt-fast,
and the weight bandwidth (BF16 weight bytes / inter-token latency) each side reaches; then each
side's profiled decode step (kernel time, gaps, kernels per step, time by class: the same
microbench.measure.attribution on both sides); then PASS/FAIL for issue 34's targets (tokens/s
>= 1.00x and ITL p50 no higher at each batch, MBU >= 45% at batch 1, the attribution within 5%
of the measured step, hf:llama within 10% of llama_1b with --hf). gpt-fast runs with its
generate.py recipe by default (--recipe model.py: its model compiled plainly); --warm compiles
every side at once first so that the timed rounds start from warm caches. A side that fails is
recorded as failed with its log; the others go on.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHAPE = dict(vocab_size=32000, n_layer=22, n_head=32, n_local_heads=4, dim=2048,
             intermediate_size=5632, block_size=2048, rope_base=10000.0, norm_eps=1e-5)
PROMPT, GENERATED = 128, 128


# ------------------------------------------------------------------ the gpt-fast side (a worker)

def apply_gptfast_recipe() -> None:
    """The compiler settings gpt-fast's generate.py makes at import (commit 32971d3, lines
    25-28): coordinate-descent tuning (inductor then writes one-row matrix products as tuned
    reductions) and unique kernel names (which the attribution reads). Its decode loop also
    pins SDPA to the math backend so that inductor writes the attention itself
    (``decode_context``)."""
    import torch._inductor.config as inductor
    inductor.coordinate_descent_tuning = True
    inductor.triton.unique_kernel_names = True


def decode_context(recipe: bool):
    import contextlib
    if not recipe:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel(SDPBackend.MATH)


def gptfast_worker(checkout: str, batch: int, compiled: bool, generations: int,
                   result_path: str, recipe: bool = True) -> None:
    """Time ``generations`` greedy generations with gpt-fast's Transformer (with its
    generate.py's compiler recipe unless ``recipe`` is off), profile 32 decode steps after
    them (microbench.attribution, as this tool's generate runs do); write a JSON. Under
    the recipe the prefill runs eagerly, as generate.py's default (compile_prefill off)."""
    import torch
    sys.path.insert(0, checkout)
    sys.path.insert(0, str(REPO))
    from model import ModelArgs, Transformer       # gpt-fast's own model.py
    from microbench.measure import attribution
    if recipe and compiled:
        apply_gptfast_recipe()
    compile_prefill = compiled and not recipe    # generate.py compiles it only if asked

    device = torch.device("cuda")
    torch.manual_seed(0)
    with torch.device(device):
        model = Transformer(ModelArgs(**SHAPE))
    model = model.to(dtype=torch.bfloat16).eval()
    with torch.device(device):
        model.setup_caches(max_batch_size=batch, max_seq_length=PROMPT + GENERATED)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())

    def prefill(tokens, positions):
        return model(tokens, positions)[:, -1].argmax(-1, keepdim=True).to(torch.int)

    def decode_step(token, position):
        return model(token, position)[:, -1].argmax(-1, keepdim=True).to(torch.int)

    if compiled:
        decode_step = torch.compile(decode_step, mode="reduce-overhead", fullgraph=True)
        if compile_prefill:
            prefill = torch.compile(prefill, fullgraph=True)

    prompt = torch.randint(0, SHAPE["vocab_size"], (batch, PROMPT), device=device)

    def generate():
        """One generation; returns CUDA events: start, after prefill, after each decode step."""
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(GENERATED + 1)]
        with torch.inference_mode():
            marks[0].record()
            token = prefill(prompt, torch.arange(PROMPT, device=device)).clone()
            marks[1].record()
            position = torch.tensor([PROMPT], device=device, dtype=torch.int)
            with decode_context(recipe):
                for step in range(GENERATED - 1):
                    token = decode_step(token, position).clone()
                    position += 1                    # advanced on the device, no host sync
                    marks[step + 2].record()
        return marks

    profiled = {}

    def profiled_prefill():
        # Inside inference mode, as in generate(): a position tensor made outside it failed
        # the compiled step's guards, which recompiled and re-tuned inside the profiled pass.
        with torch.inference_mode():
            profiled["token"] = prefill(prompt, torch.arange(PROMPT, device=device)).clone()
            profiled["position"] = torch.tensor([PROMPT], device=device, dtype=torch.int)

    def profiled_step():
        with torch.inference_mode(), decode_context(recipe):
            profiled["token"] = decode_step(profiled["token"], profiled["position"]).clone()
            profiled["position"] += 1

    started = time.perf_counter()
    for _ in range(3):                                # compile, capture, settle
        generate()
    torch.cuda.synchronize()
    warmup_s = time.perf_counter() - started
    ttft, itl = [], []
    for _ in range(generations):
        marks = generate()
        torch.cuda.synchronize()
        ttft.append(marks[0].elapsed_time(marks[1]))
        itl.extend(marks[i].elapsed_time(marks[i + 1]) for i in range(1, GENERATED))
    decode_s = sum(itl) / 1e3
    profile = attribution.profile_steps(profiled_step, 32, device, before=profiled_prefill)
    found = attribution.attribute(profile, measured_step_ms=statistics.mean(itl))
    Path(result_path).write_text(json.dumps({
        "recipe": "generate.py" if recipe and compiled else "model.py only",
        "attribution": found.to_dict() if found else None,
        "side": "gpt-fast", "batch": batch, "compiled": compiled, "warmup_s": warmup_s,
        "weight_bytes": weight_bytes, "ttft_ms": statistics.median(ttft),
        "itl_p50_ms": statistics.median(itl),
        "decode_tokens_per_s": batch * len(itl) / decode_s,
        "device": torch.cuda.get_device_name(), "torch": torch.__version__}))


# ---------------------------------------------------------------------------- this tool's side

# transformers' LlamaForCausalLM at the llama_1b shape (random weights), for --hf.
HF_LLAMA_1B = ("--network", "hf:llama", "--seq-len", "2048", "--model-kwargs", "vocab_size=32000",
               "hidden_size=2048", "intermediate_size=5632", "num_hidden_layers=22",
               "num_attention_heads=32", "num_key_value_heads=4", "max_position_embeddings=2048",
               "rms_norm_eps=1e-05", "tie_word_embeddings=False")   # RoPE theta: 10000, default


def tool_command(batch: int, compiled: bool, preset: bool, out_dir: Path,
                 extra: tuple[str, ...] = (), network: tuple[str, ...] = ("--network",
                                                                          "llama_1b"),
                 iterations: int = 10) -> list[str]:
    command = [sys.executable, str(REPO / "micro_benchmarking_pytorch.py"), *extra,
               *network, "--mode", "generate", "--batch-size", str(batch),
               "--prompt-len", str(PROMPT), "--gen-len", str(GENERATED),
               "--iterations", str(iterations), "--output-dir", str(out_dir)]
    if preset:
        return command + ["--preset", "fast"]
    command += ["--precision", "bf16"]
    if compiled:
        command += ["--compile", "--compileContext", "{'mode': 'reduce-overhead'}"]
    return command


def read_tool_result(out_dir: Path) -> dict:
    documents = [json.loads(path.read_text()) for path in sorted(out_dir.glob("*.json"))]
    document = next(d for d in documents if "generation" in d)
    generation = document["generation"]
    return {"side": "tool", "ttft_ms": generation["time_to_first_token"]["stats"]["median_ms"],
            "itl_p50_ms": generation["inter_token_latency"]["stats"]["median_ms"],
            "decode_tokens_per_s": generation["decode_tokens_per_s"],
            "bandwidth": generation.get("decode_bandwidth"), "compiler": document.get("compiler"),
            "mbu": generation.get("mbu"), "attribution": generation.get("decode_attribution")}


# ----------------------------------------------------------------------------------- the driver

def run_side(label: str, command: list[str], log_dir: Path, timeout: float) -> bool:
    log = log_dir / f"{label}.log"
    with log.open("w") as sink:
        sink.write("$ " + " ".join(command) + "\n")
        sink.flush()
        try:
            done = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, cwd=REPO,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            sink.write(f"\n[timed out after {timeout:.0f} s]\n")
            return False
    return done.returncode == 0


def one_round(args, round_index: int, batch: int, compiled: bool, results: dict) -> None:
    key = f"b{batch} {'compiled' if compiled else 'eager'}"
    sides = results.setdefault(key, {"tool": [], "gpt-fast": []})
    tag = f"r{round_index}_b{batch}_{'compiled' if compiled else 'eager'}"
    tool_dir = args.out / f"tool_{tag}"
    tool_dir.mkdir(parents=True, exist_ok=True)
    if run_side(f"tool_{tag}", tool_command(batch, compiled, False, tool_dir,
                                            tuple(args.tool_args.split())), args.out, args.timeout):
        sides["tool"].append(read_tool_result(tool_dir))
    else:
        sides["tool"].append({"failed": True})
    result_path = args.out / f"gptfast_{tag}.json"
    command = [sys.executable, __file__, "--worker", str(args.gptfast), str(batch),
               str(int(compiled)), str(args.generations), str(result_path), args.recipe]
    if run_side(f"gptfast_{tag}", command, args.out, args.timeout):
        sides["gpt-fast"].append(json.loads(result_path.read_text()))
    else:
        sides["gpt-fast"].append({"failed": True})


def warm_caches(args, batches: list[int]) -> None:
    """Every side once, all at the same time, nothing recorded: compilation is CPU work, and
    inductor's caches let the timed rounds after it start in seconds instead of minutes."""
    warm = args.out / "warm"
    warm.mkdir(parents=True, exist_ok=True)
    commands = {}
    for batch in batches:
        commands[f"tool_b{batch}"] = tool_command(batch, True, False, warm / f"tool_b{batch}",
                                                  tuple(args.tool_args.split()), iterations=1)
        commands[f"gptfast_b{batch}"] = [sys.executable, __file__, "--worker", str(args.gptfast),
                                         str(batch), "1", "1", str(warm / f"gptfast_b{batch}.json"),
                                         args.recipe]
        if args.hf:
            commands[f"hf_b{batch}"] = tool_command(batch, True, False, warm / f"hf_b{batch}",
                                                    network=HF_LLAMA_1B, iterations=1)
    running = []
    for label, command in commands.items():
        sink = (warm / f"{label}.log").open("w")
        running.append((subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT,
                                         cwd=REPO), sink))
    for process, sink in running:
        try:
            process.wait(timeout=args.timeout * 2)
        except subprocess.TimeoutExpired:
            process.kill()
        sink.close()


def median_of(trials: list[dict], key: str) -> float | None:
    values = [trial[key] for trial in trials if not trial.get("failed") and trial.get(key)]
    return statistics.median(values) if values else None


def report(results: dict, weight_bytes: int | None) -> str:
    lines = [f"{'setting':<14} {'side':<9} {'decode tok/s':>12} {'ITL p50 ms':>10} "
             f"{'TTFT ms':>8} {'weights GB/s':>12} {'rounds':>6}"]
    for key, sides in results.items():
        for side, trials in sides.items():
            rate, itl = median_of(trials, "decode_tokens_per_s"), median_of(trials, "itl_p50_ms")
            ttft = median_of(trials, "ttft_ms")
            ok = sum(not trial.get("failed") for trial in trials)
            bandwidth = (weight_bytes / (itl / 1e3) / 1e9) if (itl and weight_bytes) else None
            lines.append(f"{key:<14} {side:<9} {_cell(rate, 12, 1)} {_cell(itl, 10, 3)} "
                         f"{_cell(ttft, 8, 2)} {_cell(bandwidth, 12, 0)} {ok:>4}/{len(trials)}")
        ours = median_of(sides["tool"], "decode_tokens_per_s")
        theirs = median_of(sides.get("gpt-fast", []), "decode_tokens_per_s")
        if ours and theirs:
            lines.append(f"{key:<14} ratio     tool / gpt-fast decode tokens/s = "
                         f"{ours / theirs:.3f}")
        measured = [trial for trial in sides["tool"] if not trial.get("failed")]
        if measured:
            compiler = measured[0].get("compiler") or {}
            bandwidth = measured[0].get("bandwidth") or {}
            mbu = bandwidth.get("mbu")
            lines.append(f"{key:<14} tool says CUDA graphs {compiler.get('cuda_graphs', '-')}, "
                         f"recompiles while timed {compiler.get('timed_recompiles', '-')}, "
                         f"decode {bandwidth.get('achieved_gb_per_s') or 0:,.0f} GB/s, MBU "
                         f"{'-' if mbu is None else f'{mbu:.1%}'}")
    return "\n".join(lines) + "\n"


def attribution_table(results: dict) -> str:
    """Each side's profiled decode step (its first measured round), class by class."""
    classes = ("matmul", "attention", "elementwise+norms", "sampling", "copies")
    lines = [f"{'setting':<14} {'side':<9} {'step ms':>8} {'kernels':>8} {'gaps':>7} "
             f"{'k/step':>6} {'cover':>6} " + " ".join(f"{c[:11]:>11}" for c in classes)]
    for key, sides in results.items():
        for side, trials in sides.items():
            found = next((t["attribution"] for t in trials
                          if not t.get("failed") and t.get("attribution")), None)
            if found is None:
                continue
            cover = found.get("coverage")
            lines.append(f"{key:<14} {side:<9} {found['step_ms']:>8.3f} {found['busy_ms']:>8.3f} "
                         f"{found['gap_ms']:>7.3f} {found['per_step']:>6.0f} "
                         f"{'-' if cover is None else f'{cover:.3f}':>6} "
                         + " ".join(f"{found['classes'][c]['ms']:>6.3f}/{found['classes'][c]['count']:<4.0f}"
                                    for c in classes))
    return "\n".join(lines) + "\n"


def targets(results: dict) -> str:
    """PASS/FAIL of issue 34's targets on the medians over rounds."""
    lines = []

    def verdict(ok: bool | None, text: str) -> None:
        lines.append(f"{'PASS' if ok else ('FAIL' if ok is not None else 'N/A ')}  {text}")

    for key, sides in results.items():
        if "gpt-fast" not in sides or not key.endswith("compiled"):
            continue
        ours = median_of(sides["tool"], "decode_tokens_per_s")
        theirs = median_of(sides["gpt-fast"], "decode_tokens_per_s")
        ratio = ours / theirs if ours and theirs else None
        verdict(None if ratio is None else ratio >= 1.0,
                f"{key}: decode tokens/s tool/gpt-fast >= 1.00 "
                f"({'-' if ratio is None else f'{ratio:.3f}'})")
        itl, their_itl = median_of(sides["tool"], "itl_p50_ms"), \
            median_of(sides["gpt-fast"], "itl_p50_ms")
        verdict(None if not (itl and their_itl) else itl <= their_itl,
                f"{key}: ITL p50 tool <= gpt-fast ({itl or 0:.3f} vs {their_itl or 0:.3f} ms)")
        if key.startswith("b1 "):
            mbu = median_of(sides["tool"], "mbu")
            verdict(None if mbu is None else mbu >= 0.45,
                    f"{key}: MBU >= 45% ({'-' if mbu is None else f'{mbu:.1%}'})")
        covers = [t["attribution"]["coverage"] for t in sides["tool"]
                  if not t.get("failed") and t.get("attribution")
                  and t["attribution"].get("coverage")]
        verdict(bool(covers) and all(abs(c - 1) <= 0.05 for c in covers) if covers else None,
                f"{key}: attribution kernels + gaps within 5% of the measured step "
                f"({', '.join(f'{c:.3f}' for c in covers) or '-'})")
    for key, sides in results.items():
        if key.endswith(" hf"):
            batch_key = key.replace(" hf", " compiled")
            hf = median_of(sides["tool"], "decode_tokens_per_s")
            ours = median_of(results.get(batch_key, {}).get("tool", []), "decode_tokens_per_s")
            ratio = hf / ours if hf and ours else None
            verdict(None if ratio is None else ratio >= 0.9,
                    f"{key}: hf:llama decode tokens/s within 10% of llama_1b "
                    f"({'-' if ratio is None else f'{ratio:.3f}'})")
    return "\n".join(lines) + "\n"


def _cell(value: float | None, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width},.{digits}f}"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        checkout, batch, compiled, generations, result_path, recipe = sys.argv[2:8]
        gptfast_worker(checkout, int(batch), bool(int(compiled)), int(generations), result_path,
                       recipe == "generate.py")
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="directory for logs and result files")
    parser.add_argument("gptfast", type=Path, help="path of a gpt-fast checkout (its model.py)")
    parser.add_argument("--batches", default="1,16", help="batch sizes (default: 1,16)")
    parser.add_argument("--rounds", type=int, default=3, help="A/B rounds (default: 3)")
    parser.add_argument("--warm", action="store_true",
                        help="first compile every side at once, untimed, to fill inductor's "
                             "caches")
    parser.add_argument("--hf", action="store_true",
                        help="also run hf:llama at the llama_1b shape once per batch (after the "
                             "rounds), against this tool's own llama_1b")
    parser.add_argument("--eager", action="store_true", help="also run both sides uncompiled")
    parser.add_argument("--preset", action="store_true",
                        help="also run this tool's --preset fast --mode generate at each batch")
    parser.add_argument("--generations", type=int, default=10,
                        help="timed generations on the gpt-fast side (default: 10)")
    parser.add_argument("--tool-args", default="",
                        help="more flags for this tool's side, e.g. '--seq-len 256' to size its "
                             "KV cache as gpt-fast's (prompt + generated tokens)")
    parser.add_argument("--recipe", choices=("generate.py", "model.py"), default="generate.py",
                        help="gpt-fast's compiler recipe: its generate.py's settings "
                             "(coordinate-descent tuning, math attention in decode; default) "
                             "or its model.py compiled plainly")
    parser.add_argument("--timeout", type=float, default=240, help="seconds per side (default: 240)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not (args.gptfast / "model.py").is_file():
        sys.exit(f"error: {args.gptfast} has no model.py (give the path of a gpt-fast checkout)")
    results: dict = {}
    batches = [int(b) for b in args.batches.split(",")]
    settings = [True] + ([False] if args.eager else [])
    if args.warm:
        warm_caches(args, batches)
    for round_index in range(1, args.rounds + 1):
        for batch in batches:
            for compiled in settings:
                one_round(args, round_index, batch, compiled, results)
        write_summary(args.out, results)          # each round's, in case the job is cut off
    if args.hf:
        for batch in batches:
            hf_dir = args.out / f"tool_hf_b{batch}"
            hf_dir.mkdir(parents=True, exist_ok=True)
            ok = run_side(f"tool_hf_b{batch}", tool_command(batch, True, False, hf_dir,
                                                            network=HF_LLAMA_1B),
                          args.out, args.timeout)
            results[f"b{batch} hf"] = {"tool": [read_tool_result(hf_dir) if ok
                                                else {"failed": True}]}
    if args.preset:
        for batch in batches:
            preset_dir = args.out / f"tool_preset_b{batch}"
            preset_dir.mkdir(parents=True, exist_ok=True)
            ok = run_side(f"tool_preset_b{batch}", tool_command(batch, True, True, preset_dir),
                          args.out, args.timeout)
            results[f"b{batch} preset"] = {"tool": [read_tool_result(preset_dir) if ok
                                                    else {"failed": True}]}
    print(write_summary(args.out, results), end="")


def write_summary(out: Path, results: dict) -> str:
    weight_bytes = next((trial["weight_bytes"] for sides in results.values()
                         for trial in sides.get("gpt-fast", []) if "weight_bytes" in trial), None)
    (out / "summary.json").write_text(json.dumps(results, indent=1))
    text = (report(results, weight_bytes) + "\n" + attribution_table(results) + "\n"
            + targets(results))
    (out / "summary.txt").write_text(text)
    return text


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
