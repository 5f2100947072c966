"""The engine of ``--mode generate``: prefill a prompt, then decode tokens one at a time with a KV
cache.

One iteration generates ``gen_len`` tokens for each of ``batch`` concurrent sequences: a prefill
of the ``prompt_len``-token prompt gives the first token (its time is the time to first token),
then ``gen_len - 1`` decode steps give one token each (their times are the inter-token latencies).

Every tensor a step reads or writes besides the weights (the prompt, the KV cache, each
sequence's current token and the next position) is a buffer of one module, ``GenerationState``,
allocated once. The prefill and the decode step are two modules over that state whose
``forward`` takes no argument and returns nothing: they read the state and write it in place
(the decode step advances the position on the device), so no step waits for the host and every
decode step has the same shapes. With ``--compile`` each is compiled on its own (``fullgraph``,
static shapes, the user's options on top), so the decode step is one graph, captured once, and
under ``reduce-overhead`` replayed as a CUDA/HIP graph: its cache is static state (module
buffers), not a mutated input. The approach is gpt-fast's (pytorch-labs/gpt-fast), written here.
The timed loop records one device event after the prefill and after every decode step, and
reads them after the loop, like every other timed region.

Example::

    work = build(spec, model, compile_options=None)         # eager
    times = timed_generation(work, iterations=10, device=spec.device)
    times.prefill.median, times.decode.p99, times.e2e.mean
    tokens = generated_tokens(work)                          # (batch, gen_len), greedy
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, ContextManager

import torch
from torch import nn

from microbench.measure import flops
from microbench.platform import devices
from microbench.settings.compile_options import with_inductor_settings
from microbench.settings.kinds import GenerationShape
from microbench.steps import low_precision, quant_choice, quant_layout
from microbench.models.archs import llama
from microbench.measure.drift import LowPrecision
from microbench.models.language import LanguageModelSpec
from microbench.platform.errors import UsageError
from microbench.scenarios.views import RunView
from microbench.measure.results import GenerationTimes
from microbench.measure.timing import Measurement, make_recorder


@dataclass(frozen=True)
class DecodeTraffic:
    """Bytes a decode step must read from device memory (the numerator of MBU): every weight
    once, except the token embedding, of which only the batch's rows are read (unless it is tied
    to the output projection, which reads all of it), and the KV cache of every position the
    step attends to. RoPE's table rows and the activations are left out (kilobytes)."""

    weight_bytes: int
    kv_bytes_per_position: int          # keys and values of one position, every layer and row

    @classmethod
    def of(cls, state: "GenerationState") -> "DecodeTraffic":
        model = state.model
        # As stored: a quantized weight is its integer data and its scales, tied weights once;
        # a layer with a kernel per phase, the decode step's copy only.
        weights = low_precision.weight_bytes(model, rows=state.batch)
        embed, output = _embedding_weights(model)
        if embed is not output:
            weights -= (embed.shape[0] - state.batch) * embed.shape[1] * embed.element_size()
        return cls(weights, state.kv_bytes_per_position)

    def step_bytes(self, positions: int) -> int:
        """A decode step that attends to ``positions`` cache slots (its own included)."""
        return self.weight_bytes + positions * self.kv_bytes_per_position

    def generation_bytes(self, shape: "GenerationShape") -> int:
        """Every decode step of one generation: step i (0-based) writes position
        ``prompt_len + i`` and attends to ``prompt_len + i + 1`` slots."""
        return sum(self.step_bytes(shape.prompt_len + i + 1) for i in range(shape.gen_len - 1))


