#!/usr/bin/env python3
"""Quantized generation against BF16 and against gpt-fast's int8 form, one GPU, one job (issue 61;
first written for issues 48 and 53).

For each model (llama_1b, llama3_8b) and each format (bf16, int4wo, int8wo, float8wo), in that
order: one run of this tool (``python3 -m microbench --mode generate``, batch 1, prompt 128,
compiled ``reduce-overhead``, its result JSON read back), each in its own process with a cold
inductor cache and a cold layout cache (every run measures its own layouts: auto's choice is
part of what it costs); with ``--prompts 128,1024``, the time to first token again at each
further prompt length (BF16 and each format, few generated tokens). Beside int8wo, the loops
``--loops`` names, each in its own process, written here with the package's llama builder and
gpt-fast's recipe (coordinate-descent tuning, the prefill compiled ``fullgraph``, the decode step
``reduce-overhead``; CUDA events around the decode steps):

* ``gptfast`` (int8wo only, the default): gpt-fast's int8 weight-only form written here, an int8
  weight per output row and BF16 scales as plain buffers, ``F.linear(x, w.to(x.dtype)) *
  scales`` (gpt-fast's model/quantize.py ``WeightOnlyInt8Linear``): the reference issue 61
  measured at 1.22x BF16 on an H200;
* ``torchao``: ``quantize_`` as torchao ships it, with the layout the tool's JSON says it ran
  (its decode-step layout where the phases differ).

Whether mslk was importable is read from the job's own environment and named on every int4
line: run the script once with mslk on PYTHONPATH and once without (benchmarks/gpu_suite.sh's
two site folders) for issue 61's "with and without mslk". Whether gemlite was importable is
named the same way on every int8wo and float8wo line: where it was, auto measured gemlite's
kernels beside the unwrapped layout's (its choice is in the table's decode and prefill kernels),
and the torchao loop runs torchao's own gemlite int8 form (UIntxWeightOnlyConfig, bit_width 8)
where the tool's decode step chose gemlite.

Then a PASS/FAIL line per target of issue 61:

* llama3_8b decode tokens/s over BF16's: int4wo >= 1.85x (with and without mslk), int8wo >= 1.5x
  and >= the gpt-fast-form loop's, float8wo >= 1.35x; llama_1b: every format >= 1.0x;
* time to first token <= 1.3x BF16's at every prompt length run;
* compile + first iteration <= 1.3x BF16's (cold caches), counting the layout measurement auto
  made before it (``low_precision.quant_choice.seconds``), which a user waits for too.

A target whose runs did not finish prints ``not run`` with the reason (exit code and log). A
deadline stops it from starting a run it cannot finish. A job of one model and a few formats
fits a device call; on a 4-GPU host, one job per GPU, each with its own BF16 baseline:

    python3 benchmarks/quant_decode.py OUT --models llama3_8b --formats bf16,int4wo
    python3 benchmarks/quant_decode.py OUT --models llama3_8b --formats bf16,int8wo \\
        --prompts 128,1024
    python3 benchmarks/quant_decode.py OUT --models llama_1b --quick
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODELS = ("llama_1b", "llama3_8b")
FORMATS = ("bf16", "int4wo", "int8wo", "float8wo")
# Decode tokens/s over BF16's, at least (issue 61's targets; llama_1b: every format 1.0x).
SPEEDUP_TARGETS = {"llama3_8b": {"int4wo": 1.85, "int8wo": 1.5, "float8wo": 1.35}}
DEFAULT_SPEEDUP = 1.0
LOOP_SHARE = 0.97           # the tool's decode tokens/s over the torchao loop's, at least
TTFT_FACTOR = 1.3           # the time to first token over BF16's, at most, at each prompt
COMPILE_FACTOR = 1.3        # compile + first iteration (and auto's measuring) over BF16's
GPTFAST_SHARE = 1.0         # the tool's int8wo decode tokens/s over gpt-fast's form's, at least
LOOPS = ("torchao", "gptfast")
DEFAULT_LOOPS = ("gptfast",)
PROFILED_STEPS = 8          # decode steps a loop profiles after its timed generations
TOP_KERNELS = 10            # the heaviest decode kernels kept per run (the tool keeps 10)
TTFT_GEN = 8                # generated tokens of a run that times the first token only
# Prompt and generation (the issue's: 128 and 128); three warm-up iterations, which the tool
# asks of reduce-overhead (it records its CUDA graphs during the first ones).
FULL = dict(prompt=128, gen=128, iterations=3, warmup=3)
QUICK = dict(prompt=128, gen=32, iterations=2, warmup=3)


# ------------------------------------------------------------------ the tight loop (a worker)

def _torchao_config(fmt: str, layout: str):
    """torchao's configuration for a format in a layout, written here, not taken from the tool."""
    from torchao.quantization import (Float8WeightOnlyConfig, Int4WeightOnlyConfig,
                                      Int8WeightOnlyConfig, PerRow, PerTensor)
    granularity = PerTensor() if layout == "tensorwise" else PerRow()
    if fmt == "int8wo" and layout == "gemlite":
        # torchao's own gemlite form: its int8 values with BF16 row scales, gemlite's A16W8
        # pre-scaled (torchao/prototype/quantization/uintx/uintx_bit_packed_tensor.py)
        from torchao.prototype.quantization.quant_api import UIntxWeightOnlyConfig
        return UIntxWeightOnlyConfig(group_size=None, bit_width=8, set_inductor_config=False)
    if fmt == "int4wo":
        packing = {"tinygemm": "tile_packed_to_4d"}.get(layout, layout)
        if packing in ("preshuffled", "plain"):
            # mslk 1.1.x has no fake kernel for its preshuffled product, and torch.compile
            # cannot trace it without one: the tool's registration (output shape and dtype
            # only; it does not touch what runs) lets the loop compile where the tool does.
            from microbench.steps import quant_layout
            reason = quant_layout.mslk_traceable(layout)
            if reason is not None:
                raise SystemExit(f"the loop cannot compile layout {layout}: {reason}")
        return Int4WeightOnlyConfig(group_size=128, int4_packing_format=packing,
                                    set_inductor_config=False)
    if fmt == "int8wo":
        return Int8WeightOnlyConfig(granularity=granularity, set_inductor_config=False)
    return Float8WeightOnlyConfig(granularity=granularity, set_inductor_config=False)


