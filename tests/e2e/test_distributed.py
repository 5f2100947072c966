"""Multi-process runs on the CPU with gloo: torchrun, two "nodes", SLURM, the manual launch."""
import csv
import json
import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest

from conftest import ROOT, SCRIPT, free_port, run_main, spawn
from support.documents import check_document
from support.launch import RUN, TIMEOUT, child_env, run_torchrun, run_two_nodes, torchrun
from microbench.platform import distributed
from microbench.platform.errors import UsageError
from microbench.measure.results import RankRecord, Trial
from microbench.output.summary import Summary

def result_files(out_dir):
    return sorted(out_dir.glob("*.json"))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["training", "inference"])
def test_torchrun_two_ranks_one_summary_one_file(tmp_path, mode):
    process = run_torchrun(2, *RUN, "--mode", mode, "--batch-size", "4",
                           "--output-dir", str(tmp_path))
    assert process.returncode == 0, process.stderr[-3000:]
    out = process.stdout
    assert out.count("--------------------SUMMARY") == 1
    assert "--------Overall (all ranks; time of the slowest rank)--------" in out
    assert "Num devices: 2" in out and "Mini batch size [img] : 4" in out
    # Every rank runs one precision: said once, in the overall block (issue 58).
    assert out.count("Dtype: ") == 1 and "Dtype: FP32\nMini batch size [img] : 4" in out
    assert "Batch size    : 2 per rank, 4 global" in out and "Skew between ranks" in out
    [path] = result_files(tmp_path)
    doc = json.loads(path.read_text())
    dist = doc["distributed"]
    assert doc["GPUs"] == 2 and doc["Mini batch size [img]"] == 4
    assert doc["Mini batch size [img/gpu]"] == 2
    assert [r["rank"] for r in dist["per_rank"]] == [0, 1]
    slowest = max(sum(r["samples_ms"]) for r in dist["per_rank"])
    assert doc["Throughput [img/sec]"] == pytest.approx(4 * 3 / (slowest / 1e3))
    # Each rank reads its own host (issue 64); the other rank, under torchrun's agent, is
    # this run's, never another process's load: the agent and both ranks at least.
    loads = [r["host_load"] for r in dist["per_rank"]]
    assert doc["host_load"] == loads[0] and all(load["run_processes"] >= 3 for load in loads)
    rows = list(csv.DictReader((tmp_path / "benchmark_summary.csv").open()))
    assert len(rows) == 1 and rows[0]["world_size"] == "2"
    assert rows[0]["global_batch_size"] == "4" and rows[0]["batch_size"] == "2"


