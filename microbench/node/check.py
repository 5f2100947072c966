"""``microbench-node``'s run: one process per GPU (spawned here, or the ranks torchrun or SLURM
started), the program on each at once, the links between them, and on rank 0 (or the parent
of the spawned processes) the verdict, its table, its document and its exit code.

The processes meet in one process group (NCCL/RCCL on GPUs, gloo on the CPU) through
``platform/distributed.py``; spawned processes start, reply and fail through
``platform/workers.py`` (each ends with its parent; a failure is one line and its exit code, a
thread or process limit exit 4, as everywhere else).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import contextlib
import os
import socket
import sys
import time
from dataclasses import dataclass, field

import torch

from microbench.measure.telemetry.opening import open_source
from microbench.node import document, reference
from microbench.node import links, node_pairs, program, show
from microbench.node.reference import ALL_NODES, Baseline
from microbench.node.parts import DEFAULT_TOLERANCE_PCT
from microbench.node.verdict import Verdict, judge, judge_links, pairs_to_confirm
from microbench.platform import devices
from microbench.platform import distributed, process, safe_text, workers, writing
from microbench.platform.errors import EXIT_FLAGGED, UsageError
from microbench.store.schema import validate_result

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    import argparse
    import torch.distributed as dist


@dataclass(frozen=True)
class Options:
    """What every process needs of the command line (picklable, for spawned processes)."""

    device_type: str                  # "cuda" | "cpu"
    samples: int
    quick: bool
    timeout_s: float
    tolerance_pct: float = DEFAULT_TOLERANCE_PCT
    baseline: Baseline | None = None  # --baseline, read before the processes start


@dataclass
class Outcome:
    """What rank 0 gathered: every GPU's record and every link's measurement."""

    records: list = field(default_factory=list)
    rechecks: list | None = None      # every GPU's second measurement of the flagged parts
    copies_again: list = field(default_factory=list)  # the flagged pairs' copies, again
    collectives_again: list = field(default_factory=list)  # the flagged all-reduces, again
    pairs_of_nodes: list = field(default_factory=list)  # each pair of nodes' all-reduce, where
                                                        # the job's across nodes flagged
    collectives: list = field(default_factory=list)
    copies: list = field(default_factory=list)
    p2p_note: str | None = None
    backend: str | None = None


@dataclass(frozen=True)
class _LaunchAsk:
    """What ``distributed.detect`` reads of a configuration: no manual-launch flags (the node
    check starts its own processes), no batch to split."""

    distributed_dataparallel: bool = False
    rank: int | None = None
    world_size: int | None = None
    device_ids: tuple[int, ...] | None = None
    batch_size: int = 0
    dist_backend: str | None = None
    dist_url: str | None = None


def _device_type(requested: str) -> str:
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        devices.select("cuda")             # raises its one line (exit 4)
    return requested


def run(args: argparse.Namespace, argv: list[str], stored: Baseline | None) -> int:
    """The check as ``argv`` (the command line, for the document) asked for it, judged against
    ``stored`` (--baseline, read by :func:`~microbench.node.arguments.validate`)."""
    started = time.perf_counter()
    program.scale_of(os.environ)                # the test hook's value, checked first
    if args.plot is not None:
        from microbench.output import chart
        chart.check_path(args.plot)
    options = Options(_device_type(args.device), args.samples, args.quick, args.dist_timeout,
                      args.tolerance, stored)
    launch = distributed.detect(_LaunchAsk())
    if launch.distributed and args.processes is not None:
        raise UsageError(f"--processes: under {launch.launcher} the launcher started "
                         f"the processes (one per GPU); drop --processes")
    # The process that writes (rank 0, or the spawning parent) claims --json's name first.
    # Given back when the check ends, however (a check called in-process, as tests do, may
    # not end its process).
    json_path = claim_json(args.json) if launch.is_main and not args.no_files else None
    try:
        if launch.distributed:
            program.scale_of(os.environ, launch.world_size)
            outcome, code = _measure_rank(launch, options)
            if not launch.is_main or outcome is None:       # rank 0 has the outcome
                return code
        else:
            count = _process_count(args.processes, options.device_type)
            program.scale_of(os.environ, count)  # a rank outside the job: refused before it
            distributed.check_fail_rank(count)
            outcome = _spawned(count, options)
        return _finish(outcome, args, options, argv, time.perf_counter() - started, json_path)
    finally:
        writing.release_claims()


def claim_json(path: str) -> str:
    """``--json``'s name for this check, claimed for it (``writing.claim``: an exclusive
    create beside it) before the GPUs are measured. A file of an earlier check is replaced (a
    re-run refreshes it); a name another live check claimed sends this one to the next name
    no file has (``NAME-2.json``...), with a note: two checks at once into one --json
    otherwise both wrote it, and the first result was lost (issue 65)."""
    if writing.claim(path):
        return path
    stem, extension = os.path.splitext(path)
    number = 2
    while True:
        candidate = f"{stem}-{number}{extension}"
        if not os.path.lexists(candidate) and writing.claim(candidate):
            break
        number += 1
    print(safe_text.terminal(f"note: {path} is claimed by another node check running now; "
                             f"this check's result goes to {candidate}"))
    return candidate


def _process_count(requested: int | None, device_type: str) -> int:
    if device_type == "cpu":
        count = requested or 2
        process.check_can_start(count, "processes", "--processes")
        return count
    visible = torch.cuda.device_count()
    if requested is not None and requested > visible:
        raise UsageError(f"--processes {requested}: only {visible} GPUs are visible")
    return requested or visible


# ---------------------------------------------------------------- spawned processes

def _spawned(count: int, options: Options) -> Outcome:
    """``count`` processes, one per GPU (or CPU process), at a rendezvous on this host."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    outcomes = workers.run(f"{__name__}:_worker_main",
                           [(index, count, port, options) for index in range(count)],
                           [f"microbench-node-{index}" for index in range(count)],
                           lambda index: f"node check process {index}",
                           "the node check's processes", "use --processes with fewer")
    return outcomes[0]


