"""--parallel fsdp, --activation-checkpointing and --optimizer through the real command line:
one process in this interpreter, two ranks under torchrun (gloo), the combinations refused
before anything runs, and --rerun of a sharded result."""
from __future__ import annotations

import json
import subprocess

import pytest
import torch

from conftest import LANGUAGE_MODEL, ROOT, assert_one_line_error, free_port, requires_gpu, run_main
from support.documents import check_document
from support.launch import TIMEOUT, run_two_nodes, torchrun
from microbench.plan import cli, spec as spec_mod
from microbench.steps import workload
from microbench.settings.config import BenchConfig
from microbench.scenarios import fsdp, parallel

# llama_tiny shrunk by its flags: 16 tokens, a 512-word vocabulary, one sequence a rank.
TINY_LLAMA = ["--network", "llama_tiny", "--seq-len", "16", "--vocab-size", "512",
              "--iterations", "2", "--warmup", "1", "--device", "cpu",
              "--telemetry-interval", "0"]


def _only_result(out_dir):
    [path] = sorted(out_dir.glob("*.json"))
    return path, check_document(path)


@pytest.mark.slow
def test_fsdp_with_one_process_trains_and_records_its_settings(tmp_path, capfd):
    out_dir = tmp_path / "results"
    ran = run_main(capfd, *TINY_LLAMA, "--batch-size", "1", "--parallel", "fsdp",
                   "--activation-checkpointing", "full", "--optimizer", "adamw",
                   "--reshard-after-forward", "0", "--output-dir", str(out_dir),
                   "--peak-tflops", "1")     # a peak: the torchtitan row has an MFU to show
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "FSDP2 over 1 rank (8 blocks + root, kept gathered to backward" in ran.stdout
    assert "MFU (torchtitan basis)" in ran.stdout and "Memory rank 0" in ran.stdout
    assert "AdamW, foreach" in ran.stdout
    path, document = _only_result(out_dir)
    block = document["parallel"]
    assert (block["mode"], block["world_size"], block["reshard_after_forward"]) == ("fsdp", 1,
                                                                                   False)
    assert (block["activation_checkpointing"], block["optimizer"]) == ("full", "adamw")
    assert block["sharding"]["blocks"] == 8
    [rank] = block["per_rank"]
    # One rank holds every parameter (FP32) and AdamW's two FP32 moments of each.
    parameters = document["model"]["parameters"]
    assert rank["parameter_bytes"] == 4 * parameters
    assert rank["optimizer_state_bytes"] >= 2 * 4 * parameters
    assert block["torchtitan_flops"]["flops_per_token"] > 0
    assert document["config"]["parallel"] == "fsdp"

    # --rerun replays the sharded settings.
    replayed = cli.to_plan(cli.parse_args(["--rerun", str(path)])).configs[0]
    assert (replayed.parallel, replayed.reshard_after_forward, replayed.activation_checkpointing,
            replayed.optimizer) == ("fsdp", False, "full", "adamw")


def test_fp8_under_fsdp_prints_its_share_of_the_flops_and_its_dtype_once(tmp_path, capfd,
                                                                         monkeypatch):
    """Issue 58: the FP8 line said "(unknown share)" under FSDP. torchao's FP8 layers run on the
    CPU (slowly, in eager mode); the device layer is told this CPU has FP8 units."""
    pytest.importorskip("torchao")
    from microbench.platform import devices
    monkeypatch.setattr(devices, "no_fp8_reason", lambda device: None)
    monkeypatch.setattr(devices, "fp8_formats", lambda device: ("float8_e4m3fn", "float8_e5m2"))
    # ... and the command line's refusal of FP8 on a known CPU, made before torch is imported.
    monkeypatch.setattr(cli, "_refuse_fp8_on_cpu", lambda configs: None)
    out_dir = tmp_path / "results"
    # One timed step: FP8's eager casts are slow on the CPU; the share needs no timing.
    ran = run_main(capfd, *TINY_LLAMA, "--iterations", "1", "--warmup", "0", "--batch-size", "1",
                   "--parallel", "fsdp", "--precision", "fp8", "--optimizer", "adamw",
                   "--output-dir", str(out_dir))
    assert ran.returncode == 0, ran.stderr[-3000:]
    _, document = _only_result(out_dir)
    share = document["low_precision"]["fp8_flops_share"]
    assert 0.5 < share < 1
    assert "8 blocks + root, resharded after forward but the last;" in ran.stdout
    assert f"56 of 57 linear layers ({share:.1%} of the counted FLOPs)" in ran.stdout
    assert ran.stdout.count("Dtype: ") == 1 and "Dtype: FP8" in ran.stdout
    # One rank sends nothing: its weights are cast inside the step, not gathered in FP8.
    assert document["low_precision"]["fp8_all_gather"] is False
    assert "FP8 all-gather" not in ran.stdout


