"""Weight initialisation shared by the architectures written here (the papers specify none)."""
from torch import nn


def init_weights(model: nn.Module) -> None:
    """He initialisation for convolutions, identity BN, small normal weights for the classifier."""
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.01)
            nn.init.zeros_(module.bias)
