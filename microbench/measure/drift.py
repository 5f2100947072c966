"""What ``--precision fp8`` or ``--quantize`` did to one run's model, and how far it moved the
numbers: value types a process measures (:mod:`microbench.steps.low_precision` makes them) and every
layer above reads (the summary, the console, the result document).

Example::

    drift = Drift("logits", "BF16", relative_error=0.004, top1_agreement=0.99, positions=256)
    LowPrecision(drift).rows()     # [('Accuracy vs BF16', 'logits rel. error 0.40%; ...')]
"""
from __future__ import annotations

from typing import Iterable

from dataclasses import dataclass, field

from microbench.platform import units


@dataclass(frozen=True)
class Drift:
    """The distance of a reduced-precision run from its BF16 model, measured in this process on
    one fixed input. ``kind`` is "logits" (inference, generate) or "loss" (training)."""

    kind: str
    reference: str                                 # what it is compared with, e.g. "BF16"
    relative_error: float | None = None            # ||logits - ref|| / ||ref||
    top1_agreement: float | None = None            # share of positions whose argmax agrees
    positions: int = 0                             # positions compared
    losses: tuple[float, ...] = ()                 # training: the first steps' losses
    reference_losses: tuple[float, ...] = ()
    note: str | None = None                        # why nothing was measured

    @property
    def loss_difference(self) -> float | None:
        """The largest relative difference between the two runs' losses, step by step."""
        pairs = list(zip(self.losses, self.reference_losses))
        if not pairs:
            return None
        return max(abs(a - b) / abs(b) if b else abs(a - b) for a, b in pairs)

    def line(self) -> str:
        if self.note is not None:
            return self.note
        if self.kind == "loss":
            mine = ", ".join(f"{value:.4f}" for value in self.losses)
            ref = ", ".join(f"{value:.4f}" for value in self.reference_losses)
            return (f"loss of the first {len(self.losses)} steps {mine} vs {self.reference} "
                    f"{ref} (same seed, weights and batch; largest difference "
                    f"{self.loss_difference:.2%})")
        # The tool's models have random weights: nearly flat logits, whose argmax a small
        # error flips, so the agreement says how far the numbers moved, not how well a
        # trained model would answer (docs/fp8-and-quantization.md).
        return (f"logits rel. error {self.relative_error:.2%}; greedy tokens agree "
                f"{self.top1_agreement:.1%} ({self.positions:,} positions, vs {self.reference} "
                f"on the same input; random weights: how far the numbers moved, not a quality "
                f"score)")

    def figure(self) -> float | None:
        """The one number a table or a plot shows: the logits' relative error, or the largest
        relative difference between the losses (0 is no change)."""
        return self.relative_error if self.kind == "logits" else self.loss_difference

    def to_dict(self) -> dict:
        return {"kind": self.kind, "reference": self.reference,
                "relative_error": self.relative_error, "top1_agreement": self.top1_agreement,
                "positions": self.positions, "losses": list(self.losses),
                "reference_losses": list(self.reference_losses),
                "max_loss_difference": self.loss_difference, "note": self.note,
                "basis": ("measured in this process on the run's first input rows, against the "
                          "same model before conversion")}


@dataclass(frozen=True)
class WeightErrors:
    """How far quantization moved the weights themselves, which a random model's logits and
    greedy tokens cannot show: each quantized layer's weight, dequantized, against its BF16
    weight (relative error, largest and mean over the layers), and one layer's output on the
    run's own activations against its BF16 output."""

    layers: int
    max_error: float | None
    mean_error: float | None
    layer: str | None = None                       # the layer whose output is compared
    layer_output_error: float | None = None

    @classmethod
    def of(cls, errors: list[float], layer_error: float | None,
           layer: str | None) -> "WeightErrors":
        return cls(len(errors), max(errors) if errors else None,
                   sum(errors) / len(errors) if errors else None, layer, layer_error)

    def line(self) -> str:
        if not self.layers:
            return "no layer quantized"
        text = (f"weights rel. error max {self.max_error:.2%}, mean {self.mean_error:.2%} over "
                f"{self.layers} layers")
        if self.layer_output_error is not None:
            text += f"; {self.layer}'s output on this input {self.layer_output_error:.2%}"
        return text

    def to_dict(self) -> dict:
        return {"layers": self.layers, "max_relative_error": self.max_error,
                "mean_relative_error": self.mean_error, "layer": self.layer,
                "layer_output_relative_error": self.layer_output_error,
                "basis": ("each quantized weight dequantized against its BF16 weight; the "
                          "layer's output on the activations it had in BF16 on the run's "
                          "first input rows")}


def phase_label(name: str, rows: int) -> str:
    """'decode (1 row)', 'prefill (128 rows)': a phase of a run and the rows it multiplies."""
    return f"{name} ({rows} row{'s' * (rows != 1)})"


def _kernels_text(kernels: Iterable[dict]) -> str:
    return "; ".join(f"{k['tensor']} ({k['packing']}: {k['kernel']}) on {k['layers']} layers"
                     for k in kernels)