def torchao_layout(fmt: str, layout: str) -> str:
    """The torchao layout the loop runs for the tool's ``layout``: torchao's rowwise tensor for
    the tool's unwrapped layers, and for gemlite's FP8, which torchao has no form of."""
    if layout == "unwrapped" or (layout == "gemlite" and fmt == "float8wo"):
        return "rowwise"
    return layout


class GptFastInt8Linear:
    """gpt-fast's int8 weight-only linear layer (model/quantize.py, ``WeightOnlyInt8Linear``),
    written here: a symmetric int8 weight per output row and the scales in the weight's dtype,
    both plain buffers; the weight cast to the activations' dtype inside the product, the
    scales after it. Built as a torch.nn.Module subclass on first use (torch is imported in
    the worker only)."""

    @staticmethod
    def replace_all(model) -> int:
        import torch
        from torch.nn import functional as F

        class Layer(torch.nn.Module):
            def __init__(self, linear):
                super().__init__()
                weight = linear.weight.detach().float()
                scales = weight.abs().amax(dim=1).clamp_min(1e-5) / 127
                self.register_buffer("weight", torch.round(weight / scales[:, None])
                                     .clamp(-128, 127).to(torch.int8))
                self.register_buffer("scales", scales.to(linear.weight.dtype))

            def forward(self, x):
                return F.linear(x, self.weight.to(dtype=x.dtype)) * self.scales

        replaced = 0
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, torch.nn.Linear):
                    setattr(parent, name, Layer(child))
                    replaced += 1
        return replaced


