"""The shape of the code holds: no import cycles, the kind of run known only to the scenarios,
the vendor only to the device layer, one schema per setting (every flag replays through --rerun),
the op bench's command light enough not to load the model benchmark, and the tests in the folders
of what they test."""
from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import IMAGE_MODEL, ROOT, stored_result
from microbench.plan import cli, preset, rerun
from microbench.settings import config

PACKAGE = ROOT / "microbench"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
_NAMED_MODULE = re.compile(r"microbench(\.\w+)+(:\w+)?")


class _Imports(ast.NodeVisitor):
    """Every import of a package module by a module: function-level imports and the type
    checker's (``if TYPE_CHECKING:``) included, since a circle for the type checker is a circle
    in the design (a value type a lower layer needs lives in that layer, not above it)."""

    def __init__(self, module: str, is_package: bool):
        self.module, self.is_package, self.found = module, is_package, set()

    def _add(self, name: str) -> None:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != self.module:
            self.found.add(name)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] == "microbench":
                self._add(alias.name)

    def visit_Constant(self, node: ast.Constant) -> None:
        """A module named by a string (``importlib.import_module("microbench.x")``, an entry
        point's ``"microbench.x"``, a worker's ``"microbench.x:function"``) is imported too."""
        if isinstance(node.value, str) and _NAMED_MODULE.fullmatch(node.value):
            self._add(node.value.partition(":")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            parts = self.module.split(".")
            base = parts if self.is_package else parts[:-1]
            base = base[:len(base) - node.level + 1]
            module = ".".join(base + ([node.module] if node.module else []))
        elif node.module and node.module.split(".")[0] == "microbench":
            module = node.module
        else:
            return
        for alias in node.names:
            full = f"{module}.{alias.name}"
            self._add(full if full in MODULES else module)


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        visitor = _Imports(name, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text()))
        graph[name] = visitor.found
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path of module names, or None."""
    state: dict[str, int] = {}          # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return path[path.index(target):] + [node, target] if target in path else \
                    [node, target]
            if target not in state:
                found = visit(target, path + [node])
                if found:
                    return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start, [])
            if cycle:
                return cycle
    return None


def test_no_module_of_the_package_imports_itself_in_a_circle():
    assert find_cycle(import_graph()) is None, " -> ".join(find_cycle(import_graph()))


# The layers, bottom first: a module imports from its own folder and the folders below it.
LAYERS = ("platform", "settings", "models", "measure", "store", "steps", "data", "ops",
          "scenarios", "plan", "output", "drivers", "report", "node")


def _layer(module: str) -> str | None:
    """The layer folder of a package module; None for the package's root modules."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return [f"{module} -> {target}" for module, targets in sorted(graph.items())
            for target in sorted(targets)
            if _layer(module) and _layer(target)
            and LAYERS.index(_layer(target)) > LAYERS.index(_layer(module))]


def test_every_layer_imports_only_itself_and_the_layers_below():
    """Folders are layers, not a grouping: no folder reaches up (type-checker and
    function-level imports included), so each can be read, and tested, from the bottom up."""
    assert upward_imports(import_graph()) == []


def test_the_layer_order_is_the_folders_and_the_documents():
    """Every folder has its place in LAYERS, and docs/architecture.md lists them top first."""
    folders = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    assert folders == set(LAYERS)
    documented = (ROOT / "docs" / "architecture.md").read_text()
    listing = documented[documented.index("The layers, top first:"):]
    places = [listing.index(f"\n{layer}/") for layer in LAYERS]
    assert places == sorted(places, reverse=True)


def test_the_layer_check_finds_an_upward_import():
    graph = {"microbench.settings.config": {"microbench.drivers.runner"},
             "microbench.drivers.runner": {"microbench.settings.config", "microbench"}}
    assert upward_imports(graph) == ["microbench.settings.config -> microbench.drivers.runner"]


def test_a_module_named_by_a_string_counts_as_an_import():
    visitor = _Imports("microbench.platform.process", is_package=False)
    visitor.visit(ast.parse('importlib.import_module("microbench.report.command")\n'
                            'spawn("microbench.drivers.trials:worker")\n'
                            'print("microbench.ops: torch.matmul")'))
    assert visitor.found == {"microbench.report.command", "microbench.drivers.trials"}
    assert "microbench.main" in import_graph()["microbench.commands"]


