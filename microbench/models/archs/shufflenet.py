"""ShuffleNet v1 for ImageNet classification.

Zhang, Zhou, Lin, Sun, "ShuffleNet: An Extremely Efficient Convolutional Neural Network for Mobile
Devices", CVPR 2018 (arXiv:1707.01083). Section and table numbers below refer to that paper.

The network is Table 1: a 3x3 stride-2 convolution and a max pool, then three stages of ShuffleNet
units (Figure 2b, and Figure 2c for the first, stride-2 unit of each stage), global average pooling
and a fully connected classifier. Each unit is a bottleneck whose two 1x1 convolutions are grouped;
a channel shuffle between them lets information cross the groups (Sections 3.1-3.2, Figures 1-2).

Usage::

    import torch
    from microbench.models.archs import shufflenet_v1

    model = shufflenet_v1(num_classes=1000, groups=3)   # "ShuffleNet 1x (g = 3)", 137 MFLOPs
    logits = model(torch.randn(8, 3, 224, 224))         # -> shape (8, 1000)

    small = shufflenet_v1(groups=8, width_mult=0.5)     # "ShuffleNet 0.5x (g = 8)", Table 2
"""

from __future__ import annotations

import torch
from torch import nn

from microbench.models.archs._init import init_weights

__all__ = ["ChannelShuffle", "ShuffleUnit", "channel_shuffle", "shufflenet_v1", "SUPPORTED_GROUPS"]

# Table 1: output channels of Stages 2, 3 and 4 for each number of groups g at 1x width. The
# widths are chosen so that every g costs roughly the same, about 140 MFLOPs.
_STAGE_OUT_CHANNELS: dict[int, tuple[int, int, int]] = {
    1: (144, 288, 576),
    2: (200, 400, 800),
    3: (240, 480, 960),
    4: (272, 544, 1088),
    8: (384, 768, 1536),
}
SUPPORTED_GROUPS: tuple[int, ...] = tuple(_STAGE_OUT_CHANNELS)

# Table 1: units per stage; the first unit of each stage has stride 2, the others stride 1.
_STAGE_REPEATS: tuple[int, int, int] = (4, 8, 4)

# Table 1: Conv1 has 24 output channels for every g.
_STEM_CHANNELS = 24

# Section 3.3: "we set the number of bottleneck channels to 1/4 of the output channels".
_BOTTLENECK_RATIO = 4


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Permute the channels of an NCHW tensor so that each group draws from every group.

    Section 3.1: reshape the channel axis to (groups, channels_per_group), transpose it, and
    flatten it back. Channel j of input group i lands at position j * groups + i, so each of the
    next layer's groups receives one channel from each of this layer's groups (Figure 1c).
    """
    batch, channels, height, width = x.shape
    if channels % groups != 0:
        raise ValueError(f"channel_shuffle: {channels} channels do not split into {groups} groups")
    # Copying into `empty_like(x)` keeps the input's memory format, so a channels-last model
    # (--nhwc) pays one copy here rather than a copy plus a conversion back to channels last.
    shuffled = torch.empty_like(x)
    by_source_group = x.view(batch, groups, channels // groups, height, width)
    shuffled.view(batch, channels // groups, groups, height, width).copy_(
        by_source_group.transpose(1, 2)
    )
    return shuffled


class ChannelShuffle(nn.Module):
    """`channel_shuffle` as a module, so that it is named in printouts and profiler traces."""

    def __init__(self, groups: int) -> None:
        super().__init__()
        self.groups = groups

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return channel_shuffle(x, self.groups)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"


def _conv_bn(
    in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, groups: int = 1
) -> nn.Sequential:
    """Convolution without bias (the BN that follows supplies it) and batch normalisation."""
    conv = nn.Conv2d(
        in_channels, out_channels, kernel_size, stride=stride, padding=kernel_size // 2,
        groups=groups, bias=False,
    )
    return nn.Sequential(conv, nn.BatchNorm2d(out_channels))


class ShuffleUnit(nn.Module):
    """One ShuffleNet unit: Figure 2b when `stride` is 1, Figure 2c when it is 2.

    Main branch: 1x1 GConv, BN, ReLU -> channel shuffle -> 3x3 depthwise conv, BN -> 1x1 GConv, BN.
    There is no ReLU after the depthwise convolution (Section 3.2, following Xception).
    A stride-1 unit adds the input to the branch; a stride-2 unit concatenates the branch with a
    3x3 stride-2 average pool of the input, so its branch produces only the channels the pool
    does not, and the unit's width grows at little cost (Section 3.2). ReLU follows the merge.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        bottleneck_channels: int,
        groups: int,
        stride: int,
        group_first_pointwise: bool = True,
    ) -> None:
        super().__init__()
        if stride not in (1, 2):
            raise ValueError(f"ShuffleUnit: stride must be 1 or 2, got {stride}")
        if stride == 1 and in_channels != out_channels:
            raise ValueError(
                f"ShuffleUnit: a stride-1 unit adds its input, so in_channels ({in_channels}) "
                f"must equal out_channels ({out_channels})"
            )
        self.stride = stride
        branch_channels = out_channels if stride == 1 else out_channels - in_channels
        first_groups = groups if group_first_pointwise else 1

        self.compress = _conv_bn(in_channels, bottleneck_channels, 1, groups=first_groups)
        self.compress_relu = nn.ReLU(inplace=True)
        # Shuffling the output of an ungrouped 1x1 conv only relabels its filters, which changes
        # nothing the network can learn; skip it there (and when there is a single group).
        self.shuffle: nn.Module = (
            ChannelShuffle(groups) if first_groups > 1 else nn.Identity()
        )
        self.depthwise = _conv_bn(
            bottleneck_channels, bottleneck_channels, 3, stride=stride, groups=bottleneck_channels
        )
        self.expand = _conv_bn(bottleneck_channels, branch_channels, 1, groups=groups)
        self.shortcut_pool = nn.AvgPool2d(3, stride=2, padding=1) if stride == 2 else None
        self.merge_relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        branch = self.compress_relu(self.compress(x))
        branch = self.expand(self.depthwise(self.shuffle(branch)))
        if self.shortcut_pool is None:
            merged = x + branch
        else:
            merged = torch.cat((self.shortcut_pool(x), branch), dim=1)
        return self.merge_relu(merged)


