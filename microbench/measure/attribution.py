"""Where a decode step's time goes: a short profiled pass of a few decode steps, outside the
timed region, cut into kernel time, idle gaps and classes of kernels.

The pass runs ``steps`` decode steps back to back under torch.profiler (no host synchronisation
between them, as in the timed loop) and keeps what the device ran: every kernel, copy and fill
on a GPU, every top-level operator on the CPU. Over the window from the first one's start to the
last one's end, *busy* is the union of their intervals and a *gap* is time inside the window
that nothing ran, so busy + gaps is the window exactly; per step, each is the window's figure
over ``steps``. Classes (matrix products, attention, elementwise and norms, sampling, copies)
are sums of durations by kernel name, per step. Nothing here is an estimate except the
roofline, which says so: the bytes a step must read over the device's peak bandwidth.

Example::

    profile = attribution.profile_steps(work.decode, steps=16, device=device)
    found = attribution.attribute(profile, measured_step_ms=1.64, roofline_ms=0.66)
    print(found.line())
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable

if TYPE_CHECKING:
    import torch
    from torch.autograd.profiler_util import FunctionEvent

from microbench.platform import units

CLASSES = ("matmul", "attention", "elementwise+norms", "sampling", "copies", "compiled")
TOP_KERNELS = 10

# Names by class, checked in this order on the lower-cased name; a fused kernel takes the class
# of its heaviest part (a matrix product fused with a norm is a matrix product). Inductor names
# its kernels after the aten operators they hold (triton_red_fused_mm_..., triton_per_fused_
# _softmax_...); library kernels carry their library's words (sm90_xmma_gemm, cutlass, gemv,
# fmha, flash, cudnn).
_ATTENTION = re.compile(r"attention|flash|fmha|sdpa|softmax|_efficient_|cudnn.*(attn|mha)")
_MATMUL = re.compile(r"gemm|gemv|nvjet|cutlass|xmma|cublas|matmul|(^|[_:])b?mm(_|$)|addmm|linear|splitk")
_SAMPLING = re.compile(r"argmax|argmin|topk|sort|multinomial|(^|[_:])max(_|$)")
# A compiled region on the CPU: inductor's C++ kernels run inside it unseen by the profiler.
_COMPILED = re.compile(r"compiled")
_COPIES = re.compile(r"memcpy|memset|copy_|(^|_)copy(_|$)|index_put|index_copy|scatter|cat(_|$)")


def classify(name: str) -> str:
    """The class of one kernel or operator, by its name."""
    lowered = name.lower().replace("_to_copy", "")     # a dtype cast, not a copy
    for label, pattern in (("compiled", _COMPILED), ("attention", _ATTENTION), ("matmul", _MATMUL),
                           ("sampling", _SAMPLING), ("copies", _COPIES)):
        if pattern.search(lowered):
            return label
    return "elementwise+norms"


@dataclass(frozen=True)
class Activity:
    """One kernel (GPU) or operator (CPU) that ran during the profiled steps."""

    name: str
    start_us: float
    duration_us: float

    @property
    def end_us(self) -> float:
        return self.start_us + self.duration_us


@dataclass(frozen=True)
class Profile:
    """What the profiled pass saw: its activities, how many steps, its own wall time."""

    activities: tuple[Activity, ...]
    steps: int
    unit: str                   # "kernel" (a GPU) or "operator" (the CPU)
    pass_s: float               # wall time of the profiled pass, profiler included


def busy_us(activities: Iterable[Activity]) -> float:
    """The length of the union of the activities' intervals."""
    total, end = 0.0, None
    for item in sorted(activities, key=lambda a: a.start_us):
        if end is None or item.start_us >= end:
            total += item.duration_us
            end = item.end_us
        elif item.end_us > end:
            total += item.end_us - end
            end = item.end_us
    return total


@dataclass(frozen=True)
class Attribution:
    """One decode step, as the profiled pass saw it (all times per step, in ms)."""

    unit: str
    steps: int
    step_ms: float                      # the profiled window over the steps
    busy_ms: float                      # time something ran (union of intervals)
    gap_ms: float                       # time nothing ran, inside the window
    per_step: float                     # kernels (operators) per step
    classes: dict[str, dict] = field(default_factory=dict)   # class: ms, share, count
    top: list[dict] = field(default_factory=list)            # heaviest names
    pass_s: float = 0.0
    measured_step_ms: float | None = None     # the timed decode steps' mean
    roofline_ms: float | None = None          # bytes a step reads / peak bandwidth
    roofline_basis: str = ""

    @property
    def coverage(self) -> float | None:
        """Busy + gaps of the profiled step over the measured one (1.0: all accounted for).
        Above 1 by the profiler's own cost: on an H100 it stretched a CUDA-graph decode step
        by 0.35-0.5 us per kernel (issue 34: 1.07 at 318 kernels, 1.09 at 251)."""
        return self.step_ms / self.measured_step_ms if self.measured_step_ms else None

    @property
    def implied_gap_ms(self) -> float | None:
        """The measured (unprofiled) step minus the kernel time: the gaps without the
        profiler's stretch, derived, not seen (kernel durations are taken as they were)."""
        if not self.measured_step_ms:
            return None
        return max(self.measured_step_ms - self.busy_ms, 0.0)

    def line(self) -> str:
        """One line short enough to read (about 90 characters): the step the figures are
        cut from (the timed mean where there is one), kernels and gaps, the roofline and the
        heaviest class. The profiled step, coverage and the heaviest kernels are in the JSON.
        Where the profiled kernels alone outlast the measured step (the profiler stretches each
        kernel a little), it says so instead of a share above 100% and no gaps."""
        ms = units.duration_ms
        noun = "kernels" if self.unit == "kernel" else "operators"
        step, basis = ((self.measured_step_ms, "measured") if self.measured_step_ms
                       else (self.step_ms, "profiled"))
        if self.busy_ms > step:
            parts = [f"{basis} {ms(step)}, but {noun} {ms(self.busy_ms)} profiled: gaps unknown"]
        else:
            parts = [f"{basis} {ms(step)}: {noun} {self.busy_ms / step:.0%}, gaps "
                     f"{ms(step - self.busy_ms)}"]
        if self.roofline_ms:
            parts.append(f"roofline {ms(self.roofline_ms)}")
        share, heaviest = max((row["share"], name) for name, row in self.classes.items())
        parts.append(f"{self.per_step:.0f} {noun}/step, {heaviest} {share:.0%}")
        return "; ".join(parts)

    def to_dict(self) -> dict:
        return {"unit": self.unit, "steps_profiled": self.steps, "pass_s": self.pass_s,
                "step_ms": self.step_ms, "busy_ms": self.busy_ms, "gap_ms": self.gap_ms,
                "per_step": self.per_step, "measured_step_ms": self.measured_step_ms,
                "coverage": self.coverage, "implied_gap_ms": self.implied_gap_ms,
                "roofline_ms": self.roofline_ms,
                "roofline_basis": self.roofline_basis, "classes": self.classes,
                "top": self.top}