def test_the_type_checker_imports_count_as_imports():
    graph = import_graph()
    assert "microbench.models.family" in graph["microbench.steps.workload"]   # TYPE_CHECKING


# The tests follow the layers (issue 43): a unit test lives in tests/<layer>/ and is named after
# the module it tests, test_<module>.py, or test_<module>_<aspect>.py where one module has
# several (test_telemetry_amd.py: the telemetry package's AMD source). Tests of the commands as
# a user runs them live in e2e/, hostile input in hostile/, GPU runs in gpu/, and the repo-wide
# checks at the root. pytest imports test files by their base name (the default, prepend mode:
# conftest.py's folder, tests/, is put on sys.path, so the helpers of tests/support/ import as
# ``support.*``), so a base name may be used once in the whole tree. No __init__.py: a folder
# named ``platform`` would be a package that hides the standard library's.
TESTS = ROOT / "tests"
OTHER_TEST_FOLDERS = ("e2e", "hostile", "gpu")
REPO_WIDE_TESTS = ("test_architecture_doc.py", "test_docs.py", "test_packaging.py", "test_structure.py",
                   "test_typing.py")


def _modules_of(layer: str) -> set[str]:
    """The module names of a layer: its files and its subpackages (telemetry, archs)."""
    folder = PACKAGE / layer
    return ({path.stem for path in folder.glob("*.py") if path.stem != "__init__"}
            | {path.name for path in folder.iterdir() if (path / "__init__.py").is_file()})


def layout_problems(test_files: list[str], modules_of=_modules_of) -> list[str]:
    """What is out of place among test files given relative to tests/ ("measure/test_stats.py")."""
    problems, seen = [], {}
    for name in sorted(test_files):
        *folders, base = name.split("/")
        stem = base[len("test_"):-len(".py")]
        if base in seen:
            problems.append(f"{name}: base name also {seen[base]} (pytest imports by base name)")
        seen.setdefault(base, name)
        if not folders:
            if base not in REPO_WIDE_TESTS:
                problems.append(f"{name}: at the root, which holds only {REPO_WIDE_TESTS}")
        elif len(folders) > 1 or folders[0] not in (*LAYERS, *OTHER_TEST_FOLDERS):
            problems.append(f"{name}: not in a layer's folder nor in {OTHER_TEST_FOLDERS}")
        elif folders[0] in LAYERS and not any(stem == module or stem.startswith(module + "_")
                                              for module in modules_of(folders[0])):
            problems.append(f"{name}: names no module of microbench/{folders[0]}/")
    return problems


def test_every_test_file_is_in_the_folder_of_what_it_tests():
    found = [path.relative_to(TESTS).as_posix() for path in TESTS.rglob("test_*.py")]
    assert len(found) > 50
    assert layout_problems(found) == []
    packages = {path.parent.relative_to(TESTS).as_posix() for path in TESTS.rglob("__init__.py")}
    assert packages <= {"support"}, packages


def test_the_layout_check_finds_a_file_out_of_place():
    modules = {"measure": {"stats", "telemetry"}}.get
    assert layout_problems(["measure/test_stats.py", "measure/test_telemetry_amd.py",
                            "e2e/test_cli_e2e.py", "test_docs.py"], modules) == []
    assert layout_problems(["measure/test_statistics.py", "misc/test_x.py", "e2e/test_stats.py",
                            "measure/test_stats.py", "test_stats.py"], modules) == [
        "measure/test_statistics.py: names no module of microbench/measure/",
        "measure/test_stats.py: base name also e2e/test_stats.py (pytest imports by base name)",
        "misc/test_x.py: not in a layer's folder nor in ('e2e', 'hostile', 'gpu')",
        "test_stats.py: base name also e2e/test_stats.py (pytest imports by base name)",
        f"test_stats.py: at the root, which holds only {REPO_WIDE_TESTS}"]


def test_the_package_root_holds_only_the_entry_points():
    """Every other module lives in the folder of its layer (docs/architecture.md lists them)."""
    root = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(root) <= 12, root
    layers = {path.name for path in PACKAGE.iterdir()
              if path.is_dir() and (path / "__init__.py").exists()}
    documented = (ROOT / "docs" / "architecture.md").read_text()
    assert all(f"{layer}/" in documented for layer in layers), layers


