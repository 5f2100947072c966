"""Low precision through torchao: FP8 training, quantized weights, and how far they moved the
numbers from BF16.

* ``--precision fp8`` (training) swaps the model's linear layers for torchao's ``Float8Linear``
  (``convert_to_float8_training``) with the ``--fp8-recipe`` scaling (``tensorwise``: one scale
  per tensor, E4M3 forward and E5M2 gradients; ``rowwise``: a scale per row, E4M3 throughout).
  Which layers convert is :func:`fp8_layers`: plain ``nn.Linear`` layers whose both sides are
  multiples of 16 (the FP8 GEMM's alignment), except the output head (torchtitan leaves
  ``output`` in BF16 too: its error reaches the logits directly). Everything else (convolutions,
  norms, attention's softmax, the embedding) stays under BF16 autocast.
* ``--quantize`` (inference, generate) quantizes a BF16 model's linear layers as its name stands
  for in torchao's and gpt-fast's benchmarks (:mod:`microbench.settings.quantization`), each
  layer in the layout measured fastest for each phase of the run (:mod:`quant_choice`).

Every such run measures, in the same process, on the same fixed input, its distance from the
model it came from (a :class:`~microbench.measure.drift.Drift`, in the
``LowPrecision`` record a process hands up): for training, the losses of the first steps from
the same weights with and without FP8; for inference and generate, the relative error of the
logits and the share of greedy (argmax) tokens that agree. Weight bytes are counted as stored
(:func:`stored_bytes`: a quantized tensor's integer data and its scales), so MBU stays honest.

torchao is an optional dependency (``pip install ".[quant]"``); a run that needs it without it
stops with the install line (exit 4). What a device cannot run is refused before anything is
built (exit 2): see :func:`check` (what the flags alone refuse is ``settings/kinds.py``'s,
before torch is imported).

Example::

    layers = fp8_layers(model)                       # ['layers.0.attention.wq', ...]
    report = quantize_measured(model, spec.quant, phases, probe_tokens, device)
    report.drift.line()    # 'logits rel. error 0.41%; greedy tokens agree 99.2% (...)'
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING, Callable

import torch
from torch import nn

from microbench.measure.drift import Drift, LowPrecision, WeightErrors
from microbench.platform import devices, process
from microbench.platform.errors import MissingEnvironment, UsageError
from microbench.settings.quantization import FORMATS
from microbench.steps import quant_choice, quant_layout
from microbench.steps.quant_choice import Phase
from microbench.steps.quant_layers import PhaseLinear, linear_layers, through_identity

if TYPE_CHECKING:
    from microbench.settings.config import BenchConfig

INSTALL = 'pip install "torchao>=0.18" (or pip install ".[quant]")'
# Training steps the FP8 and the BF16 losses are compared over (from the same weights and input).
DRIFT_STEPS = 4
# The rows of the batch the logits are compared on (a fixed input: the run's own first rows).
PROBE_ROWS = 2
# Layers whose sides are not multiples of this cannot feed torch._scaled_mm.
FP8_ALIGNMENT = 16
# Names of output heads, which stay in BF16 (llama's output, HF's lm_head, torchvision's heads).
_HEADS = ("output", "lm_head", "head", "heads.head", "classifier", "fc")


def torchao():
    """torchao with the parts this module uses, or one line (exit 4) that says how to install
    it: not installed, or failing inside its import (an OSError loading its C++ extension)."""
    for name in ("torchao.float8", "torchao.quantization", "torchao"):
        module = process.import_optional(name, "--precision fp8 and --quantize", INSTALL)
    return module


def torchao_installed() -> bool:
    """Whether torchao can be found, without importing it: its import logs (an Enum
    registration warning) and takes seconds, which belong inside the run, where
    measure/library_log.py keeps them off the console."""
    import importlib.util
    try:
        return importlib.util.find_spec("torchao") is not None
    except (ImportError, ValueError):
        return False


def torchao_version() -> str | None:
    try:
        from importlib.metadata import version
        return version("torchao")
    except Exception:                    # noqa: BLE001 (not installed, or no metadata)
        return None


# ---------------------------------------------------------------- refusals, before anything runs

def check(config: BenchConfig, device: torch.device) -> "quant_layout.QuantPlan | None":
    """Refuse what this device or torchao cannot run: one line, before the model is built.
    ``--quantize``'s layouts are resolved here, once: the plan the run's spec carries."""
    if config.precision == "fp8":
        reason = devices.no_fp8_reason(device)
        if reason is not None:
            raise UsageError(f"--precision fp8 needs FP8 matrix units, and {reason}: use "
                             f"--precision amp-bf16 here")
    if (config.precision == "fp8" or config.quantize != "none") and not torchao_installed():
        raise MissingEnvironment(f"--precision fp8 and --quantize need torchao: {INSTALL}")
    if config.quantize == "none":
        return None
    return quant_layout.plan(config.quantize, config.quant_layout,
                             quant_layout.QuantDevice.of(device))


# ---------------------------------------------------------------- which layers run in FP8

def fp8_layers(model: nn.Module) -> list[str]:
    """The names of the layers ``--precision fp8`` converts (works on a meta-device model)."""
    return [name for name, module in model.named_modules() if _fp8_candidate(name, module)]


def _fp8_candidate(name: str, module: nn.Module) -> bool:
    # type() is, not isinstance: a Linear subclass such as MultiheadAttention's out_proj is
    # read through its weight by F.multi_head_attention_forward, which would bypass FP8.
    if type(module) is not nn.Linear:
        return False
    if module.in_features % FP8_ALIGNMENT or module.out_features % FP8_ALIGNMENT:
        return False
    return not any(name == head or name.endswith("." + head) for head in _HEADS)


def convert_fp8(model: nn.Module, recipe: str, fsdp: bool = False) -> list[str]:
    """Swap :func:`fp8_layers` for torchao's Float8Linear with ``recipe``; their names.

    Under FSDP2 with the tensorwise recipe the weights are all-gathered in FP8 (torchao's
    ``enable_fsdp_float8_all_gather``; the rowwise recipe has no FP8 all-gather)."""
    torchao()
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    config = Float8LinearConfig.from_recipe_name(recipe)
    if fsdp and recipe == "tensorwise":
        config = Float8LinearConfig(enable_fsdp_float8_all_gather=True)
    selected = set(fp8_layers(model))
    convert_to_float8_training(model, config=config,
                               module_filter_fn=lambda module, name: name in selected)
    return sorted(selected)


def fp8_all_gather(recipe: str, fsdp: bool) -> bool:
    return fsdp and recipe == "tensorwise"


def fp8_compile_note(sharded: bool) -> str:
    """How long an FP8 compile takes and why, said before it starts (issue 58: a one-GPU
    llama3_3b FP8 compile was still running after 240 s where BF16's took about 80 s, on a
    host running four compiles). Not measured here: the cause is the graph's size."""
    if sharded:
        return ("FP8 compiles block by block under --parallel fsdp (FSDP's hooks end each "
                "block's graph, and one block's graph serves every block): its compile is a "
                "fraction of a whole-model FP8 compile")
    return ("FP8 compile takes longer than BF16's: torch.compile traces the whole model as one "
            "graph, and each FP8 linear layer adds torchao's amax, scale and cast operations "
            "around its three GEMMs, traced through torchao's tensor subclass; expect several "
            "times BF16's compile (llama3_3b on one H200: over 240 s against about 80 s, on a "
            "host running four compiles)")


