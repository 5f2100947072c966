#!/usr/bin/env python3
"""Several nodes, proven on one 4-GPU host: two simulated nodes of 2 GPUs against one node of 4
(issue 62).

A simulated node is a torchrun agent of its own: two agents (``--nnodes 2 --nproc-per-node 2``,
c10d rendezvous on localhost, ``--node-rank 0|1``), each given two of the four GPUs through
CUDA_VISIBLE_DEVICES, form a job of 4 ranks whose nodes torchrun numbers 0 and 1 (GROUP_RANK),
as two hosts would. One node of 4 is ``torchrun --standalone --nproc-per-node 4``; one GPU is
the tool alone. Every run is this checkout's tool (``micro_benchmarking_pytorch.py``), its
result JSON read back, the same global batch on both sides of a comparison. The runs, by part
(``--parts``):

* ``ddp``: resnet50 ``--preset fast`` training, BATCH images a GPU: 1 GPU, one node of 2, one
  node of 4, two nodes of 2;
* ``fsdp``: llama3_3b, AMP-BF16 (BF16 compute, FP32 shards), sequence 4096, one sequence a GPU,
  AdamW, ``--preset fast``, ``--parallel fsdp``: one node of 4, two nodes of 2;
* ``hsdp``: the same model and flags, ``--parallel hsdp`` over two nodes of 2 (its shard group
  is a node: a mesh of 2 replicas x 2 shards), in BF16 and in FP8 (tensorwise: weights
  gathered in FP8 inside a node).

Then a PASS/FAIL line per target of issue 62:

* two nodes of 2 over one node of 4, same global batch: DDP resnet50 and FSDP llama3_3b each
  >= 0.97 of the one-node run's throughput;
* HSDP 2 x 2 >= 0.95 of FSDP over 4 (tokens/s), with its largest rank's peak reserved memory
  below what DDP would need (the FP32 weights, gradients and AdamW's two moments of the whole
  model on every rank, 16 bytes a parameter, activations not counted); its mesh is 2 x 2;
* HSDP with FP8 tensorwise faster than HSDP in BF16;
* DDP resnet50 ``--preset fast`` scaling >= 95% at 2 and at 4 GPUs (images/s over N times one
  GPU's).

A target whose runs did not finish prints ``not run`` with the reason (exit code and log). A
deadline stops it from starting a run it cannot finish; ``--parts`` splits the job over calls:

    python3 benchmarks/multinode.py OUT --parts ddp
    python3 benchmarks/multinode.py OUT --parts fsdp,hsdp
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "micro_benchmarking_pytorch.py"
PARTS = ("ddp", "fsdp", "hsdp")
GPUS = 4
NODE_SHARE = 0.97           # two nodes of 2 over one node of 4, at least
HYBRID_SHARE = 0.95         # HSDP 2 x 2 over FSDP over 4, at least
SCALING = 0.95              # DDP images/s at N GPUs over N x one GPU's, at least
DDP_STATE_BYTES = 16        # a parameter's FP32 weight, gradient and AdamW's two moments
MB = 1e6                    # the tool stores memory in MB of 10^6 bytes

# What each run launches: one GPU, one node of N, or two nodes of 2 (one agent a node).
ONE, NODE, TWO_NODES = "one", "node", "two nodes"


def image_flags(batch: int) -> list[str]:
    """resnet50 --preset fast training, ``batch`` images a GPU."""
    return ["--network", "resnet50", "--preset", "fast", "--batch-size", str(batch),
            "--iterations", "50", "--warmup", "10"]


def llama_flags(strategy: str, precision: list[str], batch: int, ac: str) -> list[str]:
    """llama3_3b at sequence 4096, AdamW, --preset fast, ``batch`` sequences in all."""
    return ["--network", "llama3_3b", "--seq-len", "4096", "--parallel", strategy, *precision,
            "--optimizer", "adamw", "--preset", "fast", "--activation-checkpointing", ac,
            "--batch-size", str(batch), "--iterations", "10", "--warmup", "3"]


BF16 = ["--precision", "amp-bf16"]
FP8 = ["--precision", "fp8", "--fp8-recipe", "tensorwise"]


def plan(parts: list[str], batch: int, ac: str) -> list[tuple[str, str, int, list[str]]]:
    """(name, launch, GPUs, the tool's flags) of every run of ``parts``, in order; a
    comparison's sides with the same global batch."""
    runs = []
    if "ddp" in parts:
        runs += [("ddp_1", ONE, 1, image_flags(batch)),
                 ("ddp_node2", NODE, 2, image_flags(2 * batch)),
                 ("ddp_node4", NODE, 4, image_flags(4 * batch)),
                 ("ddp_2x2", TWO_NODES, 4, image_flags(4 * batch))]
    if "fsdp" in parts:
        runs += [("fsdp_node4", NODE, 4, llama_flags("fsdp", BF16, GPUS, ac)),
                 ("fsdp_2x2", TWO_NODES, 4, llama_flags("fsdp", BF16, GPUS, ac))]
    if "hsdp" in parts:
        runs += [("hsdp_2x2", TWO_NODES, 4, llama_flags("hsdp", BF16, GPUS, ac)),
                 ("hsdp_2x2_fp8", TWO_NODES, 4, llama_flags("hsdp", FP8, GPUS, ac))]
    return runs


# ------------------------------------------------------------------ running

def _environment(**extra: str) -> dict:
    """This checkout first on the path, beside whatever the caller put there; no launcher's
    variables from the caller."""
    paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {key: value for key, value in os.environ.items()
           if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                          "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")}
    return {**env, "PYTHONPATH": os.pathsep.join(paths), "PYTHONUNBUFFERED": "1", **extra}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def commands(launch: str, gpus: int, flags: list[str], out: Path,
             name: str) -> list[tuple[list[str], dict]]:
    """The processes of one run, each with its environment: the tool, one torchrun, or two
    agents (the first two GPUs to node 0's, the last two to node 1's)."""
    tool = [str(SCRIPT), *flags, "--output-dir", str(out / name), "--output-file", name]
    devices = ",".join(str(gpu) for gpu in range(gpus))
    if launch == ONE:
        return [([sys.executable, *tool], _environment(CUDA_VISIBLE_DEVICES="0"))]
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    if launch == NODE:
        return [([*torchrun, "--standalone", "--nproc-per-node", str(gpus), *tool],
                 _environment(CUDA_VISIBLE_DEVICES=devices))]
    port, half = _free_port(), gpus // 2
    return [([*torchrun, "--nnodes", "2", "--nproc-per-node", str(half), "--rdzv-backend",
              "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"{name}-{port}",
              "--node-rank", str(node), *tool],
             _environment(CUDA_VISIBLE_DEVICES=",".join(
                 str(gpu) for gpu in range(node * half, (node + 1) * half))))
            for node in range(2)]