def test_plain_training_records_its_mode_and_keeps_the_ddp_default(tmp_path, capfd):
    out_dir = tmp_path / "results"
    ran = run_main(capfd, *TINY_LLAMA, "--batch-size", "1", "--activation-checkpointing",
                   "selective", "--output-dir", str(out_dir))
    assert ran.returncode == 0, ran.stderr[-3000:]
    _, document = _only_result(out_dir)
    block = document["parallel"]
    assert (block["mode"], block["sharding"], block["reshard_after_forward"]) == ("single", None,
                                                                                 None)
    assert block["per_rank"][0]["parameter_bytes"] is None
    assert "Activation checkpointing: selective" in ran.stdout.replace("  ", "")


def test_flops_counted_on_the_meta_device_are_the_whole_models():
    """The meta count is the plain CPU count with attention in SDPA's math form: six matmuls a
    layer (two forward, four backward: model FLOPs, no recomputation) where the CPU's fused
    kernel counts seven (its backward recomputes the scores, as the GPU's fused kernels do)."""
    config = BenchConfig(network="llama_tiny", batch_size=1, seq_len=16, vocab_size=512,
                         device="cpu", write_files=False)
    spec = spec_mod.resolve(config)
    plain = workload.build(spec).flops_per_iteration
    from microbench.models.archs import llama
    arch = spec.model.llama_config
    matmul = 2 * arch.num_heads * 16 * 16 * arch.head_dim       # one s x s x d attention matmul
    projections = plain - arch.num_layers * 7 * matmul
    on_meta = llama.build_on_meta(arch)
    assert fsdp._count_on_meta(on_meta, spec) == (projections + arch.num_layers * 6 * matmul,
                                                      None)


def test_the_fp8_share_under_fsdp_is_counted_from_the_layer_shapes():
    """Issue 58: a sharded FP8 run printed "(unknown share)". The meta count gives the FP8
    layers' GEMMs from their shapes: three GEMMs (forward, input and weight gradients) of
    2 x rows x in x out for every linear layer but the output head."""
    import dataclasses
    from microbench.models.archs import llama
    from microbench.settings import precision
    config = BenchConfig(network="llama_tiny", batch_size=2, seq_len=16, vocab_size=512,
                         device="cpu", write_files=False)
    spec = dataclasses.replace(spec_mod.resolve(config), precision=precision.lookup("fp8"))
    on_meta = llama.build_on_meta(spec.model.llama_config)
    total, fp8 = fsdp._count_on_meta(on_meta, spec)
    rows = 2 * 16
    shapes = [module.in_features * module.out_features
              for name, module in on_meta.named_modules()
              if isinstance(module, torch.nn.Linear) and name != "output"]
    assert len(shapes) == 7 * spec.model.llama_config.num_layers
    assert fp8 == 3 * 2 * rows * sum(shapes)
    assert 0.5 < fp8 / total < 1


@pytest.mark.parametrize("flags, text", [
    (["--network", "resnet18", "--parallel", "fsdp"], "shards the llama_* presets"),
    (["--network", "resnet18", "--activation-checkpointing", "full"],
     "resnet18 is an image model"),
    (["--network", "llama_tiny", "--parallel", "fsdp", "--precision", "amp-fp16"],
     "does not run --precision amp-fp16"),
    (["--network", "llama_tiny", "--parallel", "fsdp", "--fp16", "1"],
     "does not run --precision fp16"),
    (["--network", "llama_tiny", "--reshard-after-forward", "0"],
     "--reshard-after-forward applies to --parallel fsdp or hsdp, not to ddp"),
    (["--network", "llama_tiny", "--mode", "inference", "--parallel", "fsdp"],
     "--parallel fsdp applies to --mode training"),
    (["--network", "llama_tiny", "--mode", "inference", "--optimizer", "adamw"],
     "--optimizer adamw applies to --mode training"),
    (["--network", "llama_tiny", "--parallel", "fsdp", "--opt-step", "2"],
     "--opt-step applies to --parallel ddp"),
    (["--network", "llama_tiny", "--parallel", "fsdp", "--optimizer-impl", "fused"],
     "fused SGD kernel has no DTensor support"),
    (["--network", "llama_tiny", "--parallel", "fsdp", "--ddp-static-graph"],
     "DistributedDataParallel's options (--ddp-static-graph) do not apply"),
])
def test_combinations_refused_before_anything_runs(tmp_path, capfd, flags, text):
    out_dir = tmp_path / "results"
    ran = run_main(capfd, *flags, "--device", "cpu", "--output-dir", str(out_dir))
    assert_one_line_error(ran, 2, text)
    assert not out_dir.exists()
    assert "Building" not in ran.stdout