def fp8_compile_settings(recipe: str) -> dict:
    """Inductor settings a compiled FP8 run of ``recipe`` needs on its own graphs: the rowwise
    recipe emulates eager's precision casts, as torchtitan sets for it (its float8 converter,
    "short-term solution for pytorch/pytorch#150859": under activation checkpointing the
    recomputed intermediates of a compiled rowwise step rounded differently from the forward's,
    and training went to NaN)."""
    return {"emulate_precision_casts": True} if recipe == "rowwise" else {}


def post_step_hooks(model: nn.Module, fp8: bool) -> tuple[Callable[[], None], ...]:
    """What the run's precision recipe must do after each optimizer step (torchtitan's model
    converters: ``convert(model)``, then ``post_optimizer_hook(model)`` registered once on the
    optimizers for every parallelism); empty where it needs nothing.

    FP8 tensorwise weights all-gathered in FP8 under FSDP2 (:func:`convert_fp8`'s
    ``enable_fsdp_float8_all_gather``) take their scales from torchao's
    ``precompute_float8_dynamic_scale_for_fsdp``: one amax all-reduce for every weight at once,
    after the optimizer changed them. Without it each weight's all-gather, forward and backward,
    starts with its own amax reduction and all-reduce (torchao's ``fsdp_pre_all_gather``), a
    small collective per weight that the next all-gather waits for. Which layers gather in FP8
    is read from the model itself, so no strategy has to say it."""
    if not fp8:
        return ()
    from torchao.float8.float8_linear import Float8Linear
    if not any(isinstance(module, Float8Linear) and module.config.enable_fsdp_float8_all_gather
               for module in model.modules()):
        return ()
    import torchao.float8
    precompute = torchao.float8.precompute_float8_dynamic_scale_for_fsdp
    return (lambda: precompute(model),)


