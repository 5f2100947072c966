"""What the scenarios and the parallel strategies read of the objects above them: the resolved
run (``plan.spec.RunSpec``), the finished run's summary (``output.summary.Summary``) and the
work a scenario builds. Those types live in higher layers (plan/, output/), so they are named
here as protocols, below every module of this package, which the type checker holds each
concrete type to (issue 63): a scenario reads ``spec.launch`` or ``summary.world_size``, never
``getattr(spec, ...)``.

Example::

    def console_rows(self, summary: SummaryView) -> list[tuple[str, str]]:
        return [("Ranks", str(summary.world_size))]
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

from microbench.steps.workload import StepSettings

if TYPE_CHECKING:
    import torch

    from microbench.measure.drift import LowPrecision
    from microbench.measure.flops import BandwidthPeak, PeakChoice, Utilization
    from microbench.measure.input_bound import DataReport
    from microbench.measure.results import Detail, RankRecord
    from microbench.measure.telemetry import TelemetryReport
    from microbench.platform.distributed import Launch
    from microbench.settings.config import BenchConfig
    from microbench.settings.mesh import Mesh
    from microbench.steps import workload
    from microbench.steps.sharding import ShardPlan
    from microbench.steps.workload import PhaseMarks


class ScenarioFacts(Protocol):
    """What is read of the run's scenario from outside it (``scenarios.base.Scenario``)."""

    @property
    def updates_weights(self) -> bool: ...


class StrategyView(Protocol):
    """What is read of the run's parallel strategy (``scenarios.strategy.Strategy``)."""

    @property
    def name(self) -> str: ...

    @property
    def shards(self) -> bool: ...

    @property
    def counted_flops(self) -> str: ...

    def check_model(self, spec: RunView) -> None: ...

    def mesh(self, config: BenchConfig, launch: Launch) -> Mesh: ...

    def console_rows(self, summary: SummaryView) -> list[tuple[str, str]]: ...

    def build(self, spec: RunView, wrap: Callable[[torch.nn.Module], torch.nn.Module] | None,
              count_flops: bool) -> workload.Workload: ...


class RunView(StepSettings, Protocol):
    """What a scenario or a strategy reads of the resolved run (``plan.spec.RunSpec``): what a
    step is built from (``steps.workload.StepSettings``), and the launch, the peaks and the
    run's scenario and strategy."""

    @property
    def launch(self) -> Launch: ...

    @property
    def peak(self) -> PeakChoice: ...

    @property
    def bandwidth(self) -> BandwidthPeak: ...

    @property
    def scenario(self) -> ScenarioFacts: ...

    @property
    def parallel(self) -> StrategyView: ...


class SummaryView(Protocol):
    """What a scenario's console rows and result keys read of the finished run
    (``output.summary.Summary``)."""

    @property
    def spec(self) -> RunView: ...

    @property
    def distributed(self) -> bool: ...

    @property
    def world_size(self) -> int: ...

    @property
    def data_parallel(self) -> int: ...

    @property
    def ranks(self) -> tuple[RankRecord, ...]: ...

    @property
    def detail(self) -> Detail: ...

    @property
    def data(self) -> DataReport | None: ...

    @property
    def token_throughput(self) -> float | None: ...

    @property
    def utilization(self) -> Utilization | None: ...

    @property
    def measured_peak(self) -> PeakChoice | None: ...

    @property
    def measured_bandwidth(self) -> BandwidthPeak | None: ...

    @property
    def telemetry(self) -> TelemetryReport | None: ...


class Work(Protocol):
    """What the driver and the timed loop read of any scenario's work (``steps.workload.
    Workload``, a generation's ``decoding.GenerationWorkload``); ``None`` where it does not
    apply (a generation has no phases to mark and no shards)."""

    @property
    def step(self) -> Callable[[], object]: ...

    @property
    def eager_model(self) -> torch.nn.Module: ...

    @property
    def parameters(self) -> int: ...

    @property
    def flops_per_iteration(self) -> int | None: ...

    @property
    def phases(self) -> PhaseMarks | None: ...

    @property
    def sharding(self) -> ShardPlan | None: ...

    @property
    def lowp(self) -> LowPrecision | None: ...
