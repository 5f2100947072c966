#!/usr/bin/env python3
"""Is the GPU waiting for data? The input pipeline of microbench.data measured now, before its
flags are wired into the CLI (benchmarks/data_pipeline.sh runs the same through the flags).

In one process on one device: the model alone on synthetic input already on the device (the
tool's own training step and timed loop, device events), then for each worker count and decoder
the loader alone and the model fed by it, with the waits, the workers' CPU and the verdict.
Writes OUTPUT_DIR/<network>.json (the data blocks) and OUTPUT_DIR/<network>.png (pipeline
images/s and median wait share against workers, the model alone as a line).

    python3 benchmarks/data_pipeline_probe.py OUTPUT_DIR --network resnet50 --workers 0,2,4,8,16
    python3 benchmarks/data_pipeline_probe.py OUTPUT_DIR --network resnet18 --workers 16 \
        --decode cpu,gpu
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:                       # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

from microbench import benchmark, cli, config as config_mod, workload  # noqa: E402
from microbench.data import DataSettings, ModelInput, open_pipeline, report  # noqa: E402
from microbench.report.writing import json_text, write_whole  # noqa: E402


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output_dir")
    parser.add_argument("--network", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=None)
    parser.add_argument("--workers", default="0,2,4,8,16", help="comma-separated list")
    parser.add_argument("--decode", default="cpu", help="cpu, gpu or cpu,gpu")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--loader-batches", type=int, default=20)
    parser.add_argument("--images", type=int, default=4096)
    parser.add_argument("--image-side", type=int, default=384)
    parser.add_argument("--cache", default=None, help="(default: the user's cache directory)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--no-amp", action="store_true", help="FP32 instead of --amp --nhwc")
    parser.add_argument("--no-plot", action="store_true")
    return parser.parse_args(argv)


def build(args):
    """The tool's own run spec, model and training step, on static tensors the pipeline fills."""
    flags = ["--network", args.network, "--batch-size", str(args.batch_size), "--device",
             args.device, "--no-files", "--iterations", str(args.iterations)]
    flags += [] if args.no_amp else ["--amp", "--nhwc"]
    flags += ["--image-size", str(args.image_size)] if args.image_size else []
    plan = cli.to_plan(cli.parse_args(flags))
    spec = config_mod.resolve(plan.configs[0], plan)
    model = workload.prepare_model(spec)
    model.train()
    inputs, target = spec.model.make_batch(spec.batch_size, spec.device,
                                           spec.precision.model_dtype)
    if spec.config.nhwc:
        inputs = inputs.contiguous(memory_format=spec.model.channels_last)
    step = workload.training_step(model, spec.model, inputs, target, spec.precision, spec.device,
                                  1, workload.PhaseMarks())
    return spec, step, inputs, target


def throughput(step, spec, args) -> float:
    benchmark.warm_up(step, args.warmup, spec.device)
    times = benchmark.timed_loop(step, args.iterations, spec.device).times
    return args.iterations * spec.batch_size / (times.total_ms / 1e3)


def probe(spec, step, inputs, target, args, workers: int, decode: str, model_per_s: float):
    settings = DataSettings(source="loader", count=args.images, image_side=args.image_side,
                            cache_dir=args.cache, decode=decode, transforms="gpu"
                            if spec.device.type != "cpu" else "cpu", workers=workers)
    wanted = ModelInput.of(spec.model, spec.precision.model_dtype, spec.config.nhwc, True)
    with open_pipeline(settings, wanted, spec.batch_size, spec.device,
                       notify=lambda line: print(line, flush=True)) as pipeline:
        loader = pipeline.loader_alone(args.loader_batches)
        fed = pipeline.feeding(step, inputs, target)
        benchmark.warm_up(fed, args.warmup, spec.device)
        fed.start(args.iterations)
        times = benchmark.timed_loop(fed, args.iterations, spec.device).times
        fed.stop()
        per_s = args.iterations * spec.batch_size / (times.total_ms / 1e3)
        return report(pipeline.description(), fed.result(per_s), loader, model_per_s,
                      pipeline.skipped(), pipeline.unit)


def plot(path: Path, rows: list[dict], model_per_s: float, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, left = plt.subplots(figsize=(7, 4))
    right = left.twinx()
    for index, decode in enumerate(sorted({row["decode"] for row in rows})):
        mine = sorted((row for row in rows if row["decode"] == decode),
                      key=lambda row: row["workers"])
        workers = [row["workers"] for row in mine]
        left.plot(workers, [row["pipeline_per_s"] for row in mine], "o-", color=f"C{index}",
                  label=f"pipeline, decode {decode}")
        right.plot(workers, [100 * row["wait"]["share_median"] for row in mine], "s--",
                   color=f"C{index + 2}", label=f"wait share (median), decode {decode}")
    left.axhline(model_per_s, color="grey", linestyle=":", label="model alone")
    left.set_ylim(bottom=0)
    right.set_ylim(0, 100)
    left.set_xlabel("loader workers")
    left.set_ylabel("images/s")
    right.set_ylabel("wait for data, % of a step")
    left.set_xticks(sorted({row["workers"] for row in rows}))
    left.set_title(title, fontsize=9)
    handles = left.get_legend_handles_labels()
    more = right.get_legend_handles_labels()
    left.legend(handles[0] + more[0], handles[1] + more[1], fontsize=7, loc="center right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv=None) -> int:
    args = parse(argv)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec, step, inputs, target = build(args)
    model_per_s = throughput(step, spec, args)
    print(f"{spec.model.name} {spec.precision.label} batch {spec.batch_size} on {spec.device}: "
          f"model alone {model_per_s:,.0f} images/s", flush=True)
    rows = []
    for decode in args.decode.split(","):
        for workers in (int(n) for n in args.workers.split(",")):
            print(f"== workers {workers}, decode {decode}", flush=True)
            data = probe(spec, step, inputs, target, args, workers, decode, model_per_s)
            print("\n".join(data.lines()), flush=True)
            rows.append(data.block())
    write_whole(str(out / f"{args.network}.json"),
                json_text({"network": spec.model.name, "precision": spec.precision.label,
                           "batch_size": spec.batch_size, "device": str(spec.device),
                           "model_alone_per_s": model_per_s, "rows": rows}))
    if not args.no_plot:
        plot(out / f"{args.network}.png", rows, model_per_s,
             f"{spec.model.name} training, {spec.precision.label}, batch {spec.batch_size}, "
             f"{torch.cuda.get_device_name(spec.device) if spec.device.type != 'cpu' else 'CPU'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
