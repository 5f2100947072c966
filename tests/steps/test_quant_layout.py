"""Which kernels a --quantize format may run (microbench.steps.quant_layout, issues 48 and 61):
the layouts planned from the device's facts (faked here: an H100 with and without mslk, an A100,
an L4, an MI300, the CPU), the torchao configuration each makes, what ran read back from the
layers, the weight errors, and the compile settings of a quantized run."""
import dataclasses

import pytest
import torch
from torch import nn

from microbench.platform.devices import Vendor
from microbench.platform.errors import UsageError
from microbench.steps import low_precision, quant_layout
from microbench.steps.quant_choice import Phase
from microbench.steps.quant_layout import QuantDevice, plan

H100 = QuantDevice(Vendor.NVIDIA, (9, 0), fp8=True, mslk=True)
H100_BARE = QuantDevice(Vendor.NVIDIA, (9, 0), fp8=True, mslk=False)
A100 = QuantDevice(Vendor.NVIDIA, (8, 0), fp8=False, mslk=True)
L4 = QuantDevice(Vendor.NVIDIA, (8, 9), fp8=True, mslk=False)
MI300 = QuantDevice(Vendor.AMD, None, fp8=True, mslk=False)
CPU = QuantDevice(Vendor.CPU, None, fp8=False, mslk=False)
B200 = QuantDevice(Vendor.NVIDIA, (10, 0), fp8=True, mslk=True)


@pytest.mark.parametrize("facts, expected", [
    (H100_BARE, ("tinygemm", "inductor")), (A100, ("tinygemm", "inductor")),
    (MI300, ("tinygemm", "inductor")), (B200, ("tinygemm", "inductor"))])
def test_auto_measures_every_int4_layout_the_device_runs(facts, expected):
    planned = plan("int4wo", "auto", facts)
    assert planned.layouts == expected and planned.measured and planned.notes == ()


def test_with_mslk_on_hopper_auto_measures_its_layouts_too(monkeypatch):
    _fake_mslk(monkeypatch)
    assert plan("int4wo", "auto", H100).layouts == ("tinygemm", "preshuffled", "plain",
                                                    "inductor")


@pytest.mark.parametrize("facts, expected", [(H100, ("rowwise",)), (MI300, ("rowwise",)),
                                             (L4, ("tensorwise",))])
def test_float8_dynamic_is_rowwise_where_scaled_mm_takes_row_scales(facts, expected):
    planned = plan("float8dq", "auto", facts)
    assert planned.layouts == expected and not planned.measured


def test_int8_and_float8_run_unwrapped_on_gpus_and_torchaos_rowwise_elsewhere():
    assert plan("int8wo", "auto", CPU).layouts == ("rowwise",)
    assert plan("int8wo", "tensorwise", CPU).layouts == ("tensorwise",)
    for gpu in (H100_BARE, MI300, L4):
        assert plan("int8wo", "auto", gpu).layouts == ("unwrapped",)
        assert plan("int8wo", "rowwise", gpu).layouts == ("rowwise",)
    assert plan("float8wo", "auto", H100_BARE).layouts == ("unwrapped",)
    assert plan("float8wo", "rowwise", H100_BARE).layouts == ("rowwise",)
    with pytest.raises(UsageError, match="unwrapped layout .* needs a GPU"):
        plan("int8wo", "unwrapped", CPU)


def _unwrapped_beside_torchao(quantize: str) -> nn.Module:
    """A tiny model quantized by torchao in ``quantize``'s rowwise layout, then unwrapped: its
    two layers replaced, its outputs torchao's bit for bit (asserted here)."""
    pytest.importorskip("torchao")
    from torchao.quantization import quantize_
    from microbench.steps import quant_layers
    reference = _tiny()
    quantize_(reference, quant_layout.torchao_config(quantize, "rowwise", CPU))
    inputs = torch.randn(3, 64, dtype=torch.bfloat16)
    expected = reference(inputs)
    assert quant_layers.unwrap(reference) == 2
    assert torch.equal(reference(inputs), expected)
    return reference


