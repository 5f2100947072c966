"""What each figure is in and against (issue 46): a language model's interval is in its
headline's unit, an A/B of sides in different units is refused (before building, and in a
summary), and an accuracy is labelled with the reference each row was measured against ("vs
BF16" only on rows measured against BF16).

(Part of the hostile-input tests, split from one file by what is attacked.)"""
from __future__ import annotations

import json
import re

import pytest

from conftest import assert_one_line_error, run_main
from microbench.platform.errors import UsageError
from microbench.store import schema
from support.hostile import ab_summary, report_of, result_named
from support.hostile import no_launcher_environment  # noqa: F401 (autouse: this module's)


# ---------------------------------------------------------------- the unit an interval and an A/B are in

def test_a_language_models_interval_is_in_its_headlines_unit(capfd, steady_clock):
    ran = run_main(capfd, "--network", "llama_tiny", "--seq-len", "16", "--device", "cpu",
                   "--mode", "inference", "--batch-size", "2", "--iterations", "2",
                   "--warmup", "1", "--repeat", "2", "--trials", "in-process", "--no-files")
    assert ran.returncode == 0, ran.stderr
    headline = next(line for line in ran.stdout.splitlines()
                    if line.startswith("llama_tiny inference:"))
    found = re.search(r": ([\d,.]+) tokens/s .* 95% CI ([\d,.]+) to ([\d,.]+)", headline)
    rate, low, high = (float(text.replace(",", "")) for text in found.groups())
    assert low <= rate <= high, headline


@pytest.mark.parametrize("b", ["--network llama_tiny --seq-len 16", "--seq-len 8"])
def test_an_ab_of_sides_in_different_units_is_refused_before_building(b, capfd):
    base = (["--network", "llama_tiny", "--seq-len", "16"] if b == "--seq-len 8" else
            ["--network", "resnet18", "--batch-size", "2"])
    ran = run_main(capfd, *base, "--device", "cpu", "--iterations", "1", "--warmup", "1",
                   "--no-files", "--ab", b)
    assert_one_line_error(ran, 2, "a ratio of different units")
    assert "Building" not in ran.stdout


def test_a_summary_whose_sides_have_different_units_is_refused():
    with pytest.raises(UsageError, match="different units"):
        summary = ab_summary()
        summary["ab"]["b_trials"]["unit"] = "sequences/s"
        schema.validate_result(summary, "ab.json")


# ---------------------------------------------------------------- the reference an accuracy was measured against

def test_accuracy_labels_name_the_reference_each_row_was_measured_against():
    from microbench.output import sweep_table
    from microbench.store.entry import (Entry, MODEL, accuracy_reference,
                                        is_accuracy_reference)

    def row(precision, reference="", kind="logits"):
        return Entry(MODEL, "f", {"precision": precision},
                     {"throughput": 10.0, "accuracy": 0.004}, "tokens/s",
                     accuracy_kind=kind if reference else "", accuracy_reference=reference)
    fp16_quantized, bf16_quantized = row("fp16", "FP16"), row("bf16", "BF16")
    fp8 = row("fp8", "AMP-BF16", "loss")
    assert accuracy_reference([fp16_quantized, row("fp16")]) == "FP16"
    assert accuracy_reference([bf16_quantized, fp8, row("bf16")]) == "BF16"
    assert accuracy_reference([fp16_quantized, bf16_quantized]) is None
    assert is_accuracy_reference(row("bf16"), "BF16")
    assert not is_accuracy_reference(row("fp16"), "BF16")      # no point at 0 "vs BF16"
    assert sweep_table.accuracy_cell(fp16_quantized, named_in_heading=False).endswith("vs FP16")
    rows = [type("Row", (), {"entry": e, "spec": None, "status": "ok",
                             "label": lambda self: "row"})() for e in (fp16_quantized,
                                                                     row("fp16"))]
    columns, _ = sweep_table.comparison_cells(rows)
    assert columns[-1].heading == "accuracy vs FP16"


def test_a_report_of_fp16_rows_does_not_say_vs_bf16(tmp_path, capfd):
    document = result_named("llama_tiny")
    document["precision"] = {**document.get("precision", {}), "name": "fp16"}
    document["accuracy"] = {"kind": "logits", "reference": "FP16", "relative_error": 0.01,
                            "top1_agreement": 0.99, "positions": 64}
    (tmp_path / "q.json").write_text(json.dumps(document))
    ran = report_of(capfd, str(tmp_path / "q.json"))
    assert ran.returncode == 0, ran.stderr
    assert "vs FP16" in ran.stdout and "BF16" not in ran.stdout
