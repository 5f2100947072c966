"""The model names, known without importing torch or torchvision: ``--list-networks`` and the
refusal of an unknown ``--network`` answer in a fraction of a second (issue 45), where importing
torchvision takes seconds (tens on a loaded machine).

torchvision's names are a table read from the release named below (``list_models`` per
family); where another release is installed, torchvision is asked instead, which is slower but
never wrong. ``tests/models/test_registry.py`` checks the table against the installed torchvision.

Example::

    check("resnet81")        # UsageError: unknown network 'resnet81': did you mean resnet18, ...?
    listing()[:2]            # ['alexnet', 'convnext_base']
"""
from __future__ import annotations

from typing import Iterable

import difflib
import importlib.metadata

from microbench.models import llama_config
from microbench.platform.errors import UsageError

# The release the table was read from, and its models by family (torchvision.models.list_models
# with module=torchvision.models, .segmentation and .video).
TORCHVISION_RELEASE = "0.29"
TORCHVISION_MODELS: dict[str, tuple[str, ...]] = {
    "classification": (
        "alexnet", "convnext_base", "convnext_large", "convnext_small", "convnext_tiny",
        "densenet121", "densenet161", "densenet169", "densenet201", "efficientnet_b0",
        "efficientnet_b1", "efficientnet_b2", "efficientnet_b3", "efficientnet_b4",
        "efficientnet_b5", "efficientnet_b6", "efficientnet_b7", "efficientnet_v2_l",
        "efficientnet_v2_m", "efficientnet_v2_s", "googlenet", "inception_v3", "maxvit_t",
        "mnasnet0_5", "mnasnet0_75", "mnasnet1_0", "mnasnet1_3", "mobilenet_v2",
        "mobilenet_v3_large", "mobilenet_v3_small", "regnet_x_16gf", "regnet_x_1_6gf",
        "regnet_x_32gf", "regnet_x_3_2gf", "regnet_x_400mf", "regnet_x_800mf", "regnet_x_8gf",
        "regnet_y_128gf", "regnet_y_16gf", "regnet_y_1_6gf", "regnet_y_32gf", "regnet_y_3_2gf",
        "regnet_y_400mf", "regnet_y_800mf", "regnet_y_8gf", "resnet101", "resnet152",
        "resnet18", "resnet34", "resnet50", "resnext101_32x8d", "resnext101_64x4d",
        "resnext50_32x4d", "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "shufflenet_v2_x1_5",
        "shufflenet_v2_x2_0", "squeezenet1_0", "squeezenet1_1", "swin_b", "swin_s", "swin_t",
        "swin_v2_b", "swin_v2_s", "swin_v2_t", "vgg11", "vgg11_bn", "vgg13", "vgg13_bn",
        "vgg16", "vgg16_bn", "vgg19", "vgg19_bn", "vit_b_16", "vit_b_32", "vit_h_14",
        "vit_l_16", "vit_l_32", "wide_resnet101_2", "wide_resnet50_2"),
    "segmentation": (
        "deeplabv3_mobilenet_v3_large", "deeplabv3_resnet101", "deeplabv3_resnet50",
        "fcn_resnet101", "fcn_resnet50", "lraspp_mobilenet_v3_large"),
    "video": (
        "mc3_18", "mvit_v1_b", "mvit_v2_s", "r2plus1d_18", "r3d_18", "s3d", "swin3d_b",
        "swin3d_s", "swin3d_t"),
}
# Classification models torchvision lacks, written from their papers (microbench.models.archs).
WRITTEN_HERE = ("shufflenet", "xception")
HF_PREFIX = "hf:"

# The older tool's names for models torchvision spells differently.
LEGACY_ALIASES = {
    "SqueezeNet": "squeezenet1_0",
    "SqueezeNet1.1": "squeezenet1_1",
    "resnext50": "resnext50_32x4d",
    "resnext101": "resnext101_32x8d",
    "inception": "inception_v3",
    "shufflenet_v2_x05": "shufflenet_v2_x0_5",
    "shufflenet_v2_x10": "shufflenet_v2_x1_0",
    "shufflenet_v2_x15": "shufflenet_v2_x1_5",
    "shufflenet_v2_x20": "shufflenet_v2_x2_0",
}


def installed_torchvision_release() -> str | None:
    """'0.29' for torchvision 0.29.1+cu130, from its installed metadata (no import); None when
    it is not installed as a distribution."""
    try:
        version = importlib.metadata.version("torchvision")
    except importlib.metadata.PackageNotFoundError:
        return None
    return ".".join(version.split("+")[0].split(".")[:2])


def torchvision_models() -> dict[str, tuple[str, ...]]:
    """torchvision's models by family: the table where the installed release is the table's,
    else torchvision's own ``list_models`` (its import takes seconds)."""
    if installed_torchvision_release() == TORCHVISION_RELEASE:
        return TORCHVISION_MODELS
    import torchvision.models as tvm
    from torchvision.models import list_models
    return {family: tuple(list_models(module=module))
            for family, module in (("classification", tvm), ("segmentation", tvm.segmentation),
                                   ("video", tvm.video))}


def model_names() -> list[str]:
    """Every model the registry builds, by its own name (aliases and hf: apart)."""
    return sorted({*(name for names in torchvision_models().values() for name in names),
                   *WRITTEN_HERE, *llama_config.PRESETS})


def available_names() -> list[str]:
    return model_names() + sorted(LEGACY_ALIASES)


def listing() -> list[str]:
    """``--list-networks``: one name a line; language presets with their size."""
    presets = llama_config.PRESETS
    lines = [f"{name:<24} {llama_config.summary(presets[name])}" if name in presets
             else name for name in available_names()]
    lines.append(f"{HF_PREFIX}<model_type>{'':<12} any causal language model of "
                 f"Hugging Face transformers, built from its default config "
                 f"(--model-kwargs key=value ...)")
    return lines


def canonical(name: str, known: list[str] | None = None) -> str | None:
    """The registry's name for ``name`` (an alias resolved, case ignored), or None if unknown;
    ``hf:`` names are the transformers' to judge, later."""
    if name.startswith(HF_PREFIX):
        return name
    known = model_names() if known is None else known
    name = LEGACY_ALIASES.get(name, name)
    if name in known:
        return name
    return {known_name.lower(): known_name for known_name in known}.get(name.lower())


def language_positions(name: str, seq_len: int | None) -> tuple[str, int] | None:
    """A language model's name and positions where the flags tell them without torch:
    ``--seq-len`` for a llama preset or an ``hf:`` model (whose own limit its config judges,
    later), else the preset's length; None for any other network and for an ``hf:`` model
    without ``--seq-len``."""
    if name.startswith(HF_PREFIX):
        return None if seq_len is None else (name, seq_len)
    preset = canonical(name, list(llama_config.PRESETS))
    if preset is None:
        return None
    return preset, seq_len or llama_config.PRESETS[preset].max_seq_len


def unknown(name: str) -> UsageError:
    """The refusal of a name no model has, with the closest names."""
    close = difflib.get_close_matches(name, available_names(), n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else "see --list-networks"
    return UsageError(f"unknown network '{name}': {hint}")


def check(names: Iterable[str]) -> None:
    """Refuse the first unknown name of ``names`` (the command line's, before anything heavy
    is imported)."""
    known = model_names()
    for name in names:
        if canonical(name, known) is None:
            raise unknown(name)