@dataclass(frozen=True)
class LowPrecision:
    """What ``--precision fp8`` or ``--quantize`` did to one run's model, and its drift."""

    drift: Drift
    fp8_recipe: str | None = None
    fp8_format: str | None = None                  # the device's E4M3 encoding
    fp8_layers: tuple[str, ...] = ()
    linear_layers: int = 0                         # every nn.Linear of the model
    fp8_flops_share: float | None = None           # of one iteration's counted FLOPs
    fp8_all_gather: bool = False
    quantize: str | None = None
    quantize_description: str | None = None        # what --quantize NAME runs, in words
    weight_bytes: int | None = None                # as stored, after quantization
    weight_bytes_before: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    torchao_version: str | None = None
    quant_layout: str | None = None                # the layout that ran, or "per phase"
    # What ran, read from the weights after quantize_: {tensor, packing, kernel, layers} each.
    quant_kernels: tuple[dict, ...] = ()
    # Each phase's rows and kernels ({phase, rows, kernels}), read from the layers.
    quant_phases: tuple[dict, ...] = ()
    # How the layouts were chosen (microbench.steps.quant_choice.Choice.to_dict) and its lines.
    quant_choice: dict | None = None
    quant_choice_lines: tuple[str, ...] = ()
    weight_errors: WeightErrors | None = None
    # The quantized run's compile: the inductor settings applied, and a trade of compile time
    # for speed where the options asked for one (microbench.steps.quant_layout).
    compile_settings: dict | None = None
    compile_note: str | None = None

    def kernel_text(self) -> str:
        """'Int8Tensor (rowwise: ...) on 112 layers; Tensor (bfloat16: not quantized) on 1'."""
        return _kernels_text(self.quant_kernels)

    def rows(self) -> list[tuple[str, str]]:
        rows = []
        if self.fp8_recipe is not None:
            share = ("unknown share" if self.fp8_flops_share is None
                     else f"{self.fp8_flops_share:.1%} of the counted FLOPs")
            gather = "; FP8 all-gather under FSDP" if self.fp8_all_gather else ""
            rows.append(("FP8 layers", f"{len(self.fp8_layers)} of {self.linear_layers} linear "
                                       f"layers ({share}), {self.fp8_recipe} scaling, "
                                       f"{self.fp8_format}{gather}; the rest in BF16"))
        if (self.quantize is not None and self.weight_bytes is not None
                and self.weight_bytes_before is not None):  # both measured where it quantized
            rows.append(("Quantized", f"{self.quantize}: {self.quantize_description}; weights "
                                      f"{units.megabytes(self.weight_bytes / 1e6)} as stored "
                                      f"(BF16: {units.megabytes(self.weight_bytes_before / 1e6)})"))
        kernels_of = [(phase_label(phase["phase"], phase["rows"]),
                       _kernels_text(phase["kernels"])) for phase in self.quant_phases]
        if len({text for _, text in kernels_of}) == 1:      # every phase runs the same kernels
            alike = " and ".join(label for label, _ in kernels_of)
            rows.append(("Quantized kernels", f"layout {self.quant_layout}: "
                                              f"{kernels_of[0][1]} ({alike} alike)"))
        else:
            rows += [(f"Quantized {label}", text) for label, text in kernels_of]
        if not self.quant_phases and self.quant_kernels:
            rows.append(("Quantized kernels", f"layout {self.quant_layout}: "
                                              f"{self.kernel_text()}"))
        if self.quant_choice is not None:
            measured = any(row["ms"] for row in self.quant_choice["products"].values())
            rows.append(("Quantized layouts", ("auto, " if measured else "")
                         + self.quant_choice["basis"]))
            rows += [("Quantized choice", line) for line in self.quant_choice_lines
                     if measured]
        if self.compile_settings is not None:
            settings = "; ".join(
                f"{phase}: " + ", ".join(f"{key}={value}" for key, value in options.items())
                for phase, options in self.compile_settings.get("phases", {}).items())
            others = ", ".join(f"{key}={value}" for key, value in self.compile_settings.items()
                               if key != "phases")
            rows.append(("Quantized compile", f"{settings}; {others} (torchao's recommended "
                                              f"inductor settings without the exhaustive "
                                              f"search, on this run's graphs only; "
                                              f"coordinate-descent tuning for the one-row "
                                              f"decode step alone)"
                                              + (f"; {self.compile_note}" if self.compile_note
                                                 else "")))
        rows.append((f"Accuracy vs {self.drift.reference}", self.drift.line()))
        if self.weight_errors is not None:
            rows.append(("Weight error", self.weight_errors.line()))
        rows += [("Note", note) for note in self.notes]
        return rows

    def to_dict(self) -> dict:
        return {"fp8_recipe": self.fp8_recipe, "fp8_format": self.fp8_format,
                "fp8_layers": list(self.fp8_layers), "linear_layers": self.linear_layers,
                "fp8_flops_share": self.fp8_flops_share, "fp8_all_gather": self.fp8_all_gather,
                "quantize": self.quantize, "weight_bytes": self.weight_bytes,
                "weight_bytes_before": self.weight_bytes_before,
                "torchao_version": self.torchao_version, "notes": list(self.notes),
                "quant_layout": self.quant_layout,
                "quant_kernels": [dict(kernel) for kernel in self.quant_kernels],
                "quant_phases": [dict(phase) for phase in self.quant_phases],
                "quant_choice": self.quant_choice,
                "weight_error": (self.weight_errors.to_dict() if self.weight_errors is not None
                                 else None),
                "compile_settings": self.compile_settings, "compile_note": self.compile_note}