def _worker_main(index: int, count: int, port: int, options: Options, connection: Connection
                ) -> None:
    launch = distributed.Launch(launcher="manual", rank=index, local_rank=index,
                                world_size=count, init_method=f"tcp://127.0.0.1:{port}",
                                device_index=index)
    workers.serve(connection, lambda: _measure_rank(launch, options)[0],
                  f"node check process {index}", prefix=f"[rank {index}] ")


# ---------------------------------------------------------------- one rank

def _measure_rank(launch: distributed.Launch, options: Options) -> tuple[Outcome | None, int]:
    """This rank's program and its part of the links; on rank 0 what every rank found. With
    it, the exit code every rank leaves with: the verdict's, judged on rank 0. Under torchrun
    across nodes an agent whose workers all succeeded waits at torchrun's exit barrier for
    the agents whose workers failed (up to 300 s, deaf to SIGTERM): a flagged check, rank 0's
    exit 6 alone, held every other node's torchrun that long (issue 62)."""
    device = (torch.device("cuda", launch.local_rank) if options.device_type == "cuda"
              else torch.device("cpu"))
    devices.activate(device)
    if devices.is_gpu(device):
        _bind_near(device)
    else:
        # The CPU's processes share its cores: each takes its share, or their threads contend.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // launch.world_size))
    source, note = open_source(device)
    try:
        with distributed.failures_reported(launch, options.timeout_s, "rendezvous"):
            distributed.init_process_group(launch, device, options.timeout_s)
        distributed.fail_if_asked(launch)         # the test hook: this rank dies here
        with distributed.leaving_group(), \
                distributed.failures_reported(launch, options.timeout_s, "run"):
            def measure(only: tuple[str, ...] | None = None) -> program.GpuRecord:
                return program.run(device, launch.rank, launch.local_rank, options.samples,
                                   options.quick, source, note,
                                   align=lambda: distributed.barrier(device), only=only,
                                   node_rank=launch.node_rank)
            record = measure()
            rechecks = _recheck(record, measure, options)
            outcome = _links_and_gather(launch, device, options, record, rechecks)
            code = _exit_code(verdict_of(outcome, options)) if outcome is not None else None
            return outcome, distributed.all_gather_objects(code)[0]
    finally:
        if source is not None:
            source.close()