@contextlib.contextmanager
def linear_rows(model: nn.Module, names: list[str]):
    """Count the rows each of the linear layers ``names`` multiplies while the block runs (a
    forward hook each): yields a dict name -> rows, filled as the model runs."""
    rows: dict[str, int] = {}
    modules = dict(model.named_modules())
    handles = []
    for name in names:
        def hook(module: nn.Linear, args: tuple[torch.Tensor, ...], output: torch.Tensor,
                 name: str = name):
            rows[name] = rows.get(name, 0) + args[0].numel() // module.in_features
        handles.append(modules[name].register_forward_hook(hook))
    try:
        yield rows
    finally:
        for handle in handles:
            handle.remove()


def linear_flops(model: nn.Module, rows: dict[str, int], training: bool) -> int:
    """The FLOPs of the linear layers in ``rows``: 2 x rows x in x out for the forward GEMM,
    three GEMMs of that size in training (forward, input gradient, weight gradient)."""
    modules = dict(model.named_modules())
    forward = sum(2 * count * modules[name].in_features * modules[name].out_features
                  for name, count in rows.items())
    return forward * (3 if training else 1)


# ---------------------------------------------------------------- quantized weights

def stored_bytes(tensor: torch.Tensor) -> int:
    """Bytes a tensor occupies as stored: a tensor subclass (torchao's quantized weights, a
    Float8 tensor) is the sum of its inner tensors (integer data, scales, zero points)."""
    flatten = getattr(tensor, "__tensor_flatten__", None)
    if flatten is None or type(tensor) in (torch.Tensor, nn.Parameter):
        return tensor.numel() * tensor.element_size()
    names, _ = flatten()
    return sum(stored_bytes(getattr(tensor, name)) for name in names
               if isinstance(getattr(tensor, name), torch.Tensor))


def weight_bytes(model: nn.Module, rows: int | None = None) -> int:
    """The bytes of ``model``'s parameters as stored, tied weights once; ``rows``: only those an
    input of that many rows reads (a layer with a kernel per phase: its phase's copy)."""
    other_phase = set()
    if rows is not None:
        for module in model.modules():
            if isinstance(module, PhaseLinear):
                kept = module.phase_layer(rows)
                other_phase |= {id(p) for layer in (module.decode, module.prompt)
                                if layer is not kept for p in layer.parameters()}
    unique = {id(p): p for p in model.parameters() if id(p) not in other_phase}.values()
    return sum(stored_bytes(p) for p in unique)


def linear_count(model: nn.Module) -> int:
    return sum(1 for _ in linear_layers(model, rows=0))