def attribute(profile: Profile, measured_step_ms: float | None = None,
              roofline_ms: float | None = None, roofline_basis: str = "") -> Attribution | None:
    """Cut the profiled pass into per-step figures (None when it saw nothing)."""
    items = profile.activities
    if not items or profile.steps < 1:
        return None
    steps = profile.steps
    window = max(a.end_us for a in items) - min(a.start_us for a in items)
    busy = busy_us(items)
    classes = {name: {"ms": 0.0, "count": 0.0} for name in CLASSES}
    by_name: dict[str, list[float]] = {}
    for item in items:
        row = classes[classify(item.name)]
        row["ms"] += item.duration_us / 1e3 / steps
        row["count"] += 1 / steps
        by_name.setdefault(item.name, []).append(item.duration_us)
    total = sum(row["ms"] for row in classes.values()) or 1.0
    for row in classes.values():
        row["share"] = row["ms"] / total
    top = sorted(by_name.items(), key=lambda pair: -sum(pair[1]))[:TOP_KERNELS]
    return Attribution(
        unit=profile.unit, steps=steps, step_ms=window / 1e3 / steps,
        busy_ms=busy / 1e3 / steps, gap_ms=(window - busy) / 1e3 / steps,
        per_step=len(items) / steps, classes=classes,
        top=[{"name": name[:160], "class": classify(name), "ms": sum(d) / 1e3 / steps,
              "count": len(d) / steps} for name, d in top],
        pass_s=profile.pass_s, measured_step_ms=measured_step_ms, roofline_ms=roofline_ms,
        roofline_basis=roofline_basis)


# ------------------------------------------------------------------ reading torch.profiler

def _is_top_level_operator(event: FunctionEvent) -> bool:
    """An operator no other operator called (its time is not inside another's)."""
    if not event.name.startswith("aten::"):
        return False
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return False
        parent = parent.cpu_parent
    return True


def activities_of(events: Iterable[FunctionEvent], on_gpu: bool) -> tuple[Activity, ...]:
    """Kernels, copies and fills the device ran (GPU), or top-level operators (CPU), from
    torch.profiler's events."""
    from torch.autograd import DeviceType
    events = list(events)
    if on_gpu:
        kinds = (DeviceType.CUDA, getattr(DeviceType, "PrivateUse1", None))
        chosen = [e for e in events if e.device_type in kinds]
    else:
        cpu = [e for e in events if e.device_type == DeviceType.CPU]
        chosen = [e for e in cpu if _is_top_level_operator(e)]
        if not chosen:      # a compiled step calls no aten operator: its regions, whole
            chosen = [e for e in cpu if e.cpu_parent is None and "compiled" in e.name.lower()]
    return tuple(Activity(e.name, float(e.time_range.start), float(e.time_range.elapsed_us()))
                 for e in chosen)


def profile_steps(step: Callable[[], object], steps: int, device: torch.device,
                  before: Callable[[], object] = lambda: None,
                  clock: Callable[[], float] = time.perf_counter) -> Profile:
    """Run ``before`` (unprofiled), then ``steps`` calls of ``step`` under torch.profiler,
    synchronising the device only before and after them."""
    from torch.profiler import ProfilerActivity, profile

    from microbench.platform import devices, noise
    on_gpu = devices.is_gpu(device)
    # On a GPU the device's activity alone: with the host's operators recorded as well, the
    # profiled llama_1b step on an H100 was 1.12 x the timed one at batch 1 (1.09 without).
    activities = [ProfilerActivity.CUDA] if on_gpu else [ProfilerActivity.CPU]
    started = clock()
    before()
    devices.synchronize(device)
    with noise.captured(), profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        devices.synchronize(device)
    found = activities_of(prof.events(), on_gpu)
    return Profile(found, steps, "kernel" if on_gpu else "operator", clock() - started)
