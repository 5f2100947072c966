"""Generated data sets (microbench.data.cache): made once, whole or not at all, reused, rebuilt
when they cannot be trusted, and safe when several processes start at once."""
from __future__ import annotations

import json
import multiprocessing
import os
import signal

import pytest
import torch

from microbench.data import cache, codecs, image_files as files
from microbench.platform.errors import UsageError

SIDE, COUNT = 16, 6


def leftovers(root) -> list[str]:
    return [name for name in os.listdir(root) if name.startswith(cache.BUILDING_PREFIX)]


def make(root, **kwargs):
    return cache.ensure_image_set(str(root), kwargs.pop("image_format", "jpeg"),
                                  kwargs.pop("count", COUNT), SIDE, **kwargs)


def test_a_set_is_made_once_and_reused(tmp_path):
    notes = []
    first = make(tmp_path, notify=notes.append)
    assert first.built and notes == [f"making {first.path} (once; later runs reuse it)"]
    inodes = {path: os.stat(path).st_ino for path in first.file_paths()}
    second = make(tmp_path, notify=notes.append)
    assert not second.built and len(notes) == 1                 # nothing made, nothing said
    assert second.manifest == first.manifest
    assert {path: os.stat(path).st_ino for path in second.file_paths()} == inodes
    assert os.path.basename(first.path) == f"images-jpeg-{SIDE}-{COUNT}"
    assert len(first.file_paths()) == COUNT and leftovers(tmp_path) == []
    # The manifest is one of the tool's JSON documents: versioned, and as the schema says.
    from microbench.store import schema
    with open(os.path.join(first.path, cache.MANIFEST)) as stored:
        manifest = json.load(stored)
    assert manifest["schema_version"] == schema.SCHEMA_VERSION
    schema.validate_result(manifest, "manifest.json")
    assert schema.document_kind(manifest) == schema.DATA_CACHE


def test_the_files_are_the_images_the_manifest_names(tmp_path):
    made = make(tmp_path, image_format="png", count=2)
    for (name, size), path in zip(made.manifest["files"], made.file_paths()):
        data = files.read_checked(path, 2**20)
        assert len(data) == size and files.sniff(bytes(data[:16])) == "png"
        image = codecs.decode_on_host(torch.frombuffer(data, dtype=torch.uint8))
        assert image.shape == (3, SIDE, SIDE)
    again = cache.ensure_image_set(str(tmp_path / "elsewhere"), "png", 2, SIDE)
    assert [files.read_checked(p, 2**20) for p in again.file_paths()] == \
        [files.read_checked(p, 2**20) for p in made.file_paths()]            # deterministic


@pytest.mark.parametrize("damage", ["truncated file", "missing file", "no manifest",
                                    "another request", "garbage manifest"])
def test_a_set_that_cannot_be_trusted_is_rebuilt(tmp_path, damage):
    made = make(tmp_path)
    manifest_path = os.path.join(made.path, cache.MANIFEST)
    victim = made.file_paths()[2]
    if damage == "truncated file":
        with open(victim, "r+b") as handle:
            handle.truncate(10)
    elif damage == "missing file":
        os.unlink(victim)
    elif damage == "no manifest":                       # a half-made directory
        os.unlink(manifest_path)
    elif damage == "another request":
        manifest = json.load(open(manifest_path))
        manifest["wanted"]["quality"] = 12
        open(manifest_path, "w").write(json.dumps(manifest))
    else:
        open(manifest_path, "w").write("{not json")
    again = make(tmp_path)
    assert again.built and again.manifest["files"] == made.manifest["files"]
    assert os.path.getsize(victim) == made.manifest["files"][2][1]
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("entry", ["../outside.jpg", "/etc/hostname", "sub/0000000.jpg", "..",
                                   "size as text", "size as float", "huge size"])
