"""One invocation: resolve the plan, set up the devices and ranks, run, report.

Single device, torchrun, SLURM and the older manual launch all go through :func:`run_worker`
with a resolved :class:`~microbench.plan.spec.RunSpec`; only global rank 0 prints the summary and
writes files, once, from every rank's raw samples. Sweeps and the largest-batch search run in
one process on one device.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import os
import sys
from typing import TextIO

from microbench.drivers import capacity
from microbench.platform import devices, distributed, environment, process
from microbench.measure import profilers
from microbench.platform import progress
from microbench.drivers import ab, sweep, trials
from microbench.platform import safe_text, writing
from microbench.settings import identity
from microbench.settings.config import Plan
from microbench.platform.errors import (EXPECTED_EXIT_CODES, BenchmarkError, OutOfMemory,
                                        ReportedFailure, UsageError)
from microbench.output import compare, console, files, sweep_plot, sweep_table
from microbench.plan.spec import RunSpec, resolve
from microbench.output.summary import Summary
from microbench.store.baseline import Gate, read_gate, scaling_baseline


def run_plan(plan: Plan) -> int:
    """A sweep, a largest-batch search followed by its run, or one configuration; the names
    its results claimed (files.claim_result_path) are given back when it ends, however."""
    try:
        return _run_plan(plan)
    finally:
        writing.release_claims()


def _run_plan(plan: Plan) -> int:
    if any(config.flops_prof_step is not None for config in plan.configs):
        profilers.require_deepspeed()          # once, before anything runs, sweeps included
    if plan.ab is not None:
        return run_ab(plan)
    if plan.is_sweep:
        return run_sweep(plan, _single_device(plan, "a sweep"))
    if plan.find_max_batch:
        # The notes once, in the header of the run at the batch found (not here as well).
        [spec] = _single_device(plan, "--find-max-batch", print_notes=False)
        return run_largest_batch(spec, plan)
    spec = with_baselines(resolve(plan.configs[0]), plan)
    _note_self_compare(spec)
    return run(spec)


def with_baselines(spec: RunSpec, plan: Plan) -> RunSpec:
    """``spec`` with the results it is measured against: ``--compare``'s and
    ``--scaling-baseline``'s, read on global rank 0 only (other nodes need not see them), before
    anything runs or is written. In a multi-process job a problem with them is kept in
    ``spec.problem`` and raised on every rank when the ranks meet (distributed.agree)."""
    if not spec.launch.is_main:
        return spec
    try:
        gate = (read_gate(plan.compare, plan.tolerance_pct, spec,
                                         plan.compare_any_config, fail=plan.fail_if != "never")
                if plan.compare else None)
        baseline = (scaling_baseline(spec.config.scaling_baseline, spec)
                    if spec.config.scaling_baseline else None)
    except BenchmarkError as error:
        if not spec.launch.distributed:
            raise
        return dataclasses.replace(spec, problem=error)
    return dataclasses.replace(spec, compare=gate, scaling_baseline_img_s=baseline)


def _note_self_compare(spec: RunSpec) -> None:
    gate = spec.compare
    if gate is not None and spec.json_path is not None and \
            os.path.abspath(gate.path) == os.path.abspath(spec.json_path):
        print(safe_text.terminal(
            f"Note: --compare {gate.path} is also this run's result file: the baseline was "
            f"read before the run, and this run's result will replace it unless the gate "
            f"fails"))


def run(spec: RunSpec) -> int:
    """Check every output path before the model is built, then run (spawning workers if
    asked). Under DDP a problem is held until the process group forms, then told to every rank
    (distributed.agree), so that no rank waits for the others until --dist-timeout."""
    problem = spec.problem
    spec = _claimed(spec)
    try:
        files.prepare_output(spec)
    except BenchmarkError as error:
        if not spec.launch.distributed:
            raise
        problem = problem or error
    if spec.launch.workers > 1:
        return _spawn(spec, problem)
    return run_worker(spec, problem)


def run_worker(spec: RunSpec, problem: BenchmarkError | None = None) -> int:
    """This process's part of the run: meet the other ranks, measure, then (on rank 0) report.
    A dead peer or a timeout becomes one line (distributed.failures_reported)."""
    out = console.Console.for_spec(spec).out
    workers = trials.in_workers(spec)
    if not workers:
        devices.activate(spec.device)      # trial workers take the device themselves
    launch, timeout = spec.launch, spec.config.dist_timeout
    with distributed.leaving_group():
        if launch.distributed:
            with distributed.failures_reported(launch, timeout, "rendezvous"):
                distributed.init_process_group(launch, spec.device, timeout,
                                               coordination_only=workers)
                name = distributed.agree(spec.settings(), problem, spec.result_name)
                spec = dataclasses.replace(spec, result_name=name)
        with distributed.failures_reported(launch, timeout, "run"):
            summary = trials.measure(spec, out)
            if summary is not None:
                report(summary, out)
    return 0


def report(summary: Summary, out: TextIO) -> None:
    """Everything rank 0 shows and writes after a run, and the --compare gate last (judged
    first: a run that fails the gate never replaces the baseline it failed against)."""
    gate = summary.spec.compare
    document = files.result_document(summary)       # once: judged, written, compared
    verdict = compare.judge(document, gate) if gate is not None else None
    if gate is not None and verdict is not None and verdict.regression:   # beside the baseline
        summary = dataclasses.replace(summary, spec=_keeping_baseline(summary.spec, gate))
    if not summary.spec.config.quiet:
        console.print_iterations(summary, out)
    console.print_summary(summary, out)
    console.print_profiles(summary, out)
    files.write_files(summary, document)
    console.print_files(summary, out)
    if gate is not None:
        compare.compare(document, gate, out, verdict)


def _keeping_baseline(spec: RunSpec, gate: Gate) -> RunSpec:
    """A regressed run whose result file is the baseline: its result goes beside it
    (``NAME.regressed.json``, or ``NAME.regressed2.json``...), and the baseline stays as it
    was, so that regressed runs in a row cannot ratchet it down."""
    if spec.json_path is None or os.path.abspath(spec.json_path) != os.path.abspath(gate.path):
        return spec
    root, ext = os.path.splitext(spec.json_path)
    candidate, count = f"{root}.regressed{ext}", 1
    while os.path.exists(candidate):
        count += 1
        candidate = f"{root}.regressed{count}{ext}"
    print(safe_text.terminal(
        f"Note: this run regressed against --compare {gate.path}, which is also its result "
        f"file: the baseline is kept as it was, and this run's result goes to {candidate}"))
    return dataclasses.replace(spec, json_path=candidate)


# ---------------------------------------------------------------- the manual launch

WORKER_GRACE_S = 30.0


def _spawn(spec: RunSpec, problem: BenchmarkError | None) -> int:
    """One worker per --device_ids entry; a worker's documented exit code (it has printed its
    own error line) becomes this process's. Ctrl-C or SIGTERM here stops the workers too."""
    import torch.multiprocessing as mp
    process.check_can_start(spec.launch.workers, "rank workers", "--device_ids")
    with process.starting(f"{spec.launch.workers} rank workers", "use fewer --device_ids"):
        context = mp.start_processes(_spawned_worker, args=(spec, problem),
                                     nprocs=spec.launch.workers, join=False,
                                     start_method="spawn")
    # When one worker fails, the others are about to fail too (they hear of it when the ranks
    # agree, or see the peer go): let them print their own line before they are terminated
    # (PyTorch 2.5 and later; older ones terminate at once).
    grace = ({"grace_period": WORKER_GRACE_S}
             if "grace_period" in inspect.signature(context.join).parameters else {})
    try:
        while not context.join(**grace):
            pass
    except mp.ProcessExitedException as failure:
        if failure.exit_code in EXPECTED_EXIT_CODES:
            return failure.exit_code
        rank = spec.launch.rank + failure.error_index
        raise BenchmarkError(f"worker for rank {rank} exited with code {failure.exit_code}") \
            from None
    except BaseException:
        for worker in context.processes:
            if worker.is_alive():
                worker.terminate()             # SIGTERM: each worker reports and cleans up
        for worker in context.processes:
            worker.join(30)
        raise
    return 0


