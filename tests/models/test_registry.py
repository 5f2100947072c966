"""The model registry: names, aliases, inputs per family, and one real step per model."""
import math

import pytest
import torch

from microbench.models import registry as models
from microbench.steps import workload
from microbench.settings.config import BenchConfig
from microbench.platform.errors import UsageError
from microbench.plan.spec import resolve

CPU = torch.device("cpu")


def built(network="resnet18", image_size=32, batch_size=2, mode="training", **settings):
    """The workload the benchmark would build for these settings, on the CPU."""
    spec = resolve(BenchConfig(network=network, image_size=image_size, batch_size=batch_size,
                               mode=mode, device="cpu", write_files=False, **settings))
    return spec.scenario.build(spec, wrap=None, count_flops=True)

# One or two of each family and input quirk; `-m all_models` runs the whole registry.
FAST_SUBSET = ["resnet18", "SqueezeNet1.1", "shufflenet", "xception", "googlenet", "inception_v3",
               "vit_b_16", "lraspp_mobilenet_v3_large", "fcn_resnet50", "r3d_18"]


def test_registry_covers_torchvision_classification_segmentation_and_video():
    import torchvision.models as tvm
    names = set(models.registry())
    for module in (tvm, tvm.segmentation, tvm.video):
        assert set(tvm.list_models(module=module)) <= names
    assert {"shufflenet", "xception"} <= names


@pytest.mark.parametrize("alias, name", [
    ("SqueezeNet", "squeezenet1_0"), ("SqueezeNet1.1", "squeezenet1_1"),
    ("resnext50", "resnext50_32x4d"), ("resnext101", "resnext101_32x8d"),
    ("shufflenet_v2_x05", "shufflenet_v2_x0_5"), ("shufflenet_v2_x20", "shufflenet_v2_x2_0"),
    ("inception", "inception_v3"), ("ResNet50", "resnet50")])
def test_legacy_names_resolve(alias, name):
    assert models.resolve(alias).name == name


def test_unknown_name_suggests_the_closest():
    with pytest.raises(UsageError, match="did you mean resnet50"):
        models.resolve("resnet05")


def test_the_names_known_without_torchvision_are_the_registrys(monkeypatch):
    """--list-networks and the refusal of a typo read models/names.py, not torchvision: its
    table is the installed torchvision's (regenerate it when the release changes), and a
    release other than the table's is asked instead."""
    import torchvision.models as tvm
    from microbench.models import names
    installed = {family: tuple(tvm.list_models(module=module)) for family, module in
                 (("classification", tvm), ("segmentation", tvm.segmentation),
                  ("video", tvm.video))}
    if names.installed_torchvision_release() == names.TORCHVISION_RELEASE:
        assert names.TORCHVISION_MODELS == installed
    assert names.model_names() == sorted(models.registry())
    monkeypatch.setattr(names, "TORCHVISION_RELEASE", "0.1")       # another release: asked
    assert names.torchvision_models() == installed
    listed = names.listing()
    assert "resnet50" in listed and any(line.startswith("llama_tiny ") and "M parameters"
                                        in line for line in listed)
    assert listed[-1].startswith("hf:<model_type>")


def test_an_unknown_name_is_refused_on_the_command_line_as_the_registry_does():
    from microbench.models import names
    names.check(["resnet50", "SqueezeNet", "RESNET18", "hf:gpt2", "llama_tiny"])
    with pytest.raises(UsageError) as from_names:
        names.check(["resnet50", "resnet81"])
    with pytest.raises(UsageError) as from_registry:
        models.lookup("resnet81")
    assert str(from_names.value) == str(from_registry.value)
    assert "did you mean resnet18" in str(from_names.value)


def test_inputs_and_targets_per_family():
    seg, video, inception = (models.resolve(n) for n in ("fcn_resnet50", "r3d_18", "inception_v3"))
    assert inception.image_size == 299
    seg64 = models.resolve("fcn_resnet50", models.ModelOptions(image_size=64))
    assert seg.num_classes == 21 and seg64.target_shape(2) == (2, 64, 64)
    assert video.input_shape(2) == (2, 3, 16, 112, 112) and video.target_shape(2) == (2,)
    inputs, target = models.resolve("fcn_resnet50",
                                    models.ModelOptions(image_size=32)).make_batch(2, CPU)
    assert int(target.max()) < 21 and inputs.shape == (2, 3, 32, 32)


# A language preset steps on the CPU at 16 tokens and a 512-word vocabulary when that leaves it
# this small; the larger ones (llama_1b, llama3_*) are checked on the meta device instead, in
# tests/models/test_archs_llama3.py (shapes, published parameter counts), without allocating.
LANGUAGE_STEP_LIMIT = 300_000_000


def one_training_step(name: str) -> float:
    spec = models.resolve(name)
    if spec.family == "language":
        small = models.resolve(name, models.ModelOptions(seq_len=16, vocab_size=512))
        if small.parameter_count() > LANGUAGE_STEP_LIMIT:
            pytest.skip(f"{name} has {small.parameter_count():,} parameters even at a "
                        f"512-word vocabulary: too large for a CPU step here")
        return float(built(name, image_size=None, seq_len=16, vocab_size=512,
                           batch_size=1).step())
    size = max(spec.smallest_image_size, 32)
    return float(built(name, image_size=size).step())


@pytest.mark.parametrize("name", FAST_SUBSET)
def test_fast_subset_trains_one_step(name):
    assert math.isfinite(one_training_step(name))


@pytest.mark.all_models
@pytest.mark.parametrize("name", sorted(models.registry()))
def test_every_model_trains_one_step(name):
    assert math.isfinite(one_training_step(name))


def test_training_step_changes_weights_and_inference_does_not():
    train = built()
    before = train.model.fc.weight.detach().clone()
    train.step()
    assert not torch.equal(before, train.model.fc.weight)
    infer = built(mode="inference")
    before = infer.model.fc.weight.detach().clone()
    assert infer.step() is None and not infer.model.training
    assert torch.equal(before, infer.model.fc.weight)


def test_opt_step_accumulates_before_stepping():
    work = built(opt_step=2)
    before = work.model.fc.weight.detach().clone()
    work.step()
    assert torch.equal(before, work.model.fc.weight), "no optimizer step after 1 of 2"
    work.step()
    assert not torch.equal(before, work.model.fc.weight)


def test_nhwc_puts_model_and_input_in_channels_last():
    spec = resolve(BenchConfig(network="resnet18", image_size=32, batch_size=2, nhwc=True,
                               mode="inference", device="cpu", write_files=False))
    work = workload.build(spec)
    assert work.inputs.is_contiguous(memory_format=torch.channels_last)
    assert work.model.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    assert work.model.conv1.weight.is_contiguous(memory_format=torch.channels_last)
