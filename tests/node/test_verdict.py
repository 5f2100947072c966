"""The node check's verdict: a slow GPU is flagged and a healthy one not, a difference inside
the measured spread is not, throttling (but not the rated power limit) and reported errors
flag a GPU, and links are judged against the other links."""
from __future__ import annotations

import pytest
import torch

from microbench.measure.telemetry import NvmlSource, Sample
from microbench.measure.telemetry.health import DeviceHealth
import json

from microbench.node import document, parts, program
from microbench.node import reference
from microbench.node.parts import HOST_BOUND
from microbench.store import schema
from microbench.node.links import Collective, PairCopy, bus_factor, node_groups, rounds
from microbench.node.program import GpuRecord, Part
from microbench.node.verdict import SELF_ONLY_NOTE, judge, judge_figure, pairs_to_confirm
from microbench.node.watch import of_samples, throttling
from microbench.platform.devices import GpuIdentity
from microbench.platform.errors import UsageError
from support.telemetry_fakes import UUIDS, ScriptedSource, fake_pynvml

STEADY = (100.0, 101.0, 99.0, 100.5, 99.5, 100.2)


def _record(rank: int, scale: float = 1.0, samples=STEADY, **fields) -> GpuRecord:
    parts = {key: Part(key, tuple(s * scale for s in samples))
             for key in ("gemm_tflops", "memory_gbs")}
    return GpuRecord(rank=rank, host="node1", local_rank=rank, device=f"cuda:{rank}",
                     device_name="Fake H100", parts=parts, **fields)


def test_a_slow_gpu_is_flagged_and_the_healthy_ones_are_not():
    verdict = judge([_record(0), _record(1), _record(2, scale=0.8), _record(3)])
    assert [g.flagged for g in verdict.gpus] == [False, False, True, False]
    slow = verdict.gpus[2]
    assert slow.figures["gemm_tflops"].diff_pct == pytest.approx(-20, abs=0.5)
    assert slow.findings[0] == "GEMM 20% below its peers' median"
    assert slow.flagged_by == ("peers",) and verdict.flagged_by() == ["peers"]
    assert verdict.flagged


def test_a_healthy_node_passes():
    verdict = judge([_record(r, scale=1 + 0.01 * r) for r in range(4)])
    assert not verdict.flagged and verdict.notes == (SELF_ONLY_NOTE,)


def _host_bound_samples(load: float) -> tuple[float, ...]:
    """A fake model step: 20 ms of kernels the GPU runs and 300 launches, each costing the host
    10 us times its load, with the GPU waiting for them; images per second of 64 images."""
    device_ms, launches = 20.0, 300
    return tuple(64 / ((max(device_ms, launches * 0.01 * load * wobble)) / 1e3)
                 for wobble in (1.0, 1.02, 0.98, 1.01, 0.99, 1.0))


@pytest.mark.parametrize("key", sorted(HOST_BOUND))
def test_a_host_bound_part_is_shown_but_never_flags_its_gpu(key):
    """The model steps measure the host's kernel launches (a healthy host of 4 H200s: resnet50's
    eager step 2,038-2,810 img/s): a host twice as loaded makes one GPU's step far slower than
    its peers' and the baseline's; shown, never a finding. A slow GEMM still is."""
    records = [_record(r) for r in range(4)]
    for record, load in zip(records, (5.0, 5.2, 4.9, 10.0)):   # rank 3's host: twice as busy
        record.parts[key] = Part(key, _host_bound_samples(load))
    stored = reference.of_node_check(_check_document(judge(records[:3])), "ref.json")
    verdict = judge(records, baseline=stored, recheck=[])
    slow = verdict.gpus[3].figures[key]
    assert slow.diff_pct < -30 and not slow.flagged and not slow.judged
    assert "not judged" in slow.noise
    assert key not in verdict.gpus[3].baseline or not verdict.gpus[3].baseline[key].flagged
    assert not verdict.flagged and verdict.to_confirm() == ()
    records[1].parts["gemm_tflops"] = Part("gemm_tflops", tuple(s * 0.7 for s in STEADY))
    assert [g.flagged for g in judge(records).gpus] == [False, True, False, False]
    assert not parts.judged(key) and parts.judged("gemm_tflops")


