"""Tests for microbench.models.archs: shapes, sizes against the papers, gradients, channel shuffle.

Runs on the CPU in a few seconds: `python3 -m pytest tests/models/test_archs.py -q`.
"""

from __future__ import annotations

from typing import Callable

import pytest
import torch
from torch import nn

from microbench.models.archs import shufflenet_v1, xception
from microbench.models.archs.shufflenet import channel_shuffle


def parameter_count(model: nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def multiply_adds(model: nn.Module, input_size: int) -> int:
    """Multiply-adds of the convolutions and linear layers for one image: the papers' "FLOPs"."""
    total = 0

    def count(module: nn.Module, _inputs: tuple, output: torch.Tensor) -> None:
        nonlocal total
        if isinstance(module, nn.Conv2d):
            kernel_h, kernel_w = module.kernel_size
            per_output = module.in_channels // module.groups * kernel_h * kernel_w
            total += output[0].numel() * per_output
        else:
            total += module.in_features * module.out_features

    hooks = [
        module.register_forward_hook(count)
        for module in model.modules()
        if isinstance(module, (nn.Conv2d, nn.Linear))
    ]
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, 3, input_size, input_size))
    for hook in hooks:
        hook.remove()
    return total


# --- channel shuffle -------------------------------------------------------------------------


def channels_of(tensor: torch.Tensor) -> list[float]:
    return tensor[0, :, 0, 0].tolist()


def test_channel_shuffle_interleaves_groups() -> None:
    # Six channels numbered 0..5 in groups [0 1 2 | 3 4 5]: Section 3.1's reshape, transpose and
    # flatten take one channel from each group in turn.
    x = torch.arange(6.0).view(1, 6, 1, 1)
    assert channels_of(channel_shuffle(x, groups=2)) == [0, 3, 1, 4, 2, 5]
    assert channels_of(channel_shuffle(x, groups=3)) == [0, 2, 4, 1, 3, 5]


def test_channel_shuffle_is_a_permutation_that_mixes_every_group() -> None:
    groups, per_group = 3, 4
    x = torch.arange(2 * groups * per_group * 2 * 2, dtype=torch.float32)
    x = x.view(2, groups * per_group, 2, 2)
    shuffled = channel_shuffle(x, groups)

    original = channels_of(x)
    order = channels_of(shuffled)
    assert sorted(order) == original, "every channel appears exactly once"
    # Channels move whole (every sample, every pixel), not element by element.
    for position, value in enumerate(order):
        assert torch.equal(shuffled[:, position], x[:, original.index(value)])
    # Figure 1c: each group of the next grouped conv receives channels from every input group.
    for output_group in range(groups):
        members = order[output_group * per_group:(output_group + 1) * per_group]
        source_groups = {original.index(value) // per_group for value in members}
        assert source_groups == set(range(groups))


def test_channel_shuffle_with_one_group_is_identity() -> None:
    x = torch.randn(2, 5, 3, 3)
    assert torch.equal(channel_shuffle(x, groups=1), x)


def test_channel_shuffle_rejects_indivisible_channels() -> None:
    with pytest.raises(ValueError, match="do not split into 4 groups"):
        channel_shuffle(torch.zeros(1, 6, 1, 1), groups=4)


# --- ShuffleNet v1 -----------------------------------------------------------------------------

# Table 1, "Complexity" row: MFLOPs (multiply-adds) of ShuffleNet 1x at 224x224 for each g.
SHUFFLENET_TABLE1_MFLOPS = {1: 143, 2: 140, 3: 137, 4: 133, 8: 137}


@pytest.mark.parametrize("groups", sorted(SHUFFLENET_TABLE1_MFLOPS))
def test_shufflenet_complexity_matches_table1(groups: int) -> None:
    measured = multiply_adds(shufflenet_v1(groups=groups), 224) / 1e6
    assert measured == pytest.approx(SHUFFLENET_TABLE1_MFLOPS[groups], rel=0.03)


def test_shufflenet_parameter_count() -> None:
    # The paper gives no parameter count; reimplementations of "ShuffleNet 1x (g = 3)" report
    # about 1.9M. The exact count is pinned so that an accidental change to the network shows.
    count = parameter_count(shufflenet_v1(groups=3))
    assert count == pytest.approx(1.9e6, rel=0.03)
    assert count == 1_865_728


def test_shufflenet_half_width_matches_table2() -> None:
    # Table 2: "ShuffleNet 0.5x" costs about 38 MFLOPs (width s scales cost by about s^2).
    measured = multiply_adds(shufflenet_v1(groups=3, width_mult=0.5), 224) / 1e6
    assert measured == pytest.approx(38, rel=0.05)


@pytest.mark.parametrize("groups", [1, 2, 3, 4, 8])
def test_shufflenet_output_shape_small_input(groups: int) -> None:
    model = shufflenet_v1(num_classes=10, groups=groups)
    assert model(torch.randn(2, 3, 64, 64)).shape == (2, 10)


def test_shufflenet_output_shape_native_input() -> None:
    model = shufflenet_v1().eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, 224, 224)).shape == (1, 1000)