def _embedding_weights(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """The token embedding's and the output projection's weights (one tensor when tied)."""
    if isinstance(model, llama.Llama):
        return model.embed.weight, model.output.weight
    causal_lm: Any = model              # a transformers model (its methods: per model type)
    return causal_lm.get_input_embeddings().weight, causal_lm.get_output_embeddings().weight


class GenerationState(nn.Module):
    """The model and everything a generation step reads or writes, as buffers set up once."""

    # A Llama and its llama.KVCache here; a transformers causal LM and its StaticCache in
    # HfGenerationState, whose attributes transformers declares per model type: Any to both.
    model: Any
    cache: Any
    prompt: torch.Tensor                # buffers
    token: torch.Tensor
    input_pos: torch.Tensor

    def __init__(self, model: nn.Module, cache: object, prompt: torch.Tensor) -> None:
        super().__init__()
        self.model, self.cache = model, cache
        batch, prompt_len = prompt.shape
        self.prompt_len = prompt_len
        self.register_buffer("prompt", prompt, persistent=False)
        self.register_buffer("token", torch.zeros(batch, 1, dtype=torch.long,
                                                  device=prompt.device), persistent=False)
        self.register_buffer("input_pos", torch.zeros(1, dtype=torch.long, device=prompt.device),
                             persistent=False)

    @property
    def batch(self) -> int:
        return self.prompt.shape[0]

    @property
    def kv_bytes_per_position(self) -> int:
        return self.cache.nbytes // self.cache.max_len

    def first_token(self) -> torch.Tensor:
        """The prompt into the cache; (batch, 1) greedy first tokens."""
        return llama.prefill(self.model, self.prompt, self.cache)

    def next_token(self) -> torch.Tensor:
        """``token`` at ``input_pos`` into the cache; (batch, 1) greedy next tokens."""
        return llama.decode_step(self.model, self.token, self.input_pos, self.cache)


class HfGenerationState(GenerationState):
    """A Hugging Face causal LM with transformers' own static cache (``StaticCache``: every
    layer's keys and values allocated at full length, written in place at ``cache_position``).
    transformers marks the cache's tensors as static addresses when it allocates them outside
    a compiled region, so ``hf_state`` fills it once eagerly before anything is compiled; the
    compiled steps then mutate it in place and CUDA graphs replay over it."""

    def __init__(self, model: nn.Module, cache: object, prompt: torch.Tensor,
                 max_len: int) -> None:
        super().__init__(model, cache, prompt)
        import inspect
        parameters = inspect.signature(model.forward).parameters
        # transformers 5.2x renamed past_key_values to cache; either is the same object.
        self.cache_argument = "cache" if "cache" in parameters else "past_key_values"
        self.keeps_last = "logits_to_keep" in parameters
        self.max_len = max_len

    @property
    def kv_bytes_per_position(self) -> int:
        tensors = [t for layer in self.cache.layers for t in (layer.keys, layer.values)]
        return sum(t.numel() * t.element_size() for t in tensors) // self.max_len

    def _logits(self, **inputs: torch.Tensor | int) -> torch.Tensor:
        output = self.model(use_cache=True, **{self.cache_argument: self.cache}, **inputs)
        return output.logits[:, -1].argmax(dim=-1, keepdim=True)

    def first_token(self) -> torch.Tensor:
        # Newer transformers (5.2x) write at each layer's own count of tokens seen, not at
        # cache_position: a new generation starts that count again (older ones have none).
        for layer in self.cache.layers:
            if isinstance(getattr(layer, "cumulative_length", None), torch.Tensor):
                layer.cumulative_length.zero_()
        positions = torch.arange(self.prompt_len, device=self.prompt.device)
        extra = {"logits_to_keep": 1} if self.keeps_last else {}
        return self._logits(input_ids=self.prompt, cache_position=positions, **extra)

    def next_token(self) -> torch.Tensor:
        return self._logits(input_ids=self.token, cache_position=self.input_pos,
                            position_ids=self.input_pos.expand(self.batch, 1))


def hf_state(model: Any, prompt: torch.Tensor, max_len: int,
             autocast: ContextManager[object]) -> HfGenerationState:
    """``model``'s generation state over a transformers StaticCache of ``max_len`` positions,
    filled once by an eager prefill (see HfGenerationState); a model type whose transformers
    class does not declare static-cache, one-graph support is refused in one line."""
    from microbench.platform.errors import UsageError
    model_type = getattr(model.config, "model_type", type(model).__name__)
    if not getattr(model, "_can_compile_fullgraph", False):
        raise UsageError(f"--mode generate cannot run hf:{model_type}: transformers does not "
                         f"mark {type(model).__name__} as supporting a static KV cache "
                         f"(_can_compile_fullgraph is False); choose a decoder such as llama, "
                         f"mistral or qwen2")
    import transformers
    cache = transformers.StaticCache(config=model.config, max_cache_len=max_len)
    state = HfGenerationState(model, cache, prompt, max_len)
    with torch.inference_mode(), autocast:
        state.first_token()             # allocates the cache outside any compiled region
    return state


class PrefillStep(nn.Module):
    """The prompt into the cache; each sequence's first generated token into ``state.token``."""

    def __init__(self, state: GenerationState) -> None:
        super().__init__()
        self.state = state

    def forward(self) -> None:
        state = self.state
        state.token.copy_(state.first_token())
        state.input_pos.fill_(state.prompt_len)


class DecodeStep(nn.Module):
    """One token per sequence at ``state.input_pos``; the position advanced on the device."""

    def __init__(self, state: GenerationState) -> None:
        super().__init__()
        self.state = state

    def forward(self) -> None:
        state = self.state
        state.token.copy_(state.next_token())
        state.input_pos.add_(1)


def compiled(step: nn.Module, options: dict, inductor: dict | None = None
             ) -> Callable[[], object]:
    """``step`` compiled on its own: one graph (fullgraph), static shapes, then the user's
    ``--compileContext`` options (their mode: reduce-overhead replays the decode step as a
    CUDA/HIP graph). ``inductor`` adds inductor settings under the user's own."""
    options = {"fullgraph": True, "dynamic": False, **options}
    if inductor and options.get("backend", "inductor") == "inductor":
        options = with_inductor_settings(options, inductor)
    return torch.compile(step, **options)


# Inductor settings of the decode step, under the user's own (gpt-fast's generate.py sets the
# first globally): with coordinate-descent tuning inductor writes a product with one row (a
# batch-1 decode step's every projection) as a reduction it tunes to the memory bandwidth and
# fuses with the norm or activation around it, instead of a GEMV call per projection.
DECODE_INDUCTOR = {"coordinate_descent_tuning": True}


def step_settings(phase: str, quantized: bool) -> dict:
    """The inductor settings this tool adds to ``phase``'s compiled step (the user's win): the
    decode step's own, and a quantized run's (quant_layout.compile_extras: torchao's settings,
    coordinate-descent tuning for the decode step only)."""
    own = DECODE_INDUCTOR if phase == "decode" else {}
    return {**own, **(quant_layout.compile_extras(phase) if quantized else {})}


class GenerationWorkload:
    """The model, prompt and cache of a generation run, and its prefill and decode steps."""

    phases = None               # no forward/backward split in generation
    sharding = None             # nor shards (--parallel applies to training)
    lowp: LowPrecision | None = None    # --quantize: what it did

    def __init__(self, state: GenerationState, shape: GenerationShape,
                 autocast: ContextManager[object], compile_options: dict | None,
                 quantized: bool = False):
        self.state, self.shape = state, shape
        self.eager_model: nn.Module = state.model
        self.autocast = autocast
        self.parameters = sum(p.numel() for p in state.model.parameters())
        self.flops_per_iteration: int | None = None
        self.prefill_flops: int | None = None
        self.traffic = DecodeTraffic.of(state)
        self.prefill_step: Callable[[], object] = PrefillStep(state)
        self.decode_step: Callable[[], object] = DecodeStep(state)
        if compile_options is not None:
            self.prefill_step = compiled(self.prefill_step, compile_options,
                                         step_settings("prefill", quantized))
            self.decode_step = compiled(self.decode_step, compile_options,
                                        step_settings("decode", quantized))

    @property
    def cache(self) -> llama.KVCache:
        return self.state.cache

    def prefill(self) -> None:
        """The prompt into the cache; the first generated token of each sequence."""
        with torch.inference_mode(), self.autocast:
            self.prefill_step()

    def decode(self) -> None:
        with torch.inference_mode(), self.autocast:
            self.decode_step()

    def step(self) -> None:
        """One whole generation (warm-up and profiler passes run this)."""
        self.prefill()
        for _ in range(self.shape.gen_len - 1):
            self.decode()


def build(spec: RunView, model: nn.Module, compile_options: dict | None = None,
          count_flops: bool = True, *, shape: GenerationShape) -> GenerationWorkload:
    """``model`` is the prepared eager model of ``spec`` (a RunSpec in generate mode), which
    generates ``shape`` (the scenario's); ``compile_options`` are torch.compile's (None:
    eager)."""
    model.eval()
    fuse = getattr(model, "fuse_projections", None)     # one q|k|v product per layer (llama)
    if fuse is not None:
        fuse()
    language = spec.model
    if not isinstance(language, LanguageModelSpec):    # Generate refuses others first
        raise UsageError(f"--mode generate runs language models, not {language.name}")
    precision = spec.precision
    prompt = language.make_prompt(spec.batch_size, shape.prompt_len, spec.device,
                                  spec.config.seed)
    autocast = precision.autocast(spec.device)
    if isinstance(model, llama.Llama):
        cache_dtype = precision.autocast_dtype or precision.model_dtype
        cache = model.make_cache(spec.batch_size, shape.positions, device=spec.device,
                                 dtype=cache_dtype)
        state = GenerationState(model, cache, prompt)
    else:
        state = hf_state(model, prompt, shape.positions, autocast)
    if count_flops:     # on the eager BF16 steps: before quantizing (whose kernels torch's
        # counter does not know: the same products, counted as BF16's) and compiling
        eager = GenerationWorkload(state, shape, autocast, None)
        flops_per_iteration = flops.count_step_flops(eager.step)
        prefill_flops = flops.count_step_flops(eager.prefill)
    reduced = None
    if spec.quant is not None:       # in place: the state holds the model, not its layers
        reduced = _quantized(spec, spec.quant, state, autocast, compile_options)
    if compile_options is not None:     # before this process's first compile (any row)
        quant_layout.keep_out_cpu_int8_lowering(devices.is_gpu(spec.device))
    work = GenerationWorkload(state, shape, autocast, compile_options,
                              quantized=reduced is not None)
    work.lowp = reduced
    if count_flops:
        work.flops_per_iteration, work.prefill_flops = flops_per_iteration, prefill_flops
    return work


def _quantized(spec: RunView, quant: quant_layout.QuantPlan, state: GenerationState,
               autocast: ContextManager[object], compile_options: dict | None
               ) -> LowPrecision:
    """``--quantize`` applied to ``state``'s model in place, each layer in each phase in the
    layout measured fastest for the rows it multiplies there (the prompt's, counted on one
    eager prefill; one per sequence in a decode step), with how far it moved the numbers (on
    the prompt's first rows, before and after)."""
    model = state.model
    with autocast:
        prefill_rows = quant_choice.count_rows(model, state.first_token)
    phases = (low_precision.decode_phase(state.batch, model),
              quant_choice.Phase("prefill", prefill_rows))
    def options(phase: str) -> dict | None:         # None: timed as an uncompiled run runs
        return quant_layout.product_compile_options(compile_options, phase,
                                                    step_settings(phase, False))
    reduced = low_precision.quantize_measured(model, quant, phases,
                                              low_precision.probe_rows(state.prompt),
                                              spec.device, spec.precision.label,
                                              compile_options=options)
    return low_precision.with_compile_record(
        reduced, spec.config, spec.device,
        {phase: step_settings(phase, False) for phase in ("prefill", "decode")})


def generated_tokens(work: GenerationWorkload) -> torch.Tensor:
    """One generation's greedy tokens, (batch, gen_len), read back after each step (a check,
    not a timed loop)."""
    work.prefill()
    tokens = [work.state.token.clone()]
    for _ in range(work.shape.gen_len - 1):
        work.decode()
        tokens.append(work.state.token.clone())
    return torch.cat(tokens, dim=1)


def timed_generation(work: GenerationWorkload, iterations: int, device: torch.device,
                     time_fn: Callable[[], float] | None = None) -> GenerationTimes:
    """``iterations`` generations with a device event after the prefill and each decode step."""
    marks_per_iteration = work.shape.gen_len
    recorder = make_recorder(device, iterations * marks_per_iteration + 1, time_fn)
    recorder.mark()
    for _ in range(iterations):
        work.prefill()
        recorder.mark()
        for _ in range(work.shape.gen_len - 1):
            work.decode()
            recorder.mark()
    times = split_generation_times(recorder.intervals_ms(), marks_per_iteration)
    return dataclasses.replace(
        times, decode_bytes=iterations * work.traffic.generation_bytes(work.shape),
        prefill_flops=work.prefill_flops)


def split_generation_times(intervals_ms: list[float], per_iteration: int) -> GenerationTimes:
    """Cut the event intervals into prefills, decode steps and whole generations."""
    iterations = [intervals_ms[i:i + per_iteration]
                  for i in range(0, len(intervals_ms), per_iteration)]
    return GenerationTimes(prefill=Measurement(it[0] for it in iterations),
                           decode=Measurement(s for it in iterations for s in it[1:]),
                           e2e=Measurement(sum(it) for it in iterations))