def run(out: Path, name: str, launch: str, gpus: int, flags: list[str], end: float) -> dict:
    """One run's figures, or {"error": ...} with its exit code and log."""
    processes = []
    for index, (command, env) in enumerate(commands(launch, gpus, flags, out, name)):
        log = (out / f"{name}.log" if index == 0 else out / f"{name}.node{index}.log").open("w")
        processes.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                           cwd=REPO, env=env, start_new_session=True), log))
    codes = []
    for process, log in processes:
        try:
            codes.append(process.wait(timeout=max(end - time.monotonic(), 1.0)))
        except subprocess.TimeoutExpired:
            for other, _ in processes:           # one agent's job without the other hangs
                if other.poll() is None:
                    os.killpg(other.pid, 9)
            codes.append(124)
        log.close()
    result = out / name / f"{name}.json"
    if any(codes) or not result.exists():
        code = next((code for code in codes if code), 0)
        return {"error": f"exit {code}, see {name}.log"}
    return figures(json.loads(result.read_text()))


def figures(document: dict) -> dict:
    """What the targets read from one result of the tool."""
    block = document.get("parallel") or {}
    job = document.get("distributed") or {}
    reserved = [rank.get("peak_reserved_mb") for rank in block.get("per_rank") or []]
    reserved += [rank.get("peak_reserved_mb") for rank in job.get("per_rank") or []]
    reserved = [value for value in reserved if value is not None]
    return {"img_per_s": document.get("Throughput [img/sec]"),
            "tokens_per_s": block.get("tokens_per_s"),
            "gpus": document.get("GPUs"), "global_batch": document.get("Mini batch size [img]"),
            "mode": block.get("mode"), "mesh_shape": block.get("mesh_shape"),
            "parameters": (document.get("model") or {}).get("parameters"),
            "peak_reserved_mb": max(reserved) if reserved else None,
            "nodes": sorted({rank.get("node_rank") for rank in job.get("per_rank") or []},
                            key=lambda node: -1 if node is None else node)}


# ------------------------------------------------------------------ the verdicts

def _ratio(a, b):
    return a / b if a and b else None


def _line(target: str, value, passes, *sides: dict, unit: str = "x") -> str:
    if value is None:
        why = next((side["error"] for side in sides if side.get("error")), "no figure")
        return f"not run  {target}: {why}"
    return f"{'PASS' if passes(value) else 'FAIL'}     {target}: {value:.3f}{unit}"