def _logits(model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        output = model(inputs)
    output = output[0] if isinstance(output, (tuple, list)) else output
    output = getattr(output, "logits", output)
    return output.float().clone()


def compare_logits(output: torch.Tensor, reference: torch.Tensor, name: str) -> Drift:
    """The relative error of ``output`` against ``reference`` and their argmax agreement over
    the last dimension (the vocabulary, or the classes)."""
    agree = (output.argmax(-1) == reference.argmax(-1)).float()
    return Drift("logits", name, relative_error=relative_error(output, reference),
                 top1_agreement=float(agree.mean()), positions=agree.numel())


def quantize_measured(model: nn.Module, quant: quant_layout.QuantPlan, phases: tuple[Phase, ...],
                      probe: torch.Tensor, device: torch.device, reference: str = "BF16",
                      timer: Callable[[Callable[[], object]], float] | None = None,
                      compile_options: Callable[[str], dict | None] | None = None) -> LowPrecision:
    """Quantize ``model``'s linear layers in place as ``quant`` plans, each layer in each of
    ``phases`` in the layout :func:`quant_choice.choose` measured fastest for its shape and rows
    (a :class:`PhaseLinear` where the phases' layouts differ), with how far it moved the
    numbers: the logits on ``probe`` before and after, each layer's weight as dequantized
    against its BF16 weight, and one layer's output on the probe's own activations. What runs
    in each phase is read back from the layers (:func:`quant_layout.kernels`)."""
    torchao()
    before_bytes = weight_bytes(model)
    watched = _watched_layer(model)
    with _layer_io(model, watched) as layer_io:
        before = _logits(model, probe)
    choice = quant_choice.choose(quant, model, phases, device, timer,
                                 compile_options=compile_options)
    # One layer at a time, the BF16 layer let go as soon as it is replaced: an 8B model's
    # 16 GB of BF16 weights are not kept beside their quantized copies.
    errors = [_quantize_layer(model, name, quant, choice)
              for name in [name for name, _ in linear_layers(model)]]
    drift = compare_logits(_logits(model, probe), before, reference)
    layer_error = _layer_error(model, watched, layer_io)
    layouts = {quant_layout.layout_of(layer) for _, layer in linear_layers(model)
               if quant_layout.describe_layer(layer)[2] != "not quantized"}
    return LowPrecision(drift, quantize=quant.quantize,
                        quantize_description=FORMATS[quant.quantize].description,
                        weight_bytes=weight_bytes(model), weight_bytes_before=before_bytes,
                        torchao_version=torchao_version(),
                        quant_layout=layouts.pop() if len(layouts) == 1 else "per phase",
                        quant_kernels=tuple(k.to_dict() for k in quant_layout.kernels(model)),
                        quant_phases=tuple(_phase_record(model, phase) for phase in phases),
                        quant_choice=choice.to_dict(), quant_choice_lines=tuple(choice.lines()),
                        weight_errors=WeightErrors.of([e for e in errors if e is not None],
                                                      layer_error, watched),
                        notes=tuple(filter(None, (*quant.notes, *choice.failures,
                                                  *(quant_layout.fake_note(layout)
                                                    for layout in quant.layouts)))))


def _quantize_layer(model: nn.Module, name: str, quant: quant_layout.QuantPlan,
                    choice: "quant_choice.Choice") -> float | None:
    """Replace layer ``name`` (a linear layer) by its quantized form: one layer in the one
    layout its phases chose, or a PhaseLinear of the decode step's and the prompt's; the
    largest weight error of its copies (None where a layout leaves the layer in BF16)."""
    layer = model.get_submodule(name)
    if not isinstance(layer, nn.Linear):
        raise TypeError(f"{name} is not a linear layer")
    chosen = {phase.name: choice.layout(phase.name, name) for phase in choice.phases
              if name in phase.rows}
    layouts = list(dict.fromkeys(chosen.values())) or [quant.layouts[0]]
    built = {layout: quant_layout.build(layer, quant.quantize, layout, quant.facts)
             for layout in layouts}
    errors = [weight_error(layer.weight, copy) for copy in built.values()
              if quant_layout.describe_layer(copy)[2] != "not quantized"]
    if len(built) == 1:
        replacement = next(iter(built.values()))
    else:
        decode = next(phase for phase in choice.phases if phase.name == "decode")
        prompt = next(layout for phase, layout in chosen.items() if phase != "decode")
        replacement = PhaseLinear(built[chosen["decode"]], built[prompt], decode.rows[name])
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, replacement)
    return max(errors) if errors else None


def _phase_record(model: nn.Module, phase: Phase) -> dict:
    """What runs in ``phase``: its rows and the kernels of its layers, read from the model."""
    rows = phase.typical_rows()
    return {"phase": phase.name, "rows": rows,
            "kernels": [k.to_dict() for k in quant_layout.kernels(model, rows)]}


def decode_phase(batch: int, model: nn.Module) -> Phase:
    """A decode step: every linear layer multiplies one row per sequence."""
    return Phase("decode", {name: batch for name, _ in linear_layers(model)})


def with_compile_record(report: LowPrecision, config: BenchConfig, device: torch.device,
                        phases: dict[str, dict]) -> LowPrecision:
    """``report`` with what a compiled quantized run applied to its graphs (each phase's
    inductor settings, :func:`quant_layout.compile_extras` among them, and whether inductor's
    CPU int8 lowering was kept out), and a note where its compile options trade compile time
    for speed; as it was uncompiled."""
    if not config.compile:
        return report
    lowering = (quant_layout.keep_out_cpu_int8_lowering(devices.is_gpu(device))
                if config.quantize == "int8wo" else None)
    return dataclasses.replace(
        report, compile_settings=quant_layout.compile_settings(phases, lowering),
        compile_note=quant_layout.compile_note(config.compile_options))


def _watched_layer(model: nn.Module) -> str | None:
    """The layer whose output error is measured on the probe's activations: the first linear
    layer that is not the output head (a layer of the first block), or the head alone."""
    names = [name for name, _ in linear_layers(model)]
    inner = [name for name in names if not any(name == head or name.endswith("." + head)
                                               for head in _HEADS)]
    chosen = inner or names
    return chosen[0] if chosen else None


