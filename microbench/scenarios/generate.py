"""Generation: prefill a prompt, then decode ``gen_len - 1`` tokens one at a time with a KV
cache (the engine: :mod:`.decoding`).

One iteration generates ``gen_len`` tokens for each of ``batch`` sequences. Its unit of work is
the generated token: throughput, FLOPs and energy are per generated token. The prefill's time is
the time to first token; each decode step's is an inter-token latency.

Example::

    scenario = Generate(config, model)     # shape: 128-token prompt, 128 tokens generated
    scenario.units_per_iteration(16)       # 2048 generated tokens
"""
from __future__ import annotations

import dataclasses
from typing import Callable, ContextManager

import torch

from microbench.measure import attribution, flops
from microbench.models.family import ModelFamily
from microbench.models.language import LanguageModelSpec
from microbench.settings import kinds
from microbench.settings.config import BenchConfig
from microbench.steps import workload
from microbench.platform.errors import UsageError
from microbench.platform import units
from microbench.measure.results import Detail, GenerationTimes, Timed
from microbench.measure.telemetry import ENERGY_COUNTER
from microbench.measure.timing import Measurement
from microbench.scenarios import decoding
from microbench.scenarios.base import Loop, Scenario
from microbench.scenarios.views import RunView, SummaryView, Work

# Decode steps of the profiled pass after the timed loop (where a step's time goes): enough
# to average the per-step figures, few enough to cost well under a second on a GPU.
ATTRIBUTION_STEPS = 32


def _latency(times: Measurement) -> str:
    ms = units.duration_ms
    return f"median {ms(times.median)}  p90 {ms(times.p90)}  p99 {ms(times.p99)}"


def _bandwidth_rows(use: flops.BandwidthUtilization | None, times: GenerationTimes, batch: int,
                    measured: flops.BandwidthUtilization | None = None
                    ) -> list[tuple[str, str]]:
    if use is None or use.achieved_gbs is None:
        return []
    per_step = times.decode_bytes / times.decode.count
    mbu = units.two_denominators(
        use.mbu, use.peak.gbs, use.peak.source, measured.mbu if measured else None,
        measured.peak.gbs if measured else None, measured.peak.source if measured else "",
        units.gbs_rate)
    return [("Decode bandwidth", f"{units.bandwidth(use.achieved_gbs)}  "
                                 f"({units.megabytes(per_step / 1e6)}"
                                 f" read per decode step: weights and the KV cache up to the "
                                 f"step's position, batch {batch})"),
            ("MBU (decode)", mbu)]


def _prefill_rows(use: flops.Utilization | None,
                  measured: flops.Utilization | None = None) -> list[tuple[str, str]]:
    if use is None:
        return []
    if measured is None:
        # no peak: the MFU line says so once (issue 64: said two or three times)
        mfu = ("" if use.mfu is None
               else f"; MFU {units.percent(use.mfu)} of {use.peak.tflops:g} TFLOP/s")
    else:
        mfu = "; MFU " + units.two_denominators(
            use.mfu, use.peak.tflops, use.peak.source, measured.mfu if measured else None,
            measured.peak.tflops if measured else None,
            measured.peak.source if measured else "", units.tflops_rate)
    return [("Prefill compute", f"{units.flops(use.achieved_tflops * 1e12, per_second=True)} "
                                f"({units.flops(use.flops_per_iteration)} per prefill){mfu}")]


def _energy_rows(energy: dict | None) -> list[tuple[str, str]]:
    if energy is None:
        return []
    counted = energy["end_to_end_basis"] == ENERGY_COUNTER
    return [("Energy per token", f"{energy['end_to_end_j_per_token']:.4g} J end-to-end "
                                 f"({'energy counter' if counted else 'estimated'}); decode "
                                 f"~{energy['decode_j_per_token']:.4g} J (estimated: energy "
                                 f"shared out by time)")]


def _attribution_rows(found: attribution.Attribution | None) -> list[tuple[str, str]]:
    return [] if found is None else [("Decode step (profiled)", found.line())]


def _times(summary: SummaryView) -> GenerationTimes | None:
    """A generation's token times (the summary's detail of this kind of run)."""
    detail = summary.detail
    return detail if isinstance(detail, GenerationTimes) else None


def _generation(work: Work) -> decoding.GenerationWorkload:
    """The work :meth:`Generate.build` made."""
    if not isinstance(work, decoding.GenerationWorkload):
        raise TypeError(f"a generation times its own work, not {type(work).__name__}")
    return work