def loop_worker(model_name: str, fmt: str, layout: str, shape: dict, out: str,
                device_name: str = "cuda") -> None:
    import torch
    import torch._inductor.config as inductor
    sys.path.insert(0, str(REPO))
    from microbench.models.archs import llama
    inductor.coordinate_descent_tuning = True          # gpt-fast's generate.py
    inductor.triton.unique_kernel_names = True
    device = torch.device(device_name)
    model = llama.build_on_meta(model_name, "sdpa").to(dtype=torch.bfloat16)
    model.to_empty(device=device)
    llama.initialize(model, seed=0)
    model.eval().fuse_projections()
    if layout == "gptfast":
        GptFastInt8Linear.replace_all(model)
    elif fmt != "bf16":
        from torchao.quantization import quantize_
        quantize_(model, _torchao_config(fmt, torchao_layout(fmt, layout)))
    cache = model.make_cache(1, shape["prompt"] + shape["gen"] - 1, device=device,
                             dtype=torch.bfloat16)
    prompt = torch.randint(0, model.config.vocab_size, (1, shape["prompt"]), device=device)
    prefill = torch.compile(lambda p: llama.prefill(model, p, cache), fullgraph=True)
    decode = torch.compile(lambda t, pos: llama.decode_step(model, t, pos, cache),
                           mode="reduce-overhead", fullgraph=True)

    def generate():
        events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        with torch.inference_mode():
            events[0].record()
            token = prefill(prompt).clone()
            position = torch.tensor([shape["prompt"]], device=device)
            events[1].record()
            for _ in range(shape["gen"] - 1):
                token = decode(token, position).clone()
                position += 1
            events[2].record()
        torch.cuda.synchronize()
        return events[0].elapsed_time(events[1]), events[1].elapsed_time(events[2])

    started = time.perf_counter()
    generate()
    first_s = time.perf_counter() - started
    for _ in range(shape["warmup"] - 1):
        generate()
    timed = [generate() for _ in range(shape["iterations"])]
    decode_s = sum(d for _, d in timed) / 1e3
    with torch.inference_mode():             # after the timed ones: where a step's time goes
        token, position = prefill(prompt).clone(), torch.tensor([shape["prompt"]],
                                                                 device=device)

        def step():
            nonlocal token
            token = decode(token, position).clone()
            position.add_(1)
        profiled = decode_profile(step, PROFILED_STEPS) if device.type == "cuda" else {}
    kinds = sorted({type(getattr(m, "weight", None)).__name__ for m in model.modules()
                    if isinstance(m, torch.nn.Linear) or type(m).__name__ == "Layer"})
    Path(out).write_text(json.dumps({
        "decode_tokens_per_s": len(timed) * (shape["gen"] - 1) / decode_s,
        "ttft_ms": sorted(p for p, _ in timed)[len(timed) // 2],
        "first_iteration_s": first_s, "weights": kinds, **profiled}))


def decode_profile(step, steps: int) -> dict:
    """Device time of ``steps`` decode steps under torch.profiler (CUDA activities only):
    kernel time a step and the three longest kernels, to set beside the tool's own
    attribution (its JSON's generation.decode_attribution) when the two differ in speed."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    rows = [(event.key, getattr(event, "device_time_total", None)
             or getattr(event, "cuda_time_total", 0)) for event in prof.key_averages()]
    rows = sorted(((name, us) for name, us in rows if us), key=lambda row: -row[1])
    return {"decode_busy_ms": sum(us for _, us in rows) / steps / 1e3,
            "decode_top": [{"name": name[:120], "ms": us / steps / 1e3}
                           for name, us in rows[:TOP_KERNELS]]}


# ------------------------------------------------------------------ the driver

def _environment(cache: Path) -> dict:
    """This checkout first on the path, beside whatever the caller put there (carried wheels);
    inductor's and Triton's caches of this run's own (every run compiles cold, and a graph one
    side compiled is never the other side's: the tool keeps a lowering out of its int8 graphs
    that the loop leaves in)."""
    paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "PYTHONUNBUFFERED": "1",
            "TORCHINDUCTOR_CACHE_DIR": str(cache), "TRITON_CACHE_DIR": str(cache / "triton"),
            "XDG_CACHE_HOME": str(cache / "xdg")}      # auto's layout choice measured anew


def _run(command: list[str], log: Path, timeout: float) -> int:
    cache = log.parent / "cache" / log.stem
    with log.open("w") as stream:
        try:
            return subprocess.run(command, stdout=stream, stderr=subprocess.STDOUT, cwd=REPO,
                                  timeout=max(timeout, 1.0),
                                  env=_environment(cache)).returncode
        except subprocess.TimeoutExpired:
            return 124


def tool_command(model: str, fmt: str, shape: dict, out: Path, name: str,
                 layout: str = "auto") -> list[str]:
    """The tool's command for one run; ``layout``: its --quant-layout (auto: the tool's choice,
    which is what the targets judge; another, to compare layouts on one GPU)."""
    quantize = "none" if fmt == "bf16" else fmt
    chosen = ["--quant-layout", layout] if fmt != "bf16" and layout != "auto" else []
    return [sys.executable, "-m", "microbench", "--network", model, "--mode", "generate", *chosen,
            "--precision", "bf16", "--quantize", quantize, "--batch-size", "1",
            "--prompt-len", str(shape["prompt"]), "--gen-len", str(shape["gen"]),
            "--seq-len", str(shape["prompt"] + shape["gen"]),
            "--compile-mode", "reduce-overhead", "--iterations", str(shape["iterations"]),
            "--warmup", str(shape["warmup"]), "--measure-peaks", "0",
            "--telemetry-interval", "0", "--output-dir", str(out / "tool"),
            "--output-file", name]


def tool_figures(document: dict) -> dict:
    """What the targets read from one result of the tool."""
    generation = document.get("generation") or {}
    ttft = ((generation.get("time_to_first_token") or {}).get("stats") or {})
    block = document.get("low_precision") or {}
    found = generation.get("decode_attribution") or {}
    choice = block.get("quant_choice") or {}
    decode_layers = ((choice.get("phases") or {}).get("decode") or {}).get("layers") or {}
    return {"decode_tokens_per_s": generation.get("decode_tokens_per_s"),
            "choice_s": choice.get("seconds") or 0.0,
            "choice": {name: {"layers": phase.get("layers"), "chosen_ms": phase.get("chosen_ms"),
                              "candidates_ms": phase.get("candidates_ms")}
                       for name, phase in (choice.get("phases") or {}).items()},
            "decode_layout": max(decode_layers, key=decode_layers.get) if decode_layers
            else block.get("quant_layout"),
            "phases": block.get("quant_phases") or [],
            "compile_cache": (document.get("compiler") or {}).get("cache"),
            "decode_busy_ms": found.get("busy_ms"), "decode_gap_ms": found.get("gap_ms"),
            "decode_kernels_per_step": found.get("per_step"),
            "decode_classes": found.get("classes") or {},
            "decode_top": [{"name": str(k.get("name", ""))[:120], "ms": k.get("ms")}
                           for k in (found.get("top") or [])[:TOP_KERNELS]],
            "ttft_ms": ttft.get("median_ms"),
            "first_iteration_s": (document.get("timing") or {}).get("first_iteration_s"),
            "layout": block.get("quant_layout"), "kernels": block.get("quant_kernels") or [],
            "weight_error": block.get("weight_error"),
            "accuracy": document.get("accuracy") or {}, "notes": document.get("notes") or []}


def _loop(out: Path, model: str, fmt: str, layout: str, shape: dict, end: float,
          name: str) -> dict:
    loop_json = out / f"{name}.json"
    code = _run([sys.executable, __file__, "--worker", model, fmt, layout,
                 json.dumps(shape), str(loop_json)], out / f"{name}.log",
                end - time.monotonic())
    return (json.loads(loop_json.read_text()) if code == 0 and loop_json.exists()
            else {"error": f"exit {code}, see {name}.log"})


def run_format(out: Path, model: str, fmt: str, shape: dict, end: float,
               loops: tuple[str, ...] = DEFAULT_LOOPS, layout: str = "auto",
               prompts: tuple[int, ...] = ()) -> dict:
    """The tool's run of ``model`` in ``fmt`` (in ``layout``), its time to first token at each
    further prompt length of ``prompts``, then the loops ``loops`` names beside it."""
    name = f"{model}_{fmt}"
    tool = _tool(out, model, fmt, shape, end, name, layout)
    ttft = {shape["prompt"]: tool.get("ttft_ms")}
    for prompt in prompts:
        if prompt != shape["prompt"]:
            longer = {**shape, "prompt": prompt, "gen": TTFT_GEN}
            ttft[prompt] = _tool(out, model, fmt, longer, end, f"{name}_p{prompt}",
                                 layout).get("ttft_ms")
    layout = tool.get("decode_layout") or ("tinygemm" if fmt == "int4wo" else "rowwise")
    loop = (_loop(out, model, fmt, layout, shape, end, f"loop_{name}") if "torchao" in loops
            else {"error": "not run (--loops)"})
    row = {"model": model, "format": fmt, "mslk": MSLK, "gemlite": GEMLITE, "tool": tool,
           "loop": loop, "ttft_by_prompt": ttft}
    if fmt == "int8wo" and "gptfast" in loops:
        row["gptfast"] = _loop(out, model, fmt, "gptfast", shape, end, f"gptfast_{name}")
    print(json.dumps(row), flush=True)
    return row


def _tool(out: Path, model: str, fmt: str, shape: dict, end: float, name: str,
          layout: str) -> dict:
    tool_json = out / "tool" / f"{name}.json"
    code = _run(tool_command(model, fmt, shape, out, name, layout), out / f"tool_{name}.log",
                end - time.monotonic())
    return (tool_figures(json.loads(tool_json.read_text())) if code == 0 and tool_json.exists()
            else {"error": f"exit {code}, see tool_{name}.log"})


# Whether this job's runs can import mslk (the int4 lines say so: issue 61 asks for both), and
# gemlite (a candidate of int8wo and float8wo where it imports).
MSLK = importlib.util.find_spec("mslk") is not None
GEMLITE = importlib.util.find_spec("gemlite") is not None
# The optional library each format's auto may choose, named on its lines.
LIBRARY = {"int4wo": "mslk", "int8wo": "gemlite", "float8wo": "gemlite"}


def _label(row: dict) -> str:
    """'model format', and whether the format's optional library could be imported."""
    library = LIBRARY.get(row["format"])
    found = f" ({'with' if row.get(library) else 'without'} {library})" if library else ""
    return f"{row['model']} {row['format']}{found}"


