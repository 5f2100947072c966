"""What every kind of run has: the :class:`Scenario` interface, its unit of work, and the timed
loop of a workload that runs one step per iteration.

The unit of work is defined here once. An *item* is what the batch counts (an image, a clip, a
sequence); a *unit* is what throughput, FLOPs and energy are counted in: the item itself for
image and video models, tokens for language models (a sequence of ``seq_len`` tokens), and
generated tokens in generation (``gen_len`` per sequence). Every writer asks the scenario; none
multiplies by a length itself.

Example::

    scenario.units_per_iteration(batch=8)        # 8 images, or 8 x 512 tokens
    timed = scenario.loop(work, device)(iterations=20, first_index=0)
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, ClassVar, ContextManager

import torch

from microbench.platform.errors import UsageError
from microbench.measure.results import Detail, PhaseTimes, Timed
from microbench.measure.timing import Measurement, make_recorder
from microbench.models.family import ModelFamily
from microbench.settings.config import BenchConfig
from microbench.settings.kinds import Kind
from microbench.scenarios.views import RunView, SummaryView, Work

if TYPE_CHECKING:
    from microbench.measure.input_bound import DataTrial
    from microbench.measure.results import ShardedState
    from microbench.steps.workload import PhaseMarks

# What a scenario's loop is: (iterations, index of the first iteration) -> its timed result.
Loop = Callable[[int, int], Timed]


class Scenario:
    """A kind of run: how its work is built and timed, its unit of work, its report."""

    mode: ClassVar[str] = ""
    updates_weights: ClassVar[bool] = False      # an optimizer steps (DDP wraps the model)
    flops_counted: ClassVar[str] = "forward"     # what one iteration's FLOP count covers
    # Whether the time per item (batch time / batch) means something to a reader: not in
    # generation, where every sequence of the batch takes the whole generation's time (its
    # scenario prints that, named, instead).
    items_run_one_by_one: ClassVar[bool] = True
    # Whether --data loader|folder can feed its steps (scenarios/feeding.py: PipelineFed).
    feeds_input_pipeline: ClassVar[bool] = False
    # Whether --preset fast stores the weights in half precision (no autocast) and replays
    # its steps as CUDA/HIP graphs on GPUs: a decode step is bound by reading the weights.
    fast_half_weights: ClassVar[bool] = False
    # Whether it decodes token by token (decode_tokens_per_s, inter-token latency): a batch
    # sweep then gets the generation table and the throughput-latency figure.
    decodes_tokens: ClassVar[bool] = False

    def __init__(self, config: BenchConfig, model: ModelFamily) -> None:
        self.config, self.model = config, model

    # ------------------------------------------------------------ rules

    @classmethod
    def kind(cls) -> Kind:
        """What the flags' rules need of this kind of run: its class flags, which
        ``settings/kinds.KINDS`` repeats below torch for the plan's checks (held equal by
        tests/test_structure.py); the rules are there, declared once."""
        return Kind(cls.mode, updates_weights=cls.updates_weights,
                    feeds_input_pipeline=cls.feeds_input_pipeline,
                    decodes_tokens=cls.decodes_tokens)

    def check_spec(self, spec: RunView) -> None:
        """Settings that do not suit the resolved run (its device, its model); see RunSpec."""

    # ------------------------------------------------------------ the unit of work

    @property
    def item(self) -> str:
        """What the batch counts: image, clip or sequence."""
        return self.model.item

    @property
    def counts_tokens(self) -> bool:
        return self.model.tokens_per_item is not None

    @property
    def unit(self) -> str:
        """What throughput, FLOPs and energy are counted in."""
        return "token" if self.counts_tokens else self.item

    @property
    def units_per_item(self) -> int:
        return self.model.tokens_per_item or 1

    def units_per_iteration(self, batch: int) -> int:
        return batch * self.units_per_item

    # ------------------------------------------------------------ building and timing

    def build(self, spec: RunView, wrap: Callable[[torch.nn.Module], torch.nn.Module] | None,
              count_flops: bool) -> Work:
        """The model, inputs and step of this run; ``wrap`` goes around the ready model."""
        raise NotImplementedError

    def loop(self, work: Work, device: torch.device, time_fn: Callable[[], float] | None = None,
             around: Callable[[int], ContextManager[object]] | None = None) -> Loop:
        """The timed loop as a function of (iterations, index of the first iteration)."""
        return lambda iterations, first_index: timed_loop(
            work.step, iterations, device, time_fn, around, first_index, work.phases)

    # ------------------------------------------------------------ the input pipeline

    def before_timing(self, spec: RunView, work: Work, on_phase: Callable[[str], None]) -> Work:
        """The work the timed loop runs, called after warm-up: ``work`` itself here (inputs
        made once on the device); :class:`~.feeding.PipelineFed` measures the model and the
        loader alone, then returns the step fed by the loader."""
        return work

    def input_measured(self, work: Work) -> DataTrial | None:
        """What this process's input pipeline measured (None: no pipeline)."""
        return None

    def release_inputs(self, work: Work) -> None:
        """Stop the input pipeline's worker processes (called however the run ended)."""

    def after_timing(self, spec: RunView, work: Work, detail: Detail) -> Detail:
        """The scenario's detail of the timed loop, with what a pass after it adds (generation:
        where a decode step's time goes); ``detail`` itself here."""
        return detail

    def sharded_state(self, work: Work) -> ShardedState | None:
        """What this rank holds of a sharded model after the timed loop (None: not sharded)."""
        return None

    # ------------------------------------------------------------ the report

    def mode_text(self) -> str:
        return self.config.mode

    def console_rows(self, summary: SummaryView) -> list[tuple[str, str]]:
        """Rows this kind of run adds to the console summary."""
        return []

    def document(self, summary: SummaryView) -> dict:
        """Keys this kind of run adds to the result JSON."""
        return {}


def timed_loop(step: Callable[[], object], iterations: int, device: torch.device,
               time_fn: Callable[[], float] | None = None,
               around_step: Callable[[int], ContextManager[object]] | None = None,
               first_index: int = 0, phases: PhaseMarks | None = None) -> Timed:
    """The timed region: ``iterations`` steps between device-event marks.

    ``around_step(i)`` is a context per iteration (a named ROCTX/NVTX range); the loop is chosen
    once, so the plain loop carries no per-iteration branch. With ``phases`` (the step's
    :class:`~microbench.steps.workload.PhaseMarks`), the step marks the end of its forward and backward
    passes on the same recorder, so each iteration's interval is cut in three that add up to it
    exactly.
    """
    per_step = len(PhaseTimes.NAMES) if phases is not None else 1
    recorder = make_recorder(device, iterations * per_step + 1, time_fn)
    outputs: list = [None] * iterations
    if phases is not None:
        phases.record_on(recorder)
    try:
        recorder.mark()
        if around_step is None:
            for index in range(iterations):
                outputs[index] = step()
                recorder.mark()
        else:
            for index in range(iterations):
                with around_step(first_index + index):
                    outputs[index] = step()
                recorder.mark()
    finally:
        if phases is not None:
            phases.stop()
    intervals = recorder.intervals_ms()
    if phases is None:
        return Timed(Measurement(intervals), outputs)
    split = PhaseTimes(*(Measurement(intervals[i::per_step]) for i in range(per_step)))
    iterations_ms = (sum(intervals[i:i + per_step]) for i in range(0, len(intervals), per_step))
    return Timed(Measurement(iterations_ms), outputs, detail=split)