def test_unwrapped_float8_runs_torchaos_numbers_without_the_subclass():
    """torchao's weight-only FP8 values and row scales as plain parameters of a
    Float8WeightOnlyLinear give its Float8Tensor's outputs bit for bit."""
    from microbench.steps import quant_layers
    reference = _unwrapped_beside_torchao("float8wo")
    layer = reference[0]
    assert isinstance(layer, quant_layers.Float8WeightOnlyLinear)
    assert type(layer.weight) is nn.Parameter and layer.weight.dtype == torch.float8_e4m3fn
    assert layer.scale.shape == (64, 1) and layer.scale.dtype == torch.float32
    assert quant_layout.layout_of(layer) == "unwrapped"
    assert quant_layout.describe_layer(layer)[0] == "Float8WeightOnlyLinear"
    assert not getattr(layer, "materialize_input", False)      # no gain measured (H200)
    assert quant_layers.unwrap(reference) == 0              # once


def test_unwrapped_int8_runs_torchaos_numbers_without_the_subclass(monkeypatch):
    """The unwrapped layout on a (faked) GPU: the same int8 values and scales torchao made,
    as plain parameters, giving torchao's Int8Tensor outputs bit for bit."""
    reference = _unwrapped_beside_torchao("int8wo")
    layer = reference[0]
    assert type(layer.weight) is nn.Parameter and layer.weight.dtype == torch.int8
    assert layer.materialize_input          # its input computed once, not in its loads
    assert layer.scale.dtype == torch.bfloat16 and layer.scale.shape == (64,)
    assert low_precision.weight_bytes(reference) == (64 * 64 + 32 * 64) + 2 * (64 + 32)

    model = _tiny()
    planned = plan("int8wo", "unwrapped", H100_BARE)
    report = low_precision.quantize_measured(model, planned, _phases(model, 2),
                                             torch.randn(2, 64).to(torch.bfloat16),
                                             torch.device("cpu"))
    assert report.quant_layout == "unwrapped"
    assert [(k["tensor"], k["packing"], k["layers"]) for k in report.quant_kernels] == \
        [("Int8WeightOnlyLinear", "unwrapped rowwise", 2)]
    assert "gpt-fast's form" in report.quant_kernels[0]["kernel"]
    assert report.weight_errors.layers == 2 and report.weight_errors.max_error < 0.02
    assert report.drift.relative_error < 0.02
    assert report.quant_choice["source"] == "asked for"


def _phases(model: nn.Module, rows: int) -> tuple[Phase, ...]:
    """One forward phase of ``rows`` rows for every linear layer."""
    from microbench.steps.quant_layers import linear_layers
    return (Phase("forward", {name: rows for name, _ in linear_layers(model)}),)


@pytest.mark.parametrize("quantize, layout, facts, words", [
    ("int4wo", "preshuffled", A100, "sm_90"),
    ("int4wo", "plain", A100, "sm_90 \\(Hopper"),
    ("int4wo", "preshuffled", B200, "Hopper: H100, H200\\) only"),
    ("int4wo", "preshuffled", H100_BARE, "pip install mslk"),
    ("int4wo", "plain", H100_BARE, "pip install mslk"),
    ("int4wo", "plain", MI300, "built for NVIDIA GPUs"),
    ("int8wo", "tinygemm", H100, "not a layout of --quantize int8wo"),
    ("float8dq", "rowwise", L4, "sm_90"),
    ("int4wo", "auto", CPU, "--quantize int4wo needs a GPU: use --quantize int8wo on the CPU"),
    ("float8wo", "auto", A100, "--quantize float8wo needs FP8 matrix units"),
])
def test_a_layout_the_device_cannot_run_is_refused_in_words(quantize, layout, facts, words):
    with pytest.raises(UsageError, match=words):
        plan(quantize, layout, facts)


def test_the_torchao_configs_leave_inductor_alone_and_carry_the_layout():
    pytest.importorskip("torchao")
    from torchao.quantization import PerTensor
    tinygemm = quant_layout.torchao_config("int4wo", "tinygemm", MI300)
    assert tinygemm.int4_packing_format == "tile_packed_to_4d"
    assert tinygemm.int4_tile_packed_ntile == 16            # ROCm's tiles
    assert quant_layout.torchao_config("int4wo", "preshuffled", H100).int4_packing_format == \
        "preshuffled"
    int8 = quant_layout.torchao_config("int8wo", "tensorwise", CPU)
    assert isinstance(int8.granularity, PerTensor)
    from microbench.settings.quantization import FORMATS
    for name in ("int4wo", "int8wo", "float8wo", "float8dq"):
        for layout in FORMATS[name].layouts:
            if layout not in ("inductor", "unwrapped"):           # this tool's own layers
                config = quant_layout.torchao_config(name, layout, H100)
                assert config.set_inductor_config is False


