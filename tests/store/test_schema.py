"""The published schema (microbench/store/result.schema.json): every document the tool writes
validates and declares no key the schema does not name; documents of every earlier version
validate; anything else is refused with one line.

The tool runs in-process on tiny configurations: training with trials, inference, generation on
a shrunk llama_tiny, a two-row sweep and the op bench."""
import json

import jsonschema
import pytest

from conftest import HISTORY, TINY, run_main
from microbench.platform.errors import UsageError
from microbench.store import schema
from microbench.store.entry import NOT_SETTINGS
from support.documents import check_document, undeclared_keys

RUNS = {
    # In this process: a worker process a trial would cost seconds of imports each.
    "training-with-trials": ["--network", "resnet18", *TINY, "--repeat", "2", "--trials",
                             "in-process"],
    "inference": ["--network", "resnet18", *TINY, "--mode", "inference", "--measure-peaks", "1"],
    "generate": ["--network", "llama_tiny", "--seq-len", "16", "--vocab-size", "128",
                 "--batch-size", "2", "--iterations", "2", "--warmup", "1", "--mode",
                 "generate", "--prompt-len", "6", "--gen-len", "4"],
    "two-row-sweep": ["--network", "resnet18", "--image-size", "32", "--batch-size", "2,4",
                      "--iterations", "2", "--warmup", "1"],
}


def test_a_key_the_schema_does_not_declare_is_found():
    document = json.loads((HISTORY / "v2_17ac068_training.json").read_text())
    document["timing"]["new_statistic"] = 1.0
    document["env"]["new_library"] = "1.0"
    found = list(undeclared_keys(document, {"$ref": "#/$defs/result"}))
    assert found == ["$.env.new_library", "$.timing.new_statistic"]


def test_the_schema_is_a_valid_draft_2020_12_schema_of_the_version_written():
    jsonschema.Draft202012Validator.check_schema(schema.schema())
    from microbench.output import files
    assert schema.SCHEMA_VERSION == files.SCHEMA_VERSION == 2
    definitions = schema.schema()["$defs"]
    assert definitions["result"]["properties"]["schema_version"]["enum"] == \
        list(schema.READABLE_VERSIONS)


def test_every_closed_setting_of_the_parser_is_in_the_schemas_enum():
    """A new mode, parallel strategy, quantization or recipe is a choice of its flag: the
    schema's enum of the same setting must take it, or results of the new kind would be refused
    by --compare, --rerun and the report (issue 43). Checked for every flag with a closed set
    of values whose setting the schema enumerates."""
    from microbench.plan import cli
    definitions = schema.schema()["$defs"]
    checked = []
    for action in cli.build_parser()._actions:
        allowed = action.choices or getattr(action.type, "allowed", None)
        field = definitions["config"]["properties"].get(action.dest)
        if allowed is None or field is None or "enum" not in field:
            continue
        checked.append(action.dest)
        missing = set(allowed) - set(field["enum"])
        assert not missing, f"$defs.config.{action.dest} lacks {sorted(missing)}"
    # The parallel block names the strategy that ran: the same values as --parallel.
    [parallel] = [a for a in cli.build_parser()._actions if a.dest == "parallel"]
    assert set(parallel.type.allowed) <= set(definitions["parallel"]["properties"]["mode"]["enum"])
    assert {"mode", "parallel", "quantize", "fp8_recipe", "data", "optimizer"} <= set(checked)


@pytest.mark.slow
@pytest.mark.parametrize("name", RUNS)
def test_every_document_a_run_writes_validates(name, tmp_path, capfd):
    process = run_main(capfd, "--output-dir", str(tmp_path), *RUNS[name])
    assert process.returncode == 0, process.stderr[-2000:]
    written = sorted(tmp_path.glob("*.json"))
    assert written, "the run wrote no JSON"
    kinds = [schema.document_kind(check_document(path)) for path in written]
    if name == "two-row-sweep":
        assert kinds.count(schema.SWEEP) == 1 and kinds.count(schema.RESULT) == 2
    if name == "training-with-trials":
        [document] = [json.loads(path.read_text()) for path in written]
        assert document["trials"]["trials"] == 2 and document["trials"]["ci95_low"] is not None


def test_the_op_bench_document_validates_and_carries_the_version(tmp_path, capfd):
    from microbench.ops.cli import main
    output = tmp_path / "ops.json"
    process = run_main(capfd, "--op", "add", "--input1-dim", "64-64", "--device", "cpu",
                       "--num-iters", "3", "--num-warmup-iters", "1", "--output-json",
                       str(output), main=main)
    assert process.returncode == 0, process.stderr
    document = check_document(output)
    assert document["schema_version"] == schema.SCHEMA_VERSION


