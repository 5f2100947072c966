"""Xception for ImageNet classification.

Chollet, "Xception: Deep Learning with Depthwise Separable Convolutions", CVPR 2017
(arXiv:1610.02357). Section and figure numbers below refer to that paper.

The network is Figure 5: an entry flow, a middle flow repeated eight times and an exit flow, built
from depthwise separable convolutions with residual connections around every block but the first
two convolutions and the last two separable convolutions. Figure 5's caption adds that every
convolution and separable convolution is followed by batch normalisation and that separable
convolutions use a depth multiplier of 1.

Usage::

    import torch
    from microbench.models.archs import xception

    model = xception(num_classes=1000)                # ~22.9M parameters, Table 3
    logits = model(torch.randn(4, 3, 299, 299))       # -> shape (4, 1000); native size 299x299
    logits = model(torch.randn(4, 3, 224, 224))       # smaller inputs work too (adaptive pooling)
"""

from __future__ import annotations

import torch
from torch import nn

from microbench.models.archs._init import init_weights

__all__ = ["SeparableConv2d", "xception"]

_ENTRY_STEM_CHANNELS = (32, 64)
_MIDDLE_CHANNELS = 728
_MIDDLE_REPEATS = 8
# Section 4.3: the ImageNet models put dropout of rate 0.5 before the logistic regression layer.
_CLASSIFIER_DROPOUT = 0.5


class SeparableConv2d(nn.Module):
    """Depthwise 3x3 convolution, then pointwise 1x1 convolution, without a norm between them.

    Section 1.2 contrasts this order (spatial first, then channels, no non-linearity in between)
    with an "extreme" Inception module; Section 4.7 finds that an intermediate ReLU hurts.
    """

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.depthwise = nn.Conv2d(
            in_channels, in_channels, 3, padding=1, groups=in_channels, bias=False
        )
        self.pointwise = nn.Conv2d(in_channels, out_channels, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pointwise(self.depthwise(x))


def _separable_bn(in_channels: int, out_channels: int) -> list[nn.Module]:
    return [SeparableConv2d(in_channels, out_channels), nn.BatchNorm2d(out_channels)]


def _relu_separable_bn(in_channels: int, out_channels: int) -> list[nn.Module]:
    # Not in place: the ReLU that opens a block reads the block's input, which the residual
    # connection still needs unchanged.
    return [nn.ReLU(inplace=False), *_separable_bn(in_channels, out_channels)]


class ResidualBlock(nn.Module):
    """`branch(x) + shortcut(x)`; the shortcut is the identity unless a module is given."""

    def __init__(self, branch: nn.Module, shortcut: nn.Module | None = None) -> None:
        super().__init__()
        self.branch = branch
        self.shortcut = shortcut if shortcut is not None else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.branch(x) + self.shortcut(x)


def _downsampling_block(
    in_channels: int, mid_channels: int, out_channels: int, relu_first: bool
) -> ResidualBlock:
    """Two separable convolutions and a 3x3 stride-2 max pool, plus a 1x1 stride-2 conv shortcut.

    Figure 5 (entry flow, and the first block of the exit flow). The first entry block has no
    leading ReLU because the convolution before it already ends in one.
    """
    first = _relu_separable_bn if relu_first else _separable_bn
    branch = nn.Sequential(
        *first(in_channels, mid_channels),
        *_relu_separable_bn(mid_channels, out_channels),
        nn.MaxPool2d(3, stride=2, padding=1),
    )
    shortcut = nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 1, stride=2, bias=False),
        nn.BatchNorm2d(out_channels),
    )
    return ResidualBlock(branch, shortcut)


def _middle_block(channels: int) -> ResidualBlock:
    """Figure 5, middle flow: three ReLU-separable-conv layers around an identity shortcut."""
    layers = [module for _ in range(3) for module in _relu_separable_bn(channels, channels)]
    return ResidualBlock(nn.Sequential(*layers))


def _conv_bn_relu(in_channels: int, out_channels: int, stride: int) -> list[nn.Module]:
    # No padding: the paper's Keras reference uses "valid" here, 299 -> 149 -> 147, which gives
    # the 19x19x728 entry flow output that Figure 5 states.
    return [
        nn.Conv2d(in_channels, out_channels, 3, stride=stride, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    ]


class Xception(nn.Module):
    """Figure 5: entry flow, middle flow (x8), exit flow, global average pool, classifier."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        stem_1, stem_2 = _ENTRY_STEM_CHANNELS
        self.entry_flow = nn.Sequential(
            *_conv_bn_relu(3, stem_1, stride=2),
            *_conv_bn_relu(stem_1, stem_2, stride=1),
            _downsampling_block(stem_2, 128, 128, relu_first=False),
            _downsampling_block(128, 256, 256, relu_first=True),
            _downsampling_block(256, _MIDDLE_CHANNELS, _MIDDLE_CHANNELS, relu_first=True),
        )
        self.middle_flow = nn.Sequential(
            *(_middle_block(_MIDDLE_CHANNELS) for _ in range(_MIDDLE_REPEATS))
        )
        self.exit_flow = nn.Sequential(
            _downsampling_block(_MIDDLE_CHANNELS, 728, 1024, relu_first=True),
            *_separable_bn(1024, 1536),
            nn.ReLU(inplace=True),
            *_separable_bn(1536, 2048),
            nn.ReLU(inplace=True),
        )
        # Adaptive pooling makes the classifier independent of the input size (10x10 at 299).
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(_CLASSIFIER_DROPOUT)
        self.classifier = nn.Linear(2048, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.exit_flow(self.middle_flow(self.entry_flow(x)))
        return self.classifier(self.dropout(torch.flatten(self.pool(x), 1)))


def xception(num_classes: int = 1000) -> nn.Module:
    """Build Xception (Figure 5). Native input 3x299x299; smaller inputs such as 224x224 work too.

    Raises ValueError for fewer than one class.
    """
    if num_classes < 1:
        raise ValueError(f"xception: num_classes must be at least 1, got {num_classes}")
    model = Xception(num_classes)
    init_weights(model)
    return model