def _spawned_worker(index: int, spec: RunSpec, problem: BenchmarkError | None) -> None:
    """One worker of a manual launch with several --device_ids (runs in a child process). The
    parent's problem found before the run goes to its first worker; the others hear of it from
    that worker when the ranks agree. A rank reports as a rank torchrun starts does, through
    the command's own mapping (process.command): its one line, prefixed with its rank, and the
    documented exit code, which the parent takes as its own."""
    prefix = f"[rank {spec.launch.rank + index}] "
    code = process.command(
        lambda: run_worker(spec.for_worker(index), problem if index == 0 else None),
        prefix=lambda: prefix)
    if code:
        sys.exit(code)


# ---------------------------------------------------------------- one process, one device

def _single_device(plan: Plan, what: str, print_notes: bool = True) -> list[RunSpec]:
    # A sweep row whose settings do not suit its model fails alone, when its turn comes.
    specs = [with_baselines(resolve(config, check=not plan.is_sweep), plan)
             for config in plan.configs]
    if specs[0].launch.distributed:
        raise UsageError(f"{what} runs in one process on one device; launch it without "
                         f"torchrun, srun or --distributed_dataparallel")
    _refuse_repeated_rows(specs)
    devices.activate(specs[0].device)
    # Every row's notes, each once: a note of a later row only (--quantize int8wo without
    # --compile beside an unquantized first row) is said too.
    notes = dict.fromkeys(note for spec in specs for note in spec.notes)
    for note in notes if print_notes else ():
        print(safe_text.terminal(f"Note: {note}"))
    return specs


