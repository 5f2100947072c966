"""Precision modes, the APEX opt-level mapping, and the FP16 master-weight update."""
import pytest
import torch
from torch import nn

import fp16util
from microbench.settings import precision
from microbench.platform.errors import UsageError


@pytest.mark.parametrize("flags, name", [
    ((0, False, "fp16", None, False), "fp32"),
    ((0, False, "fp16", None, True), "tf32"),
    ((1, False, "fp16", None, False), "fp16"),
    ((0, True, "fp16", None, False), "amp-fp16"),
    ((0, True, "bf16", None, False), "amp-bf16"),
    ((0, False, "fp16", 0, False), "fp32"),
    ((0, False, "fp16", 1, False), "amp-fp16"),
    ((0, False, "fp16", 2, False), "fp16"),
    ((0, False, "fp16", 3, False), "fp16"),
])
def test_older_flags_select_a_row_of_the_table(flags, name):
    selected, _ = precision.from_older_flags(*flags)
    assert selected == name and precision.lookup(selected).name == name


def test_opt_level_says_how_it_was_mapped():
    _, notes = precision.from_older_flags(0, False, "fp16", 2, False)
    assert any("O2" in note and "fp16" in note for note in notes)


def test_conflicting_modes_are_refused():
    with pytest.raises(UsageError, match="choose one"):
        precision.from_older_flags(1, True, "fp16", None, False)
    with pytest.raises(UsageError, match="cannot be combined"):
        precision.from_older_flags(1, False, "fp16", 1, False)


def test_bf16_needs_no_scaler_and_fp16_amp_does():
    assert not precision.lookup("amp-bf16").grad_scaling
    assert precision.lookup("amp-fp16").grad_scaling and precision.lookup("amp").grad_scaling


def test_one_table_drives_the_cli_choices_and_the_mfu_peak():
    from microbench.plan import cli
    from microbench.measure import flops
    assert set(precision.PRECISIONS) <= set(precision.CHOICES)
    for row in precision.TABLE:
        assert row.peak_key in flops.PRECISIONS, row.name
        plan = cli.to_plan(cli.parse_args(["--precision", row.name]))
        assert plan.configs[0].precision == row.name
    with pytest.raises(SystemExit):
        cli.parse_args(["--precision", "fp4"])
    assert precision.lookup("tf32").tf32 and not precision.lookup("fp32").tf32
    assert precision.lookup("amp-bf16", tf32=True).tf32


def small_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.GroupNorm(2, 4), nn.Flatten(),
                         nn.LayerNorm(4 * 6 * 6), nn.Linear(4 * 6 * 6, 5))


def test_network_to_half_keeps_norm_layers_fp32():
    net = fp16util.network_to_half(small_net())
    assert net[0].weight.dtype == torch.float16 and net[5].weight.dtype == torch.float16
    assert net[1].weight.dtype == torch.float32 and net[1].running_var.dtype == torch.float32
    assert net[2].weight.dtype == torch.float32 and net[4].weight.dtype == torch.float32
    assert net(torch.randn(2, 3, 8, 8).half()).dtype == torch.float16


def test_norms_without_native_mixed_support_see_fp32_input():
    """CUDA's group_norm refuses FP16 input with FP32 weights; the cast keeps them equal."""
    net = fp16util.network_to_half(small_net())
    seen = {}
    for index in (1, 2, 4):
        net[index].register_forward_pre_hook(
            lambda module, args, index=index: seen.__setitem__(index, args[0].dtype))
    net(torch.randn(2, 3, 8, 8).half())
    assert seen == {1: torch.float16, 2: torch.float32, 4: torch.float32}
    assert net[3](torch.ones(1, 2)).dtype == torch.float32   # Flatten untouched


def test_master_weights_receive_the_fp16_gradients_and_update_the_model():
    """One SGD step through the master weights equals the same step done by hand in FP32."""
    net = fp16util.network_to_half(small_net())
    lr = 0.1
    updater = fp16util.MasterWeightOptimizer(
        net, lambda params: torch.optim.SGD(params, lr=lr), loss_scale=64.0)
    before = [p.detach().float().clone() for p in net.parameters()]
    inputs = torch.randn(2, 3, 8, 8).half()
    loss = net(inputs).float().sum()
    updater.backward(loss)
    grads = [p.grad.float() / 64.0 for p in net.parameters()]
    updater.step()
    for master, start, grad in zip(updater.master_params, before, grads):
        assert torch.allclose(master, start - lr * grad, atol=1e-6)
    for param, master in zip(net.parameters(), updater.master_params):
        assert torch.equal(param.detach(), master.detach().to(param.dtype)), \
            "updated master weights must be copied back into the FP16 model"
    assert any(not torch.equal(p.detach().float(), b) for p, b in zip(net.parameters(), before))
    updater.zero_grad()
    assert all(p.grad is None for p in net.parameters())