@pytest.mark.slow
def test_two_nodes_on_one_machine_have_distinct_global_ranks(tmp_path):
    port, processes = free_port(), []
    for node in range(2):
        command, env = torchrun("--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend",
                                "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id",
                                "two-nodes", "--node-rank", str(node))
        processes.append(spawn(command + RUN + ["--batch-size", "4", "--output-dir",
                                                           str(tmp_path)], cwd=ROOT, env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
    outputs = [p.communicate(timeout=TIMEOUT) for p in processes]
    assert [p.returncode for p in processes] == [0, 0], [err[-2000:] for _, err in outputs]
    [path] = result_files(tmp_path)
    per_rank = json.loads(path.read_text())["distributed"]["per_rank"]
    assert sorted(r["rank"] for r in per_rank) == [0, 1]
    assert [r["local_rank"] for r in per_rank] == [0, 0]     # one process per "node"
    # One host name, two nodes: told apart by torchrun's node rank (issue 62).
    assert sorted(r["node_rank"] for r in per_rank) == [0, 1]
    assert len({r["host"] for r in per_rank}) == 1
    assert sum(out.count("--------------------SUMMARY") for out, _ in outputs) == 1
    [table] = [out for out, _ in outputs if "Skew between ranks" in out]
    assert " rank local  node  host" in table


@pytest.mark.slow
def test_two_nodes_of_two_ranks_under_ddp_name_each_ranks_node(tmp_path):
    """Issue 62: --nnodes 2 with two ranks a node; the batch split over all four."""
    agents = run_two_nodes(*RUN, "--batch-size", "8", "--output-dir", str(tmp_path))
    assert [code for code, _, _ in agents] == [0, 0], [err[-2000:] for _, _, err in agents]
    [path] = result_files(tmp_path)
    document = check_document(path)
    per_rank = sorted(document["distributed"]["per_rank"], key=lambda r: r["rank"])
    assert [(r["rank"], r["local_rank"], r["node_rank"]) for r in per_rank] == [
        (0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1)]
    assert (document["GPUs"], document["Mini batch size [img/gpu]"]) == (4, 2)
    assert (document["parallel"]["mode"], document["parallel"]["mesh_shape"],
            document["parallel"]["data_parallel"]) == ("ddp", [4], 4)


def launch_by_hand(tmp_path, per_rank_env, per_rank_args, batch="4"):
    processes = []
    for rank, (env, args) in enumerate(zip(per_rank_env, per_rank_args)):
        processes.append(spawn(
            [sys.executable, str(SCRIPT), *RUN, "--batch-size", batch, "--output-dir",
             str(tmp_path), *args], cwd=ROOT, env=child_env(**env), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True))
    return processes, [p.communicate(timeout=TIMEOUT) for p in processes]


@pytest.mark.slow
def test_manual_launch_keeps_the_per_process_batch(tmp_path):
    url = f"tcp://127.0.0.1:{free_port()}"
    args = [["--distributed_dataparallel", "--rank", str(r), "--world-size", "2",
             "--dist-backend", "gloo", "--dist-url", url] for r in range(2)]
    processes, outputs = launch_by_hand(tmp_path, [{}, {}], args)
    assert [p.returncode for p in processes] == [0, 0], [err[-2000:] for _, err in outputs]
    doc = json.loads(result_files(tmp_path)[0].read_text())
    assert doc["Mini batch size [img/gpu]"] == 4 and doc["Mini batch size [img]"] == 8
    assert doc["distributed"]["launcher"] == "manual"


@pytest.mark.slow
def test_slurm_variables_without_torchrun(tmp_path):
    port = str(free_port())
    envs = [{"SLURM_PROCID": str(r), "SLURM_NTASKS": "2", "SLURM_LOCALID": str(r),
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port} for r in range(2)]
    processes, outputs = launch_by_hand(tmp_path, envs, [[], []])
    assert [p.returncode for p in processes] == [0, 0], [err[-2000:] for _, err in outputs]
    doc = json.loads(result_files(tmp_path)[0].read_text())
    assert doc["distributed"]["launcher"] == "slurm" and doc["Mini batch size [img/gpu]"] == 2


@pytest.mark.slow
def test_uneven_batch_is_a_usage_error_on_every_rank(tmp_path):
    envs = [{"SLURM_PROCID": str(r), "SLURM_NTASKS": "2", "SLURM_LOCALID": str(r),
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())} for r in range(2)]
    processes, outputs = launch_by_hand(tmp_path, envs, [[], []], batch="3")
    assert [p.returncode for p in processes] == [2, 2]
    for rank, (_, err) in enumerate(outputs):
        assert err.strip() == (f"[rank {rank}] error: --batch-size 3 does not split evenly "
                               f"across 2 ranks: use a multiple of 2")


@pytest.mark.slow
def test_failing_rank_ends_the_job_with_its_name(tmp_path):
    process = run_torchrun(2, *RUN, "--batch-size", "4", "--output-dir", str(tmp_path),
                           env={distributed.FAIL_RANK_VARIABLE: "1"})
    assert process.returncode == 1          # torchrun's own code for a failed worker
    assert "[rank 1] error: unexpected RuntimeError: failure injected on rank 1" in process.stderr
    assert result_files(tmp_path) == []


def config(**overrides):
    base = dict(distributed_dataparallel=False, rank=None, world_size=None, dist_backend=None,
                dist_url=None, device_ids=None, batch_size=8)
    return SimpleNamespace(**{**base, **overrides})


def test_torchrun_rank_comes_from_rank_and_device_from_local_rank():
    env = {"TORCHELASTIC_RUN_ID": "x", "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8",
           "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}    # torchrun sets all of these
    launch = distributed.detect(config(batch_size=64), env)
    assert (launch.rank, launch.local_rank, launch.device_index) == (5, 1, 1)
    assert (launch.local_batch, launch.global_batch) == (8, 64)


def test_a_rank_knows_its_node_from_the_launcher_where_it_numbers_nodes():
    """Issue 62: a host name alone cannot tell two nodes of one name apart."""
    torchrun = {"TORCHELASTIC_RUN_ID": "x", "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8",
                "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    assert distributed.detect(config(batch_size=64), {**torchrun, "GROUP_RANK": "2"}) \
        .node_rank == 2
    assert distributed.detect(config(batch_size=64), torchrun).node_rank is None  # by hand
    slurm = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1",
             "SLURM_NODEID": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    assert distributed.detect(config(batch_size=64), slurm).node_rank == 1
    manual = distributed.detect(config(distributed_dataparallel=True, rank=1, world_size=2,
                                       dist_backend="gloo", dist_url="tcp://h:1"), {})
    assert manual.node_rank == 1
    assert distributed.detect(config(), {}).node_rank is None
    with pytest.raises(UsageError, match="GROUP_RANK"):
        distributed.detect(config(batch_size=64), {**torchrun, "GROUP_RANK": "one"})


@pytest.mark.parametrize("overrides, message", [
    (dict(distributed_dataparallel=True, rank=0), "missing: --world-size, --dist-backend"),
    (dict(distributed_dataparallel=True, rank=2, world_size=2, dist_backend="gloo",
          dist_url="tcp://h:1"), "must be in"),
    (dict(rank=1), "only apply with --distributed_dataparallel"),
])
def test_manual_launch_argument_errors(overrides, message):
    with pytest.raises(UsageError, match=message):
        distributed.detect(config(**overrides), {})


def test_manual_launch_with_device_ids_numbers_workers_like_the_older_tool():
    launch = distributed.detect(config(distributed_dataparallel=True, rank=1, world_size=2,
                                       dist_backend="nccl", dist_url="tcp://h:1",
                                       device_ids=(2, 3)), {})
    assert (launch.rank, launch.world_size, launch.workers, launch.local_batch) == (2, 4, 2, 4)
    second = distributed.worker_launch(launch, 1, (2, 3))
    assert (second.rank, second.local_rank, second.device_index) == (3, 1, 3)


def test_slurm_without_rendezvous_address_is_a_usage_error():
    with pytest.raises(UsageError, match="MASTER_ADDR"):
        distributed.detect(config(), {"SLURM_PROCID": "0", "SLURM_NTASKS": "2",
                                      "SLURM_LOCALID": "0"})


def record(rank, samples, batch=2):
    return RankRecord(rank, rank, "h", "cpu", batch, tuple(samples), None, None)


def test_summary_of_ranks_uses_the_slowest_rank_never_rank0_times_world():
    spec = SimpleNamespace(launch=distributed.Launch(launcher="torchrun", world_size=2),
                           scaling_baseline_img_s=150.0, notes=())
    result = SimpleNamespace(flops_per_iteration=None, losses=[])
    summary = Summary(spec, {}, [Trial.of_ranks(result, [record(1, [15.0, 15.0]),
                                                         record(0, [10.0, 10.0])])])
    assert [r.rank for r in summary.ranks] == [0, 1]
    assert summary.throughput == pytest.approx(4 * 2 / 0.030)      # slowest: 30 ms in all
    assert summary.throughput != pytest.approx(2 * record(0, [10.0, 10.0]).throughput)
    assert summary.skew == pytest.approx(0.5) and summary.own.rank == 0
    assert summary.slowest.rank == 1 and summary.times.samples_ms == (15.0, 15.0)
    assert summary.time_per_batch_ms == pytest.approx(15.0)
    assert summary.per_device_throughput == pytest.approx(summary.throughput / 2)
    assert summary.scaling_efficiency == pytest.approx(summary.throughput / 300.0)


@pytest.mark.slow
def test_manual_launch_with_device_ids_spawns_one_worker_each(tmp_path):
    url = f"tcp://127.0.0.1:{free_port()}"
    processes, outputs = launch_by_hand(
        tmp_path, [{}], [["--distributed_dataparallel", "--rank", "0", "--world-size", "1",
                          "--dist-backend", "gloo", "--dist-url", url, "--device_ids", "0,1"]])
    assert processes[0].returncode == 0, outputs[0][1][-2000:]
    [path] = result_files(tmp_path)
    doc = check_document(path)                    # a DDP result matches the published schema
    assert doc["GPUs"] == 2 and doc["Mini batch size [img/gpu]"] == 2
    assert [r["rank"] for r in doc["distributed"]["per_rank"]] == [0, 1]
    # The spawned workers carry the whole spec: --compare gates this launch too (exit 5).
    doc["Throughput [img/sec]"] *= 100
    baseline = tmp_path / "faster.json"
    baseline.write_text(json.dumps(doc))
    url = f"tcp://127.0.0.1:{free_port()}"
    processes, outputs = launch_by_hand(
        tmp_path / "again", [{}], [["--distributed_dataparallel", "--rank", "0", "--world-size",
                                    "1", "--dist-backend", "gloo", "--dist-url", url,
                                    "--device_ids", "0,1", "--compare", str(baseline)]])
    assert processes[0].returncode == 5, outputs[0][1][-2000:]
    assert "throughput regressed" in outputs[0][1] and "Comparison with" in outputs[0][0]


@pytest.mark.slow
def test_scaling_baseline_adds_efficiency_and_refuses_other_configs(tmp_path, capfd):
    single = tmp_path / "single"
    assert run_main(capfd, *RUN, "--batch-size", "2", "--output-dir", str(single)).returncode == 0
    [baseline] = result_files(single)
    process = run_torchrun(2, *RUN, "--batch-size", "4", "--output-dir", str(tmp_path / "two"),
                           "--scaling-baseline", str(baseline))
    assert process.returncode == 0, process.stderr[-2000:]
    assert "Scaling efficiency : " in process.stdout
    doc = json.loads(result_files(tmp_path / "two")[0].read_text())
    single_throughput = json.loads(baseline.read_text())["Throughput [img/sec]"]
    # The efficiency is the job's throughput over world size x the baseline's (real timings:
    # checked as a formula, never against a range a busy machine could leave).
    assert doc["distributed"]["scaling_efficiency"] == pytest.approx(
        doc["Throughput [img/sec]"] / (2 * single_throughput))
    process = run_torchrun(2, *RUN, "--batch-size", "4", "--mode", "inference", "--output-dir",
                           str(tmp_path / "three"), "--scaling-baseline", str(baseline))
    assert process.returncode == 1 and "error: --scaling-baseline" in process.stderr
    assert "differs in mode" in process.stderr


@pytest.mark.slow
def test_kineto_traces_of_two_ranks_do_not_overwrite_each_other(tmp_path):
    process = run_torchrun(2, *RUN, "--batch-size", "4", "--mode", "inference", "--kineto",
                           "--profiler-schedule", "0,1,1", "--output-dir", str(tmp_path))
    assert process.returncode == 0, process.stderr[-2000:]
    stem = "resnet18_inference_fp32_kineto_b4_w2"
    assert sorted(p.name for p in tmp_path.glob("*trace*.json")) == [
        f"{stem}_trace2_rank0.json", f"{stem}_trace2_rank1.json"]
    # Another configuration under the same name: rank 0 picks ...-2, and every rank's traces
    # follow it rather than replacing the first run's.
    again = run_torchrun(2, *RUN, "--batch-size", "4", "--mode", "inference", "--kineto",
                         "--profiler-schedule", "0,1,1", "--output-dir", str(tmp_path),
                         "--seed", "9")
    assert again.returncode == 0, again.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.glob(f"{stem}-2_trace*.json")) == [
        f"{stem}-2_trace2_rank0.json", f"{stem}-2_trace2_rank1.json"]
    assert len(list(tmp_path.glob("*trace*.json"))) == 4


def test_rank_prefix_only_for_one_rank_of_several():
    assert distributed.rank_prefix({"RANK": "3", "WORLD_SIZE": "4"}) == "[rank 3] "
    assert distributed.rank_prefix({"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}) == "[rank 1] "
    assert distributed.rank_prefix({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}) == ""
    assert distributed.rank_prefix({"RANK": "0", "WORLD_SIZE": "x"}) == ""


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
def test_a_rank_whose_peer_never_comes_honours_sigterm(tmp_path):
    """Rank 1 failed alone (it never starts); torchrun then sends rank 0, which waits for it at
    the rendezvous inside torch's C++, a SIGTERM: one line and 143, not a kill 30 s later."""
    port = free_port()
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port)}
    rank0 = spawn([sys.executable, str(SCRIPT), *RUN, "--batch-size", "4",
                              "--output-dir", str(tmp_path)], cwd=ROOT, env=child_env(**env),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(TIMEOUT * 10):        # a condition, not a duration: the store is up
            if _listening(port) or rank0.poll() is not None:
                break
            try:
                rank0.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass
        assert rank0.poll() is None, rank0.communicate()
        rank0.terminate()
        out, err = rank0.communicate(timeout=TIMEOUT)
    finally:
        rank0.kill()
    assert rank0.returncode == 143, err[-2000:]
    assert err.strip() == "[rank 0] error: terminated (SIGTERM)"
    assert result_files(tmp_path) == []
