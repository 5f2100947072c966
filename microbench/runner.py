"""One invocation: resolve the configuration, set up the devices and ranks, run, report.

Single device, torchrun, SLURM and the older manual launch all go through :func:`run_worker`;
only global rank 0 prints the summary and writes files, once, from every rank's raw samples.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import TextIO

import torch

from . import benchmark, capacity, compare, device as device_mod, distributed, models
from . import plot, precision as precision_mod, profilers, report, sweep
from .cli import BenchConfig, Plan
from .distributed import Launch
from .errors import BenchmarkError, OutOfMemory, UsageError


@dataclass
class Console:
    """Where this process writes: plain lines on rank 0, rank-prefixed lines elsewhere."""

    out: TextIO
    err: TextIO

    @classmethod
    def for_launch(cls, launch: Launch) -> "Console":
        if not launch.distributed:
            return cls(sys.stdout, sys.stderr)
        prefix = f"[rank {launch.rank}] "
        out = sys.stdout if launch.is_main else report.PrefixedLines(sys.stdout, prefix)
        return cls(out, report.PrefixedLines(sys.stderr, prefix))


def load_baseline(path: str | None, config: BenchConfig, precision) -> float | None:
    """Single-device throughput from a result JSON, refusing another configuration."""
    if path is None:
        return None
    document = compare.load_result(path, "--scaling-baseline")
    if document.get("GPUs") != 1:
        raise UsageError(f"--scaling-baseline {path} is a {document.get('GPUs')}-device result; "
                         f"give a single-device run of the same configuration")
    theirs = document.get("config", {})
    ours = {"network": config.network, "mode": config.mode}
    mismatched = [key for key, value in ours.items() if theirs.get(key) != value]
    if document.get("precision", {}).get("name") != precision.name:
        mismatched.append("precision")
    if mismatched:
        raise UsageError(f"--scaling-baseline {path} differs in {', '.join(mismatched)}")
    return float(document["Throughput [img/sec]"])


def _ddp_wrapper(config: BenchConfig, device: torch.device):
    from torch.nn.parallel import DistributedDataParallel

    def wrap(model: torch.nn.Module) -> torch.nn.Module:
        return DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None,
            bucket_cap_mb=config.ddp_bucket_cap_mb, static_graph=config.ddp_static_graph,
            gradient_as_bucket_view=config.ddp_gradient_as_bucket_view)
    return wrap


def run_worker(config: BenchConfig, launch: Launch, console: Console,
               plan: Plan | None = None) -> int:
    spec = models.resolve(config.network)
    precision, notes = precision_mod.for_config(config)
    notes += list(config.compile_notes)
    if config.flops_prof_step is not None and launch.distributed:
        notes.append(f"DeepSpeed's profile of iteration {config.flops_prof_step} is printed by "
                     f"rank 0 only; the other ranks run that iteration unprofiled, and every "
                     f"rank leaves it out of its statistics")
    device, notice = device_mod.select_device(
        config.device, launch.device_index if launch.distributed else None)
    if notice and launch.is_main:
        print(notice, file=console.out)
    try:
        if launch.distributed:
            distributed.init_process_group(launch, device, config.dist_timeout)
        return _benchmark_and_report(config, launch, console, spec, precision, notes, device,
                                     plan)
    finally:
        distributed.shutdown()


def _enter_timed_region(launch: Launch, device: torch.device) -> None:
    distributed.fail_if_asked(launch)
    distributed.barrier(device)                # all ranks enter the timed region together


def _benchmark_and_report(config, launch, console, spec, precision, notes, device,
                          plan: Plan | None = None) -> int:
    out, main = console.out, launch.is_main
    baseline = load_baseline(config.scaling_baseline, config, precision) if main else None
    env = device_mod.describe(device)
    image_size = config.image_size or spec.image_size
    if main:
        report.print_config(config, precision, spec, image_size, launch, env, notes, out)
        print(f"Building {spec.name}...", file=out, flush=True)
    wrap, before_timing = None, lambda: None
    if launch.distributed:
        wrap = _ddp_wrapper(config, device) if config.mode == "training" else None
        before_timing = lambda: _enter_timed_region(launch, device)   # noqa: E731
    result = benchmark.run(
        config, device, env, precision, launch.local_batch,
        on_phase=lambda phase: main and print(f"{phase.capitalize()}...", file=out, flush=True),
        wrap=wrap, before_timing=before_timing, is_main=main,
        rank=launch.rank, world_size=launch.world_size)
    result.notes.extend(notes)
    aggregate = None
    if launch.distributed:
        distributed.barrier(device)            # ...and meet again at its end
        records = distributed.gather_records(distributed.record_of(result, launch))
        if main:
            aggregate = distributed.Aggregate(launch, records, baseline)
    if main:
        report.print_warmup(result, out)
        if not config.quiet:
            report.print_iterations(result, out)
        report.print_summary(result, out, aggregate)
        report.print_profiles(result, out)
        report.write_files(result, out, aggregate)
        if plan is not None and plan.compare:
            compare.compare(report.result_document(result, aggregate),
                            compare.load_result(plan.compare), plan.compare,
                            plan.tolerance_pct, out)
    return 0


def _spawned_worker(index: int, config: BenchConfig, launch: Launch) -> None:
    """One worker of a manual launch with several --device_ids (runs in a child process)."""
    worker = distributed.worker_launch(launch, index, config.device_ids)
    console = Console.for_launch(worker)
    try:
        code = run_worker(config, worker, console)
    except BenchmarkError as error:
        print(f"error: {error}", file=console.err)
        console.err.flush()
        code = error.exit_code
    if code:
        sys.exit(code)


def run_plan(plan: Plan) -> int:
    """A sweep, a max-batch search followed by its run, or one configuration."""
    if plan.is_sweep:
        return run_sweep(plan)
    config = plan.configs[0]
    if plan.compare:
        compare.load_result(plan.compare)            # unreadable: fail before the run
    if plan.find_max_batch:
        return run_largest_batch(config, plan)
    return run(config, plan)


def _single_device(plan: Plan, what: str) -> tuple[torch.device, dict]:
    if distributed.detect(plan.configs[0]).distributed:
        raise UsageError(f"{what} runs in one process on one device; launch it without "
                         f"torchrun, srun or --distributed_dataparallel")
    device, notice = device_mod.select_device(plan.configs[0].device)
    if notice:
        print(notice)
    return device, device_mod.describe(device)


def run_sweep(plan: Plan) -> int:
    for config in plan.configs:
        models.resolve(config.network)
    report.prepare_output(plan.configs[0])
    if plan.plot:
        plot.require_matplotlib()
    device, env = _single_device(plan, "a sweep")
    print(f"Sweep of {len(plan.configs)} configurations on {env['device']} "
          f"{env['device_name']}, {plan.configs[0].iterations} timed iterations each")
    rows = sweep.run_sweep(plan.configs, device, env, sys.stdout)
    sweep.print_comparison(rows, sys.stdout)
    base = plan.configs[0]
    if base.write_files:
        path = sweep.write_files(rows, base.output_dir, report.csv_path(base), env)
        print(f"Results JSON : {path} (and one per successful row)")
        print(f"Results CSV  : {report.csv_path(base)}")
    if plan.plot:
        plot.plot_rows(rows, plan.plot)
        print(f"Plot         : {plan.plot}")
    return 0


def run_largest_batch(config: BenchConfig, plan: Plan) -> int:
    """Find the largest batch that fits, printing every try, and benchmark it."""
    models.resolve(config.network)
    report.prepare_output(config)
    device, _ = _single_device(plan, "--find-max-batch")
    note = capacity.apply_memory_budget(device, plan.memory_budget_gb)
    if note:
        print(f"Note: {note}")
    precision, _ = precision_mod.for_config(config)
    print(f"Searching the largest batch for {config.network} ({config.mode}, {precision.name}) "
          f"from {config.batch_size} up to {plan.max_batch_limit}...", flush=True)

    def fits(batch: int) -> bool:
        ok = capacity.batch_fits(config, device, precision, batch)
        print(f"  batch {batch}: {'fits' if ok else 'out of memory'}", flush=True)
        return ok

    def full_run(batch: int) -> int | None:
        print(f"Largest batch that fits the probe: {batch}; benchmarking it", flush=True)
        try:
            return run(replace(config, batch_size=batch), plan)
        except OutOfMemory:
            print(f"  batch {batch}: the full run ran out of memory; searching below it",
                  flush=True)
            return None

    found, code = capacity.largest_that_runs(fits, full_run, config.batch_size,
                                             plan.max_batch_limit)
    if found.largest == 0:
        raise OutOfMemory(f"not even batch 1 of {config.network} fits: try --amp or --fp16 1, "
                          f"a smaller --image-size, or a larger --memory-budget-gb")
    limit = (" (the --max-batch-limit; more may fit)"
             if found.largest == plan.max_batch_limit else "")
    print(f"Largest batch that fits: {found.largest}{limit}")
    return code


def run(config: BenchConfig, plan: Plan | None = None) -> int:
    """Validate everything that can be checked without other ranks, then run."""
    if config.flops_prof_step is not None:
        profilers.require_deepspeed()
    models.resolve(config.network)
    precision_mod.for_config(config)           # conflicting precision flags: fail before launch
    launch = distributed.detect(config)
    if launch.is_main:
        report.prepare_output(config)
    if launch.workers > 1:
        return _spawn(config, launch)
    return run_worker(config, launch, Console.for_launch(launch), plan)


def _spawn(config: BenchConfig, launch: Launch) -> int:
    import torch.multiprocessing as mp
    try:
        mp.spawn(_spawned_worker, args=(config, launch), nprocs=launch.workers, join=True)
    except mp.ProcessExitedException as failure:
        rank = launch.rank + failure.error_index
        raise BenchmarkError(f"worker for rank {rank} exited with code {failure.exit_code}") \
            from None
    return 0