def _bind_near(device: torch.device) -> None:
    """Run on the CPUs of the GPU's own NUMA node: its pinned host buffers are then allocated
    there, and a GPU on the far socket of a healthy two-socket node is not flagged for host
    copies that cross the sockets (the process's own placement, not the GPU's health)."""
    near = devices.local_cpus(device)
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if near and allowed and near & allowed:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, near & allowed)


def _recheck(record: program.GpuRecord, measure: Callable[..., program.GpuRecord], options: Options
            ) -> list | None:
    """A flag is confirmed before it counts: every rank sees every GPU's figures, judges them
    as rank 0 will (the same records, the same rule: the same parts on every rank, without a
    message to agree on), and every GPU measures the flagged parts again, all at once as the
    first time. Every rank's second records (None: nothing was flagged, nothing measured
    again)."""
    records = distributed.all_gather_objects(record)
    again = judge(records, tolerance_pct=options.tolerance_pct,
                  baseline=options.baseline).to_confirm()
    if not again:
        return None
    return distributed.all_gather_objects(measure(only=again))


def _links_and_gather(launch: distributed.Launch, device: torch.device, options: Options,
                      record: program.GpuRecord, rechecks: list | None) -> Outcome | None:
    # Nodes by name and node rank: two nodes of one host name (containers, two torchrun
    # agents on one host) are two nodes.
    everyone = distributed.all_gather_objects((record.node, record.device_name))
    groups = links.node_groups([node for node, _ in everyone])
    models = {rank: model for rank, (_, model) in enumerate(everyone)}
    # Every rank creates every node's group, in the same order (torch.distributed's rule).
    node_groups = {node: (distributed.new_group(ranks) if len(groups) > 1 else None)
                   for node, ranks in groups.items()}
    mine = groups[record.node]
    collectives = [links.all_reduce(node_groups[record.node], mine, device, options.samples,
                                    f"node {record.node}")]
    if len(groups) > 1:
        collectives.append(links.all_reduce(None, list(range(launch.world_size)), device,
                                            options.samples, ALL_NODES))
    collectives_again, pairs_of_nodes = _collectives_again(
        collectives, node_groups, groups, record.node, launch.world_size, device, options,
        models)
    copies, copies_again, p2p_note = [], [], None
    if options.quick:
        p2p_note = "peer-to-peer copies: not measured with --quick"
    elif not devices.is_gpu(device):
        p2p_note = links.NO_P2P_ON_CPU
    else:
        copies = links.pair_copies(node_groups[record.node], mine, record.node, launch.rank,
                                   device, options.samples)
        copies_again = _pairs_again(copies, node_groups[record.node], mine, record.node,
                                    launch.rank, device, options, models)
    # Each node's all-reduce once (its first rank's), the job's once (rank 0's), a pair of
    # nodes' once (its first rank's).
    def once(measured: list) -> list:
        shared = [c for c in measured if c.scope == ALL_NODES] if launch.rank == 0 else []
        own = [c for c in measured if c.scope != ALL_NODES] if launch.rank == mine[0] else []
        return own + shared

    pairs_once = [pair for pair in pairs_of_nodes if pair.all_reduce.ranks[0] == launch.rank]
    gathered = distributed.gather_to_main((record, once(collectives), copies, copies_again,
                                           once(collectives_again), pairs_once))
    if gathered is None:
        return None
    outcome = Outcome(p2p_note=p2p_note, backend=distributed.backend_name(),
                      rechecks=rechecks)
    for record_, collectives_, copies_, again_, reduced_again, pairs_ in gathered:
        outcome.records.append(record_)
        outcome.collectives += collectives_
        outcome.copies += copies_
        outcome.copies_again += again_
        outcome.collectives_again += reduced_again
        outcome.pairs_of_nodes += pairs_
    return outcome