def test_a_telemetry_block_with_samples_validates(tmp_path):
    """The CPU has no telemetry: the block of a GPU run comes from the telemetry module's own
    summary of scripted samples, in the place a run puts it."""
    from microbench.measure import telemetry

    class Source:
        name, device_label, max_sm_clock_mhz = "scripted 1.0", "test GPU", 2100.0

    samples = [telemetry.Sample(t_s=float(i), sm_clock_mhz=2000.0 - 50 * i, power_w=300.0 + i,
                                temperature_c=60.0, throttle_reasons=("sw_power_cap",) * (i % 2),
                                energy_j=100.0 + 300.0 * i) for i in range(4)]
    report = telemetry.summarize(samples, Source(), items=64, timed_s=3.0)
    document = json.loads((HISTORY / "v2_17ac068_training.json").read_text())
    document["telemetry"] = json.loads(json.dumps(report.to_dict()))
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(document))
    assert check_document(path)["telemetry"]["joules_per_item"] == report.joules_per_item


@pytest.mark.parametrize("path", sorted(HISTORY.glob("*.json")), ids=lambda p: p.name)
def test_documents_of_every_earlier_version_validate(path):
    check_document(path)


def _edited(change):
    document = json.loads((HISTORY / "v2_17ac068_training.json").read_text())
    change(document)
    return document


@pytest.mark.parametrize("document, message", [
    ([1, 2], "not a result of this tool (a JSON list"),
    ({"traceEvents": []}, "not a result of this tool (a JSON object"),
    (_edited(lambda d: d.update(schema_version=3)), "schema version 3 is newer than this tool"),
    (_edited(lambda d: d.update(schema_version=0)), "schema version 0 was never written"),
    (_edited(lambda d: d.update(schema_version="2")), "is not a version number"),
    (_edited(lambda d: d.pop("timing")), "at $: 'timing' is a required property"),
    (_edited(lambda d: d["timing"]["samples_ms"].append("fast")),
     "at $.timing.samples_ms[2]: 'fast' is not of type 'number'"),
    (_edited(lambda d: d.update({"Throughput [img/sec]": -1.0})),
     "at $['Throughput [img/sec]']: -1.0 is less than or equal to the minimum of 0"),
    (_edited(lambda d: d["config"].update(mode=list(range(10000)))), "..."),
])
def test_anything_else_is_refused_with_one_line(document, message):
    with pytest.raises(UsageError) as refused:
        schema.validate_result(document, "x.json")
    text = str(refused.value)
    assert text.startswith("x.json: ") and message in text and "\n" not in text
    assert len(text) < 300


# Edits that break the schema in each way it can be broken, for the fast validator's verdicts.
_BROKEN = {
    "a boolean for an integer": lambda d: d.update(GPUs=True),
    "a fraction for an integer": lambda d: d.update(GPUs=1.5),
    "a string for a number": lambda d: d.update({"Throughput [img/sec]": "1"}),
    "a number for a string": lambda d: d["env"].update(torch=3),
    "below a minimum": lambda d: d["config"].update(batch_size=0),
    "a missing required block": lambda d: d.pop("precision"),
    "a list for an object": lambda d: d.update(telemetry=[]),
    "a string in the samples": lambda d: d["timing"]["samples_ms"].append("fast"),
    "a value outside an enum": lambda d: d["config"].update(mode="bogus"),
}
_RESULTS = sorted(HISTORY.glob("v*_training.json")) + sorted(HISTORY.glob("v*_generate.json"))


@pytest.mark.parametrize("path, edit", [
    *[(path, None) for path in sorted(HISTORY.glob("*.json"))],
    *[(path, edit) for path in _RESULTS for edit in _BROKEN]],
    ids=lambda value: getattr(value, "name", str(value)))
def test_the_fast_validator_agrees_with_jsonschema(path, edit):
    """Many files are checked by fastjsonschema first (collection.FAST_VALIDATION_FROM): it
    passes exactly what jsonschema passes, so a file it refuses gets jsonschema's message."""
    pytest.importorskip("fastjsonschema")
    document = json.loads(path.read_text())
    if edit is not None:
        _BROKEN[edit](document)
    assert schema._passes_fast(document) == (schema._first_problem(document, False) is None)


def test_many_files_read_alike_through_the_fast_validator(tmp_path, monkeypatch):
    from microbench.store import collection
    for path in HISTORY.glob("*.json"):
        (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / "broken.json").write_text(json.dumps(_edited(lambda d: d.pop("timing"))))
    slow = collection.read(collection.input_files([str(tmp_path)]))
    monkeypatch.setattr(collection, "FAST_VALIDATION_FROM", 0)
    fast = collection.read(collection.input_files([str(tmp_path)]))
    assert (fast.lines, fast.entries) == (slow.lines, slow.entries)
    assert any("'timing' is a required property" in line for line in fast.lines)


def test_settings_leave_out_what_rerun_does_not_replay():
    from microbench.settings.config import SCHEMA
    assert {"output_dir", "rank", "dist_url", "explicit"} <= NOT_SETTINGS
    assert {name for name, item in SCHEMA.items() if not item.replayed} <= NOT_SETTINGS


def test_the_schema_is_package_data():
    """Read through importlib.resources, so it is found wherever the package is installed
    (test_packaging checks an installed copy); pyproject.toml names it as package data."""
    import tomllib
    from conftest import ROOT
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    data = project["tool"]["setuptools"]["package-data"]["microbench.store"]
    assert schema.SCHEMA_FILE in data
    assert "jsonschema>=4.18" in project["project"]["dependencies"]
