"""One rank's input pipeline, from its settings to batches on the device, with its measurements.

:func:`open_pipeline` checks everything before anything runs (settings, where decoding and
transforms may run on this device, GPU decoding by trying it, the source: the generated set made
or reused, or the user's folder scanned), then builds the dataset, the DataLoader of this rank's
shard and the device stage. The :class:`Pipeline` then gives:

* :meth:`Pipeline.loader_alone`: the loader iterated without the model (batches copied to the
  device and through the device stage), after draining the batches queued at start-up;
* :meth:`Pipeline.feeding`: the model's step fed by the loader. Each call fetches a batch, copies
  it into the workload's own input and target tensors (so the step, its compiled graph or its
  captured graph keep their buffers), records how long the host waited, then runs the step;
* :meth:`Pipeline.close` (or ``with``): the workers stopped and waited for.

The model-alone figure is the run's ordinary synthetic measurement; :func:`measure.report` turns
the three into the verdict and the JSON ``data`` block.

Example (the scenario's side, simplified)::

    with open_pipeline(settings, ModelInput.of(spec.model, dtype, nhwc, training),
                       batch_size=spec.batch_size, device=spec.device, rank=rank,
                       world_size=world, local_world_size=local_world) as pipeline:
        loader = pipeline.loader_alone(batches=50)
        fed = pipeline.feeding(work.step, work.inputs, target)
        warm_up(fed, ...)                               # untimed steps, not recorded
        fed.start(iterations)
        timed = timed_loop(fed, iterations, device)     # the run's own timed loop
        fed.stop()
        run = fed.result(per_s=summary_throughput)
        data = report(pipeline.description(), run, loader, model_alone_per_s,
                      pipeline.skipped())
"""
from __future__ import annotations

import time
from typing import Callable, Iterable, Sequence

import torch

from microbench.platform import devices, safe_text
from microbench.platform.errors import MissingEnvironment, UsageError
from microbench.data import cache, codecs
from microbench.data.datasets import EncodedImages, Failure, TokenWindows
from microbench.data.image_files import FileRefused
from microbench.data.folder import scan_folder
from microbench.data.loader import (Stage, EndlessBatches, batches_per_epoch, check_shared_memory,
                                    make_loader, to_device)
from microbench.measure.input_bound import (CpuMeter, CpuUse, LoaderRun, PipelineRun, WaitTimes,
                                            proc_cpu_seconds)
from microbench.data.settings import ModelInput, check_for
from microbench.settings.data_settings import DataSettings
from microbench.platform.writing import user_cache_root
from microbench.data.transforms import DeviceStage, host_transform


class _TokenStage:
    """Token ids need nothing after the copy (the copy into the workload's tensors casts)."""

    decode = False

    def __call__(self, inputs: torch.Tensor,
                 sources: tuple[str, ...] = ()) -> tuple[torch.Tensor, tuple[Failure, ...]]:
        return inputs, ()


