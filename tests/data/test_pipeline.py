"""The input pipeline on the CPU (microbench.data): the user's folder checked before the run,
corrupt files skipped and named, disjoint shards per rank, endless batches, transforms where the
run puts them, token corpora for language models, and settings that cannot take effect refused."""
from __future__ import annotations

import os

import pytest
import torch

from microbench.models import registry
from microbench.data import DataSettings, ModelInput, codecs, open_pipeline
from microbench.data.folder import scan_folder
from microbench.data.loader import batches_per_epoch
from microbench.data.transforms import (IMAGENET_MEAN, DeviceStage, batched_crops,
                                        host_transform)
from microbench.platform.errors import MissingEnvironment, UsageError

CPU = torch.device("cpu")
SIZE = 32
LIMIT = 2**20


def image_bytes(seed: int, image_format: str = "jpeg", side: int = 40) -> bytes:
    generator = torch.Generator().manual_seed(seed)
    image = torch.randint(0, 256, (3, side, side), generator=generator, dtype=torch.uint8)
    return bytes(codecs.encode(image, image_format).tolist())


def write_images(directory, names, image_format="jpeg"):
    directory.mkdir(parents=True, exist_ok=True)
    for index, name in enumerate(names):
        (directory / name).write_bytes(image_bytes(index, image_format))


def image_input(classes: int = 1000, training: bool = True, **kwargs) -> ModelInput:
    return ModelInput("image", training, image_size=SIZE, num_classes=classes, **kwargs)


def one_line(error) -> str:
    text = str(error.value)
    assert "\n" not in text and error.value.exit_code in (2, 4)
    return text


# ---------------------------------------------------------------- --data folder