def test_a_manifest_naming_files_outside_the_set_or_odd_sizes_is_rebuilt(tmp_path, entry):
    """A cache is a shared folder: its manifest is a stranger's file. A name that leaves the
    set, or a size that is no count, makes it a damaged set (rebuilt), never a file read."""
    made = make(tmp_path)
    (tmp_path / "outside.jpg").write_bytes(b"x" * 10)
    manifest_path = os.path.join(made.path, cache.MANIFEST)
    manifest = json.load(open(manifest_path))
    name, size = manifest["files"][1]
    manifest["files"][1] = {"size as text": [name, str(size)],
                            "size as float": [name, float(size)],
                            "huge size": [name, 10**400]}.get(entry, [entry, 10])
    manifest["mean_file_bytes"] = float("inf")
    open(manifest_path, "w").write(json.dumps(manifest))
    again = make(tmp_path)
    assert again.built and again.manifest["files"] == made.manifest["files"]
    assert all(path.startswith(again.path + os.sep) for path in again.file_paths())
    assert again.mean_file_bytes == sum(size for _, size in again.manifest["files"]) / COUNT


def test_a_killed_build_leaves_nothing_and_its_leftovers_go_next_time(tmp_path, monkeypatch):
    """A real SIGINT in the middle of making the set: no set, no temporary directory. A
    temporary directory a SIGKILLed build left is removed by the next build."""
    calls = []
    real_encode = codecs.encode

    def encode_then_interrupt(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGINT)     # handled at the next bytecode: Ctrl-C
        return real_encode(*args, **kwargs)

    monkeypatch.setattr(codecs, "encode", encode_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        make(tmp_path)
    assert sorted(os.listdir(tmp_path)) == [f".images-jpeg-{SIDE}-{COUNT}.lock"]
    monkeypatch.setattr(codecs, "encode", real_encode)
    stale = tmp_path / f"{cache.BUILDING_PREFIX}images-jpeg-{SIDE}-{COUNT}-999-dead"
    stale.mkdir()
    (stale / "0000000.jpg").write_bytes(b"half")
    assert make(tmp_path).built and leftovers(tmp_path) == []


def _race(root: str, barrier, results) -> None:
    barrier.wait(timeout=60)
    made = cache.ensure_image_set(root, "jpeg", 24, SIDE)
    results.put((made.built, made.manifest["files"]))


def test_two_processes_starting_at_once_make_it_once(tmp_path):
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(2), context.Queue()
    processes = [context.Process(target=_race, args=(str(tmp_path), barrier, results))
                 for _ in range(2)]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert sorted(built for built, _ in outcomes) == [False, True]
    assert outcomes[0][1] == outcomes[1][1]
    assert not make(tmp_path, count=24).built and leftovers(tmp_path) == []


def test_a_token_corpus_is_made_once_and_mapped(tmp_path):
    made = cache.ensure_token_corpus(str(tmp_path), vocab_size=50, tokens=1001, seed=3)
    assert made.built and not cache.ensure_token_corpus(str(tmp_path), 50, 1001, 3).built
    tokens = torch.from_file(made.file_paths()[0], shared=False, size=1001, dtype=torch.int32)
    assert tokens.min() >= 0 and tokens.max() < 50 and tokens.unique().numel() > 40


def test_a_cache_root_that_is_a_file_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="not a directory|cannot create") as caught:
        make(tmp_path / "file")
    assert caught.value.exit_code == 2 and "\n" not in str(caught.value)



def test_the_shared_reader_reads_in_place_and_names_a_short_read():
    """data/image_files.py reads through platform/inputs.py's read_exactly: a source that ends
    early is a ShortRead with the count (the data side records "shorter than its size (...)")."""
    from microbench.platform.inputs import ShortRead, read_exactly
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"\xff\xd8\xff")
        os.close(write_end)
        with pytest.raises(ShortRead, match=r"3 of 16 bytes read"):
            read_exactly(read_end, 16)
    finally:
        os.close(read_end)
    assert files.read_exactly is read_exactly