class Pipeline:
    """See the module docstring; made by :func:`open_pipeline`."""

    def __init__(self, settings: DataSettings, model_input: ModelInput, device: torch.device,
                 batches: EndlessBatches, stage: Stage, description: dict,
                 rejected: tuple[tuple[str, str], ...], batch_size: int,
                 clock: Callable[[], float], cpu_seconds: Callable[[int], float | None]):
        self.settings, self.model_input, self.device = settings, model_input, device
        self.batches, self.stage = batches, stage
        self.batch_size = batch_size
        self._description = description
        self._skipped: dict[str, str] = dict(rejected)
        self._clock, self._cpu_seconds = clock, cpu_seconds

    # ------------------------------------------------------------ batches

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch's input and labels on the device (copies queued, not awaited)."""
        batch = next(self.batches)
        self._note(batch.failures)
        if batch.inputs is None:
            path, why = batch.failures[0] if batch.failures else ("?", "unknown")
            raise UsageError(f"no image of {self._description['location']} could be used "
                             f"(e.g. {path}: {why}); check the files")
        try:
            inputs, labels, failures = to_device(batch, self.device, self.stage)
        except FileRefused as refused:
            raise UsageError(f"{refused}; check the files or use --decode cpu") from None
        self._note(failures)
        return inputs, labels

    def _note(self, failures: Iterable[Failure]) -> None:
        for path, why in failures:
            self._skipped.setdefault(path, why)

    def skipped(self) -> tuple[tuple[str, str], ...]:
        """Files left out so far, each once, with the reason (at the scan or when read)."""
        return tuple(self._skipped.items())

    def cpu_meter(self) -> CpuMeter:
        return CpuMeter(self.batches.worker_pids, self._clock, self._cpu_seconds)

    # ------------------------------------------------------------ measurements

    def loader_alone(self, batches: int, warmup: int | None = None) -> LoaderRun:
        """Items per second of the loader without the model: ``batches`` batches fetched,
        copied and through the device stage, timed on the host up to a device
        synchronisation. The first ``warmup`` batches (default: the workers' start-up queue,
        workers x prefetch factor, at least one) are not timed, since they were made before
        the clock started and would flatter the rate."""
        if warmup is None:
            workers = self._description["workers"]
            warmup = max(1, workers * (self._description["prefetch_factor"] or 0))
        for _ in range(warmup):
            self.next_batch()
        devices.synchronize(self.device)
        meter = self.cpu_meter()
        meter.start()
        start = self._clock()
        for _ in range(batches):
            self.next_batch()
        devices.synchronize(self.device)
        seconds = self._clock() - start
        return LoaderRun(batches * self.batch_size, seconds, batches, meter.stop())

    def feeding(self, step: Callable[[], object], inputs: torch.Tensor,
                target: torch.Tensor | None = None) -> "FedStep":
        return FedStep(self, step, inputs, target, self._clock)

    # ------------------------------------------------------------ describing

    def description(self) -> dict:
        """The settings as they took effect, for the JSON ``data`` block and the console."""
        return dict(self._description)

    @property
    def unit(self) -> str:
        return f"{self.model_input.item}s/s"

    # ------------------------------------------------------------ ending

    def close(self) -> None:
        self.batches.close()

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class FedStep:
    """The model's step fed by the pipeline; records the waits of the steps between
    :meth:`start` and :meth:`stop` (warm-up steps outside them are fed but not recorded). A
    timed loop cut in segments (around a profiled iteration) starts and stops once per
    segment; the samples of every segment are kept."""

    def __init__(self, pipeline: Pipeline, step: Callable[[], object], inputs: torch.Tensor,
                 target: torch.Tensor | None, clock: Callable[[], float]):
        self.pipeline, self.step = pipeline, step
        self.inputs, self.target = inputs, target
        self._clock = clock
        self._starts: list[float] = []
        self._waits: list[float] = []
        self._count = 0
        self._recording = False
        self._segments: list[WaitTimes] = []
        self._meter: CpuMeter | None = None
        self._cpu: list[CpuUse | None] = []

    def __call__(self):
        start = self._clock()
        inputs, labels = self.pipeline.next_batch()
        self.inputs.copy_(inputs, non_blocking=True)
        if self.target is not None:
            self.target.copy_(labels, non_blocking=True)
        if self._recording:
            self._record(start, self._clock() - start)
        return self.step()

    def _record(self, start: float, waited: float) -> None:
        if self._count < len(self._starts):
            self._starts[self._count], self._waits[self._count] = start, waited
        else:
            self._starts.append(start)
            self._waits.append(waited)
        self._count += 1

    def start(self, steps: int) -> None:
        """Record from the next step on; room for ``steps`` samples is made now, so the timed
        loop allocates nothing for them. Starts measuring the workers' CPU."""
        self._starts, self._waits = [0.0] * steps, [0.0] * steps
        self._count, self._recording = 0, True
        self._meter = self.pipeline.cpu_meter()
        self._meter.start()

    def stop(self) -> None:
        """Call when the timed loop (or segment) is over, after its device synchronisation:
        closes the last step's interval and the CPU measurement."""
        if not self._recording:
            return
        end = self._clock()
        self._recording = False
        count = self._count
        starts = self._starts[:count] + [end]
        self._segments.append(WaitTimes(tuple(w * 1e3 for w in self._waits[:count]),
                                        tuple((b - a) * 1e3 for a, b in zip(starts, starts[1:]))))
        self._cpu.append(self._meter.stop() if self._meter is not None else None)

    def waits(self) -> WaitTimes:
        if self._recording:
            raise RuntimeError("FedStep.stop() closes the last step before waits are read")
        return WaitTimes.merge(self._segments)

    def worker_cpu(self) -> CpuUse | None:
        """The workers' CPU over the recorded segments (unknown if any segment's is)."""
        uses = self._cpu
        known = [use for use in uses if use is not None]
        if not uses or len(known) < len(uses):
            return None
        return CpuUse(sum(u.cpu_s for u in known), sum(u.wall_s for u in known),
                      known[0].workers)

    def result(self, per_s: float) -> PipelineRun:
        """The pipeline's run: ``per_s`` is the run's own throughput (its timed total, on the
        summary's basis), with the waits and worker CPU recorded here."""
        return PipelineRun(per_s, self.waits(), self.worker_cpu())