@pytest.fixture
def classes_tree(tmp_path):
    root = tmp_path / "tree"
    write_images(root / "cat", ["a.jpg", "b.JPEG", "c.png"])
    write_images(root / "dog" / "deeper", ["d.jpg", "e.jpg"])
    (root / "dog" / "notes.txt").write_text("not an image, and not named like one")
    good = image_bytes(9)
    (root / "dog" / "truncated.jpg").write_bytes(good[: len(good) // 2])   # starts as a JPEG
    (root / "cat" / "fake.jpg").write_text("a text file with an image's name")
    return root


def test_a_class_tree_is_scanned_with_classes_and_rejections(classes_tree):
    listing = scan_folder(str(classes_tree), LIMIT)
    assert listing.classes == ("cat", "dog") and listing.layout == "class folders"
    names = [os.path.relpath(path, classes_tree) for path in listing.paths]
    assert names == ["cat/a.jpg", "cat/b.JPEG", "cat/c.png", "dog/deeper/d.jpg",
                     "dog/deeper/e.jpg", "dog/truncated.jpg"]
    assert listing.labels == (0, 0, 0, 1, 1, 1)
    assert [(os.path.basename(p), why) for p, why in listing.rejected] == [
        ("fake.jpg", "not a JPEG file (it does not start as an image)")]
    assert listing.suffix_formats() == {"jpeg": 5, "png": 1}


def test_links_back_up_a_class_tree_end_the_scan_not_loop_it(classes_tree):
    """torchvision's make_dataset follows such links for ever; the scan does not follow them,
    and hidden class folders are no classes."""
    (classes_tree / "dog" / "deeper" / "up").symlink_to(classes_tree / "dog")
    (classes_tree / "dog" / "deeper" / "self").symlink_to(classes_tree / "dog" / "deeper")
    (classes_tree / ".cache").mkdir()
    write_images(classes_tree / ".cache", ["hidden.jpg"], "jpeg")
    listing = scan_folder(str(classes_tree), LIMIT)
    assert listing.classes == ("cat", "dog") and len(listing.paths) == 6


def test_a_corrupt_file_is_skipped_named_and_counted(classes_tree):
    settings = DataSettings(source="folder", data_dir=str(classes_tree), workers=2)
    with open_pipeline(settings, image_input(), batch_size=2, device=CPU) as pipeline:
        labels = []
        for _ in range(6):                              # two epochs of three batches
            inputs, batch_labels = pipeline.next_batch()
            assert inputs.shape == (2, 3, SIZE, SIZE) and inputs.dtype == torch.float32
            labels += batch_labels.tolist()
        skipped = dict((os.path.basename(p), why) for p, why in pipeline.skipped())
        description = pipeline.description()
    assert set(skipped) == {"fake.jpg", "truncated.jpg"}
    assert skipped["truncated.jpg"].startswith("cannot decode:")
    assert "decode_jpeg.cpp" not in skipped["truncated.jpg"]          # the reason, not a path
    assert set(labels) <= {0, 1}
    assert description["rejected_at_scan"] == 1 and description["layout"] == "class folders"
    assert "2 workers" in description["summary"]


def test_a_flat_folder_is_one_class(tmp_path):
    write_images(tmp_path / "flat", [f"{n}.png" for n in range(4)], "png")
    listing = scan_folder(str(tmp_path / "flat"), LIMIT)
    assert listing.classes == () and listing.labels == (0, 0, 0, 0)
    settings = DataSettings(source="folder", data_dir=str(tmp_path / "flat"), workers=0)
    with open_pipeline(settings, image_input(), batch_size=4, device=CPU) as pipeline:
        inputs, labels = pipeline.next_batch()
        assert labels.tolist() == [0, 0, 0, 0] and pipeline.skipped() == ()


def make_fifo(path):
    os.mkfifo(path)


@pytest.mark.parametrize("case, expected", [
    ("missing", "no such directory"),
    ("a file", "not a directory"),
    ("empty", "holds no images"),
    ("no images", "holds no images"),
    ("none readable", "none of its 2 images can be read as one"),
    ("mixed", "mixes 1 images at its top level"),
])
def test_a_folder_that_cannot_be_used_is_one_line_exit_2(tmp_path, case, expected):
    root = tmp_path / "data"
    if case == "a file":
        root.write_text("x")
    elif case == "empty":
        root.mkdir()
    elif case == "no images":
        root.mkdir()
        (root / "labels.csv").write_text("a,b")
    elif case == "none readable":
        root.mkdir()
        (root / "a.jpg").write_text("text")
        make_fifo(root / "b.png")                       # a FIFO must not hang the scan
    elif case == "mixed":
        write_images(root / "cls", ["a.jpg"])
        write_images(root, ["loose.jpg"])
    settings = DataSettings(source="folder", data_dir=str(root))
    with pytest.raises(UsageError) as error:
        open_pipeline(settings, image_input(), batch_size=1, device=CPU)
    assert expected in one_line(error) and "--data-dir" in one_line(error)


def test_a_file_over_the_bound_or_not_regular_is_left_out(tmp_path):
    write_images(tmp_path / "d", ["small.jpg"])
    (tmp_path / "d" / "big.jpg").write_bytes(image_bytes(1) + b"\0" * 4096)
    make_fifo(tmp_path / "d" / "pipe.jpg")
    listing = scan_folder(str(tmp_path / "d"), max_file_bytes=4000)
    reasons = {os.path.basename(p): why for p, why in listing.rejected}
    assert [os.path.basename(p) for p in listing.paths] == ["small.jpg"]
    assert "more than the" in reasons["big.jpg"] and "an image can have" in reasons["big.jpg"]
    assert reasons["pipe.jpg"] == "is a FIFO, not a regular file"


def test_gpu_decoding_of_a_folder_with_png_files_is_refused_before_the_run(classes_tree):
    settings = DataSettings(source="folder", data_dir=str(classes_tree), decode="gpu",
                            transforms="gpu")
    with pytest.raises(MissingEnvironment) as error:       # on the CPU: no GPU at all
        open_pipeline(settings, image_input(), batch_size=1, device=CPU)
    assert "--decode and --transforms gpu need a GPU" in one_line(error)


# ---------------------------------------------------------------- the generated set, shards

def test_two_ranks_read_disjoint_shards_and_batches_never_run_out(tmp_path):
    """Image i has class i (classes > images), so labels name the images each rank read. The
    sampler reshuffles every epoch; within an epoch the two ranks' shards are disjoint and
    cover the set."""
    settings = DataSettings(source="loader", count=24, image_side=40, workers=0,
                            cache_dir=str(tmp_path))
    epochs = []
    for rank in (0, 1):
        with open_pipeline(settings, image_input(), batch_size=4, device=CPU, rank=rank,
                           world_size=2) as pipeline:
            assert pipeline.description()["batches_per_epoch"] == 3
            read = [pipeline.next_batch()[1].tolist() for _ in range(10)]     # 3 epochs and 1
            assert pipeline.batches.epoch == 3
            epochs.append([sum(read[first:first + 3], []) for first in (0, 3, 6)])
    for mine, theirs in zip(*epochs):
        assert set(mine).isdisjoint(theirs) and set(mine) | set(theirs) == set(range(24))
    assert epochs[0][0] != epochs[0][1]                                       # reshuffled


def test_workers_start_the_next_epoch_before_this_one_is_consumed(tmp_path):
    """The pipeline must not drain at an epoch's end (a small set's epochs are a few batches,
    and a drain each time halved resnet50's throughput on an H100): while the last batch of
    epoch 0 is still ahead of the model, the loader has already asked for epoch 1's indices,
    and it stays one iterator with the same workers."""
    settings = DataSettings(source="loader", count=8, image_side=40, workers=1,
                            prefetch_factor=2, cache_dir=str(tmp_path))
    with open_pipeline(settings, image_input(), batch_size=4, device=CPU) as pipeline:
        shard = pipeline.batches.loader.sampler.shard
        epochs_asked = []
        set_epoch = shard.set_epoch
        shard.set_epoch = lambda epoch: (epochs_asked.append(epoch), set_epoch(epoch))
        pipeline.next_batch()                           # batch 0 of the 2 in epoch 0
        assert epochs_asked == [0, 1] and pipeline.batches.epoch == 0
        workers = pipeline.batches.worker_pids()
        for _ in range(5):
            pipeline.next_batch()
        assert pipeline.batches.epoch == 3 and pipeline.batches.worker_pids() == workers


def test_a_set_too_small_for_one_batch_per_rank_is_refused(tmp_path):
    settings = DataSettings(source="loader", count=6, image_side=40, cache_dir=str(tmp_path))
    with pytest.raises(UsageError) as error:
        open_pipeline(settings, image_input(), batch_size=4, device=CPU, world_size=2)
    assert "use --data-images 8 or more" in one_line(error)
    assert batches_per_epoch(6, 4, 2) == 0 and batches_per_epoch(8, 4, 2) == 1


def test_the_model_input_comes_in_the_precision_and_memory_format_asked(tmp_path):
    settings = DataSettings(source="loader", count=8, image_side=40, workers=1,
                            cache_dir=str(tmp_path))
    wanted = image_input(dtype=torch.bfloat16, channels_last=True, training=False)
    with open_pipeline(settings, wanted, batch_size=4, device=CPU) as pipeline:
        inputs, _ = pipeline.next_batch()
        assert pipeline.description()["pin_memory"] is False        # no GPU: not pinned
    assert inputs.dtype == torch.bfloat16 and inputs.shape == (4, 3, SIZE, SIZE)
    assert inputs.is_contiguous(memory_format=torch.channels_last)


# ---------------------------------------------------------------- transforms

def test_normalising_after_the_copy_equals_normalising_in_the_worker():
    image = torch.randint(0, 256, (3, 48, 40), dtype=torch.uint8)
    in_worker = host_transform(SIZE, training=False, normalise=True)(image)
    crop = host_transform(SIZE, training=False, normalise=False)(image)
    assert crop.dtype == torch.uint8 and crop.shape == (3, SIZE, SIZE)
    stage = DeviceStage(CPU, SIZE, training=False, decode=False, normalise=True,
                        dtype=torch.float32, channels_last=False)
    after_copy, failures = stage(crop.unsqueeze(0))
    assert failures == () and torch.allclose(after_copy[0], in_worker, atol=1e-6)
    mean_image = (torch.tensor(IMAGENET_MEAN) * 255).round().to(torch.uint8)
    flat = mean_image.view(1, 3, 1, 1).expand(1, 3, SIZE, SIZE)
    assert stage(flat)[0].abs().max() < 0.01                         # ImageNet's mean -> 0


def test_the_device_stage_decodes_a_batch_and_stands_in_for_a_corrupt_file():
    good = [torch.frombuffer(bytearray(image_bytes(n)), dtype=torch.uint8) for n in range(3)]
    corrupt = good[1][: good[1].numel() // 2].clone()
    stage = DeviceStage(CPU, SIZE, training=True, decode=True, normalise=True,
                        dtype=torch.float32, channels_last=True)
    inputs, failures = stage([good[0], corrupt, good[2]], ("a.jpg", "b.jpg", "c.jpg"))
    assert inputs.shape == (3, 3, SIZE, SIZE)
    assert inputs.is_contiguous(memory_format=torch.channels_last)
    assert [path for path, _ in failures] == ["b.jpg"]
    assert failures[0][1].startswith("cannot decode:")


def test_crops_of_equal_sized_images_are_cut_in_one_call_as_the_recipe_cuts_them():
    # A left-to-right ramp: each pixel's value says which column it came from.
    ramp = (torch.arange(64) * 3).to(torch.uint8).expand(4, 3, 48, 64).contiguous()
    kept = batched_crops(ramp, SIZE, training=False)
    assert kept.shape == (4, 3, SIZE, SIZE) and kept.dtype == torch.uint8
    side = 48 * 224 / 256                              # the centred square of resize + crop
    first, last = (64 - side) / 2 * 3, (64 + side) / 2 * 3
    assert abs(int(kept[0, 0, 0, 0]) - first) <= 6 and abs(int(kept[0, 0, 0, -1]) - last) <= 6
    torch.manual_seed(3)
    drawn = batched_crops(ramp.repeat(8, 1, 1, 1), SIZE, training=True)
    rising = drawn[:, 0, 0, -1].int() > drawn[:, 0, 0, 0].int()
    assert 0 < int(rising.sum()) < 32                  # some flipped, some not
    flat = torch.full((2, 3, 30, 50), 77, dtype=torch.uint8)
    assert set(batched_crops(flat, SIZE, training=True).unique().tolist()) == {77}


def test_images_of_mixed_sizes_are_cropped_one_by_one():
    stage = DeviceStage(CPU, SIZE, training=True, decode=True, normalise=False,
                        dtype=torch.float32, channels_last=False)
    images = [torch.randint(0, 256, (3, 40, 40), dtype=torch.uint8),
              torch.randint(0, 256, (3, 30, 50), dtype=torch.uint8)]
    assert stage._crop(images).shape == (2, 3, SIZE, SIZE)


# ---------------------------------------------------------------- language models

def test_a_language_model_reads_windows_of_a_token_corpus(tmp_path):
    spec = registry.resolve("llama_tiny", registry.ModelOptions(seq_len=16, vocab_size=100))
    wanted = ModelInput.of(spec)
    assert wanted.kind == "tokens" and wanted.item == "sequence"
    settings = DataSettings(source="loader", count=12, workers=1, cache_dir=str(tmp_path))
    with open_pipeline(settings, wanted, batch_size=3, device=CPU) as pipeline:
        inputs, target = pipeline.next_batch()
        assert pipeline.unit == "sequences/s"
        assert pipeline.description()["tokens"] == 12 * 16 + 1
    assert inputs.shape == target.shape == (3, 16)
    assert torch.equal(inputs[:, 1:], target[:, :-1])                # next-token targets
    assert int(inputs.max()) < 100


def test_image_only_settings_are_refused_for_language_models(tmp_path):
    spec = registry.resolve("llama_tiny", registry.ModelOptions(seq_len=16))
    for settings, expected in (
            (DataSettings(source="folder", data_dir=str(tmp_path)), "--data folder holds images"),
            (DataSettings(source="loader", decode="gpu", transforms="gpu"),
             "--decode and --transforms gpu apply to images")):
        with pytest.raises(UsageError) as error:
            open_pipeline(settings, ModelInput.of(spec), batch_size=1, device=CPU)
        assert expected in one_line(error)


# ---------------------------------------------------------------- settings

@pytest.mark.parametrize("settings, expected", [
    (DataSettings(source="folder"), "--data folder needs --data-dir"),
    (DataSettings(source="loader", data_dir="x"), "--data-dir applies to --data folder"),
    (DataSettings(source="loader", decode="gpu"), "use --transforms gpu"),
    (DataSettings(source="loader", decode="gpu", transforms="gpu", image_format="png"),
     "decodes JPEG only"),
    (DataSettings(source="loader", count=0), "--data-images must be at least 1"),
    (DataSettings(source="loader", workers=-1), "--workers must be at least 0"),
    (DataSettings(source="loader", prefetch_factor=0), "--prefetch-factor must be at least 1"),
    (DataSettings(source="disk"), "--data must be one of synthetic, loader, folder"),
])
def test_settings_that_cannot_take_effect_are_refused(settings, expected):
    with pytest.raises(UsageError) as error:
        settings.check()
    assert expected in one_line(error)


def test_gpu_transforms_on_the_cpu_are_a_missing_environment(tmp_path):
    settings = DataSettings(source="loader", transforms="gpu", cache_dir=str(tmp_path))
    with pytest.raises(MissingEnvironment) as error:
        open_pipeline(settings, image_input(), batch_size=1, device=CPU)
    assert "use --transforms cpu" in one_line(error) and not os.listdir(tmp_path)


def test_the_default_workers_share_this_process_cores_between_local_ranks(monkeypatch):
    from microbench.settings import data_settings as settings_module
    assert settings_module.available_cores() == len(os.sched_getaffinity(0))
    monkeypatch.setattr(settings_module, "available_cores", lambda: 16)
    assert DataSettings().resolved_workers(local_world_size=1) == 16
    assert DataSettings().resolved_workers(local_world_size=8) == 2
    assert DataSettings().resolved_workers(local_world_size=32) == 1
    assert DataSettings(workers=0).resolved_workers(local_world_size=8) == 0


def test_models_without_an_image_and_a_class_have_no_pipeline():
    spec = registry.resolve("fcn_resnet50")
    with pytest.raises(UsageError) as error:
        ModelInput.of(spec)
    assert "fcn_resnet50 is a segmentation model: use --data synthetic" in one_line(error)


# ---------------------------------------------------------------- workers that cannot work

def test_batches_in_flight_beyond_the_free_shared_memory_are_refused(tmp_path, monkeypatch):
    from microbench.data import loader
    real_statvfs = os.statvfs

    def small_shm(path):
        if path == str(tmp_path):
            return os.statvfs_result((4096, 4096, 0, 0, 16 * 256, 0, 0, 0, 0, 255))   # 16 MiB
        return real_statvfs(path)

    monkeypatch.setattr(loader.os, "statvfs", small_shm)
    loader.check_shared_memory(2**20, workers=8, prefetch_factor=2, path=str(tmp_path))
    loader.check_shared_memory(2**30, workers=0, prefetch_factor=2, path=str(tmp_path))
    with pytest.raises(MissingEnvironment) as error:
        loader.check_shared_memory(2**20, workers=8, prefetch_factor=4, path=str(tmp_path))
    assert "need 0.03 GiB of shared memory" in one_line(error) and "--shm-size" in str(error.value)


def test_a_dead_worker_is_one_line_not_a_traceback(tmp_path, monkeypatch):
    from microbench.data.loader import LoaderFailed
    settings = DataSettings(source="loader", count=8, image_side=40, workers=1,
                            cache_dir=str(tmp_path))
    with open_pipeline(settings, image_input(), batch_size=4, device=CPU) as pipeline:
        pipeline.next_batch()

        def dead(*args):
            raise RuntimeError("DataLoader worker (pid 4242) is killed by signal: Killed. ")

        monkeypatch.setattr(type(pipeline.batches._iterator), "__next__", dead)
        with pytest.raises(LoaderFailed) as error:
            pipeline.next_batch()
        monkeypatch.undo()
    text = str(error.value)
    assert "\n" not in text and error.value.exit_code == 1
    assert text.startswith("DataLoader worker (pid 4242) is killed by signal: Killed:")


def test_a_worker_that_dies_during_the_shutdown_raises_nothing_over_it(tmp_path):
    """A worker that dies while the main process is joining it (a job's SIGTERM closing the run
    reached a worker that had not yet set its signals aside, on a loaded host) must not raise
    torch's "worker is killed by signal" from its SIGCHLD handler over the exception that is
    closing the run. The worker is killed once the shutdown has begun."""
    import signal
    settings = DataSettings(source="loader", count=8, image_side=40, workers=1,
                            cache_dir=str(tmp_path))
    pipeline = open_pipeline(settings, image_input(), batch_size=4, device=CPU).__enter__()
    pipeline.next_batch()
    [worker] = pipeline.batches.worker_pids()
    iterator = pipeline.batches._iterator
    shutdown = iterator._shutdown_workers

    def shutdown_of_a_dead_worker():
        iterator._shutdown_workers = shutdown               # once (the iterator's __del__ too)
        os.kill(worker, signal.SIGKILL)
        os.waitid(os.P_PID, worker, os.WEXITED | os.WNOWAIT)     # dead: SIGCHLD handled here
        shutdown()

    iterator._shutdown_workers = shutdown_of_a_dead_worker
    pipeline.close()                                            # raises nothing
    assert pipeline.batches.worker_pids() == ()


def test_workers_are_born_deaf_to_the_stopping_signals_and_the_parent_hears_them(tmp_path):
    """The stopping signals are held back across the workers' fork: a job's SIGTERM to its
    process group cannot end a worker before it sets them aside (only the main process
    stops the workers), and the main process's own mask is as it was once they started."""
    import signal
    settings = DataSettings(source="loader", count=8, image_side=40, workers=1,
                            cache_dir=str(tmp_path))
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    with open_pipeline(settings, image_input(), batch_size=4, device=CPU) as pipeline:
        pipeline.next_batch()
        assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before
        [worker] = pipeline.batches.worker_pids()
        status = dict(line.split(":\t") for line in
                      open(f"/proc/{worker}/status").read().splitlines() if ":\t" in line)
        ignored, blocked = int(status["SigIgn"], 16), int(status["SigBlk"], 16)
    assert ignored >> (signal.SIGTERM - 1) & 1 and not blocked >> (signal.SIGTERM - 1) & 1