@pytest.mark.parametrize("groups", [0, 5, 6, 16])
def test_shufflenet_rejects_groups_outside_table1(groups: int) -> None:
    with pytest.raises(ValueError, match=rf"groups={groups} is not defined.*1, 2, 3, 4, 8"):
        shufflenet_v1(groups=groups)


def test_shufflenet_rejects_non_positive_width() -> None:
    with pytest.raises(ValueError, match="width_mult must be positive"):
        shufflenet_v1(width_mult=0.0)


# --- Xception ----------------------------------------------------------------------------------

# Table 3: Xception has 22,855,952 parameters (convolutions, BN scales and offsets, classifier).
XCEPTION_TABLE3_PARAMETERS = 22_855_952


@pytest.fixture(scope="module")
def xception_model() -> nn.Module:
    torch.manual_seed(0)
    return xception()


def test_xception_parameter_count_matches_table3(xception_model: nn.Module) -> None:
    count = parameter_count(xception_model)
    assert count == pytest.approx(XCEPTION_TABLE3_PARAMETERS, rel=0.01)
    assert count == XCEPTION_TABLE3_PARAMETERS


def test_xception_output_shape_small_input(xception_model: nn.Module) -> None:
    xception_model.train()
    assert xception_model(torch.randn(2, 3, 64, 64)).shape == (2, 1000)


def test_xception_output_shape_native_input(xception_model: nn.Module) -> None:
    xception_model.eval()
    with torch.no_grad():
        assert xception_model(torch.randn(1, 3, 299, 299)).shape == (1, 1000)


def test_xception_entry_flow_gives_figure5_shape(xception_model: nn.Module) -> None:
    # Figure 5: the entry flow turns 299x299x3 into 19x19x728.
    xception_model.eval()
    with torch.no_grad():
        features = xception_model.entry_flow(torch.randn(1, 3, 299, 299))
    assert features.shape == (1, 728, 19, 19)


def test_xception_rejects_zero_classes() -> None:
    with pytest.raises(ValueError, match="num_classes must be at least 1"):
        xception(num_classes=0)


# --- both --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [lambda: shufflenet_v1(num_classes=10), lambda: xception(num_classes=10)],
    ids=["shufflenet_v1", "xception"],
)
def test_backward_reaches_every_parameter(build: Callable[[], nn.Module]) -> None:
    torch.manual_seed(0)
    model = build().train()
    logits = model(torch.randn(2, 3, 64, 64))
    nn.functional.cross_entropy(logits, torch.tensor([1, 7])).backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, f"{name} received no gradient"
        assert torch.isfinite(parameter.grad).all(), f"{name} has a non-finite gradient"
        assert parameter.grad.abs().sum() > 0, f"{name} has an all-zero gradient"


def test_package_exports_both_builders() -> None:
    import microbench.models.archs as archs

    assert set(archs.__all__) == {"shufflenet_v1", "xception"}


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_channel_shuffle_keeps_memory_format_and_gradient(
    memory_format: torch.memory_format,
) -> None:
    x = torch.randn(1, 6, 2, 2, dtype=torch.float64).contiguous(memory_format=memory_format)
    assert channel_shuffle(x, groups=3).is_contiguous(memory_format=memory_format)
    x.requires_grad_()
    assert torch.autograd.gradcheck(lambda t: channel_shuffle(t, groups=3), (x,))