def _ratio(a, b):
    return a / b if a and b else None


def verdicts(rows: list[dict]) -> list[str]:
    """A PASS/FAIL line per target (``not run`` where a side has no figure)."""
    lines = []
    base = {row["model"]: row for row in rows if row["format"] == "bf16"}
    for row in rows:
        model, fmt, tool, loop = row["model"], row["format"], row["tool"], row["loop"]
        label = _label(row)
        bf16 = (base.get(model) or {}).get("tool") or {}
        if fmt == "bf16":
            continue
        need = SPEEDUP_TARGETS.get(model, {}).get(fmt, DEFAULT_SPEEDUP)
        lines.append(_line(f"{label} decode vs BF16 >= {need:.2f}x",
                           _ratio(tool.get("decode_tokens_per_s"), bf16.get("decode_tokens_per_s")),
                           lambda value: value >= need, tool, bf16))
        for prompt, ttft in _ttfts(row).items():
            reference = _ttfts(base.get(model) or {"tool": {}}).get(prompt)
            lines.append(_line(f"{label} TTFT at prompt {prompt} vs BF16 <= {TTFT_FACTOR:.1f}x",
                               _ratio(ttft, reference), lambda value: value <= TTFT_FACTOR,
                               tool, bf16))
        lines.append(_line(f"{label} compile + first iteration (+ auto's measuring) vs BF16 "
                           f"<= {COMPILE_FACTOR:.1f}x", _ratio(_ready_s(tool), _ready_s(bf16)),
                           lambda value: value <= COMPILE_FACTOR, tool, bf16))
        if "gptfast" in row:
            reference = row["gptfast"]
            lines.append(_line(f"{label} decode vs gpt-fast's int8 form >= {GPTFAST_SHARE:.2f}x",
                               _ratio(tool.get("decode_tokens_per_s"),
                                      reference.get("decode_tokens_per_s")),
                               lambda value: value >= GPTFAST_SHARE, tool, reference))
        if "error" not in loop or loop["error"] != "not run (--loops)":
            lines.append(_line(f"{label} tool vs torchao loop >= {LOOP_SHARE:.2f}x",
                               _ratio(tool.get("decode_tokens_per_s"),
                                      loop.get("decode_tokens_per_s")),
                               lambda value: value >= LOOP_SHARE, tool, loop))
    return lines