def _refuse_repeated_rows(specs: list[RunSpec]) -> None:
    """A sweep whose lists name one configuration twice (``--batch-size 8,8``, or a model by
    its name and by an alias) would run it twice without a word, as two rows that look like
    two configurations: refused before anything is built. Rows are the same configuration
    when every setting that names a result agrees (the model as resolved, not as spelled)."""
    fields = tuple(name for name in identity.naming_fields() if name != "network")
    seen: dict[str, RunSpec] = {}
    for spec in specs:
        ours = identity.of_spec(spec)
        key = json.dumps([ours.get(name) for name in fields], sort_keys=True, default=str)
        if key in seen:
            first = seen[key]
            raise UsageError(f"the sweep lists one configuration twice ({first.config.network} "
                             f"{first.config.mode}, batch {first.config.batch_size}: "
                             f"{first.result_name or 'the same settings'}); give each value "
                             f"once (--repeat N measures one configuration N times)")
        seen[key] = spec


def _claimed(spec: RunSpec, taken: set[str] | None = None) -> RunSpec:
    spec, note = files.claim_result_path(spec, taken)
    if note:
        print(safe_text.terminal(f"Note: {note}"), flush=True)
    return spec


def run_sweep(plan: Plan, specs: list[RunSpec]) -> int:
    taken: set[str] = set()                  # rows of this sweep never share a name
    specs = [_claimed(spec, taken) for spec in specs]
    first = specs[0]
    files.prepare_output(first, plan.plot)
    env = environment.describe(first.device)
    print(f"Sweep of {len(specs)} configurations on {env.device} {env.device_name}, "
          f"{first.config.iterations} timed iterations each")
    rows = sweep.run_sweep(specs, env, sys.stdout)
    sweep_table.print_comparison(rows, sys.stdout)
    if first.json_path is not None:
        path = sweep.write_files(rows, first.config.output_dir, env)
        print(safe_text.terminal(f"Results JSON : {path} (and one per successful row)"))
        print(safe_text.terminal(f"Results CSV  : {first.csv_path}"))
    if plan.plot:
        sweep_plot.plot_rows(rows, plan.plot)
        print(safe_text.terminal(f"Plot         : {plan.plot}"))
    return sweep.outcome(rows)