# ---------------------------------------------------------------- opening

def open_pipeline(settings: DataSettings, model_input: ModelInput, batch_size: int,
                  device: torch.device, rank: int = 0, world_size: int = 1,
                  local_world_size: int = 1, notify: Callable[[str], None] = lambda line: None,
                  clock: Callable[[], float] = time.perf_counter,
                  cpu_seconds: Callable[[int], float | None] = proc_cpu_seconds) -> Pipeline:
    """Check, make or scan the source, and build this rank's pipeline (see the module
    docstring). ``batch_size`` is this rank's; ``notify`` gets one-line progress (making the
    generated set once, waiting for another rank that makes it)."""
    settings.check()
    check_for(settings, model_input)
    if settings.is_synthetic:
        raise UsageError("--data synthetic needs no pipeline: the model's inputs are made on "
                         "the device")
    check_placement(settings, device)
    workers = settings.resolved_workers(local_world_size)
    on_gpu = devices.is_gpu(device)
    stage: Stage
    dataset: TokenWindows | EncodedImages
    if model_input.kind == "tokens":
        dataset, description, rejected = _token_source(settings, model_input, notify)
        stage = _TokenStage()
    else:
        dataset, description, rejected = _image_source(settings, model_input, notify)
        stage = DeviceStage(device, model_input.image_size, model_input.training,
                            decode=settings.decode == "gpu",
                            normalise=settings.transforms == "gpu", dtype=model_input.dtype,
                            channels_last=model_input.channels_last)
    per_epoch = batches_per_epoch(len(dataset), batch_size, world_size)
    if per_epoch < 1:
        raise UsageError(f"{len(dataset)} {model_input.item}s make no full batch of {batch_size} "
                         f"on each of {world_size} rank(s): use --data-images "
                         f"{batch_size * world_size} or more, or a smaller --batch-size")
    check_shared_memory(_batch_bytes(settings, model_input, description, batch_size), workers,
                        settings.prefetch_factor)
    loader = make_loader(dataset, batch_size, workers, settings.pin_memory and on_gpu,
                         settings.prefetch_factor, settings.persistent_workers, rank,
                         world_size, settings.seed, shuffle=model_input.training)
    description.update(
        decode=settings.decode, transforms=settings.transforms, workers=workers,
        workers_default=settings.workers is None,
        pin_memory=settings.pin_memory and on_gpu,
        prefetch_factor=settings.prefetch_factor if workers else None,
        persistent_workers=settings.persistent_workers and workers > 0,
        batch_size=batch_size, rank=rank, world_size=world_size,
        shard_items=len(dataset) // world_size, batches_per_epoch=per_epoch)
    description["summary"] = _summary(description, model_input)
    return Pipeline(settings, model_input, device, EndlessBatches(loader), stage, description,
                    rejected, batch_size, clock, cpu_seconds)


def _batch_bytes(settings: DataSettings, model_input: ModelInput, description: dict,
                 batch_size: int) -> int:
    """The size of one batch as a worker hands it over (inputs; the labels are small)."""
    if model_input.kind == "tokens":
        return batch_size * (model_input.seq_len + 1) * 4
    if settings.decode == "gpu":                     # encoded files
        return int(batch_size * description["mean_file_bytes"])
    element = 1 if settings.transforms == "gpu" else model_input.dtype.itemsize
    return batch_size * 3 * model_input.image_size ** 2 * element


def check_placement(settings: DataSettings, device: torch.device) -> None:
    """Decoding or transforms on the GPU need one, and GPU decoding a build that has it (one
    tiny JPEG decoded now): MissingEnvironment, exit 4."""
    if not devices.is_gpu(device):
        moved = [flag for flag, place in (("--decode", settings.decode),
                                          ("--transforms", settings.transforms))
                 if place == "gpu"]
        if moved:
            raise MissingEnvironment(f"{' and '.join(moved)} gpu need a GPU, and this run is on "
                                     f"the CPU: use {' '.join(f + ' cpu' for f in moved)}")
    if settings.decode == "gpu":
        codecs.probe_device_decode(device)


def _image_source(settings: DataSettings, model_input: ModelInput, notify: Callable[[str], None]
                  ) -> tuple[EncodedImages, dict, tuple[Failure, ...]]:
    paths: Sequence[str]
    labels: Sequence[int]
    rejected: tuple[Failure, ...]
    if settings.source == "loader":
        made = cache.ensure_image_set(settings.cache_dir or user_cache_root(),
                                      settings.image_format, settings.count,
                                      settings.image_side, settings.seed, notify=notify)
        paths = made.file_paths()
        labels = range(len(paths))              # image i is of class i % num_classes
        rejected = ()
        description: dict = {"source": "loader", "format": settings.image_format,
                       "items": len(paths), "image_side": settings.image_side,
                       "mean_file_bytes": made.mean_file_bytes,
                       "location": made.path, "cache_built": made.built}
    else:
        assert settings.data_dir is not None        # settings.check(): --data folder names it
        listing = scan_folder(settings.data_dir, settings.max_file_bytes)
        formats = listing.suffix_formats()
        if settings.decode == "gpu" and set(formats) != {"jpeg"}:
            others = ", ".join(f"{n} {kind.upper()}" for kind, n in formats.items()
                               if kind != "jpeg")
            raise UsageError(f"--decode gpu decodes JPEG only, and --data-dir "
                             f"{settings.data_dir} holds {others} files: use --decode cpu")
        paths, labels, rejected = listing.paths, listing.labels, listing.rejected
        if listing.outside:
            path, real = listing.outside[0]
            notify(safe_text.terminal(
                f"{len(listing.outside)} image(s) of --data-dir {settings.data_dir} are links "
                f"that lead out of it (e.g. {path} -> {real}); they are read"))
        description = {"source": "folder", "format": "+".join(sorted(formats)),
                       "format_counts": formats, "items": len(paths),
                       "mean_file_bytes": listing.mean_file_bytes,
                       "layout": listing.layout, "classes": len(listing.classes) or 1,
                       "location": listing.root, "rejected_at_scan": len(rejected)}
    transform = None
    if settings.decode == "cpu":
        transform = host_transform(model_input.image_size, model_input.training,
                                   normalise=settings.transforms == "cpu",
                                   dtype=model_input.dtype)
    dataset = EncodedImages(paths, labels, model_input.num_classes, settings.max_file_bytes,
                            transform, decode_on_host=settings.decode == "cpu")
    description["decoder"] = codecs.LIBRARY
    return dataset, description, rejected


def _token_source(settings: DataSettings, model_input: ModelInput, notify: Callable[[str], None]
                  ) -> tuple[TokenWindows, dict, tuple[Failure, ...]]:
    tokens = settings.count * model_input.seq_len + 1
    made = cache.ensure_token_corpus(settings.cache_dir or user_cache_root(),
                                     model_input.vocab_size, tokens, settings.seed,
                                     notify=notify)
    dataset = TokenWindows(made.file_paths()[0], tokens, model_input.seq_len)
    description = {"source": "loader", "format": "int32 token ids (memory-mapped)",
                   "items": len(dataset), "tokens": tokens, "location": made.path,
                   "cache_built": made.built}
    return dataset, description, ()


def _summary(description: dict, model_input: ModelInput) -> str:
    """One line: what is read, and how (the console's 'Input pipeline' row)."""
    if model_input.kind == "tokens":
        what = f"{description['items']} sequences of a generated token corpus"
        how = ""
    else:
        if description["source"] == "loader":
            side = description["image_side"]
            what = (f"{description['items']} generated {description['format'].upper()} images "
                    f"{side}x{side}")
        else:
            what = (f"{description['items']} {description['format'].upper()} images of "
                    f"{description['location']} ({description['layout']})")
        how = f", decode {description['decode']}, transforms {description['transforms']}"
    workers = description["workers"]
    loading = (f"{workers} worker{'s' if workers > 1 else ''}" if workers
               else "loading in the main process")
    if description["prefetch_factor"]:
        loading += f", prefetch {description['prefetch_factor']}"
    pinned = "pinned" if description["pin_memory"] else "not pinned"
    return f"{what}{how}, {loading}, {pinned}"