def _collectives_again(collectives: list, node_groups: dict, groups: dict, node: str,
                       world_size: int, device: torch.device, options: Options,
                       models: dict) -> tuple[list, list]:
    """An all-reduce's flag is confirmed as a pair's is: every rank judges every all-reduce as
    rank 0 will (against the other nodes' and the baseline), and the flagged ones are measured
    again: the job's by every rank, then each node's by its own ranks (one order on every
    rank: the job's scope sorts first). The job's flagged across 3 or more nodes, each pair
    of nodes' all-reduce is measured too, to name the slow node (``node_pairs.py``).
    The all-reduces measured again, and the pairs of nodes' (this rank's)."""
    everyone = {c.scope: c for measured in distributed.all_gather_objects(collectives)
                for c in measured}
    flagged = sorted({link.scope for link in judge_links(
        (), list(everyone.values()), options.tolerance_pct, baseline=options.baseline,
        models=models) if link.flagged and link.scope})
    again = []
    for scope in flagged:
        if scope == ALL_NODES:
            again.append(links.all_reduce(None, list(range(world_size)), device,
                                          options.samples, scope))
        elif scope == f"node {node}":
            again.append(links.all_reduce(node_groups[node], groups[node], device,
                                          options.samples, scope))
    if ALL_NODES not in flagged or len(groups) < node_pairs.MIN_NODES:
        return again, []
    return again, node_pairs.measure(groups, node, device, options.samples)


def _pairs_again(copies: list, group: dist.ProcessGroup | None, mine: list[int], host: str,
                 rank: int, device: torch.device, options: Options, models: dict) -> list:
    """A link's flag is confirmed as a GPU's is: every rank judges every pair's copies as rank
    0 will (against the other pairs and the baseline), and the flagged pairs are measured
    again (each node its own, in rounds)."""
    everyone = [c for copies_ in distributed.all_gather_objects(copies) for c in copies_]
    again = pairs_to_confirm(judge_links(everyone, (), options.tolerance_pct,
                                         baseline=options.baseline, models=models))
    if not again:
        return []
    return links.pair_copies(group, mine, host, rank, device, options.samples, only=again)


# ---------------------------------------------------------------- the verdict

def _finish(outcome: Outcome, args: argparse.Namespace, options: Options, argv: list[str],
            seconds: float, json_path: str | None = None) -> int:
    """The verdict, printed and written (``json_path``: --json's claimed name; None: none)."""
    verdict = verdict_of(outcome, options)
    show.print_verdict(verdict, outcome.collectives, outcome.p2p_note, sys.stdout)
    built = document.build(
        verdict, outcome.collectives, outcome.copies, device_type=options.device_type,
        quick=options.quick, samples=options.samples, command=["microbench-node", *argv],
        seconds=seconds, backend=outcome.backend, p2p_note=outcome.p2p_note)
    validate_result(built, "the node check's own document")   # the schema holds
    if json_path is not None and not args.no_files:
        import json
        writing.write_whole(json_path, json.dumps(built, indent=1) + "\n")
        print(safe_text.terminal(f"Result: {json_path}"))
    if args.save_baseline is not None:
        print(reference.save(built["node_check"], args.save_baseline))
    if args.plot is not None:
        from microbench.node import plot
        plot.write(verdict, args.plot)
        print(safe_text.terminal(f"Plot: {args.plot}"))
    sys.stdout.flush()
    return _exit_code(verdict)


def verdict_of(outcome: Outcome, options: Options) -> Verdict:
    """The verdict on what rank 0 gathered."""
    # Nothing flagged at first: nothing measured again, and no flag to confirm ([]).
    return judge(outcome.records, outcome.copies, outcome.collectives, options.tolerance_pct,
                 options.baseline, outcome.rechecks or [], outcome.copies_again,
                 outcome.collectives_again, outcome.pairs_of_nodes)


def _exit_code(verdict: Verdict) -> int:
    return EXIT_FLAGGED if verdict.flagged else 0