def _tiny(out_features: int = 32) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64, bias=False), nn.ReLU(),
                         nn.Linear(64, out_features, bias=False)).to(torch.bfloat16)


@pytest.mark.parametrize("layout", ["rowwise", "tensorwise"])
def test_what_ran_is_read_from_the_weights(layout):
    pytest.importorskip("torchao")
    from torchao.quantization import quantize_
    model = _tiny()
    quantize_(model[0], quant_layout.torchao_config("int8wo", layout, CPU))
    kernels = quant_layout.kernels(model)
    assert [(k.tensor, k.packing, k.layers) for k in kernels] == \
        [("Int8Tensor", layout, 1), ("Tensor", "bfloat16", 1)]
    assert "cast to BF16" in kernels[0].kernel and kernels[1].kernel == "not quantized"


def test_quantize_measured_reports_layout_kernels_and_weight_errors():
    pytest.importorskip("torchao")

    class Probe(nn.Module):              # tokens -> logits, as a language model's forward
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(50, 64)
            self.body = _tiny(out_features=64)
            self.output = nn.Linear(64, 50, bias=False)

        def forward(self, tokens):
            return self.output(self.body(self.embed(tokens)))

    model = Probe().to(torch.bfloat16)
    tokens = torch.randint(0, 50, (2, 8))
    report = low_precision.quantize_measured(model, plan("int8wo", "auto", CPU),
                                             _phases(model, 16), tokens, torch.device("cpu"))
    assert report.quant_layout == "rowwise"
    assert [k["tensor"] for k in report.quant_kernels] == ["Int8Tensor"]
    assert report.quant_kernels[0]["layers"] == 3
    errors = report.weight_errors
    assert errors.layers == 3 and 0 < errors.mean_error <= errors.max_error < 0.02
    assert errors.layer == "body.0" and 0 < errors.layer_output_error < 0.05
    labels = [label for label, _ in report.rows()]
    assert "Quantized kernels" in labels and "Weight error" in labels
    assert dict(report.rows())["Quantized layouts"] == "the only candidate this device runs"
    # Issue 61: the console's accuracy line says what the figure is on random weights.
    assert "random weights: how far the numbers moved, not a quality score" in \
        dict(report.rows())["Accuracy vs BF16"]
    stored = report.to_dict()
    assert stored["quant_kernels"][0]["packing"] == "rowwise"
    assert stored["weight_error"]["layers"] == 3


def test_a_weight_without_its_own_dequantize_goes_through_its_kernel():
    class Packed(torch.Tensor):          # like torchao's int4 tensors: no dequantize of its own
        pass

    weight = torch.randn(24, 2100, dtype=torch.float32)
    packed = torch.Tensor._make_subclass(Packed, weight)
    assert torch.equal(low_precision.dequantized(packed, torch.float32), weight)   # in slices of 1024


def test_compile_note_names_the_exhaustive_searches_only():
    assert quant_layout.compile_note({"mode": "reduce-overhead"}) is None
    assert quant_layout.compile_note(None) is None
    note = quant_layout.compile_note({"mode": "max-autotune"})
    assert "mode max-autotune" in note and "compile time" in note
    note = quant_layout.compile_note({"options": {"coordinate_descent_check_all_directions": 1}})
    assert "coordinate_descent_check_all_directions" in note


def test_quantized_compile_options_keep_the_users_over_torchaos():
    options = quant_layout.quantized_compile_options(
        {"mode": "reduce-overhead", "options": {"coordinate_descent_tuning": False}}, "decode")
    inductor = options["options"]
    assert inductor["triton.cudagraphs"] is True               # the mode, as options
    assert inductor["coordinate_descent_tuning"] is False       # the user's word wins
    assert inductor["force_fuse_int_mm_with_mul"] is True
    assert "coordinate_descent_check_all_directions" not in inductor
    assert quant_layout.quantized_compile_options({"backend": "eager"}) == {"backend": "eager"}


