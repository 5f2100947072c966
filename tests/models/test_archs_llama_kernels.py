"""Which kernels the LLaMA model hands its work to (issue 44): the fused RMSNorm, rotary
embeddings in the activations' dtype, and grouped k/v heads given to a fused attention kernel
instead of copied; the SwiGLU product as its own buffer before an int8 down projection
(issue 61). Each is checked against the formula it replaces; CPU only."""
from __future__ import annotations

from typing import Callable

import pytest
import torch
import torch.nn.functional as F

from microbench.models.archs import llama


def spelled_out_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)])
def test_the_fused_rms_norm_computes_the_papers_formula(dtype, tolerance):
    torch.manual_seed(0)
    norm = llama.RMSNorm(64, eps=1e-5).to(dtype)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(3, 5, 64, dtype=dtype) * 4
    out = norm(x)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), spelled_out_rms_norm(x, norm.weight, 1e-5).float(),
                               rtol=tolerance, atol=tolerance)


def test_rms_norm_takes_one_kernel_where_torch_has_it(monkeypatch):
    calls = []
    monkeypatch.setattr(F, "rms_norm", lambda *args: calls.append(args) or args[0])
    llama.RMSNorm(8, eps=1e-5)(torch.ones(2, 8))
    assert len(calls) == int(llama._FUSED_RMS_NORM)


def test_rotary_embeddings_run_in_the_queries_dtype():
    """FP32 tables (an FSDP or autocast run keeps its buffers in FP32) must not make BF16
    queries FP32: twice the bytes, and a cast back before attention."""
    config = llama.PRESETS["llama_tiny"]
    attention = llama.Attention(config, 0, "sdpa").to(torch.bfloat16)
    cos, sin = llama.rope_tables(config.head_dim, 16, config.rope_theta)
    seen = []
    original = llama.apply_rope

    def recording(x, cos, sin):
        seen.append((x.dtype, cos.dtype, sin.dtype))
        return original(x, cos, sin)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(llama, "apply_rope", recording)
        out = attention(torch.randn(2, 16, config.hidden_size, dtype=torch.bfloat16), cos, sin,
                        torch.arange(16), None, None)
    assert out.dtype == torch.bfloat16
    assert seen and all(dtypes == (torch.bfloat16,) * 3 for dtypes in seen)


def test_grouped_heads_in_the_kernel_equal_the_copied_heads():
    torch.manual_seed(0)
    q = torch.randn(2, 8, 16, 32)
    k, v = torch.randn(2, 2, 16, 32), torch.randn(2, 2, 16, 32)
    grouped = llama.attend("sdpa", q, k, v, None, grouped=True)
    copied = llama.attend("sdpa", q, llama.expand_kv(k, 4), llama.expand_kv(v, 4), None)
    torch.testing.assert_close(grouped, copied)


@pytest.mark.parametrize("impl", ["eager", "math", "sdpa", "flash"])
def test_off_the_gpu_and_for_the_spelled_out_forms_the_heads_are_copied(impl):
    q, kv = torch.randn(1, 4, 8, 16), torch.randn(1, 2, 8, 16)
    assert not llama.grouped_in_kernel(impl, q, kv, kv)
    meta = q.to("meta")
    assert not llama.grouped_in_kernel(impl, meta, meta, meta)


class FakeChecks:
    """torch.backends.cuda's SDPA checks, answering as told; counts the questions."""

    def __init__(self, flash: bool, efficient: bool, params_error: bool = False):
        self.answers = {"flash": flash, "efficient": efficient}
        self.params_error, self.asked = params_error, []

    def install(self, monkeypatch):
        cuda = torch.backends.cuda

        def params(*args):
            if self.params_error:
                raise TypeError("SDPAParams takes 6 arguments")   # PyTorch < 2.5
            assert args[-1] is True            # asked about grouped heads (enable_gqa)
            return args

        monkeypatch.setattr(cuda, "SDPAParams", params)
        for name in ("flash", "efficient"):
            monkeypatch.setattr(cuda, f"can_use_{name}_attention",
                                lambda p, debug, name=name: self.asked.append(name)
                                or self.answers[name])
        monkeypatch.setattr(cuda, "can_use_cudnn_attention", lambda p, debug: False,
                            raising=False)


@pytest.mark.parametrize("impl, flash, efficient, expected", [
    ("sdpa", True, False, True), ("sdpa", False, True, True), ("sdpa", False, False, False),
    ("flash", False, True, False), ("efficient", True, False, False),
    ("efficient", False, True, True)])
def test_a_gpu_kernel_takes_grouped_heads_only_where_torch_says_so(monkeypatch, impl, flash,
                                                                   efficient, expected):
    FakeChecks(flash, efficient).install(monkeypatch)
    q, kv = torch.randn(1, 4, 8, 16), torch.randn(1, 2, 8, 16)
    assert llama._fused_takes_groups(impl, q, kv, kv) is expected


def test_a_torch_without_grouped_attention_copies(monkeypatch):
    FakeChecks(True, True, params_error=True).install(monkeypatch)
    q, kv = torch.randn(1, 4, 8, 16), torch.randn(1, 2, 8, 16)
    assert llama._fused_takes_groups("sdpa", q, kv, kv) is False


def test_the_answer_is_asked_once_per_device_and_dtype(monkeypatch):
    checks = FakeChecks(True, False)
    checks.install(monkeypatch)
    monkeypatch.setattr(llama, "_GROUPED_KERNEL", {})

    class OnTheGpu(torch.Tensor):   # a CPU tensor that says it is on a CUDA device
        @property
        def device(self):
            return torch.device("cuda", 0)

    q = torch.randn(1, 4, 8, 16).as_subclass(OnTheGpu)
    kv = torch.randn(1, 2, 8, 16)
    assert llama.grouped_in_kernel("sdpa", q, kv, kv) and llama.grouped_in_kernel("sdpa", q, kv,
                                                                                  kv)
    assert checks.asked == ["flash"]
    assert list(llama._GROUPED_KERNEL) == [("sdpa", torch.device("cuda", 0), torch.float32, 16)]


class _DownAskingForItsInput(torch.nn.Linear):
    materialize_input = True


@pytest.mark.parametrize("fused", [False, True])
def test_the_swiglu_product_is_its_own_buffer_where_the_down_projection_asks(fused):
    """A down projection that says ``materialize_input`` (the int8 layer) gets the SwiGLU
    product through the opaque ``materialized`` op, so the compiled graph holds a boundary
    inductor cannot fuse across; the outputs are the same. A plain layer gets no copy."""
    config = llama.PRESETS["llama_tiny"]
    feed_forward = llama.FeedForward(config)
    inputs = torch.randn(2, 3, config.hidden_size)
    expected = feed_forward(inputs)
    if fused:
        feed_forward.fuse_projections()

    def ops_in_graph(module: torch.nn.Module) -> list[str]:
        seen: list[str] = []

        def backend(graph: torch.fx.GraphModule, example_inputs: list) -> Callable:
            seen.extend(str(node.target) for node in graph.graph.nodes)
            return graph.forward

        torch._dynamo.reset()
        compiled = torch.compile(module, backend=backend, fullgraph=True)
        assert torch.allclose(compiled(inputs), expected, atol=1e-5)
        return seen

    assert not any("materialized" in op for op in ops_in_graph(feed_forward))
    down = _DownAskingForItsInput(config.intermediate_size, config.hidden_size, bias=False)
    down.weight = feed_forward.w2.weight
    feed_forward.w2 = down
    assert any("microbench.materialized" in op for op in ops_in_graph(feed_forward))
    assert torch.equal(feed_forward(inputs), expected)