class Generate(Scenario):
    mode = "generate"
    flops_counted = "prefill + decode steps"
    items_run_one_by_one = False
    fast_half_weights = True
    decodes_tokens = True

    def __init__(self, config: BenchConfig, model: ModelFamily) -> None:
        super().__init__(config, model)
        self.shape = self._shape()

    def _shape(self) -> kinds.GenerationShape:
        model, config = self.model, self.config
        if not model.can_generate or not isinstance(model, LanguageModelSpec):
            raise UsageError(f"--mode generate runs language models (the llama_* presets, "
                             f"hf: decoders), not {model.name}")
        return kinds.GenerationShape.fitted(config.prompt_len, config.gen_len, model.name,
                                            model.seq_len)

    # ------------------------------------------------------------ the unit of work

    @property
    def unit(self) -> str:
        return "generated token"

    @property
    def units_per_item(self) -> int:
        return self.shape.gen_len

    # ------------------------------------------------------------ building and timing

    def build(self, spec: RunView, wrap: Callable[[torch.nn.Module], torch.nn.Module] | None,
              count_flops: bool) -> Work:
        # Not ``wrap``: the prefill and the decode step are compiled apart, each as one graph
        # (decoding.compiled); nothing else wraps a generating model (no optimizer, no DDP).
        options = spec.config.compile_options if spec.config.compile else None
        return decoding.build(spec, workload.prepare_model(spec), options, count_flops,
                              shape=self.shape)

    def loop(self, work: Work, device: torch.device, time_fn: Callable[[], float] | None = None,
             around: Callable[[int], ContextManager[object]] | None = None) -> Loop:
        generation = _generation(work)

        def generate(iterations: int, first_index: int) -> Timed:
            times = decoding.timed_generation(generation, iterations, device, time_fn)
            return Timed(times.e2e, [], detail=times)
        return generate

    def after_timing(self, spec: RunView, work: Work, times: Detail) -> Detail:
        """The timed token times with where a decode step's time goes: ``ATTRIBUTION_STEPS``
        decode steps after a fresh prefill, under torch.profiler, after the timed loop (its
        wall time is stated), set beside the timed steps' mean and the roofline."""
        steps = min(ATTRIBUTION_STEPS, self.shape.gen_len - 1)
        if not isinstance(times, GenerationTimes) or steps < 1 or not times.decode.count:
            return times
        generation = _generation(work)
        profile = attribution.profile_steps(generation.decode, steps, spec.device,
                                            before=generation.prefill)
        per_step = times.decode_bytes / times.decode.count
        peak = spec.bandwidth.gbs
        found = attribution.attribute(
            profile, measured_step_ms=times.decode.mean,
            roofline_ms=per_step / (peak * 1e9) * 1e3 if peak else None,
            roofline_basis=f"{units.megabytes(per_step / 1e6)} a step / "
                           f"{units.bandwidth(peak)} "
                           f"({spec.bandwidth.source})" if peak else "")
        return dataclasses.replace(times, attribution=found)

    # ------------------------------------------------------------ the report

    def mode_text(self) -> str:
        return (f"generate ({self.shape.prompt_len}-token prompt, {self.shape.gen_len} tokens "
                f"generated per sequence, KV cache)")

    def decode_tokens_per_s(self, summary: SummaryView) -> float | None:
        """Tokens generated per second by the decode steps alone (this process's batch)."""
        times = _times(summary)
        if times is None or not times.decode.count:
            return None
        return summary.spec.batch_size * times.decode.count / (times.decode.total_ms / 1e3)

    def decode_bandwidth(self, summary: SummaryView, measured: bool = False
                         ) -> flops.BandwidthUtilization | None:
        """The bytes the timed decode steps had to read over their summed time (the same
        samples as the inter-token latency), against the device's memory bandwidth: the
        datasheet's, or with ``measured`` the probe's copy rate (None without a probe)."""
        times = _times(summary)
        peak = summary.measured_bandwidth if measured else summary.spec.bandwidth
        if times is None or not times.decode.count or not times.decode_bytes or peak is None:
            return None
        return flops.BandwidthUtilization(times.decode_bytes, times.decode.total_ms / 1e3,
                                          peak)

    def prefill_utilization(self, summary: SummaryView, measured: bool = False
                            ) -> flops.Utilization | None:
        """The prefill's FLOPs (counted once) at the rate of the timed prefills (their own
        samples), against the precision's dense peak: MFU for the compute-bound phase; with
        ``measured`` against the probe's GEMM rate (None without a probe)."""
        times = _times(summary)
        peak = summary.measured_peak if measured else summary.spec.peak
        if times is None or not times.prefill_flops or not times.prefill.total_ms or \
                peak is None:
            return None
        per_s = times.prefill.count / (times.prefill.total_ms / 1e3)
        return flops.Utilization(times.prefill_flops, per_s, peak)

    def energy_per_token(self, summary: SummaryView) -> dict | None:
        """Joules per generated token over whole generations (the telemetry's own figure, by
        the energy counter or estimated) and per token of the decode steps alone. The decode
        figure is always an estimate: the timed region's energy shared out by time (decode
        steps' summed time over the generations'), which assumes the prefill draws the same
        power as decoding; a compute-bound prefill draws more, so it errs high."""
        times, report = _times(summary), summary.telemetry
        if (times is None or report is None or not report.available
                or report.joules_per_item is None or not times.e2e.total_ms
                or self.shape.gen_len < 2):
            return None
        share = times.decode.total_ms / times.e2e.total_ms
        decode = (report.joules_per_item * share * self.shape.gen_len
                  / (self.shape.gen_len - 1))
        return {"end_to_end_j_per_token": report.joules_per_item,
                "end_to_end_basis": report.energy_basis,
                "decode_j_per_token": decode,
                "decode_basis": "the timed region's energy shared out by the decode steps' "
                                "share of its time, estimated"}

    def console_rows(self, summary: SummaryView) -> list[tuple[str, str]]:
        times = _times(summary)
        if times is None:
            return []
        batch = summary.spec.batch_size
        decode = self.decode_tokens_per_s(summary)
        return [
            ("Time to first token", _latency(times.prefill)
             + f"  ({self.shape.prompt_len}-token prompt, batch {batch})"),
            ("Inter-token latency", _latency(times.decode)
             + f"  ({times.decode.count} decode steps)"),
            ("Decode", f"{units.rate(decode) if decode is not None else 'unknown'} tokens/s "
                       f"(decode steps only)"),
            ("Time per sequence", f"mean {units.duration_ms(times.e2e.mean)}  (prefill and "
                                  f"{self.shape.gen_len - 1} decode steps: every sequence of "
                                  f"the batch takes this long)"),
        ] + _prefill_rows(self.prefill_utilization(summary),
                          self.prefill_utilization(summary, measured=True)) \
          + _bandwidth_rows(self.decode_bandwidth(summary), times, summary.spec.batch_size,
                            self.decode_bandwidth(summary, measured=True)) \
          + _energy_rows(self.energy_per_token(summary)) \
          + _attribution_rows(times.attribution)

    def document(self, summary: SummaryView) -> dict:
        times = _times(summary)
        if times is None:
            return {}
        bandwidth, prefill = self.decode_bandwidth(summary), self.prefill_utilization(summary)
        measured_bandwidth = self.decode_bandwidth(summary, measured=True)
        measured_prefill = self.prefill_utilization(summary, measured=True)
        return {"generation": {
            "prompt_len": self.shape.prompt_len, "gen_len": self.shape.gen_len,
            "batch_size": summary.spec.batch_size,
            "time_to_first_token": {"stats": times.prefill.stats(),
                                    "samples_ms": list(times.prefill.samples_ms)},
            "inter_token_latency": {"stats": times.decode.stats(),
                                    "samples_ms": list(times.decode.samples_ms)},
            "end_to_end": {"stats": times.e2e.stats()},
            "decode_tokens_per_s": self.decode_tokens_per_s(summary),
            "mbu": bandwidth.mbu if bandwidth is not None else None,
            "mbu_measured": measured_bandwidth.mbu if measured_bandwidth is not None else None,
            "decode_bandwidth": bandwidth.to_dict() if bandwidth is not None else None,
            "decode_bandwidth_measured": (measured_bandwidth.to_dict()
                                          if measured_bandwidth is not None else None),
            "energy_per_token": self.energy_per_token(summary),
            "prefill_flops": prefill.to_dict() if prefill is not None else None,
            "prefill_mfu_measured": (measured_prefill.mfu if measured_prefill is not None
                                     else None),
            "generated_tokens_per_s": summary.token_throughput,
            "decode_attribution": (times.attribution.to_dict()
                                   if times.attribution is not None else None)}}