@pytest.mark.slow
def test_torchrun_two_ranks_shard_the_model_in_halves(tmp_path):
    command, env = torchrun("--nproc-per-node", "2", "--master-port", str(free_port()))
    ran = subprocess.run(command + [*TINY_LLAMA, "--batch-size", "2", "--parallel", "fsdp",
                                    "--optimizer", "adamw", "--output-dir", str(tmp_path)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.count("--------------------SUMMARY") == 1
    assert "FSDP2 over 2 ranks" in ran.stdout and "total over 2 devices" in ran.stdout
    _, document = _only_result(tmp_path)
    block = document["parallel"]
    assert (block["mode"], block["world_size"]) == ("fsdp", 2)
    assert document["config"]["parallel"] == "fsdp"
    whole = 4 * document["model"]["parameters"]
    halves = [rank["parameter_bytes"] for rank in block["per_rank"]]
    assert [rank["rank"] for rank in block["per_rank"]] == [0, 1]
    # Each rank holds its dim-0 shard of every parameter: half, up to one row of an odd one.
    assert sum(halves) == whole
    assert all(abs(held - whole / 2) <= 0.01 * whole for held in halves)
    assert all(rank["optimizer_state_bytes"] >= 2 * held
               for rank, held in zip(block["per_rank"], halves))
    assert torch.isfinite(torch.tensor(document["losses"])).all()


@pytest.mark.slow
@pytest.mark.parametrize("strategy, mesh, text", [
    ("fsdp", [4], "FSDP2 over 4 ranks ("),
    ("hsdp", [2, 2], "FSDP2 over 4 ranks, mesh 2 replicas x 2 shards")])
def test_two_nodes_of_two_ranks_shard_over_the_job_or_inside_each_node(tmp_path, strategy,
                                                                       mesh, text):
    """Issue 62: --nnodes 2 with two ranks a node (two torchrun agents): fsdp shards over all
    four ranks; hsdp inside each node (LOCAL_WORLD_SIZE 2), replicated across the two."""
    checkpointing = ["--activation-checkpointing", "selective"] if strategy == "hsdp" else []
    agents = run_two_nodes(*TINY_LLAMA, "--batch-size", "4", "--parallel", strategy,
                           *checkpointing, "--output-dir", str(tmp_path))
    assert [code for code, _, _ in agents] == [0, 0], [err[-3000:] for _, _, err in agents]
    [out] = [out for _, out, _ in agents if "--------------------SUMMARY" in out]
    assert text in out
    _, document = _only_result(tmp_path)
    block = document["parallel"]
    assert (block["mode"], block["mesh_shape"], block["sharding"]["mesh_shape"],
            block["data_parallel"]) == (strategy, mesh, mesh, 4)
    per_rank = sorted(document["distributed"]["per_rank"], key=lambda r: r["rank"])
    assert [(r["rank"], r["node_rank"]) for r in per_rank] == [(0, 0), (1, 0), (2, 1), (3, 1)]
    # Each rank holds 1/shards of every parameter: a quarter under fsdp, a half under hsdp.
    whole, shards = 4 * document["model"]["parameters"], mesh[-1]
    held = [rank["parameter_bytes"] for rank in block["per_rank"]]
    assert all(abs(part - whole / shards) <= 0.01 * whole for part in held)
    assert document["Mini batch size [img]"] == 4          # the older key, whatever the unit
    assert torch.isfinite(torch.tensor(document["losses"])).all()


def test_compare_gate_tells_sharded_from_replicated_work():
    """--compare and --scaling-baseline take only results of the same work: an fsdp or AdamW
    result is not a baseline for a ddp or SGD one, and a file written before these settings
    existed ran with their defaults."""
    from microbench.settings import identity
    older = identity.of_document({"config": {"network": "llama_tiny"}})
    assert (older["parallel"], older["optimizer"]) == ("ddp", "sgd")
    sharded = {**older, "parallel": "fsdp", "optimizer": "adamw"}
    assert identity.differences(sharded, older, identity.WORK)
    assert not identity.differences(older, dict(older), identity.WORK)


def test_sweep_rows_name_sharding_and_checkpointing():
    from dataclasses import replace
    from microbench.plan import naming
    sharded = BenchConfig(network="llama_tiny", parallel="fsdp", activation_checkpointing="full",
                          batch_size=2, precision="amp-bf16")
    assert naming.row_label(naming.Described.of(spec_mod.resolve(replace(sharded, parallel="ddp",
                            activation_checkpointing="none")))).endswith(" sdpa s128 b2")
    assert naming.row_label(naming.Described.of(spec_mod.resolve(sharded))).endswith(
        " sdpa s128 fsdp ac=full b2")


@requires_gpu
def test_fsdp_on_one_gpu_reports_memory_and_both_mfus(tmp_path, capfd):
    """BF16 compute through FSDP's MixedPrecisionPolicy, FP32 master weights and AdamW state;
    the GPU reports peak memory, and a listed GPU gives both MFUs."""
    out_dir = tmp_path / "results"
    ran = run_main(capfd, "--network", "llama_tiny", "--batch-size", "4", "--parallel", "fsdp",
                   "--precision", "amp-bf16", "--optimizer", "adamw", "--iterations", "3",
                   "--warmup", "2", "--output-dir", str(out_dir))
    assert ran.returncode == 0, ran.stderr[-3000:]
    _, document = _only_result(out_dir)
    block = document["parallel"]
    assert block["sharding"]["param_dtype"] == "bf16"
    assert block["per_rank"][0]["peak_allocated_mb"] > 0
    assert block["per_rank"][0]["parameter_bytes"] == 4 * document["model"]["parameters"]
    if document["flops"]["peak_tflops"] is not None:
        assert block["torchtitan_flops"]["mfu"] > 0 and document["flops"]["mfu"] > 0


def test_the_fast_preset_under_fsdp_chooses_only_what_takes_effect(monkeypatch):
    """On a GPU --preset fast would choose fused SGD (no DTensor kernel), the DDP options (no
    DDP) and CUDA graphs; under fsdp it leaves them out, and keeps fused AdamW."""
    from microbench.plan import preset
    gpu = {"compile": True, "compile_options": {"mode": "reduce-overhead"},
           "precision": "amp-bf16", "cudnn_benchmark": True, "optimizer_impl": "fused"}
    # The GPU's choices, and the strategy's own (the DDP options only under ddp).
    monkeypatch.setattr(preset, "fast_choices",
                        lambda model, device, world, training, half, strategy: {
                            **gpu, **strategy.preset_choices(training, world)})
    device = torch.device("cpu")
    sgd = preset.apply(BenchConfig(network="llama_tiny", preset="fast", parallel="fsdp"),
                       LANGUAGE_MODEL, device, 2, True)
    assert (sgd.optimizer_impl, sgd.ddp_static_graph, sgd.compile_options) == ("foreach", False,
                                                                              {})
    assert sgd.compile and sgd.precision == "amp-bf16"
    adamw = preset.apply(BenchConfig(network="llama_tiny", preset="fast", parallel="fsdp",
                                     optimizer="adamw"), LANGUAGE_MODEL, device, 2, True)
    assert adamw.optimizer_impl == "fused"
    ddp = preset.apply(BenchConfig(network="llama_tiny", preset="fast"), LANGUAGE_MODEL, device, 2,
                       True)
    assert ddp.ddp_static_graph and ddp.compile_options == {"mode": "reduce-overhead"}


def test_a_large_job_prints_its_largest_rank_memory_in_one_row():
    from types import SimpleNamespace
    from microbench.measure.results import ShardedState
    ranks = [SimpleNamespace(rank=rank, peak_allocated_mb=1000.0 + rank,
                             peak_reserved_mb=2000.0 + (rank == 5) * 500,
                             sharded=ShardedState({}, 10**9, 2 * 10**9)) for rank in range(16)]
    [(name, text)] = parallel._memory_rows(ranks)
    assert name == "Memory, rank 5" and "the largest of 16 ranks" in text
    assert "reserved 2.50 GB" in text and "parameters 1.00 GB" in text
    assert len(parallel._memory_rows(ranks[:2])) == 2