def test_module_names_are_unique_across_the_layers():
    """Two modules of one name in different layers (three ``measure``s, ``tables`` beside
    ``table``) read as one thing; a name means one thing in the package. The op bench keeps its
    own command's names (``cli``, ``runner``, ``report``): it is a separate tool."""
    seen: dict[str, str] = {}
    for name in sorted(MODULES):
        if name.startswith("microbench.ops") or MODULES[name].name.startswith("__"):
            continue
        short = name.rpartition(".")[2]
        assert short not in seen or short in NAMES_LEFT_TO_SPLIT, f"{name} and {seen[short]}"
        seen[short] = name


# Names still shared: none (kept for a split that must wait).
NAMES_LEFT_TO_SPLIT: set[str] = set()


# Modules that parse JSON, and what: a stored result is parsed in one place only.
JSON_READERS = {"microbench/store/stored.py": "result documents (every reader's, the report's too)",
                "microbench/store/schema.py": "the published schema file",
                "microbench/data/cache.py": "the image cache's manifest",
                "microbench/steps/quant_choice.py": "the measured layout choices' cache",
                "microbench/settings/identity.py": "values made plain (json.dumps then loads)"}


def test_one_module_parses_stored_results():
    readers = {hit.split(":")[0] for hit in _hits(r"json\.loads?\(")}
    assert readers <= set(JSON_READERS), sorted(readers - set(JSON_READERS))


# Where --parallel's value is read: the registry, the strategies' flag side below torch
# (settings/strategy_flags.py), and the hybrid mesh's arithmetic, which refuses a world size the
# shard group does not divide before torch's import (settings/mesh.py, called by plan/cli.py;
# the strategy, scenarios/hsdp.py, builds its mesh with it).
PARALLEL_READERS = ("microbench/scenarios/parallel.py", "microbench/settings/strategy_flags.py",
                    "microbench/settings/mesh.py")


def test_only_the_strategies_read_the_parallel_flag():
    """--parallel's value becomes a Strategy in resolve (and the flag side of one in the plan's
    checks below torch); everything else asks the strategy."""
    hits = _hits(r"(?<!named\()config\.parallel\b")
    assert all(hit.startswith(PARALLEL_READERS) for hit in hits), hits


def test_model_specs_are_asked_not_probed():
    """Every model spec implements models/family.py's ModelFamily: no getattr probes for what
    a spec is, and no test of the family's name outside the models."""
    probes = _hits(r'getattr\([\w.]*model\w*, "(family|tokens_per_item|llama_config|'
                   r'can_generate|image_size|seq_len|attention)"')
    assert not probes, probes
    named = [hit for hit in _hits(r'family [!=]= "language"')
             if not hit.startswith("microbench/models/")]
    assert not named, named


def test_one_chart_stack_draws_every_chart():
    """The sweep's --plot and the report's chart are drawn with the same parts: only
    output/chart.py imports matplotlib."""
    assert {hit.split(":")[0] for hit in _hits(r"^\s*(from|import) matplotlib")} == {
        "microbench/output/chart.py"}


def test_the_sweeps_plot_and_tables_read_results_as_the_report_does():
    """--plot and the sweep's closing tables draw each row from its result document read
    through store.entry (row.entry), as the report does a stored result: no figure of the live
    Summary."""
    assert not [hit for hit in _hits(r"\bsummary\b|Summary")
                if hit.startswith(("microbench/output/sweep_plot.py",
                                   "microbench/output/table.py",
                                   "microbench/output/sweep_table.py"))]


def test_one_table_module_lays_out_results():
    """Tables are laid out by platform/text_table.py alone (rich's tables included)."""
    assert {hit.split(":")[0] for hit in _hits(r"^\s*from rich\.table|^\s*import rich")} <= {
        "microbench/platform/text_table.py", "microbench/platform/progress.py"}


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) is not None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def _hits(pattern: str) -> list[str]:
    regex = re.compile(pattern)
    return [f"{path.relative_to(ROOT)}:{number}" for path in sorted(PACKAGE.rglob("*.py"))
            for number, line in enumerate(path.read_text().splitlines(), 1)
            if regex.search(line)]


def test_only_the_scenarios_know_the_kind_of_run():
    hits = _hits(r'mode == "generate"|generation is (not )?None|GenerationWorkload')
    assert all(hit.startswith("microbench/scenarios/") for hit in hits), hits


def test_only_the_device_layer_reads_the_vendor_of_the_build():
    assert all(hit.startswith("microbench/platform/devices.py") for hit in _hits(r"torch\.version\.hip"))