def _scaled_channels(channels: int, width_mult: float, divisor: int) -> int:
    """`channels * width_mult` rounded to the nearest multiple of `divisor`, and at least `divisor`.

    Section 3.3: "ShuffleNet s x" scales the number of filters of ShuffleNet 1x by s. Rounding
    keeps every grouped convolution divisible by its groups; at 1x the Table 1 widths are already
    multiples, so they come back unchanged.
    """
    return max(divisor, int(channels * width_mult / divisor + 0.5) * divisor)


def _stage(
    in_channels: int, out_channels: int, repeats: int, groups: int, is_first_stage: bool
) -> nn.Sequential:
    bottleneck_channels = out_channels // _BOTTLENECK_RATIO
    units = [
        # Section 3.3: Stage 2's first pointwise layer is not grouped "because the number of input
        # channels is relatively small" (24 from Conv1).
        ShuffleUnit(
            in_channels, out_channels, bottleneck_channels, groups, stride=2,
            group_first_pointwise=not is_first_stage,
        )
    ]
    units += [
        ShuffleUnit(out_channels, out_channels, bottleneck_channels, groups, stride=1)
        for _ in range(repeats - 1)
    ]
    return nn.Sequential(*units)


class ShuffleNetV1(nn.Module):
    """Table 1: Conv1, MaxPool, Stages 2-4, global average pool, FC."""

    def __init__(self, num_classes: int, groups: int, width_mult: float) -> None:
        super().__init__()
        # Multiples of 4 * groups keep the bottleneck (1/4 of the output) divisible by groups.
        stage_channels = [
            _scaled_channels(c, width_mult, _BOTTLENECK_RATIO * groups)
            for c in _STAGE_OUT_CHANNELS[groups]
        ]
        # Multiples of groups keep Stage 2's first branch (output minus stem) divisible by groups.
        stem_channels = _scaled_channels(_STEM_CHANNELS, width_mult, groups)

        self.stem = nn.Sequential(
            *_conv_bn(3, stem_channels, 3, stride=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        in_channels = stem_channels
        stages = []
        for index, (out_channels, repeats) in enumerate(zip(stage_channels, _STAGE_REPEATS)):
            stages.append(_stage(in_channels, out_channels, repeats, groups, index == 0))
            in_channels = out_channels
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(in_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.classifier(torch.flatten(self.pool(x), 1))


def shufflenet_v1(num_classes: int = 1000, groups: int = 3, width_mult: float = 1.0) -> nn.Module:
    """Build ShuffleNet v1 "ShuffleNet `width_mult`x (g = `groups`)" for 3x224x224 inputs.

    Raises ValueError for a number of groups that Table 1 does not define, a width multiplier that
    is not positive, or fewer than one class.
    """
    if groups not in _STAGE_OUT_CHANNELS:
        supported = ", ".join(str(g) for g in SUPPORTED_GROUPS)
        raise ValueError(
            f"shufflenet_v1: groups={groups} is not defined by the paper; "
            f"Table 1 defines groups {supported}"
        )
    if not width_mult > 0:
        raise ValueError(f"shufflenet_v1: width_mult must be positive, got {width_mult}")
    if num_classes < 1:
        raise ValueError(f"shufflenet_v1: num_classes must be at least 1, got {num_classes}")
    model = ShuffleNetV1(num_classes, groups, width_mult)
    init_weights(model)
    return model