@contextlib.contextmanager
def _layer_io(model: nn.Module, name: str | None):
    """While the block runs, the input and output of layer ``name``'s first call (a dict)."""
    seen: dict[str, torch.Tensor] = {}
    if name is None:
        yield seen
        return

    def hook(module: nn.Module, args: tuple[torch.Tensor, ...], output: torch.Tensor):
        if "input" not in seen:
            seen["input"], seen["output"] = args[0].detach().clone(), output.detach().clone()

    handle = dict(model.named_modules())[name].register_forward_hook(hook)
    try:
        yield seen
    finally:
        handle.remove()


def _layer_error(model: nn.Module, name: str | None, seen: dict) -> float | None:
    """The relative error of layer ``name``'s output, quantized, on the input it had in BF16."""
    if name is None or "input" not in seen:
        return None
    with torch.inference_mode():
        output = dict(model.named_modules())[name](seen["input"])
    return relative_error(output.float(), seen["output"].float())


def relative_error(value: torch.Tensor, reference: torch.Tensor) -> float:
    """||value - reference|| / ||reference|| (Frobenius norms, in FP32)."""
    return float(torch.linalg.vector_norm(value.float() - reference.float())
                 / torch.linalg.vector_norm(reference.float()).clamp_min(1e-30))


def dequantized(weight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A quantized weight back in ``dtype``: its own ``dequantize()`` where it has one (int8,
    float8), else the identity pushed through its kernel (torchao's int4 tensors have none:
    :func:`~microbench.steps.quant_layers.through_identity`)."""
    if type(weight) in (torch.Tensor, nn.Parameter):
        return weight.detach().to(dtype)
    # Every tensor has torch's dequantize (for torch's own quantized tensors); a subclass that
    # can dequantize itself overrides it.
    if type(weight).dequantize is not torch.Tensor.dequantize:
        return weight.dequantize().to(dtype)
    return through_identity(lambda eye: torch.nn.functional.linear(eye, weight),
                            weight.shape[1], dtype, weight.device)


def weight_error(original: torch.Tensor, layer: nn.Linear) -> float:
    """The relative reconstruction error of one quantized layer's weight: the layer's own
    dequantize where it has one (this tool's layers), else its weight's."""
    own = getattr(layer, "dequantize", None)
    restored = own().to(original.dtype) if callable(own) else dequantized(layer.weight,
                                                                          original.dtype)
    return relative_error(restored, original)


def probe_rows(inputs: torch.Tensor) -> torch.Tensor:
    """The fixed input the logits are compared on: the batch's first rows."""
    return inputs[:PROBE_ROWS]


def training_losses(make_step: Callable[[], Callable[[], torch.Tensor]], steps: int,
                    seed: int) -> tuple[float, ...]:
    """The losses of ``steps`` steps of a fresh step function (its own optimizer)."""
    torch.manual_seed(seed)
    step = make_step()
    return tuple(float(step()) for _ in range(steps))


def fp8_measured(model: nn.Module, recipe: str, device: torch.device,
                 make_step: Callable[[], Callable[[], torch.Tensor]] | None, seed: int,
                 fp8_flops: int | None, total_flops: int | None,
                 fsdp: bool = False) -> LowPrecision:
    """Convert ``model`` to FP8 training, with the first steps' losses from the same weights
    before and after the conversion (``make_step()``: a fresh training step with its own
    optimizer; the weights are restored after each, so the timed run starts from them)."""
    linears = linear_count(model)
    saved = None
    reference_losses: tuple[float, ...] = ()
    if make_step is not None:
        # A host copy: a model that fills the device leaves no room for a second one there.
        saved = {key: value.detach().to("cpu", copy=True)
                 for key, value in model.state_dict().items()}
        reference_losses = training_losses(make_step, DRIFT_STEPS, seed)
        _restore(model, saved)
    names = convert_fp8(model, recipe, fsdp)
    if make_step is not None and saved is not None:
        losses = training_losses(make_step, DRIFT_STEPS, seed)
        _restore(model, saved)
        drift = Drift("loss", "AMP-BF16", losses=losses, reference_losses=reference_losses)
    else:
        drift = Drift("loss", "AMP-BF16", note="not measured under --parallel fsdp (the model "
                                               "is sharded before it has weights)")
    formats = devices.fp8_formats(device)
    share = fp8_flops / total_flops if fp8_flops is not None and total_flops else None
    return LowPrecision(drift, fp8_recipe=recipe, fp8_format=formats[0] if formats else None,
                        fp8_layers=tuple(names), linear_layers=linears, fp8_flops_share=share,
                        fp8_all_gather=fp8_all_gather(recipe, fsdp),
                        torchao_version=torchao_version())


def _restore(model: nn.Module, saved: dict) -> None:
    with torch.no_grad(), contextlib.suppress(AttributeError):
        model.zero_grad(set_to_none=True)
    model.load_state_dict(saved)