@pytest.mark.parametrize("phase, tuned", [("decode", True), ("prefill", False),
                                          ("forward", False)])
def test_only_the_one_row_decode_step_gets_coordinate_descent_tuning(phase, tuned):
    """Issue 61: tuning every kernel of a many-row prompt bought nothing and cost the int8
    compile its time; a one-row product needs it to become a tuned reduction."""
    inductor = quant_layout.quantized_compile_options({}, phase)["options"]
    assert inductor.get("coordinate_descent_tuning", False) is tuned
    timed = quant_layout.product_compile_options({"mode": "reduce-overhead"}, phase)
    assert "triton.cudagraphs" not in timed["options"]        # the measurement's own graphs
    assert timed["fullgraph"] is True and timed["dynamic"] is False
    assert quant_layout.product_compile_options(None, phase) is None
    assert quant_layout.product_compile_options({"backend": "aot_eager"}, phase) is None
    record = quant_layout.compile_settings({phase: {}})
    assert record["phases"][phase].get("coordinate_descent_tuning", False) is tuned


def test_the_guard_filter_drops_only_the_weights_metadata_guards():
    pytest.importorskip("torchao")
    if not quant_layout.guard_filter_supported():
        pytest.skip("this torch.compile takes no guard_filter_fn")
    from torchao.quantization import quantize_
    model = _tiny()
    quantize_(model, quant_layout.torchao_config("int8wo", "rowwise", CPU))
    kept: dict[str, list[bool]] = {}

    def record(entries):
        verdicts = quant_layout.skip_weight_metadata_guards(entries)
        for entry, keep in zip(entries, verdicts):
            kept.setdefault(entry.guard_type, []).append(keep)
        return verdicts

    compiled = torch.compile(model, backend="eager", fullgraph=True,
                             options={"guard_filter_fn": record})
    inputs = torch.randn(2, 64, dtype=torch.bfloat16)
    assert torch.equal(compiled(inputs), model(inputs))
    assert kept[quant_layout.WEIGHT_METADATA_GUARD] == [False, False]     # two weights
    assert all(kept["TENSOR_MATCH"])


WOQ_PROBE = r"""
import sys, torch
from torch import nn
from torch._dynamo.utils import counters
from microbench.platform.devices import Vendor
from microbench.steps import quant_layout
from torchao.quantization import quantize_
gpu = quant_layout.QuantDevice(Vendor.NVIDIA, (9, 0), fp8=True, mslk=False)
if sys.argv[1] == "keep-out":
    print("status:", quant_layout.keep_out_cpu_int8_lowering(gpu=True))
model = nn.Sequential(nn.Linear(64, 32, bias=False)).to(torch.bfloat16)
quantize_(model, quant_layout.torchao_config("int8wo", "rowwise", gpu))
compiled = torch.compile(model, fullgraph=True, dynamic=False)
with torch.inference_mode():
    compiled(torch.randn(16, 64, dtype=torch.bfloat16))
print("woq:", counters["inductor"].get("woq_matcher_count", 0))
print("again:", quant_layout.keep_out_cpu_int8_lowering(gpu=True))
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode, woq, again", [
    ("keep-out", 0, "again: kept out"),
    # The control: inductor's own rewrite of a 16-row product, then too late to keep it out.
    ("as-is", 1, "again: in use (a graph compiled earlier in this process registered it)")])
def test_the_cpu_int8_lowering_is_kept_out_of_a_quantized_gpu_run(tmp_path, mode, woq, again):
    """Process-wide state (inductor registers its patterns once): each case in its own
    process, with its own cold inductor cache. Inductor's pattern admits CPU tensors too, so
    the CPU shows what it does to a GPU's graph."""
    pytest.importorskip("torchao")
    import os
    import subprocess
    import sys
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
           "TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "OMP_NUM_THREADS": "1"}
    ran = subprocess.run([sys.executable, "-c", WOQ_PROBE, mode], capture_output=True,
                         text=True, timeout=600, env=env)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert f"woq: {woq}" in ran.stdout and again in ran.stdout
    assert ("status: kept out" in ran.stdout) is (mode == "keep-out")