def test_two_nodes_of_one_host_name_are_named_and_grouped_apart():
    """Issue 62: containers and simulated nodes share a host name; the launcher's node rank
    tells them apart in the groups, the verdict, the table and the document."""
    from microbench.node import show
    records = [_record(r, node_rank=r // 2, scale=0.8 if r == 3 else 1.0) for r in range(4)]
    assert node_groups([r.node for r in records]) == {"node1 node 0": [0, 1],
                                                      "node1 node 1": [2, 3]}
    verdict = judge(records)
    assert verdict.flagged_hosts() == ["node1 node 1"]
    header, rows, _ = show.gpu_table(verdict)
    assert header[0] == "GPU" and rows[3][0] == "node1 node 1 rank 3" == records[3].label
    assert records[3].labelled("\n") == "node1 node 1\nrank 3"        # the plot's ticks
    gpus = _check_document(verdict)["gpus"]
    assert [(g["host"], g["node_rank"]) for g in gpus] == [("node1", 0), ("node1", 0),
                                                           ("node1", 1), ("node1", 1)]
    assert _record(0).node == "node1"                   # no launcher numbered the nodes


def test_ranks_on_the_cpu_are_headed_as_ranks_not_gpus():
    from microbench.node import show
    records = [GpuRecord(**{**r.__dict__, "device": "cpu"}) for r in [_record(0), _record(1)]]
    assert show.gpu_table(judge(records))[0][0] == "rank"


def _check_document(verdict) -> dict:
    return document.build(verdict, [], [], device_type="cuda", quick=False, samples=6,
                          command=["microbench-node"], seconds=1.0, backend="nccl",
                          p2p_note=None)["node_check"]


def test_a_flag_counts_only_once_measured_again():
    """Rank 2's GEMM and copy are 20% below at first; measured again it is level (a passing hiccup: not
    a finding), or still 20% below (confirmed)."""
    first = [_record(0), _record(1), _record(2, scale=0.8), _record(3)]
    preliminary = judge(first)
    assert preliminary.gpus[2].flagged and preliminary.to_confirm() == ("gemm_tflops", "memory_gbs")
    level = [_record(r) for r in range(4)]
    verdict = judge(first, recheck=level)
    gemm = verdict.gpus[2].figures["gemm_tflops"]
    assert not verdict.flagged and not gemm.flagged
    assert gemm.noise.startswith("not confirmed: -20% at first") and gemm.recheck is not None
    still = [_record(0), _record(1), _record(2, scale=0.8), _record(3)]
    confirmed = judge(first, recheck=still)
    assert [g.flagged for g in confirmed.gpus] == [False, False, True, False]
    assert "confirmed: 20% when measured again" in confirmed.gpus[2].findings[0]
    built = _check_document(confirmed)["gpus"][2]["figures"]["gemm_tflops"]
    assert built["recheck"]["flagged"] and len(built["recheck"]["samples"]) == len(STEADY)


def test_a_baseline_flags_a_uniformly_slow_node_and_not_a_healthy_one():
    healthy = [_record(r) for r in range(4)]
    stored = reference.of_node_check(_check_document(judge(healthy)), "healthy.json")
    slow_everywhere = [program.scaled(_record(r), {program.SCALE_VARIABLE: "*:0.6"})
                       for r in range(4)]
    alone = judge(slow_everywhere)                 # against itself: nothing to see
    assert not alone.flagged and SELF_ONLY_NOTE in alone.notes
    verdict = judge(slow_everywhere, baseline=stored, recheck=slow_everywhere)
    assert all(g.flagged and g.flagged_by == ("baseline",) for g in verdict.gpus)
    assert verdict.gpus[0].findings[0].startswith("GEMM 40% below the baseline's median")
    assert verdict.flagged_by() == ["baseline"] and SELF_ONLY_NOTE not in verdict.notes
    again = [_record(r, scale=1 + 0.01 * r) for r in range(4)]
    assert not judge(again, baseline=stored, recheck=[]).flagged


def test_a_baseline_naming_one_device_model_twice_is_refused(tmp_path):
    """Issue 65's note: the second entry of one model silently replaced the first."""
    check = _check_document(judge([_record(0), _record(1), _record(2)]))
    path = tmp_path / "baseline.json"
    reference.save(check, str(path))
    written = json.loads(path.read_text())
    models = written["node_baseline"]["models"]
    models.append(json.loads(json.dumps(models[0])))
    path.write_text(json.dumps(written))
    before = path.read_bytes()
    with pytest.raises(UsageError, match="names 'Fake H100' twice: keep one entry per device"):
        reference.load(str(path))
    assert path.read_bytes() == before


def test_a_baseline_round_trips_and_validates(tmp_path):
    records = [_record(0), _record(1), _record(2, scale=0.5)]
    check = _check_document(judge(records))
    path = tmp_path / "baseline.json"
    line = reference.save(check, str(path))
    assert line == f"Baseline: {path} (Fake H100 (2 GPUs))"    # the flagged GPU left out
    written = json.loads(path.read_text())
    schema.validate_result(written, str(path))
    assert schema.document_kind(written) == schema.NODE_BASELINE
    loaded = reference.load(str(path))
    assert loaded.samples("Fake H100", "gemm_tflops") == STEADY + STEADY
    from_check = tmp_path / "node_check.json"
    from_check.write_text(json.dumps({"schema_version": 2, "node_check": check}))
    assert reference.load(str(from_check)).models == loaded.models
    written["node_baseline"]["models"][0]["figures"]["gemm_tflops"]["samples"] = [-1.0]
    path.write_text(json.dumps(written))
    with pytest.raises(UsageError, match="does not match the result schema"):
        reference.load(str(path))
    every = _check_document(judge([_record(0), _record(1, scale=0.1)]))
    every["gpus"][0]["flagged"] = True
    assert "not written" in reference.save(every, str(tmp_path / "none.json"))
    assert not (tmp_path / "none.json").exists()


def test_the_noise_rule_keeps_a_difference_inside_the_spread_unflagged():
    """20% below the median, but its own samples spread from 40 to 120: not a finding."""
    noisy = (40.0, 120.0, 60.0, 110.0, 70.0, 90.0)
    verdict = judge([_record(0), _record(1), _record(2, samples=noisy), _record(3)])
    judged = verdict.gpus[2].figures["gemm_tflops"]
    assert judged.diff_pct < -10 and not judged.flagged
    assert judged.noise.startswith("within its noise")
    assert not verdict.gpus[2].flagged


def test_the_tolerance_keeps_a_small_but_steady_difference_unflagged():
    verdict = judge([_record(0), _record(1), _record(2, scale=0.95)], tolerance_pct=10)
    assert not verdict.flagged
    assert judge([_record(0), _record(1), _record(2, scale=0.95)], tolerance_pct=2).flagged


def test_one_gpu_has_no_peers_to_be_compared_with():
    verdict = judge([_record(0, scale=0.1)])
    assert not verdict.flagged and "no peers" in verdict.notes[0]


def test_gpus_are_compared_with_their_own_model():
    other = GpuRecord(**{**_record(2, scale=0.5).__dict__, "device_name": "Fake A100"})
    verdict = judge([_record(0), _record(1), other])
    assert not verdict.flagged and "2 device models" in verdict.notes[0]


def _throttled(reasons, capped=False):
    telemetry = of_samples([Sample(t_s=0, sm_clock_mhz=1500, throttle_reasons=reasons),
                            Sample(t_s=1, sm_clock_mhz=1980, throttle_reasons=())])
    record = _record(1)
    parts = {k: Part(k, p.samples, telemetry=telemetry) for k, p in record.parts.items()}
    limits = dict(power_limit_w=500.0 if capped else 700.0, default_power_limit_w=700.0)
    return GpuRecord(**{**record.__dict__, "parts": parts, **limits})


def test_a_throttling_gpu_is_flagged():
    verdict = judge([_record(0), _throttled(("hw_thermal_slowdown",)), _record(2)])
    assert [g.flagged for g in verdict.gpus] == [False, True, False]
    assert verdict.gpus[1].findings == ("throttled: hw_thermal_slowdown",)


def test_the_rated_power_limit_flags_only_a_capped_board():
    assert not judge([_record(0), _throttled(("sw_power_cap",))]).gpus[1].flagged
    capped = judge([_record(0), _throttled(("sw_power_cap",), capped=True)]).gpus[1]
    assert capped.findings == ("throttled: sw_power_cap",
                               "power limit 500 W, below its default 700 W")
    assert throttling([None], capped=None) == ()


def _health(**overrides):
    """A GPU's health as NVML reports it, through the fake pynvml."""
    nvml = fake_pynvml(UUIDS[:1], **overrides)
    return NvmlSource(GpuIdentity(0, UUIDS[0][4:]), nvml, environ={}).health()


def test_an_erroring_gpu_is_flagged():
    records = [_record(0, health=_health()), _record(1, health=_health(ecc=(0, 2))),
               _record(2, health=_health())]
    verdict = judge(records)
    assert [g.flagged for g in verdict.gpus] == [False, True, False]
    assert verdict.gpus[1].findings == ("2 uncorrectable ECC errors",)


def test_a_link_trained_narrower_than_its_peers_is_flagged():
    records = [_record(0, health=_health()), _record(1, health=_health(pcie=(5, 5, 8, 16))),
               _record(2, health=_health())]
    verdict = judge(records)
    assert verdict.gpus[1].findings == ("PCIe link width x8, its peers' width x16",)
    assert not verdict.gpus[0].flagged


def test_a_failed_part_flags_its_gpu():
    record = _record(1)
    parts = {**record.parts, "train_items_per_s": Part("train_items_per_s",
                                                       failure="out of memory")}
    verdict = judge([_record(0), GpuRecord(**{**record.__dict__, "parts": parts})])
    assert verdict.gpus[1].findings == ("train step failed: out of memory",)


def test_a_slow_pair_and_a_slow_node_all_reduce_are_flagged():
    copies = [PairCopy("node1", a, b, tuple(s * (0.5 if (a, b) == (1, 0) else 1)
                                            for s in STEADY))
              for a in range(3) for b in range(3) if a != b]
    collectives = [Collective(f"node n{i}", (0, 1), (1 << 20,),
                              {1 << 20: tuple(s * (0.6 if i == 2 else 1) for s in STEADY)})
                   for i in range(4)]
    verdict = judge([_record(0), _record(1)], copies, collectives)
    flagged = [link.name for link in verdict.links if link.judged.flagged]
    assert flagged == ["rank 1 -> rank 0 (node1)", "all-reduce 1 MiB (n2)"]
    assert verdict.flagged_hosts() == ["n2", "node1"]


def test_judge_figure_without_samples_is_unknown():
    judged = judge_figure((), [STEADY], 10)
    assert judged.value is None and not judged.flagged


def test_bus_bandwidth_factor_and_node_groups():
    assert bus_factor(2) == 1.0 and bus_factor(8) == pytest.approx(1.75)
    assert node_groups(["a", "a", "b", "b", "a"]) == {"a": [0, 1, 4], "b": [2, 3]}


def test_the_program_reads_a_fake_source_in_every_part():
    """The program on the CPU (--quick: GEMM and memory, tiny) with a scripted telemetry
    source: each part carries its readings, its parts align first, and the source's health
    and limits are kept."""
    class Source(ScriptedSource):
        def read(self):
            self.reads += 1
            return Sample(t_s=0, sm_clock_mhz=1900, throttle_reasons=())

        def health(self):
            return DeviceHealth(ecc_uncorrected=0, pcie_width=16)

        def power_limits_w(self):
            return 700.0, 700.0

    size = program.CPU_SIZES.probe
    small = program.Sizes(type(size)(gemm_n=64, copy_elements=1 << 12, warmup=1,
                                     iterations=3), "fp32", 0, {}, {})
    aligned = []
    original, program.CPU_SIZES = program.CPU_SIZES, small
    try:
        record = program.run(torch.device("cpu"), 0, 0, 3, True,
                             source=Source(), environ={}, align=lambda: aligned.append(1))
    finally:
        program.CPU_SIZES = original
    assert set(record.parts) == {"gemm_tflops", "gemm_fp8_tflops", "memory_gbs", "h2d_gbs",
                                 "d2h_gbs"}
    assert len(aligned) == 5
    assert record.parts["gemm_fp8_tflops"].skipped == "no FP8 matrix units on this device"
    assert record.parts["h2d_gbs"].skipped and not record.parts["h2d_gbs"].samples
    gemm = record.parts["gemm_tflops"]
    assert len(gemm.samples) == 3 and gemm.telemetry.samples >= 1
    assert gemm.telemetry.sm_clock_mhz == 1900 and gemm.telemetry.throttle_reasons == ()
    assert record.health.pcie_width == 16 and record.power_capped is False


def test_the_scale_hook_scales_the_ranks_it_names():
    every = {program.SCALE_VARIABLE: "*:0.5"}
    assert all(program.scaled(_record(r), every).parts["gemm_tflops"].samples
               == tuple(s * 0.5 for s in STEADY) for r in range(3))
    several = {program.SCALE_VARIABLE: "0:0.5,2:0.25"}
    assert program.scaled(_record(1), several) == _record(1)
    assert program.scaled(_record(2), several).parts["gemm_tflops"].samples[0] == 25.0
    environ = {program.SCALE_VARIABLE: "1:0.5"}
    assert program.scaled(_record(0), environ) == _record(0)
    assert program.scaled(_record(1), environ).parts["gemm_tflops"].samples == \
        tuple(s * 0.5 for s in STEADY)
    assert program.scale_of({}) is None
    for bad in ("1", "a:b", "-1:0.5", "1:0", "1:inf", "*:0", "1:0.5,", "+:2"):
        with pytest.raises(UsageError, match="MICROBENCH_NODE_SCALE"):
            program.scale_of({program.SCALE_VARIABLE: bad})


@pytest.mark.parametrize("count, expected_rounds", [(2, 1), (3, 3), (4, 3), (8, 7)])
def test_pairs_are_measured_in_rounds_of_disjoint_pairs(count, expected_rounds):
    """Every pair once (both ways in one exchange), no GPU in two pairs of a round: 8 GPUs in
    7 rounds, not 56 copies one at a time."""
    schedule = rounds(list(range(10, 10 + count)))
    assert len(schedule) == expected_rounds
    pairs = [pair for round_ in schedule for pair in round_]
    assert sorted(pairs) == [(a, b) for a in range(10, 10 + count)
                             for b in range(a + 1, 10 + count)]
    for round_ in schedule:
        ranks = [rank for pair in round_ for rank in pair]
        assert len(ranks) == len(set(ranks))


def test_a_slow_pair_counts_only_once_measured_again():
    """A pair's copy 40% below the others: the pair is measured again (both directions) and
    flags only where the second copy is slow too."""
    fast = [PairCopy("node1", a, b, STEADY) for a in range(3) for b in range(3) if a != b]
    slow = [PairCopy("node1", 0, 1, tuple(s * 0.6 for s in STEADY))] + fast[1:]
    first = judge([_record(0), _record(1), _record(2)], copies=slow)
    assert pairs_to_confirm(first.links) == frozenset({(0, 1)})
    level = judge([_record(0), _record(1), _record(2)], copies=slow, recheck=[],
                  copies_again=[PairCopy("node1", 0, 1, STEADY), PairCopy("node1", 1, 0, STEADY)])
    link = next(l for l in level.links if l.name.startswith("rank 0 -> rank 1"))
    assert not link.judged.flagged and link.judged.noise.startswith("not confirmed")
    assert not level.flagged
    again = judge([_record(0), _record(1), _record(2)], copies=slow, recheck=[],
                  copies_again=[slow[0]])
    assert again.flagged and again.flagged_by() == ["links"]
    built = _check_document(again)["links"][0]
    assert built["flagged"] and built["recheck"]["flagged"]


def test_a_gpu_shared_with_another_process_is_flagged_though_some_calls_ran_alone():
    """Bimodal samples, as a GPU another process keeps busy gave on 4 H200s (2026-11-27): the
    calls that ran alone are a healthy GPU's, the rest two thirds down. Welch's t on the logs
    finds the spread too wide; the ranks do not."""
    healthy = [_record(r, samples=(875.0, 871.0, 879.0, 873.0, 877.0)) for r in range(4)]
    stored = reference.of_node_check(_check_document(judge(healthy)), "healthy.json")
    shared = [_record(r, samples=(866.0, 289.0, 288.0, 866.0, 273.0)) for r in range(4)]
    verdict = judge(shared, baseline=stored, recheck=shared)
    figure = verdict.gpus[1].baseline["gemm_tflops"]
    assert figure.flagged and "Mann-Whitney" in figure.noise, figure
    assert all(g.flagged_by == ("baseline",) for g in verdict.gpus)


@pytest.mark.parametrize("own, reference, flagged", [
    ((100.0, 101.0, 99.0), (3e-308, 3.1e-308, 2.9e-308), False),    # a baseline at the floor
    ((3e-308, 3.1e-308, 2.9e-308), (100.0, 101.0, 99.0), True),     # a GPU as good as dead
    ((1e308, 1.1e308, 0.9e308), (1e-300, 1e-300, 1e-300), False),   # beyond any ratio
])
def test_a_difference_near_the_float_range_stays_a_short_bounded_percentage(own, reference,
                                                                               flagged):
    """Samples near the float range's floor printed a 311-character percentage (issue 65):
    a difference beyond any ratio of two figures is unknown, one below it is -100%."""
    from microbench.node import show, verdict
    judged = verdict.judge_reference(own, reference, 5.0)
    assert judged.flagged is flagged
    assert judged.diff_pct is None or -100.0 <= judged.diff_pct <= 1e17
    figure = parts.GPU_FIGURES[0]
    assert len(show._cell(figure, judged, judged)) < 60
    assert len(judged.why) < 60


# Issue 62's measurement: with every GPU of a 4x H200 host busy, peer links fell from ~273 to
# ~128 GB/s and the all-reduce from 340 to 154 GB/s, every link alike, so no link flagged.
P2P_GBS, BUSBW_GBS = 273.0, 340.0
SIZES = (8 << 20, 512 << 20)


def _copies(scale: float = 1.0, ranks: int = 4) -> list[PairCopy]:
    return [PairCopy("node1", a, b, tuple(s / 100 * P2P_GBS * scale for s in STEADY))
            for a in range(ranks) for b in range(ranks) if a != b]


def _collective(scope: str, ranks, scale: float = 1.0) -> Collective:
    return Collective(scope, tuple(ranks), SIZES,
                      {size: tuple(s / 100 * BUSBW_GBS * scale for s in STEADY)
                       for size in SIZES})


def _saved_baseline(tmp_path, records, copies, collectives) -> reference.Baseline:
    healthy = judge(records, copies, collectives)
    assert not healthy.flagged
    check = document.build(healthy, collectives, copies, device_type="cuda", quick=False,
                           samples=6, command=["microbench-node"], seconds=1.0,
                           backend="nccl", p2p_note=None)["node_check"]
    path = tmp_path / "baseline.json"
    assert reference.save(check, str(path)) == \
        f"Baseline: {path} (Fake H100 ({len(records)} GPUs and their links))"
    schema.validate_result(json.loads(path.read_text()), str(path))
    return reference.load(str(path))


def test_a_baseline_flags_links_that_are_all_equally_slow(tmp_path, capsys):
    """Issue 62: every pair and the node's all-reduce half as fast as the healthy run's: against
    each other nothing is seen; the baseline flags every one, by name and node, once the pairs
    and the all-reduce measured again are slow too."""
    from microbench.node import show
    records = [_record(r) for r in range(4)]
    stored = _saved_baseline(tmp_path, records, _copies(),
                             [_collective("node node1", range(4))])
    slow_copies = _copies(128 / P2P_GBS)
    slow_node = [_collective("node node1", range(4), 154 / BUSBW_GBS)]
    assert not judge(records, slow_copies, slow_node).flagged           # alike: unseen
    first = judge(records, slow_copies, slow_node, baseline=stored)
    assert pairs_to_confirm(first.links) == frozenset(
        (a, b) for a in range(4) for b in range(a + 1, 4))
    verdict = judge(records, slow_copies, slow_node, baseline=stored, recheck=[],
                    copies_again=slow_copies, collectives_again=slow_node)
    flagged = [link for link in verdict.links if link.flagged]
    assert len(flagged) == 12 + 1 and not any(link.judged.flagged for link in flagged)
    allreduce = flagged[-1]
    assert allreduce.name == "all-reduce 512 MiB (node1)" and allreduce.ranks == (0, 1, 2, 3)
    assert allreduce.why.startswith("55% below the baseline's median (confirmed: 55%")
    assert flagged[0].why.startswith("53% below the baseline's median (confirmed: 53%")
    assert verdict.flagged_by() == ["baseline", "links"]
    assert verdict.flagged_hosts() == ["node1"] and not any(g.flagged for g in verdict.gpus)
    show.print_verdict(verdict, slow_node, None, __import__("sys").stdout)
    out = capsys.readouterr().out
    assert "all-reduce 512 MiB (node1): 154 (+0%, -55% vs baseline) ! GB/s FLAGGED 55% below " \
           "the baseline's median (confirmed" in out
    assert "links: 13; hosts: node1; flagged by: baseline, links" in out
    built = document.build(verdict, slow_node, slow_copies, device_type="cuda", quick=False,
                           samples=6, command=["microbench-node"], seconds=1.0,
                           backend="nccl", p2p_note=None)
    schema.validate_result(built, "the node check")
    link = built["node_check"]["links"][-1]
    assert link["flagged"] and link["baseline"]["flagged"] and link["scope"] == "node node1"
    # The pairs measured again at their healthy speed: their flags are not confirmed; the
    # all-reduce, not measured again, stands as first measured.
    level = judge(records, slow_copies, slow_node, baseline=stored, recheck=[],
                  copies_again=_copies())
    assert [link.name for link in level.links if link.flagged] == [allreduce.name]
    assert level.links[0].baseline.noise.startswith("not confirmed")
    passing = judge(records, slow_copies, slow_node, baseline=stored, recheck=[],
                    copies_again=_copies(),
                    collectives_again=[_collective("node node1", range(4))])
    assert not passing.flagged
    assert passing.links[-1].baseline.noise.startswith("not confirmed: -55% at first, +0%")
    # A healthy run against the same baseline: nothing.
    assert not judge(records, _copies(1.01), [_collective("node node1", range(4), 0.99)],
                     baseline=stored, recheck=[], copies_again=[]).flagged


def test_across_nodes_the_slow_node_is_named_and_the_job_all_reduce_judged_by_the_baseline(
        tmp_path):
    """Two nodes of two GPUs: each node's all-reduce and the job's across them. Node 1's own
    all-reduce at half speed names node 1 (against node 0, and the baseline); the job's, which
    has no peer, is judged by the baseline only. A baseline of another shape (one node of 4)
    judges no all-reduce of this job, and says so."""
    records = [_record(r, node_rank=r // 2) for r in range(4)]

    def collectives(node1: float = 1.0, across: float = 1.0) -> list[Collective]:
        return [_collective("node node1 node 0", (0, 1)),
                _collective("node node1 node 1", (2, 3), node1),
                _collective("all nodes", range(4), across)]

    stored = _saved_baseline(tmp_path, records, (), collectives())
    assert {shape.scope for shape in stored.links["Fake H100"]} == {"node", "all nodes"}
    verdict = judge(records, (), collectives(0.5, 0.6), baseline=stored, recheck=[])
    flagged = {link.name: link for link in verdict.links if link.flagged}
    assert sorted(flagged) == ["all-reduce 512 MiB (all 2 nodes)",
                               "all-reduce 512 MiB (node1 node 1)"]
    node1 = flagged["all-reduce 512 MiB (node1 node 1)"]
    assert node1.judged.flagged and node1.baseline.flagged          # by both references
    across = flagged["all-reduce 512 MiB (all 2 nodes)"]
    assert across.judged.median is None and across.baseline.flagged
    assert verdict.flagged_hosts() == ["node1 node 1"]
    assert not judge(records, (), collectives(), baseline=stored, recheck=[]).flagged
    one_node = _saved_baseline(tmp_path, [_record(r) for r in range(4)], (),
                               [_collective("node node1", range(4))])
    other = judge(records, (), collectives(1.0, 0.6), baseline=one_node, recheck=[])
    assert not other.flagged
    assert any("has no all-reduce of 2 ranks inside a node at 512 MiB, all-reduce of 4 "
               "ranks across 2 nodes at 512 MiB: judged against the other links only" in note
               for note in other.notes), other.notes
