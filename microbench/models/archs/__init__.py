"""Image-classification architectures that torchvision does not ship, written from their papers.

- `shufflenet_v1`: Zhang, Zhou, Lin, Sun, "ShuffleNet: An Extremely Efficient Convolutional Neural
  Network for Mobile Devices", CVPR 2018 (arXiv:1707.01083).
- `xception`: Chollet, "Xception: Deep Learning with Depthwise Separable Convolutions", CVPR 2017
  (arXiv:1610.02357).

Usage::

    import torch
    from microbench.models.archs import shufflenet_v1, xception

    shufflenet = shufflenet_v1(num_classes=1000, groups=3)   # 224x224 inputs
    logits = shufflenet(torch.randn(2, 3, 224, 224))          # -> shape (2, 1000)
    logits = xception()(torch.randn(2, 3, 299, 299))           # -> shape (2, 1000)
"""

from microbench.models.archs.shufflenet import shufflenet_v1
from microbench.models.archs.xception import xception

__all__ = ["shufflenet_v1", "xception"]