def test_the_op_bench_parses_its_flags_without_the_model_benchmark():
    probe = ("import sys\nfrom microbench.ops.cli import main\n"
             "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
             "loaded = sorted(m for m in ('torchvision', 'microbench.models.registry',"
             " 'microbench.plan.cli') if m in sys.modules)\nprint('LOADED', loaded)\n")
    ran = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert "LOADED []" in ran.stdout, ran.stdout[-2000:] + ran.stderr[-2000:]


def test_answers_that_need_no_run_import_no_torch():
    """--help, --version, --list-networks, a refused flag and an unknown network answer before
    torch is imported (seconds, tens on a loaded machine: issue 45), and so do
    microbench-report --help and microbench-ops --help and its refusals; one fresh interpreter
    runs them all in-process."""
    probe = (
        "import contextlib, io, sys\n"
        "from microbench.main import main\n"
        "from microbench.report.command import main as report\n"
        "from microbench.ops.cli import main as ops\n"
        "codes = []\n"
        "for command, argv in ((main, ['--help']), (main, ['--version']),\n"
        "                      (main, ['--list-networks']), (main, ['--network', 'resnet81']),\n"
        "                      (main, ['--bogus']), (main, ['--batch-size', '0']),\n"
        "                      (report, ['--help']), (ops, ['--help']),\n"
        "                      (ops, ['--op-type', 'x'])):\n"
        "    with contextlib.redirect_stdout(io.StringIO()), \\\n"
        "            contextlib.redirect_stderr(io.StringIO()):\n"
        "        try:\n"
        "            codes.append(command(argv))\n"
        "        except SystemExit as stop:\n"
        "            codes.append(stop.code)\n"
        "heavy = sorted(m for m in ('torch', 'torchvision', 'scipy', 'matplotlib')\n"
        "               if m in sys.modules)\n"
        "print('CODES', codes, 'LOADED', heavy)\n")
    ran = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert "CODES [0, 0, 0, 2, 2, 2, 0, 0, 2] LOADED []" in ran.stdout, \
        ran.stdout[-2000:] + ran.stderr[-2000:]


def test_the_names_below_torch_are_the_scenarios_and_the_strategies():
    """--mode and --parallel's choices and the schema's enums read config's names: each names
    a scenario (of the module of its name) and a strategy, and nothing else is one."""
    from microbench import scenarios
    from microbench.scenarios import base, parallel
    assert tuple(scenarios.SCENARIOS) == config.MODES
    assert all(kind.mode == mode for mode, kind in scenarios.SCENARIOS.items())
    written = {cls.mode for path in (PACKAGE / "scenarios").glob("[!_]*.py")
               for cls in vars(importlib.import_module(f"microbench.scenarios.{path.stem}")).values()
               if isinstance(cls, type) and issubclass(cls, base.Scenario) and cls.mode}
    assert written == set(config.MODES)
    assert set(parallel.STRATEGIES) == {config.ONE_PROCESS, *config.PARALLEL}
    assert all(name == strategy.name for name, strategy in parallel.STRATEGIES.items())


def test_what_the_plan_checks_below_torch_is_the_scenarios_and_the_strategies():
    """Issue 64: the plan runs the flags' rules before torch with settings/kinds.KINDS and
    settings/strategy_flags.FLAGS; each kind is its scenario's class flags, and each strategy
    is a subclass of its flag side (its options and rules declared there, once)."""
    from microbench import scenarios
    from microbench.scenarios import parallel
    from microbench.settings import kinds, strategy_flags
    assert {mode: kind.kind() for mode, kind in scenarios.SCENARIOS.items()} == kinds.KINDS
    assert strategy_flags.FLAGS.keys() == parallel.STRATEGIES.keys()
    assert all(isinstance(strategy, type(strategy_flags.FLAGS[name]))
               for name, strategy in parallel.STRATEGIES.items())


