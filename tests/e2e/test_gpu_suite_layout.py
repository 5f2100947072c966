"""benchmarks/gpu_suite.sh collects its both-GPU phase from the folders it names
(GPU_TEST_DIRS), not from the whole tree: a gpu-marked test anywhere else would never run on a
GPU. This holds the layout the script relies on."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKS = re.compile(r"pytest\.mark\.gpu\b|\bgpu_suite\b")


def suite_dirs() -> list[str]:
    script = (ROOT / "benchmarks" / "gpu_suite.sh").read_text()
    found = re.search(r"^GPU_TEST_DIRS=\(([^)]*)\)", script, re.MULTILINE)
    assert found, "gpu_suite.sh no longer names GPU_TEST_DIRS"
    return found.group(1).split()


def test_every_gpu_marked_test_lives_where_the_gpu_suite_collects():
    dirs = [ROOT / name for name in suite_dirs()]
    assert all(folder.is_dir() for folder in dirs), dirs
    outside = [path.relative_to(ROOT) for path in (ROOT / "tests").rglob("*.py")
               if MARKS.search(path.read_text(encoding="utf-8"))
               and not any(folder in path.parents for folder in dirs)
               and path != Path(__file__).resolve()]
    assert not outside, f"gpu-marked tests outside {suite_dirs()}: {outside}"


def test_the_check_sees_a_gpu_mark():
    assert MARKS.search("@pytest.mark.gpu\ndef test_x(): ...")
    assert MARKS.search("pytestmark = gpu_suite")
    assert not MARKS.search("pytest.mark.gpus_present")
