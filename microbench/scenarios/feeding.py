"""Training and inference fed by an input pipeline: ``--data loader|folder`` (issue 25).

With ``--data synthetic`` (the default) the step reads inputs made once on the device, and
nothing here runs. With ``--data loader`` (a generated set, made once into the cache) or
``--data folder`` (the user's tree), one process measures, in this order, after the usual
warm-up on the synthetic inputs (where compilation and autotuning happen):

1. **the model alone**: ``--iterations`` steps on the synthetic inputs, timed by the scenario's
   own loop (device events), before any loader worker exists, so that no worker competes with
   the model for the host's cores;
2. the pipeline opened (the set made or reused, the folder scanned; the workers start);
3. **the loader alone**: the batches the workers queued at start-up taken untimed, then
   ``max(--iterations, 4 x workers)`` batches fetched, copied and through the device stage,
   timed to a device synchronisation (four batches per worker at least, so the rate is of
   steady production, not of where each worker happened to be);
4. fed warm-up: ``max(--warmup, workers x prefetch factor)`` fed steps, not recorded, which
   take the batches the workers queued while nobody asked, so the timed steps start from the
   loader's steady state and not from a full queue;
5. **the pipeline**: the run's own timed loop (telemetry, memory peaks, the headline
   throughput) with each step taking its batch from the loader; the time each step waited
   (host time in ``next(iterator)`` plus queuing the copy) is recorded per step.

The loader alone runs right before the pipeline so that the files it read are in the page
cache for both, as the model alone runs before both so that the workers are not running yet.
:class:`PipelineFed` is the mixin that gives the training and inference scenarios all this;
``settings/data_settings.check_flags`` refuses, from the flags alone (below torch), data
settings that would not take effect.

Example::

    class Training(PipelineFed, Scenario): ...
    work = scenario.before_timing(spec, work, on_phase)    # model alone, loader alone, warm-up
    timed = scenario.loop(work, device)(iterations, 0)     # the fed step, waits recorded
    scenario.input_measured(work)                          # DataTrial (ProcessResult.data)
    scenario.release_inputs(work)                          # workers stopped
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Callable, ContextManager

import torch

from microbench.measure.results import Timed
from microbench.platform import devices, process
from microbench.data.pipeline import FedStep, Pipeline, check_placement, open_pipeline
from microbench.data.folder import list_images
from microbench.measure.input_bound import DataTrial, LoaderRun, ModelAloneRun
from microbench.data.settings import ModelInput, check_for
from microbench.platform.errors import UsageError
from microbench.steps.workload import Workload
from microbench.scenarios.base import Loop, Scenario
from microbench.scenarios.views import RunView, SummaryView, Work
from microbench.settings.config import BenchConfig
from microbench.settings.data_settings import settings_of
from microbench.platform.distributed import Launch

# The loader alone: batches per worker at least (see the module docstring).
LOADER_BATCHES_PER_WORKER = 4


def model_input(spec: RunView) -> ModelInput:
    return ModelInput.of(spec.model, spec.precision.model_dtype, spec.config.nhwc,
                         spec.scenario.updates_weights)


def check_resolved(spec: RunView) -> None:
    """Before the model is built: the model takes images or token ids, decoding and transforms
    have a GPU where asked (and GPU decoding a build that has it), the folder is a tree of
    images. UsageError (exit 2) or MissingEnvironment (exit 4)."""
    settings = settings_of(spec.config)
    check_for(settings, model_input(spec))
    check_placement(settings, spec.device)
    workers = settings.resolved_workers(ranks_on_this_host(spec.launch))
    # Every rank of this host starts its own; the ranks themselves are running already.
    process.check_can_start(workers * ranks_on_this_host(spec.launch), "loader workers",
                            "--workers")
    if settings.source == "folder" and settings.data_dir is not None:   # check(): named
        list_images(settings.data_dir)


def ranks_on_this_host(launch: Launch) -> int:
    """The ranks that share this host's cores: torchrun's LOCAL_WORLD_SIZE, the manual launch's
    workers, else one."""
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    if launch.distributed and local.isdigit() and int(local) > 0:
        return int(local)
    return max(1, launch.workers)


@dataclass
class FedWork(Workload):
    """The workload with its step fed by the pipeline, and what was measured beside it."""

    pipeline: Pipeline | None = None
    fed: FedStep | None = None
    model_alone: ModelAloneRun | None = None
    loader: LoaderRun | None = None

    def measured(self) -> DataTrial:
        pipeline, fed, loader, alone = self.pipeline, self.fed, self.loader, self.model_alone
        if pipeline is None or fed is None or loader is None or alone is None:   # feed()'s
            raise ValueError("a FedWork without its pipeline")
        return DataTrial(pipeline.description(), fed.waits(), fed.worker_cpu(), loader, alone,
                         pipeline.skipped(), pipeline.unit)


def feed(spec: RunView, work: Workload, loop: Callable[[Work, torch.device], Loop],
         on_phase: Callable[[str], None]) -> FedWork:
    """Steps 1 to 4 of the module docstring; the returned work's step is the fed one."""
    config, device, launch = spec.config, spec.device, spec.launch
    on_phase(f"timing the model alone ({config.iterations} iterations, synthetic input)")
    alone = loop(work, device)(config.iterations, 0)
    model_alone = ModelAloneRun(spec.batch_size, alone.times.samples_ms)
    on_phase("opening the input pipeline")
    pipeline = open_pipeline(
        settings_of(config), model_input(spec), spec.batch_size, device, rank=launch.rank,
        world_size=launch.world_size, local_world_size=ranks_on_this_host(launch),
        notify=on_phase)
    try:
        workers = pipeline.description()["workers"]
        batches = max(config.iterations, LOADER_BATCHES_PER_WORKER * workers)
        on_phase(f"timing the loader alone ({batches} batches)")
        loader = pipeline.loader_alone(batches)
        fed = pipeline.feeding(work.step, work.inputs, work.target)
        steps = max(config.warmup, workers * config.prefetch_factor)
        on_phase(f"warming up the fed step ({steps} iterations)")
        for _ in range(steps):
            fed()
        devices.synchronize(device)
    except BaseException:
        pipeline.close()
        raise
    fields = {item.name: getattr(work, item.name) for item in dataclasses.fields(Workload)}
    return FedWork(**{**fields, "step": fed}, pipeline=pipeline, fed=fed,
                   model_alone=model_alone, loader=loader)


