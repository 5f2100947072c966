"""FLOPs per token on torchtitan's basis (microbench/measure/token_flops.py), against numbers worked out
by hand and against torchtitan's published Llama 3.1 8B throughput and MFU."""
from __future__ import annotations

import pytest
import torch

from microbench.models.archs import llama
from microbench.measure.flops import H100_SXM, PeakChoice
from microbench.measure.token_flops import TokenUtilization, llama_flops, model_flops


def test_llama3_8b_at_8192_tokens_by_hand():
    flops = llama_flops(llama.PRESETS["llama3_8b"], seq_len=8192)
    # 8,030,261,248 parameters less the untied embedding (128,256 x 4,096 = 525,336,576).
    assert flops.matmul_parameters == 7_504_924_672
    assert flops.dense == 6 * 7_504_924_672 == 45_029_548_032
    # 12 x 32 layers x 32 heads x 128 head_dim x 8192 tokens.
    assert flops.attention == 12 * 32 * 32 * 128 * 8192 == 12_884_901_888
    assert flops.per_token == 57_914_449_920


def test_a_tied_embedding_stays_in_the_matmul_count():
    flops = llama_flops(llama.PRESETS["llama3_1b"], seq_len=2048)
    assert flops.matmul_parameters == 1_235_814_400                # every parameter
    assert flops.per_token == 6 * 1_235_814_400 + 12 * 16 * 32 * 64 * 2048


def test_torchtitans_published_8b_mfu_comes_out_of_its_published_throughput():
    """torchtitan's Llama 3.1 8B benchmark (benchmarks/llama3_h100_202412_torchtitan.md): FSDP
    on 8 H100s, sequence 8192, 5,762 tokens/s/GPU eager and 6,667 compiled, "33% to 39% MFU"."""
    flops = llama_flops(llama.PRESETS["llama3_8b"], seq_len=8192)
    peak = PeakChoice(H100_SXM.bf16, "H100 SXM dense bf16")
    eager, compiled = (TokenUtilization(flops, rate, peak).mfu for rate in (5762.0, 6667.0))
    assert eager == pytest.approx(0.337, abs=0.001)
    assert compiled == pytest.approx(0.390, abs=0.001)


def test_unknown_peak_gives_unknown_mfu():
    use = TokenUtilization(llama_flops(llama.PRESETS["llama_tiny"]), 1000.0,
                           PeakChoice(None, "no peak known for the CPU"))
    assert use.mfu is None
    assert use.achieved_tflops == pytest.approx(use.flops.per_token * 1000 / 1e12)
    assert use.to_dict()["basis"].startswith("torchtitan: 6 x matmul parameters + 12 x")


@pytest.mark.parametrize("tied", [True, False])
def test_counting_a_built_model_agrees_with_the_closed_form(tied):
    config = llama.LlamaConfig(vocab_size=300, hidden_size=64, num_layers=3, num_heads=4,
                               num_kv_heads=2, intermediate_size=96, max_seq_len=16,
                               tie_embeddings=tied)
    model = llama.build_on_meta(config)
    counted = model_flops(model, config.num_layers, config.num_heads, config.head_dim, 16)
    assert counted == llama_flops(config)
    embedding = 300 * 64
    total = llama.parameter_count(config)
    assert counted.matmul_parameters == (total if tied else total - embedding)


# ---------------------------------------------------------------- fused attention, counted

def test_grouped_query_attention_counts_as_its_kv_heads_repeated():
    """An hf: Llama runs SDPA with enable_gqa (8 query heads on 2 kv heads): the count is the
    multiply-adds of the kv heads repeated for each query head, forward and backward, on a
    torch whose own formula asserts equal head counts as on one that takes GQA."""
    from torch.utils import flop_counter
    from microbench.measure import flops
    query, kv, grad = (2, 8, 16, 32), (2, 2, 16, 32), (2, 8, 16, 32)
    repeated = (2, 8, 16, 32)
    assert flops._attention_forward(query, kv, kv) == \
        flop_counter.sdpa_flop_count(query, repeated, repeated) == 2 * 2 * (2 * 8 * 16 * 16 * 32)
    assert flops._attention_backward(grad, query, kv, kv) == \
        flop_counter.sdpa_backward_flop_count(grad, query, repeated, repeated)


def test_the_counter_counts_attention_on_the_cpu_with_grouped_heads():
    from microbench.measure import flops
    q = torch.randn(1, 4, 8, 16, requires_grad=True)
    k, v = (torch.randn(1, 2, 8, 16, requires_grad=True) for _ in range(2))
    with flops.counting() as counter:
        torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True).sum().backward()
    forward = 2 * 2 * (1 * 4 * 8 * 8 * 16)                    # two products of 4 query heads
    counts = {str(op): count for op, count in counter.get_flop_counts()["Global"].items()}
    assert counts.get("aten._scaled_dot_product_flash_attention_for_cpu") == forward
    assert counter.get_total_flops() >= 3 * forward           # backward: more than twice that
