"""--data-dir given hostile folders (issue 38): images of no bytes refused before the model
is built, and images reached through links out of the folder named.

(Part of the hostile-input tests, split from one file by what is attacked.)"""
from __future__ import annotations

import os
from pathlib import Path

from conftest import assert_one_line_error, run_main
from microbench.data import cache
from support.hostile import RUN
from support.hostile import no_launcher_environment  # noqa: F401 (autouse: this module's)


# ---------------------------------------------------------------- issue 38: --data-dir

def test_a_data_dir_of_empty_images_is_refused_before_the_model_is_built(tmp_path, capfd):
    images = tmp_path / "images"
    images.mkdir()
    for index in range(3):
        (images / f"{index}.jpg").write_bytes(b"")
    ran = run_main(capfd, *RUN, "--data", "folder", "--data-dir", str(images),
                   "--output-dir", str(tmp_path / "out"))
    assert_one_line_error(ran, 2, "all of its 3 image files are empty")
    assert "Building" not in ran.stdout and not (tmp_path / "out").exists()


def test_images_reached_through_links_out_of_the_data_dir_are_named(tmp_path):
    from microbench.data import folder
    made = cache.ensure_image_set(str(tmp_path / "cache"), "png", count=2, side=16)
    images = tmp_path / "images"
    images.mkdir()
    inside, outside = made.file_paths()
    (images / "inside.png").write_bytes(Path(inside).read_bytes())
    (images / "outside.png").symlink_to(outside)
    listing = folder.scan_folder(str(images), 2**20)
    assert len(listing.paths) == 2
    assert listing.outside == ((str(images / "outside.png"), os.path.realpath(outside)),)
