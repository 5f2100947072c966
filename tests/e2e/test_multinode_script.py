"""benchmarks/multinode.py (issue 62) on the CPU: its runs are command lines the tool takes,
two simulated nodes get two GPUs each, it reads the figures the tool writes, and it judges
every target of the issue from them (PASS, FAIL, or not run with the reason)."""
import json

from benchmarks import multinode
from microbench.plan import cli


def _tool_args(command: list[str]) -> list[str]:
    return command[command.index(str(multinode.SCRIPT)) + 1:]


def test_every_run_is_a_command_line_the_tool_takes(tmp_path):
    runs = multinode.plan(list(multinode.PARTS), 128, "selective")
    assert [name for name, *_ in runs] == ["ddp_1", "ddp_node2", "ddp_node4", "ddp_2x2",
                                           "fsdp_node4", "fsdp_2x2", "hsdp_2x2",
                                           "hsdp_2x2_fp8"]
    for name, launch, gpus, flags in runs:
        [(command, _), *_] = multinode.commands(launch, gpus, flags, tmp_path, name)
        [config] = cli.to_plan(cli.parse_args(_tool_args(command))).configs
        assert config.preset == "fast" and config.output_file == name
        assert config.batch_size == (128 * gpus if config.network == "resnet50" else 4)
    fp8 = dict((name, flags) for name, _, _, flags in runs)["hsdp_2x2_fp8"]
    [config] = cli.to_plan(cli.parse_args(fp8)).configs
    assert (config.parallel, config.precision, config.fp8_recipe, config.seq_len,
            config.optimizer) == ("hsdp", "fp8", "tensorwise", 4096, "adamw")


def test_two_simulated_nodes_are_two_agents_with_two_gpus_each(tmp_path):
    agents = multinode.commands(multinode.TWO_NODES, 4, ["--network", "resnet50"], tmp_path,
                                "x")
    assert [env["CUDA_VISIBLE_DEVICES"] for _, env in agents] == ["0,1", "2,3"]
    for node, (command, env) in enumerate(agents):
        assert command[command.index("--nnodes") + 1] == "2"
        assert command[command.index("--nproc-per-node") + 1] == "2"
        assert command[command.index("--node-rank") + 1] == str(node)
        assert command[command.index("--rdzv-backend") + 1] == "c10d"
        assert "RANK" not in env and env["PYTHONPATH"].startswith(str(multinode.REPO))
    [(one, env)] = multinode.commands(multinode.ONE, 1, [], tmp_path, "y")
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and "torch.distributed.run" not in one
    [(node, env)] = multinode.commands(multinode.NODE, 4, [], tmp_path, "z")
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and "--standalone" in node


def test_figures_are_read_from_the_result_document(tmp_path):
    document = {"Throughput [img/sec]": 2.5, "GPUs": 4, "Mini batch size [img]": 4,
                "model": {"parameters": 3_000_000_000},
                "parallel": {"mode": "hsdp", "mesh_shape": [2, 2], "tokens_per_s": 10240.0,
                             "per_rank": [{"peak_reserved_mb": 30_000.0},
                                          {"peak_reserved_mb": 31_000.0}]},
                "distributed": {"per_rank": [{"node_rank": 1, "peak_reserved_mb": 31_000.0},
                                             {"node_rank": 0, "peak_reserved_mb": 30_000.0}]}}
    figures = multinode.figures(document)
    assert (figures["tokens_per_s"], figures["mesh_shape"], figures["peak_reserved_mb"],
            figures["nodes"], figures["parameters"]) == (10240.0, [2, 2], 31_000.0, [0, 1],
                                                         3_000_000_000)
    (tmp_path / "fsdp_node4").mkdir()
    (tmp_path / "fsdp_node4" / "fsdp_node4.json").write_text(json.dumps(document))
    assert multinode.earlier(tmp_path, "fsdp_node4") == figures
    assert multinode.earlier(tmp_path, "hsdp_2x2") is None


def test_every_target_is_judged():
    runs = {"ddp_1": {"img_per_s": 1000.0}, "ddp_node2": {"img_per_s": 1900.0},   # 95%
            "ddp_node4": {"img_per_s": 3700.0},                                 # 92.5%
            "ddp_2x2": {"img_per_s": 3600.0},                                   # 0.973x
            "fsdp_node4": {"tokens_per_s": 40000.0},
            "fsdp_2x2": {"tokens_per_s": 38000.0},                              # 0.95x
            "hsdp_2x2": {"tokens_per_s": 39000.0, "mesh_shape": [2, 2],         # 0.975x
                         "parameters": 3_000_000_000, "peak_reserved_mb": 40_000.0},
            "hsdp_2x2_fp8": {"error": "exit 1, see hsdp_2x2_fp8.log"}}
    text = "\n".join(multinode.verdicts(runs))
    assert "PASS     DDP resnet50 --preset fast scaling at 2 GPUs >= 95%: 0.950" in text
    assert "FAIL     DDP resnet50 --preset fast scaling at 4 GPUs >= 95%: 0.925" in text
    assert "PASS     DDP resnet50 two nodes of 2 vs one node of 4 >= 0.97x: 0.973x" in text
    assert "FAIL     FSDP llama3_3b two nodes of 2 vs one node of 4 >= 0.97x: 0.950x" in text
    assert "PASS     HSDP mesh is 2 replicas x 2 shards: 2 x 2" in text
    assert "PASS     HSDP 2x2 vs FSDP over 4 (llama3_3b tokens/s) >= 0.95x: 0.975x" in text
    # 40 GB against 16 bytes of each of 3e9 parameters, 48 GB.
    assert ("PASS     HSDP 2x2 peak reserved vs DDP's weights, gradients and AdamW state "
            "(48.0 GB a rank) < 1.00x: 0.833x") in text
    assert ("not run  HSDP FP8 tensorwise vs HSDP BF16 (tokens/s) > 1.00x: exit 1, see "
            "hsdp_2x2_fp8.log") in text
    assert len(text.splitlines()) == 8
    assert multinode.verdicts({"hsdp_2x2": {"error": "not started (deadline)"}})[0] == \
        "not run  HSDP mesh is 2 replicas x 2 shards: not started (deadline)"
    assert "| hsdp_2x2 | 4 | [0, 1] | hsdp | [2, 2] |" in multinode.table(
        {"hsdp_2x2": {"gpus": 4, "nodes": [0, 1], "mode": "hsdp", "mesh_shape": [2, 2]}})