def _ttfts(row: dict) -> dict:
    """Prompt length -> time to first token (ms) of a row: its first run's, and each further
    prompt's (--prompts)."""
    return row.get("ttft_by_prompt") or {FULL["prompt"]: row["tool"].get("ttft_ms")}


def _ready_s(tool: dict) -> float | None:
    """Compile + first iteration, and the layout measurement auto made before it."""
    first = tool.get("first_iteration_s")
    return None if first is None else first + (tool.get("choice_s") or 0.0)


def _line(target: str, value, passes, side, other, unit: str = "x") -> str:
    if value is None:
        why = side.get("error") or (other or {}).get("error") or "no figure"
        return f"not run  {target}: {why}"
    return f"{'PASS' if passes(value) else 'FAIL'}     {target}: {value:.3f}{unit}"


def table(rows: list[dict]) -> str:
    lines = ["| model | format | mslk | gemlite | decode tok/s | vs BF16 | TTFT ms by prompt | "
             "compile + first s (+ auto's measuring) | cache | decode kernels | prefill "
             "kernels | weight error max/mean |",
             "|---|---|---|---|---:|---:|---|---|---|---|---|---|"]
    base = {row["model"]: row["tool"] for row in rows if row["format"] == "bf16"}
    rows = [*rows, *({"model": row["model"], "format": "gpt-fast int8 form (loop)",
                      "tool": row["gptfast"]} for row in rows if "gptfast" in row)]
    for row in rows:
        tool = row["tool"]
        phases = {phase["phase"]: "; ".join(f"{k['tensor']} {k['packing']} x{k['layers']}"
                                            for k in phase["kernels"])
                  for phase in tool.get("phases", [])}
        error = tool.get("weight_error") or {}
        werr = (f"{error['max_relative_error']:.2%}/{error['mean_relative_error']:.2%}"
                if error.get("max_relative_error") is not None else "")
        ttft = ", ".join(f"{prompt}: {_num(value, 2)}" for prompt, value in _ttfts(row).items())
        rate = tool.get("decode_tokens_per_s")
        lines.append(
            f"| {row['model']} | {row['format']} | {'yes' if row.get('mslk') else 'no'} | "
            f"{'yes' if row.get('gemlite') else 'no'} | {_num(rate)} | "
            f"{_num(_ratio(rate, (base.get(row['model']) or {}).get('decode_tokens_per_s')), 3)}"
            f" | {ttft} | {_num(tool.get('first_iteration_s'))} (+{_num(tool.get('choice_s'))})"
            f" | {tool.get('compile_cache') or ''} | "
            f"{phases.get('decode', tool.get('error', ''))} | {phases.get('prefill', '')} | "
            f"{werr} |")
    choices = [f"- {row['model']} {row['format']}: " + "; ".join(
        f"{name}: " + ", ".join(f"{layout} {_num(ms, 3)} ms" for layout, ms in
                                 (phase.get("candidates_ms") or {}).items())
        + f" -> {phase.get('layers')}" for name, phase in row["tool"].get("choice", {}).items())
        for row in rows if row["tool"].get("choice")]
    return "\n".join(lines + (["", "auto's measurements (every linear product of a phase):",
                                *choices] if choices else []))