def verdicts(runs: dict) -> list[str]:
    """A PASS/FAIL line per target whose runs were planned (``not run`` where a side has no
    figure)."""
    lines = []

    def get(name: str) -> dict:
        return runs.get(name) or {"error": "not planned"}
    if "ddp_1" in runs:
        one = get("ddp_1")
        for gpus in (2, 4):
            side = get(f"ddp_node{gpus}")
            lines.append(_line(f"DDP resnet50 --preset fast scaling at {gpus} GPUs >= "
                               f"{SCALING:.0%}",
                               _ratio(side.get("img_per_s"), gpus * (one.get("img_per_s") or 0)),
                               lambda value: value >= SCALING, side, one, unit=""))
        two, node = get("ddp_2x2"), get("ddp_node4")
        lines.append(_line(f"DDP resnet50 two nodes of 2 vs one node of 4 >= {NODE_SHARE:.2f}x",
                           _ratio(two.get("img_per_s"), node.get("img_per_s")),
                           lambda value: value >= NODE_SHARE, two, node))
    if "fsdp_2x2" in runs:
        two, node = get("fsdp_2x2"), get("fsdp_node4")
        lines.append(_line(f"FSDP llama3_3b two nodes of 2 vs one node of 4 >= "
                           f"{NODE_SHARE:.2f}x",
                           _ratio(two.get("tokens_per_s"), node.get("tokens_per_s")),
                           lambda value: value >= NODE_SHARE, two, node))
    if "hsdp_2x2" in runs:
        hybrid, fsdp = get("hsdp_2x2"), get("fsdp_node4")
        mesh = hybrid.get("mesh_shape")
        lines.append(f"not run  HSDP mesh is 2 replicas x 2 shards: "
                     f"{hybrid.get('error', 'no figure')}" if mesh is None else
                     f"{'PASS' if mesh == [2, 2] else 'FAIL'}     HSDP mesh is 2 replicas x 2 "
                     f"shards: {' x '.join(map(str, mesh))}")
        lines.append(_line(f"HSDP 2x2 vs FSDP over 4 (llama3_3b tokens/s) >= {HYBRID_SHARE:.2f}x",
                           _ratio(hybrid.get("tokens_per_s"), fsdp.get("tokens_per_s")),
                           lambda value: value >= HYBRID_SHARE, hybrid, fsdp))
        parameters, peak = hybrid.get("parameters"), hybrid.get("peak_reserved_mb")
        ddp_gb = parameters * DDP_STATE_BYTES / 1e9 if parameters else None
        lines.append(_line(f"HSDP 2x2 peak reserved vs DDP's weights, gradients and AdamW "
                           f"state ({_num(ddp_gb)} GB a rank) < 1.00x",
                           _ratio(peak * MB / 1e9 if peak else None, ddp_gb),
                           lambda value: value < 1.0, hybrid))
        fp8 = get("hsdp_2x2_fp8")
        lines.append(_line("HSDP FP8 tensorwise vs HSDP BF16 (tokens/s) > 1.00x",
                           _ratio(fp8.get("tokens_per_s"), hybrid.get("tokens_per_s")),
                           lambda value: value > 1.0, fp8, hybrid))
    return lines


def _num(value, digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def table(runs: dict) -> str:
    lines = ["| run | GPUs | nodes | mode | mesh | global batch | img/s | tokens/s | peak "
             "reserved GB (largest rank) |", "|---|---:|---|---|---|---:|---:|---:|---:|"]
    for name, row in runs.items():
        if "error" in row:
            lines.append(f"| {name} | | | {row['error']} | | | | | |")
            continue
        peak = row.get("peak_reserved_mb")
        lines.append(f"| {name} | {row.get('gpus')} | {row.get('nodes')} | {row.get('mode')} | "
                     f"{row.get('mesh_shape')} | {row.get('global_batch')} | "
                     f"{_num(row.get('img_per_s'))} | {_num(row.get('tokens_per_s'))} | "
                     f"{_num(peak / 1e3 if peak else None, 2)} |")
    return "\n".join(lines)


# ------------------------------------------------------------------ the command

def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated, from {', '.join(PARTS)} (default: all; hsdp's "
                             f"comparison reads fsdp's one-node run, from this OUT if an "
                             f"earlier call made it)")
    parser.add_argument("--batch", type=int, default=128,
                        help="resnet50 images a GPU (default: 128, as fast_scaling.sh)")
    parser.add_argument("--ac", default="selective", choices=("none", "full", "selective"),
                        help="llama3_3b's --activation-checkpointing (default: selective)")
    parser.add_argument("--deadline-s", type=float, default=450.0,
                        help="start no run after this many seconds (default: 450)")
    parser.add_argument("--end-s", type=float, default=560.0,
                        help="stop any run still going after this many seconds (default: 560)")
    args = parser.parse_args(argv)
    args.parts = [part for part in args.parts.split(",") if part]
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown part: {', '.join(unknown)} (from {', '.join(PARTS)})")
    return args


def earlier(out: Path, name: str) -> dict | None:
    """A run an earlier call of this script wrote in ``out`` (--parts split over calls)."""
    result = out / name / f"{name}.json"
    return figures(json.loads(result.read_text())) if result.is_file() else None


def main(argv: list[str]) -> int:
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    deadline, end = start + args.deadline_s, start + args.end_s
    runs: dict = {}
    for name, launch, gpus, flags in plan(args.parts, args.batch, args.ac):
        if time.monotonic() > deadline:
            runs[name] = {"error": "not started (deadline)"}
            continue
        runs[name] = run(args.out, name, launch, gpus, flags, end)
        print(json.dumps({name: runs[name]}), flush=True)
    if "hsdp" in args.parts and "fsdp_node4" not in runs:
        runs["fsdp_node4"] = earlier(args.out, "fsdp_node4") or {
            "error": "fsdp_node4 not run (--parts fsdp first)"}
    text = table(runs) + "\n\n" + "\n".join(verdicts(runs))
    (args.out / "multinode.md").write_text(text + "\n")
    (args.out / "multinode.json").write_text(json.dumps(runs, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