def run_ab(plan: Plan) -> int:
    """``--ab``: A (the command as given) and B, alternating by round in one process on one
    device (each trial in a fresh worker by default), then the paired verdict."""
    ab_plan = plan.ab
    if ab_plan is None:
        raise ValueError("run_ab runs a plan of --ab")
    specs = [resolve(plan.configs[0]), resolve(ab_plan.config)]
    ab.check_same_unit(specs)
    if specs[0].launch.distributed:
        raise UsageError("--ab runs in one process on one device; launch it without torchrun, "
                         "srun or --distributed_dataparallel")
    devices.activate(specs[0].device)
    taken: set[str] = set()                  # A and B never share a result name
    specs = [_claimed(spec, taken) for spec in specs]
    for spec in specs:
        files.prepare_output(spec)
    env = environment.describe(specs[0].device)
    rounds = specs[0].config.repeat
    where = ("each trial in a fresh worker process" if trials.in_workers(specs[0])
             else "all trials in this process (--trials in-process)")
    print(f"A/B on {env.device} {env.device_name}: A is the command as given, B adds "
          f"{ab_plan.flags}; {rounds} rounds, A B then B A in turn, {where}", flush=True)
    rows = sweep.run_sweep(specs, env, sys.stdout, counterbalance=True)
    for side, row in zip("AB", rows):
        if row.failed:
            raise ReportedFailure(f"--ab: {side} failed ({row.status}): {row.error}",
                                  row.exit_code)
    result = ab.verdict_of(rows, plan.tolerance_pct)
    ab.print_verdict(result, ab_plan, rows, sys.stdout)
    path = ab.write(result, ab_plan, rows)
    if path is not None:
        print(safe_text.terminal(
            f"Results JSON : {rows[0].spec.json_path} (A), {rows[1].spec.json_path} (B)"))
        print(safe_text.terminal(f"A/B JSON     : {path}"))
    ab.fail_if_slower(result, ab_plan, rows)
    return 0


def _batch_probe(spec: RunSpec, plan: Plan):
    """Whether a batch fits: out of memory on a GPU; on the CPU, beyond --memory-budget-gb of
    peak resident memory (required there: nothing else stops the search before the machine
    swaps)."""
    def probe(batch: int) -> bool:
        return capacity.batch_fits(spec, batch)
    if devices.is_gpu(spec.device):
        return probe
    memory = capacity.HostMemory()
    budget = plan.memory_budget_gb
    problem = capacity.host_budget_problem(budget, memory,
                                           devices.total_memory_bytes(spec.device))
    if problem or budget is None:                 # no budget is a problem on the CPU
        raise UsageError(problem or "--memory-budget-gb is needed on the CPU")
    return capacity.within_host_budget(probe, budget * 1e9, memory)


def run_largest_batch(spec: RunSpec, plan: Plan) -> int:
    """Find the largest batch that fits, printing every try, and benchmark it."""
    probe = _batch_probe(spec, plan)
    files.prepare_output(spec)
    note = capacity.apply_memory_budget(spec.device, plan.memory_budget_gb)
    if note:
        print(safe_text.terminal(f"Note: {note}"))
    config = spec.config
    print(f"Searching the largest batch for {config.network} ({config.mode}, "
          f"{spec.precision.name}) from {config.batch_size} up to {plan.max_batch_limit}, "
          f"to a multiple of {plan.batch_granularity}...", flush=True)
    activity = progress.Activity(sys.stdout)

    def fits(batch: int) -> bool:
        activity.start(f"  batch {batch}", announce=False)
        ok = probe(batch)
        activity.finish("fits" if ok else "out of memory")
        return ok

    def full_run(batch: int) -> int | None:
        print(f"Largest batch that fits the probe: {batch}; benchmarking it", flush=True)
        try:
            return run(spec.with_batch_size(batch))
        except OutOfMemory:
            print(f"  batch {batch}: the full run ran out of memory; searching below it",
                  flush=True)
            return None

    found, code = capacity.largest_that_runs(fits, full_run, config.batch_size,
                                             plan.max_batch_limit, plan.batch_granularity)
    if found.largest == 0 or code is None:        # a batch that fits has its run's code
        raise OutOfMemory(f"not even batch 1 of {config.network} fits: try --amp or --fp16 1, "
                          f"a smaller --image-size, or a larger --memory-budget-gb")
    limit = (" (the --max-batch-limit; more may fit)"
             if found.largest == plan.max_batch_limit else "")
    print(f"Largest batch that fits: {found.largest}{limit}")
    return code