# A value other than the default for every setting --rerun replays. A new setting must be added
# here (the test below fails until it is), which proves it replays.
REPLAYED_SAMPLES = {
    "network": "llama_tiny", "batch_size": 3, "image_size": 48, "seq_len": 40,
    "vocab_size": 500, "kv_heads": 2, "attention": "eager", "model_kwargs": ("a=1", "b=2"),
    "mode": "generate", "prompt_len": 7, "gen_len": 9, "opt_step": 2, "iterations": 11,
    "warmup": 4, "repeat": 3, "trials": "in-process", "telemetry_interval_ms": 50.0,
    "max_noise_pct": 2.5, "max_trials": 7, "time_limit_s": 90.0, "discard_throttled": True,
    "precision": "amp-bf16",
    "tf32": True, "nhwc": True, "compile": True,
    "compile_options": {"mode": "max-autotune", "fullgraph": True}, "device": "cpu",
    "seed": 17, "dist_timeout": 30.0, "ddp_bucket_cap_mb": 50.0, "ddp_static_graph": True,
    "ddp_gradient_as_bucket_view": True, "ddp_options": {"broadcast_buffers": False},
    "autograd_profiler": True, "kineto": True,
    "profiler_schedule": (0, 1, 3), "flops_prof_step": 2, "peak_tflops": 123.0,
    "peak_bandwidth": 4800.0, "measure_peaks": True,
    "capture_range": True, "phase_timing": False, "optimizer_impl": "fused",
    "cudnn_benchmark": True, "preset": "fast",
    "data": "loader", "data_format": "png", "data_images": 64, "data_dir": "/data/images",
    "decode": "gpu", "transforms": "gpu", "workers": 3, "pin_memory": False,
    "prefetch_factor": 4,
    "parallel": "fsdp", "reshard_after_forward": False, "hsdp_shard_size": 2,
    "activation_checkpointing": "full", "optimizer": "adamw", "fp8_recipe": "rowwise", "quantize": "int8wo",
    "quant_layout": "tensorwise",
}


# Settings that take effect only beside another one.
NEEDS = {"prompt_len": {"mode": "generate"}, "gen_len": {"mode": "generate"},
         "tf32": {"precision": "amp-bf16"}, "compile_options": {"compile": True},
         **{name: {"data": "loader"} for name in ("data_format", "data_images", "workers",
                                                  "pin_memory", "prefetch_factor",
                                                  "transforms")},
         "data_dir": {"data": "folder"}, "decode": {"data": "loader", "transforms": "gpu"},
         "max_trials": {"max_noise_pct": 2.5}, "time_limit_s": {"max_noise_pct": 2.5},
         "reshard_after_forward": {"parallel": "fsdp"}, "hsdp_shard_size": {"parallel": "hsdp"},
         "fp8_recipe": {"precision": "fp8"}, "quantize": {"mode": "inference"},
         "quant_layout": {"mode": "inference", "quantize": "int8wo"}}


def _replay(tmp_path, stored: dict):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(stored_result(stored)))
    return cli.parse_args(["--rerun", str(path)])


def test_every_replayed_setting_has_a_sample_here():
    assert set(REPLAYED_SAMPLES) == set(config.replayed_fields())


@pytest.mark.parametrize("name", sorted(REPLAYED_SAMPLES))
def test_every_setting_replays_through_rerun(tmp_path, name):
    """Each replayed field, stored with a value other than its default, comes back as that value
    (the flags are parsed by the command line itself, with its checks)."""
    value = REPLAYED_SAMPLES[name]
    stored = {name: list(value) if isinstance(value, tuple) else value, **NEEDS.get(name, {})}
    args = _replay(tmp_path, stored)
    args.rerun_notes = []
    replayed = cli.to_plan(args).configs[0]
    assert getattr(replayed, name) == value
    assert name in args.explicit or name == "tf32"


def test_settings_of_this_invocation_are_not_replayed(tmp_path):
    words, _ = rerun.flags_of(_write(tmp_path, {"output_dir": "/elsewhere", "quiet": True,
                                                "rank": 3, "iterations": 7}))
    assert words == ["--iterations=7"]


def _write(tmp_path, stored: dict) -> str:
    path = tmp_path / "stored.json"
    path.write_text(json.dumps(stored_result(stored)))
    return str(path)


def test_a_preset_chooses_only_settings_declared_as_its_own():
    import torch
    for training in (True, False):
        for world in (1, 2):
            chosen = preset.fast_choices(IMAGE_MODEL, torch.device("cpu"), world, training)
            assert set(chosen) <= set(config.PRESET_FIELDS)


def test_preset_flags_are_spelled_as_a_shell_takes_them():
    chosen = config.BenchConfig(compile=True, compile_options={"mode": "reduce-overhead"},
                                precision="amp-bf16", nhwc=True, cudnn_benchmark=True)
    assert preset.as_flags(chosen) == ("--precision amp-bf16 --nhwc --compile-mode "
                                       "reduce-overhead --cudnn-benchmark 1")