class PipelineFed(Scenario):
    """The training and inference scenarios' side of the input pipeline (a mixin before
    :class:`~.base.Scenario`); with ``--data synthetic`` every method does what the base does."""

    feeds_input_pipeline = True

    def check_spec(self, spec: RunView) -> None:
        super().check_spec(spec)
        if spec.config.data != "synthetic":
            check_resolved(spec)

    def before_timing(self, spec: RunView, work: Work, on_phase: Callable[[str], None]) -> Work:
        if spec.config.data == "synthetic" or not isinstance(work, Workload):
            return super().before_timing(spec, work, on_phase)
        return feed(spec, work, super().loop, on_phase)

    def loop(self, work: Work, device: torch.device, time_fn: Callable[[], float] | None = None,
             around: Callable[[int], ContextManager[object]] | None = None) -> Loop:
        inner = super().loop(work, device, time_fn, around)
        fed = work.fed if isinstance(work, FedWork) else None
        if fed is None:
            return inner

        def fed_loop(iterations: int, first_index: int) -> Timed:
            fed.start(iterations)
            try:
                return inner(iterations, first_index)
            finally:
                fed.stop()                 # after the loop's own device synchronisation
        return fed_loop

    def input_measured(self, work: Work) -> DataTrial | None:
        return work.measured() if isinstance(work, FedWork) else None

    def release_inputs(self, work: Work) -> None:
        if isinstance(work, FedWork) and work.pipeline is not None:
            work.pipeline.close()

    # ------------------------------------------------------------ the report

    def console_rows(self, summary: SummaryView) -> list[tuple[str, str]]:
        data = summary.data
        return super().console_rows(summary) + (data.rows() if data is not None else [])

    def document(self, summary: SummaryView) -> dict:
        data = summary.data
        return {**super().document(summary), **({"data": data.block()} if data else {})}
