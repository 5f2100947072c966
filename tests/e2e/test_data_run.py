"""Runs fed by the input pipeline, through the real command line in-process (issue 25): training
and inference with and without loader workers, the data block of the JSON (valid against the
published schema), a sweep over the workers with its table and plot, trials in worker
processes, a language model's token corpus, a folder with a corrupt file, and flags that cannot
take effect refused with one line before anything is built."""
from __future__ import annotations

import json

import pytest
import torch

from conftest import TINY
from microbench.data import codecs
from microbench.store.schema import validate_result

RESNET = ["--network", "resnet18", *TINY, "--batch-size", "4"]
DATA_ROWS = ("Input pipeline", "Pipeline", "Loader alone", "Model alone", "Wait for data",
             "Loader worker CPU", "Verdict")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One generated set for the whole module (made by the first run, reused by the others)."""
    return str(tmp_path_factory.mktemp("cache"))


def loader(cache: str, *more: str) -> list[str]:
    return [*RESNET, "--data", "loader", "--data-images", "8", "--data-cache", cache, *more]


def documents(out_dir):
    found = [json.loads(path.read_text()) for path in sorted(out_dir.glob("*.json"))]
    for document in found:
        validate_result(document, "test")
    return found


def rows_of(stdout: str) -> dict[str, str]:
    rows = {}
    for line in stdout.splitlines():
        label, colon, value = line.strip().partition(":")
        if colon:
            rows.setdefault(label.strip(), value.strip())
    return rows


def test_training_fed_by_the_loader_in_the_main_process(cli, cache):
    ran, out_dir = cli(*loader(cache, "--workers", "0"))
    assert ran.returncode == 0, ran.stderr
    rows = rows_of(ran.stdout)
    assert all(label in rows for label in DATA_ROWS), ran.stdout
    assert "0 workers" not in rows["Input pipeline"]
    assert "loading in the main process" in rows["Input pipeline"]
    assert rows["Loader worker CPU"].startswith("unknown")        # no worker processes
    (document,) = documents(out_dir)
    data = document["data"]
    assert (data["source"], data["workers"], data["decode"]) == ("loader", 0, "cpu")
    # The pipeline is the run's own headline; the model alone its own samples.
    assert data["pipeline_per_s"] == pytest.approx(document["Throughput [img/sec]"])
    assert len(data["model_alone"]["samples_ms"]) == 2 and data["wait"]["steps"] == 2
    assert data["loader_alone"]["batches"] == 2
    assert document["config"]["data"] == "loader"
    assert [path.name for path in out_dir.glob("*.json")] == [
        "resnet18_training_fp32_b4_loader-w0-decode-cpu.json"]


def test_inference_fed_by_two_worker_processes_reuses_the_set(cli, cache):
    cli(*loader(cache, "--workers", "0"))                 # the set exists after this
    ran, out_dir = cli(*loader(cache, "--workers", "2", "--mode", "inference",
                               "--prefetch-factor", "1"))
    assert ran.returncode == 0, ran.stderr
    assert "Making" not in ran.stdout                      # made once, reused
    (data,) = [d["data"] for d in documents(out_dir) if d["config"]["mode"] == "inference"]
    assert (data["workers"], data["prefetch_factor"], data["cache_built"]) == (2, 1, False)
    assert data["loader_alone"]["batches"] == 8            # 4 batches per worker at least
    # Any verdict the rule can give: which one depends on how busy the machine is ("unknown"
    # when another job disturbed the model-alone figure); this test is about the reuse.
    assert data["verdict"]["kind"] in ("input-bound", "compute-bound", "interference", "unknown")


@pytest.mark.slow
def test_a_sweep_over_the_workers_prints_its_table_and_draws_its_plot(cli, cache, tmp_path):
    plot = tmp_path / "workers.png"
    ran, out_dir = cli(*loader(cache, "--workers", "0,1", "--plot", str(plot)))
    assert ran.returncode == 0, ran.stderr
    assert "loader workers=0 decode=cpu" in ran.stdout and "loader workers=1 decode=cpu" in ran.stdout
    table = ran.stdout[ran.stdout.index("Input pipeline (images/s"):].splitlines()
    assert table[1].split()[:3] == ["#", "workers", "decode"]
    assert set(table[2].split()) == {"-" * len(word) for word in table[2].split()}
    assert [line.split()[1] for line in table[3:5]] == ["0", "1"]
    assert plot.stat().st_size > 0
    results = [d for d in documents(out_dir) if "rows" not in d]
    assert sorted(d["data"]["workers"] for d in results) == [0, 1]
    assert len({d["Name"] for d in results}) == 1          # the network, as the older tool
    rows = [p for p in out_dir.glob("*loader-w*") if not p.name.startswith("sweep_")]
    assert len(rows) == 2                                    # one file per row, named apart


@pytest.mark.slow
def test_trials_in_worker_processes_each_measure_their_pipeline(cli, cache):
    ran, out_dir = cli(*loader(cache, "--workers", "0", "--repeat", "2"))
    assert ran.returncode == 0, ran.stderr
    (document,) = documents(out_dir)
    data = document["data"]
    assert data["trials"] == 2 and data["wait"]["steps"] == 4       # both trials' steps
    assert len({trial["pid"] for trial in document["trials"]["per_trial"]}) == 2


def test_a_language_model_reads_a_token_corpus(cli, cache):
    ran, out_dir = cli("--network", "llama_tiny", "--batch-size", "2", "--seq-len", "16",
                       "--iterations", "2", "--warmup", "1", "--data", "loader",
                       "--data-images", "4", "--data-cache", cache, "--workers", "0")
    assert ran.returncode == 0, ran.stderr
    data = documents(out_dir)[0]["data"]
    assert data["unit"] == "sequences/s" and data["format"].startswith("int32 token ids")


def test_a_folder_with_a_corrupt_file_runs_and_names_it(cli, tmp_path):
    tree = tmp_path / "photos"
    tree.mkdir()
    for index in range(8):
        image = torch.full((3, 48, 48), index * 30, dtype=torch.uint8)
        (tree / f"{index}.png").write_bytes(bytes(codecs.encode(image, "png").tolist()))
    good = (tree / "0.png").read_bytes()
    (tree / "broken.png").write_bytes(good[:40])             # starts as a PNG, then ends
    ran, out_dir = cli(*RESNET, "--data", "folder", "--data-dir", str(tree), "--workers", "0")
    assert ran.returncode == 0, ran.stderr
    assert "Skipped files" in ran.stdout and "broken.png" in ran.stdout
    data = documents(out_dir)[0]["data"]
    assert [entry["path"].endswith("broken.png") for entry in data["skipped_files"]] == [True]


@pytest.mark.parametrize("flags, code, text", [
    (["--data", "folder"], 2, "--data folder needs --data-dir"),
    (["--data", "folder", "--data-dir", "/nonexistent/photos"], 2,
     "--data-dir /nonexistent/photos: no such directory"),
    (["--workers", "4"], 2, "--workers applies to --data loader or --data folder"),
    (["--data", "loader", "--decode", "gpu", "--transforms", "gpu", "--device", "cpu"], 4,
     "--decode and --transforms gpu need a GPU"),
    (["--data", "loader", "--decode", "gpu"], 2, "use --transforms gpu"),
    (["--data", "loader", "--network", "fcn_resnet50"], 2, "use --data synthetic"),
])
def test_settings_that_cannot_take_effect_stop_before_the_model_is_built(cli, flags, code,
                                                                        text):
    refused(*cli(*RESNET, *flags), code, text)


def test_generation_makes_its_own_prompts_and_takes_no_pipeline(cli):
    refused(*cli("--network", "llama_tiny", "--mode", "generate", "--data", "loader"), 2,
            "--data loader feeds training and inference steps; --mode generate makes its own "
            "prompts")


def refused(ran, out_dir, code: int, text: str) -> None:
    assert ran.returncode == code, (ran.stdout[-2000:], ran.stderr)
    lines = [line for line in ran.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and text in lines[0], ran.stderr
    assert "Building" not in ran.stdout and not out_dir.exists()