def test_the_cpu_keeps_its_own_int8_kernel():
    assert quant_layout.keep_out_cpu_int8_lowering(gpu=False) is None


# ---------------------------------------------------------------- mslk's fake kernels (issue 53)

def _fake_mslk(monkeypatch, ops=("bf16i4bf16_shuffled", "bf16i4bf16_rowwise"),
               own_fake=False, version="1.1.0"):
    """A stand-in for mslk: a module named mslk, and its int4 operators in a namespace of this
    test's own (operators cannot be removed from a process, so each test names a fresh one).
    ``own_fake``: the operators come with their own fake kernel (mslk 1.2), whose calls are
    counted; without it they have none (mslk 1.1.x's bf16i4bf16_shuffled)."""
    import sys
    import types
    import uuid
    namespace = f"mbtest{uuid.uuid4().hex[:10]}"
    library = torch.library.Library(namespace, "DEF")
    own_calls = []

    def product(X, W, w_scale_group, w_zero_group):       # any deterministic product will do
        # mslk's kernel flattens X's leading dimensions: (B, M, K) gives (B * M, N).
        rows = X.reshape(-1, X.shape[-1])
        return (rows.float().sum(-1, keepdim=True) + W.float().sum(-1)).to(torch.bfloat16)

    for name in ops:
        library.define(f"{name}(Tensor X, Tensor W, Tensor w_scale_group, "
                       f"Tensor w_zero_group) -> Tensor")
        library.impl(name, product, "CPU")
        if own_fake:
            def theirs(X, W, w_scale_group, w_zero_group):
                own_calls.append(True)
                return X.new_empty((X.numel() // X.shape[-1], W.shape[0]), dtype=torch.bfloat16)
            torch.library.register_fake(f"{namespace}::{name}", theirs, lib=library)
    module = types.ModuleType("mslk")
    module.__version__ = version
    module.__spec__ = importlib_spec("mslk")
    module.library = library            # the operators live as long as the module (as mslk's)
    monkeypatch.setitem(sys.modules, "mslk", module)
    monkeypatch.setattr(quant_layout, "MSLK_NAMESPACE", namespace)
    monkeypatch.setattr(quant_layout, "_REGISTERED", [])
    return namespace, library, own_calls


def importlib_spec(name):
    import importlib.machinery
    return importlib.machinery.ModuleSpec(name, None)


def _compiled_product(namespace):
    op = getattr(getattr(torch.ops, namespace), "bf16i4bf16_shuffled")
    return torch.compile(lambda x, w, s, z: op(x, w, s, z) * 2, backend="aot_eager",
                         fullgraph=True)


def _inputs(batch=(3,)):
    return (torch.randn(*batch, 8, dtype=torch.bfloat16),
            torch.randint(-8, 8, (5, 4), dtype=torch.int8),
            torch.ones(1, 5, dtype=torch.bfloat16), torch.zeros(1, 5, dtype=torch.bfloat16))


def test_a_missing_fake_kernel_is_registered_and_compile_then_traces_the_product(monkeypatch):
    namespace, library, _ = _fake_mslk(monkeypatch)
    inputs = _inputs()
    torch._dynamo.reset()
    with pytest.raises(Exception, match="fake"):        # mslk 1.1.x as it is: issue 53's crash
        _compiled_product(namespace)(*inputs)
    torch._dynamo.reset()
    assert quant_layout.mslk_traceable("preshuffled") is None
    assert quant_layout.registered_fakes() == (f"{namespace}::bf16i4bf16_shuffled",)
    op = getattr(torch.ops, namespace).bf16i4bf16_shuffled
    assert torch.equal(_compiled_product(namespace)(*inputs), op(*inputs) * 2)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:                        # (M, K) and (B, M, K) activations
        for batch, rows in (((3,), 3), ((2, 3), 6)):
            x, w, s, z = (mode.from_tensor(t) for t in _inputs(batch))
            out = op(x, w, s, z)
            # Flattened, as the kernel returns it: a (B, M, N) fake failed inductor's size
            # assertion against the real kernel's output on an H200 (2026-11-27).
            assert out.shape == (rows, 5) and out.dtype == torch.bfloat16
    note = quant_layout.fake_note("preshuffled")
    assert "mslk (1.1.0) has no fake kernel" in note and "registered one" in note
    assert "misspelled" in note
    assert quant_layout.mslk_traceable("preshuffled") is None       # once: not twice
    assert len(quant_layout.registered_fakes()) == 1
    torch._dynamo.reset()


def test_mslks_own_fake_kernel_is_left_alone(monkeypatch):
    namespace, library, own_calls = _fake_mslk(monkeypatch, own_fake=True, version="1.2.0")
    assert quant_layout.mslk_traceable("preshuffled") is None
    assert quant_layout.mslk_traceable("plain") is None
    assert quant_layout.registered_fakes() == ()
    assert quant_layout.fake_note("preshuffled") is None
    torch._dynamo.reset()
    _compiled_product(namespace)(*_inputs())
    assert own_calls                                      # traced through mslk's own
    torch._dynamo.reset()


def test_a_layout_whose_operator_is_missing_is_left_out_with_one_line(monkeypatch):
    _fake_mslk(monkeypatch, ops=("bf16i4bf16_rowwise",))           # no shuffled operator
    planned = plan("int4wo", "auto", H100)
    assert planned.layouts == ("tinygemm", "plain", "inductor")
    (note,) = planned.notes
    assert note.startswith("--quantize int4wo leaves out layout preshuffled: ")
    assert "has no operator" in note and "bf16i4bf16_shuffled" in note and "\n" not in note
    # Asked for by name, auto's layouts run instead, and a line says so.
    named = plan("int4wo", "preshuffled", H100)
    assert named.layouts == ("tinygemm", "plain", "inductor")
    assert named.notes[0].startswith("--quant-layout preshuffled cannot run: ")
    # A layout with no mslk operator needs nothing.
    assert plan("int4wo", "tinygemm", H100) == \
        quant_layout.QuantPlan("int4wo", "tinygemm", ("tinygemm",), facts=H100)


def test_a_working_mslk_keeps_its_layouts(monkeypatch):
    _fake_mslk(monkeypatch)
    assert plan("int4wo", "plain", H100).layouts == ("plain",)
    assert plan("int4wo", "preshuffled", H100).notes == ()


@pytest.mark.parametrize("own_fake", [False, True])
def test_a_torch_without_has_fake_kernel_reads_the_registrations_itself(monkeypatch, own_fake):
    import torch._library.utils as library_utils
    monkeypatch.delattr(library_utils, "has_fake_kernel", raising=False)
    namespace, _, _ = _fake_mslk(monkeypatch, own_fake=own_fake)
    assert quant_layout.mslk_traceable("preshuffled") is None
    expected = () if own_fake else (f"{namespace}::bf16i4bf16_shuffled",)
    assert quant_layout.registered_fakes() == expected
    assert quant_layout.mslk_traceable("preshuffled") is None     # found the second time
    assert quant_layout.registered_fakes() == expected


def test_a_broken_mslk_is_left_out_in_one_line_a_layout(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "mslk", None)                # import mslk -> ImportError
    planned = plan("int4wo", "auto", H100)
    assert planned.layouts == ("tinygemm", "inductor") and len(planned.notes) == 2
    for note in planned.notes:
        assert "mslk fails to import (ModuleNotFoundError" in note
        assert "\n" not in note and len(note) < 400


# ---------------------------------------------------------------- gemlite (issue 61)

H100_GEMLITE = dataclasses.replace(H100_BARE, gemlite=True)


def _fake_gemlite(monkeypatch, **options):
    from microbench.steps import quant_layers
    from support import gemlite_fake
    return gemlite_fake.install(monkeypatch, quant_layout, quant_layers, **options)


def test_gemlite_is_measured_beside_unwrapped_on_a_gpu_where_it_imports(monkeypatch):
    _fake_gemlite(monkeypatch)
    for quantize in ("int8wo", "float8wo"):
        planned = plan(quantize, "auto", H100_GEMLITE)
        assert planned.layouts == ("unwrapped", "gemlite") and planned.measured
        assert planned.notes == ()
        assert plan(quantize, "auto", H100_BARE).layouts == ("unwrapped",)     # not installed
        assert plan(quantize, "gemlite", H100_GEMLITE).layouts == ("gemlite",)  # by name
    assert plan("int8wo", "auto", dataclasses.replace(MI300, gemlite=True)).layouts == \
        ("unwrapped", "gemlite")
    assert plan("int8wo", "auto", dataclasses.replace(CPU, gemlite=True)).layouts == \
        ("rowwise",)
    assert plan("int4wo", "auto", H100_GEMLITE).layouts == ("tinygemm", "inductor")


def test_gemlite_named_where_it_is_not_installed_or_on_the_cpu_is_refused_in_words():
    with pytest.raises(UsageError, match=r"--quant-layout gemlite for --quantize int8wo: the "
                                         r"gemlite layout \(gemlite's A16W8 Triton kernels\) "
                                         r"needs the gemlite package: pip install gemlite"):
        plan("int8wo", "gemlite", H100_BARE)
    with pytest.raises(UsageError, match=r"gemlite's A16W8 Triton kernels\) needs a GPU"):
        plan("float8wo", "gemlite", dataclasses.replace(CPU, fp8=True, gemlite=True))
    with pytest.raises(UsageError, match="not a layout of --quantize int4wo"):
        plan("int4wo", "gemlite", H100_GEMLITE)


def test_a_gemlite_that_fails_to_import_is_left_out_in_one_line(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "gemlite", None)               # import gemlite fails
    planned = plan("int8wo", "auto", H100_GEMLITE)
    assert planned.layouts == ("unwrapped",)
    (note,) = planned.notes
    assert note.startswith("--quantize int8wo leaves out layout gemlite: gemlite fails to "
                           "import (ModuleNotFoundError") and "\n" not in note
    named = plan("int8wo", "gemlite", H100_GEMLITE)                  # named: auto's instead
    assert named.layouts == ("unwrapped",) and named.requested == "gemlite"
    assert named.notes[0].startswith("--quant-layout gemlite cannot run: gemlite fails")


def test_a_gemlite_op_torch_compile_cannot_trace_is_left_out(monkeypatch):
    _fake_gemlite(monkeypatch, fake_kernel=False)
    (note,) = plan("float8wo", "auto", H100_GEMLITE).notes
    assert "has no fake kernel for " in note and "::forward_functional" in note


def test_what_gemlite_says_at_its_import_is_a_note_not_a_console_line(monkeypatch):
    said = "gemlite.core WARNING: Loaded /site/gemlite/configs/h100.json config."
    _fake_gemlite(monkeypatch, said=(said,))
    assert plan("int8wo", "auto", H100_GEMLITE).notes == (f"gemlite at its import: {said}",)
    assert plan("int8wo", "unwrapped", H100_GEMLITE).notes == ()


def _built(quantize: str, layout: str, out_features: int = 48) -> nn.Linear:
    torch.manual_seed(0)
    layer = nn.Linear(64, out_features, bias=False).to(torch.bfloat16)
    return quant_layout.build(layer, quantize, layout, H100_GEMLITE)


@pytest.mark.parametrize("quantize, post_scale, scale_dtype", [
    ("int8wo", True, torch.bfloat16), ("float8wo", False, torch.float32)])
def test_the_gemlite_layer_holds_the_unwrapped_values_and_gives_their_outputs(
        monkeypatch, quantize, post_scale, scale_dtype):
    """The table's promise: the same values, so the choice changes the kernel, not the numbers.
    Each scale is applied where the unwrapped layer applies it (int8: after the product, BF16;
    FP8: on the weight, FP32), which the fake's arithmetic, gemlite's, then shows bit for bit."""
    pytest.importorskip("torchao")
    from microbench.steps.quant_layers import GemliteLinear
    calls, namespace = _fake_gemlite(monkeypatch)
    unwrapped, gemlite = _built(quantize, "unwrapped"), _built(quantize, "gemlite")
    assert isinstance(gemlite, GemliteLinear)
    assert calls == [dict(device=torch.device("cpu"), dtype=torch.bfloat16,
                          fp8=torch.float8_e4m3fn if quantize == "float8wo" else None,
                          post_scale=post_scale)]
    assert gemlite.scale.dtype == scale_dtype and gemlite.scale.shape == (1, 48)
    assert gemlite.weight.shape == (64, 48)                 # gemlite's (in, out) view
    assert torch.equal(gemlite.dequantize(), unwrapped.dequantize())
    assert low_precision.weight_error(unwrapped.dequantize().to(torch.bfloat16), gemlite) == 0
    torch.manual_seed(1)
    for shape in ((3, 64), (1, 2, 64)):
        x = torch.randint(-4, 5, shape).to(torch.bfloat16)    # exact sums: any order agrees
        assert torch.equal(gemlite(x), unwrapped(x))
    compiled = torch.compile(gemlite, backend="aot_eager", fullgraph=True)   # its fake kernel
    assert torch.equal(compiled(x), unwrapped(x))
    torch._dynamo.reset()
    assert quant_layout.layout_of(gemlite) == "gemlite"
    kind = "FP8" if quantize == "float8wo" else "int8"
    how = ("int8 weight cast to BF16 inside the product, row scales after it" if post_scale
           else "FP8 weight times its FP32 row scale, cast to BF16, inside the product")
    assert quant_layout.describe_layer(gemlite, rows=1) == (
        "GemliteLinear", f"gemlite A16W8 {kind}", f"gemlite's Triton GEMV_SPLITK kernel ({how})")
    assert "GEMM kernel" in quant_layout.describe_layer(gemlite, rows=128)[2]


def test_auto_measures_gemlite_per_phase_and_the_summary_names_what_each_phase_ran(
        monkeypatch, tmp_path):
    """int8 on a faked H100 with gemlite: the decode step's one row faster unwrapped, the
    prompt's rows faster in gemlite (what issue 61 hopes of an H200), so each layer holds both,
    and the summary and the JSON say what each phase ran."""
    pytest.importorskip("torchao")
    from microbench.steps import quant_choice
    from microbench.steps.quant_layers import GemliteLinear, PhaseLinear
    _fake_gemlite(monkeypatch)
    monkeypatch.setattr(quant_choice.writing, "user_cache_root", lambda: str(tmp_path))

    def timer(product):                 # gemlite 2 ms a product for a prompt, 5 for one row
        cells = [cell.cell_contents for cell in product.__closure__ or ()]
        built = next(cell for cell in cells if isinstance(cell, nn.Module))
        x = next(cell for cell in cells if isinstance(cell, torch.Tensor))
        prompt = x.shape[0] > 1
        return (2.0 if prompt else 5.0) if isinstance(built, GemliteLinear) else 4.0

    model = _tiny()
    names = [name for name, _ in quant_layout.linear_layers(model)]
    phases = (Phase("decode", dict.fromkeys(names, 1)), Phase("prefill", dict.fromkeys(names, 16)))
    report = low_precision.quantize_measured(model, plan("int8wo", "auto", H100_GEMLITE), phases,
                                             torch.randn(2, 64).to(torch.bfloat16),
                                             torch.device("cpu"), timer=timer)
    assert isinstance(model[0], PhaseLinear) and isinstance(model[0].prompt, GemliteLinear)
    assert model[0].materialize_input          # the int8 decode step's input, as a buffer
    assert report.quant_layout == "per phase"
    decode, prefill = report.quant_phases
    assert [(k["tensor"], k["packing"], k["layers"]) for k in decode["kernels"]] == \
        [("Int8WeightOnlyLinear", "unwrapped rowwise", 2)]
    assert [(k["tensor"], k["packing"], k["layers"]) for k in prefill["kernels"]] == \
        [("GemliteLinear", "gemlite A16W8 int8", 2)]
    assert prefill["kernels"][0]["kernel"].startswith("gemlite's Triton GEMM_SPLITK kernel")
    rows = dict(report.rows())
    assert rows["Quantized layouts"].startswith("auto, measured: every linear product")
    assert report.quant_choice["phases"]["prefill"]["candidates_ms"] == \
        {"gemlite": 4.0, "unwrapped": 8.0}
    assert report.weight_errors.max_error < 0.02 and report.drift.relative_error < 0.02
    print("\n".join(f"  {label:<22}: {value}" for label, value in report.rows()))
