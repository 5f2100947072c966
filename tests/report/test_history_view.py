"""``microbench-report --history`` in-process over folders of synthetic nightly results: the
table names what changed, exit 5 on a confirmed slowdown the newest result still shows (0
otherwise), markdown, JSON, the chart and the page, flags that would not take effect, bad and
hostile files in the folder, and the benchmark's --label that the history orders by."""
import json
import math
import random
import shutil

import pytest

from conftest import HISTORY, assert_one_line_error, nightly_result, run_main
from microbench.plan import cli
from microbench.report import command

NIGHTS = 12


def write_nights(folder, step: float = 0.9, network: str = "resnet18") -> None:
    """2 * NIGHTS nights of ``network``: torch 2.14.1, then 2.15.0 at ``step`` of the speed."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(network)
    for night in range(2 * NIGHTS):
        after = night >= NIGHTS
        value = 100.0 * (step if after else 1.0) * math.exp(rng.gauss(0, 0.01))
        document = nightly_result(value, night, {"network": network},
                                  {"torch": "2.15.0" if after else "2.14.1"}, f"n{night}")
        document["model"]["name"] = network
        (folder / f"{network}_{night}.json").write_text(json.dumps(document))


@pytest.fixture(scope="module")
def nightly(tmp_path_factory):
    """resnet18 10% slower from night 12 (with torch 2.15.0), resnet50 5% faster."""
    folder = tmp_path_factory.mktemp("history") / "nightly"
    write_nights(folder)
    write_nights(folder, 1.05, "resnet50")
    return folder


def report(capfd, *args):
    return run_main(capfd, *args, main=command.main)


def test_a_confirmed_slowdown_names_torch_and_exits_5(nightly, capfd):
    ran = report(capfd, str(nightly), "--history", "--by", "label")
    assert ran.returncode == 5
    lines = ran.stdout.splitlines()
    row = next(line for line in lines if line.startswith("1  "))
    assert "n11" in row and "n12" in row and "torch 2.14.1 → 2.15.0" in row
    assert "REGRESSION: slower by 10." in ran.stdout
    assert ran.stderr.strip().splitlines()[-1].startswith("error: resnet18")
    assert "Traceback" not in ran.stderr


def test_a_slowdown_within_the_tolerance_exits_0(nightly, capfd):
    ran = report(capfd, str(nightly), "--history", "--tolerance", "20")
    assert ran.returncode == 0, ran.stderr
    assert "REGRESSION" not in ran.stdout and ran.stdout.count("1 confirmed change") == 2


def test_markdown_and_json(nightly, capfd):
    markdown = report(capfd, str(nightly), "--history", "--format", "markdown").stdout
    assert "| # | last before | first after |" in markdown
    document = json.loads(report(capfd, str(nightly), "--history", "--format", "json").stdout)
    by_title = {series["title"].split(" · ")[0]: series for series in document["series"]}
    slower, faster = by_title["resnet18"], by_title["resnet50"]
    assert slower["regression"] and not faster["regression"]
    [change] = slower["changes"]
    assert change["changed"][0] == {"field": "torch", "kind": "software", "before": "2.14.1",
                                    "after": "2.15.0", "varies": False}
    assert change["ratio"] == pytest.approx(0.9, rel=0.02)
    assert change["ci95"][0] < change["ratio"] < change["ci95"][1]
    assert len(slower["results"]) == 2 * NIGHTS
    # Each result keeps the host's load beside its throughput (unknown: none was recorded).
    assert {key: slower["results"][0][key] for key in ("host_load_per_core",
                                                       "host_others_cpu_pct",
                                                       "host_loaded")} == dict.fromkeys(
        ("host_load_per_core", "host_others_cpu_pct", "host_loaded"))


def test_the_chart_and_the_page_are_written_before_the_exit(nightly, capfd, tmp_path):
    plot, page = tmp_path / "history.png", tmp_path / "history.html"
    ran = report(capfd, str(nightly), "--history", "--plot", str(plot), "--html", str(page))
    assert ran.returncode == 5
    assert plot.read_bytes().startswith(b"\x89PNG")
    html = page.read_text()
    assert "data:image/png;base64," in html and "<script" not in html
    assert "torch 2.14.1 → 2.15.0" in html and 'class="regression"' in html


@pytest.mark.parametrize("args, message", [
    (["--by", "label"], "--by applies to --history"),
    (["--tolerance", "3"], "--tolerance applies to --history"),
    (["--history", "--baseline", "1"], "--baseline chooses what the table"),
    (["--history", "--x", "batch"], "--x chooses what the table"),
    (["--history", "--format", "csv"], "--history writes text, markdown, json"),
])
def test_flags_that_would_not_take_effect_are_refused(capfd, args, message):
    assert_one_line_error(report(capfd, str(HISTORY), *args), 2, message)


def test_a_folder_without_a_series_is_exit_2(capfd, tmp_path):
    shutil.copy(HISTORY / "ops_a7991ea.json", tmp_path)
    ran = report(capfd, str(tmp_path), "--history")
    assert ran.returncode == 2 and "--history has no series to show" in ran.stderr
    assert "no run identity recorded" in ran.stderr


def test_bad_and_hostile_files_are_skipped_or_escaped(capfd, tmp_path):
    """Corrupt, future and deeply nested files are skipped with a line each; a torch version
    holding markup, a terminal escape and mathtext reaches the table, the chart's label and
    the page as text."""
    folder = tmp_path / "nightly"
    write_nights(folder)
    for path in folder.glob("*.json"):
        document = json.loads(path.read_text())
        if document["env"]["torch"] == "2.15.0":
            document["env"]["torch"] = "<script>x</script>\x1b[31m$\\frac{$"
            path.write_text(json.dumps(document))
    (folder / "corrupt.json").write_text('{"schema_version": 2, "Name"')
    (folder / "future.json").write_text((folder / "resnet18_0.json").read_text()
                                        .replace('"schema_version": 2', '"schema_version": 9'))
    (folder / "nested.json").write_text("[" * 5000 + "]" * 5000)
    page, plot = tmp_path / "page.html", tmp_path / "h.png"
    ran = report(capfd, str(folder), "--history", "--html", str(page), "--plot", str(plot))
    assert ran.returncode == 5, ran.stderr
    skipped = [line for line in ran.stderr.splitlines() if line.startswith("skipped")]
    assert len(skipped) == 3 and "Traceback" not in ran.stderr
    assert "\x1b" not in ran.stdout + ran.stderr and "torch 2.14.1 → <script>" in ran.stdout
    assert "<script>" not in page.read_text() and "&lt;script&gt;" in page.read_text()
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_the_benchmark_stores_a_label_and_refuses_a_bad_one(capfd):
    args = cli.parse_args(["--label", " nightly-2026-11-27 "])
    assert cli.to_config(args).label == "nightly-2026-11-27"
    assert cli.to_config(cli.parse_args([])).label is None
    for bad in ("", "two\nlines", "x" * 121):
        with pytest.raises(SystemExit) as refused:
            cli.parse_args(["--label", bad])
        assert refused.value.code == 2
    assert "a label is 1 to 120 printable characters" in capfd.readouterr().err