def step_table(rows: list[dict]) -> str:
    """Where a decode step's time goes, each side: the step (from decode tokens/s), the
    kernels' time in it (the tool's profiled pass, the loop's torch.profiler pass) and the
    longest kernel. A step much longer than its kernels waits on the host."""
    lines = ["| model | format | side | step ms | kernels ms | longest kernel (ms) |",
             "|---|---|---|---:|---:|---|"]
    for row in rows:
        sides = [("tool", row["tool"]), ("torchao loop", row["loop"])]
        if "gptfast" in row:
            sides.append(("gpt-fast int8 form", row["gptfast"]))
        for side, figures in sides:
            rate = figures.get("decode_tokens_per_s")
            top = (figures.get("decode_top") or [{}])[0]
            longest = (f"{top.get('name', '')[:60]} ({_num(top.get('ms'), 3)})"
                       if top.get("name") else "")
            lines.append(f"| {row['model']} | {row['format']} | {side} | "
                         f"{_num(1e3 / rate if rate else None, 3)} | "
                         f"{_num(figures.get('decode_busy_ms'), 3)} | {longest} |")
    return "\n".join(lines)


def _num(value, digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated, from {', '.join(MODELS)} (default: both)")
    parser.add_argument("--formats", default=",".join(FORMATS),
                        help=f"comma-separated, from {', '.join(FORMATS)}; bf16 is always run "
                             f"first (the targets' baseline)")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK['gen']} generated tokens and {QUICK['iterations']} timed "
                             f"generations instead of {FULL['gen']} and {FULL['iterations']}")
    parser.add_argument("--prompts", default="",
                        help="further prompt lengths whose time to first token is measured "
                             "(the first run's prompt is 128), e.g. 128,1024")
    parser.add_argument("--loops", default=",".join(DEFAULT_LOOPS),
                        help=f"the loops run beside the tool, comma-separated, from "
                             f"{', '.join(LOOPS)}, or none (default: gptfast; gptfast runs "
                             f"beside int8wo only)")
    parser.add_argument("--layouts", default="",
                        help="FORMAT=LAYOUT pairs, comma-separated, passed to the tool as "
                             "--quant-layout (e.g. int4wo=tinygemm to set it beside a job "
                             "that ran auto's preshuffled; default: auto for every format)")
    parser.add_argument("--deadline-s", type=float, default=450.0,
                        help="start no tool/loop pair after this many seconds (default: 450)")
    parser.add_argument("--end-s", type=float, default=530.0,
                        help="stop any run still going after this many seconds (default: 530)")
    args = parser.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    formats = [f for f in args.formats.split(",") if f]
    unknown = [name for name in (*args.models, *formats) if name not in (*MODELS, *FORMATS)]
    if unknown:
        parser.error(f"unknown model or format: {', '.join(unknown)}")
    args.formats = ["bf16"] + [f for f in formats if f != "bf16"]
    pairs = [pair.partition("=") for pair in args.layouts.split(",") if pair]
    args.layouts = {fmt: layout for fmt, _, layout in pairs}
    if any(not layout or fmt not in FORMATS for fmt, layout in args.layouts.items()):
        parser.error(f"--layouts takes FORMAT=LAYOUT pairs of {', '.join(FORMATS[1:])}")
    args.loops = tuple(loop for loop in args.loops.split(",") if loop and loop != "none")
    if set(args.loops) - set(LOOPS):
        parser.error(f"unknown loop: {', '.join(sorted(set(args.loops) - set(LOOPS)))}")
    try:
        args.prompts = tuple(int(prompt) for prompt in args.prompts.split(",") if prompt)
    except ValueError:
        parser.error("--prompts takes prompt lengths, comma-separated (e.g. 128,1024)")
    return args


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--worker":
        model, fmt, layout, shape, out = argv[1:6]
        loop_worker(model, fmt, layout, json.loads(shape), out)
        return 0
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    shape = QUICK if args.quick else FULL
    start = time.monotonic()
    deadline, end = start + args.deadline_s, start + args.end_s
    rows = []
    for model in args.models:
        for fmt in args.formats:
            if time.monotonic() > deadline:
                rows.append({"model": model, "format": fmt, "mslk": MSLK, "gemlite": GEMLITE,
                             "tool": {"error": "not started (deadline)"}, "loop": {}})
                continue
            rows.append(run_format(args.out, model, fmt, shape, end, args.loops,
                                   args.layouts.get(fmt, "auto"), args.prompts))
    text = table(rows) + "\n\n" + step_table(rows) + "\n\n" + "\n".join(verdicts(rows))
    (args.out / "quant_decode.md").write_text(text + "\n")
    (args.out / "quant_decode.json").write_text(json.dumps(rows, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
