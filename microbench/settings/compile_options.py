"""``--compileContext``: torch.compile's keyword arguments, read as literals and checked.

The older tool evaluated the string and took ``bool('False')`` for True. Here the text is parsed by
``ast.literal_eval`` only (never run), bounded in size and depth before that, its keys must be
torch.compile arguments, and each value is checked: booleans are booleans ('True'/'False' strings
are read as such), ``mode`` and ``backend`` must name ones the installed PyTorch has, and
``options`` takes only inductor performance settings from an allow-list, none that names a
program, a directory or a file.

Example::

    options, notes = parse_compile_context("{'mode': 'max-autotune', 'fullgraph': 'True'}")
    # ({'mode': 'max-autotune', 'fullgraph': True}, [])
"""
from __future__ import annotations

import ast
import difflib
import inspect
import io
import math
import re
import shutil
import tokenize
from typing import Any, Callable

from microbench.platform.errors import UsageError

# The compile modes a sweep (--compile-mode) chooses from; "none" runs eagerly.
COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune",
                 "max-autotune-no-cudagraphs")

# torch.compile's own keyword arguments; anything else in --compileContext is a usage error.
def _compile_keywords() -> set[str]:
    import torch
    return {name for name in inspect.signature(torch.compile).parameters if name != "model"}


# Inductor option names the workshop guide uses, and the real inductor options they mean.
WORKSHOP_INDUCTOR_OPTIONS = {
    "matmul-padding": "shape_padding",     # "Pad input tensors of matmul/bmm/addmm"
    "static-memory": "memory_planning",    # "pooled allocations for non-output tensors"
}

# The inductor options --compileContext may set: performance settings only. Inductor has
# hundreds of options, and some name a program to run (cpp.cxx, cuda.cuda_cxx), a directory to
# take code from (cutlass_dir, rocm.ck_dir) or a file to write (trace.debug_dir,
# profile_bandwidth_output); a command line that passes them through lets a result file or a
# CI variable run any program. An allow-list keeps new such options out too. Options missing
# from the installed PyTorch are unknown, as before.
INDUCTOR_ALLOWED = frozenset({
    "max_autotune", "max_autotune_pointwise", "max_autotune_gemm", "max_autotune_gemm_backends",
    "max_autotune_conv_backends", "max_autotune_gemm_search_space", "coordinate_descent_tuning",
    "coordinate_descent_check_all_directions", "coordinate_descent_search_radius",
    "epilogue_fusion", "epilogue_fusion_first", "pattern_matcher", "shape_padding",
    "comprehensive_padding", "padding_alignment_bytes", "memory_planning", "memory_pool",
    "freezing", "layout_optimization", "force_layout_optimization", "keep_output_stride",
    "aggressive_fusion", "benchmark_kernel", "benchmark_fusion", "benchmark_epilogue_fusion",
    "split_reductions", "conv_1x1_as_mm", "fallback_random", "cpp_wrapper",
    "search_autotune_cache", "reorder_for_locality", "reorder_for_peak_memory",
    "reorder_for_compute_comm_overlap", "combo_kernels", "permute_fusion", "use_mixed_mm",
    "emulate_precision_casts", "max_fusion_size", "max_pointwise_cat_inputs",
    "unroll_reductions_threshold", "realize_opcount_threshold", "size_asserts", "nan_asserts",
    "implicit_fallbacks", "dynamic_scale_rblock", "assume_aligned_inputs", "online_softmax",
    "triton.cudagraphs", "triton.cudagraph_trees", "triton.cudagraph_skip_dynamic_graphs",
    "triton.autotune_pointwise", "triton.autotune_cublasLt", "triton.max_tiles",
    "triton.tiling_prevents_pointwise_fusion", "triton.unique_kernel_names",
    "triton.persistent_reductions", "triton.multi_kernel", "triton.divisible_by_16",
    "triton.prefer_nd_tiling", "triton.enable_persistent_tma_matmul",
    "cpp.threads", "cpp.simdlen", "cpp.min_chunk_size", "cpp.dynamic_threads",
    "cpp.enable_tiling_heuristics", "cpp.weight_prepack",
})
# A string value is a short word list (max_autotune_gemm_backends: "ATEN,TRITON"), never a path.
_SAFE_STRING = re.compile(r"[A-Za-z0-9_,.+-]{1,64}")
# Bounds on the literal, checked before ast.literal_eval: a deeply nested or huge literal would
# end in RecursionError or MemoryError there. Ours nest two deep ({'options': {...}}).
MAX_COMPILE_CONTEXT_CHARS = 4096
MAX_COMPILE_CONTEXT_DEPTH = 4


def _literal_booleans(value: Any) -> Any:
    """'True'/'False' strings become booleans (the older tool used bool(str), always True)."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if isinstance(value, dict):
        return {key: _literal_booleans(item) for key, item in value.items()}
    return value


def _check_scalar(where: str, value: Any, default: Any) -> Any:
    """An inductor option's value: the type of its default, bounded, a string never a path
    or a program."""
    kinds = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}
    allowed = kinds.get(type(default), (bool, int, float, str))
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        raise UsageError(f"--compileContext: {where} must be "
                         f"{' or '.join(kind.__name__ for kind in allowed)}, got {value!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and \
            not (math.isfinite(value) and abs(value) <= 2**31):
        raise UsageError(f"--compileContext: {where} is out of range: {value!r}")
    if isinstance(value, str) and (not _SAFE_STRING.fullmatch(value) or shutil.which(value)):
        raise UsageError(f"--compileContext: {where} must be a short word list such as "
                         f"'ATEN,TRITON', not a path or a program: {value!r}")
    return value


def _inductor_options(options: Any, notes: list[str]) -> dict:
    if not isinstance(options, dict):
        raise UsageError("--compileContext: 'options' must be a dict of inductor options")
    import torch._inductor
    import torch._inductor.config as inductor_config
    known = set(torch._inductor.list_options())
    defaults = inductor_config.get_config_copy()
    resolved = {}
    for key, value in options.items():
        name = WORKSHOP_INDUCTOR_OPTIONS.get(key, str(key).replace("-", "_"))
        if name not in known:
            close = difflib.get_close_matches(name, known & INDUCTOR_ALLOWED, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise UsageError(f"--compileContext: unknown inductor option '{key}'{hint}")
        if name not in INDUCTOR_ALLOWED:
            raise UsageError(f"--compileContext: inductor option '{key}' is not allowed: only "
                             f"performance settings that run no program and write no file "
                             f"are (see README, --compileContext)")
        if name != key:
            notes.append(f"compile option '{key}' is inductor's '{name}'")
        resolved[name] = _check_scalar(f"option '{key}'", value, defaults.get(name))
    return resolved


def _check_literal_shape(text: str) -> None:
    """Size and nesting depth of the literal, counted on its tokens (brackets inside strings
    do not count) before anything recursive parses it."""
    if len(text) > MAX_COMPILE_CONTEXT_CHARS:
        raise UsageError(f"--compileContext is {len(text)} characters long; at most "
                         f"{MAX_COMPILE_CONTEXT_CHARS}")
    depth = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.OP and token.string in "([{":
                depth += 1
                if depth > MAX_COMPILE_CONTEXT_DEPTH:
                    raise UsageError(f"--compileContext nests more than "
                                     f"{MAX_COMPILE_CONTEXT_DEPTH} levels deep; it takes a dict "
                                     f"such as \"{{'options': {{'max_autotune': True}}}}\"")
            elif token.type == tokenize.OP and token.string in ")]}":
                depth -= 1
    except (tokenize.TokenError, SyntaxError):
        pass                                 # malformed: literal_eval says so below


def _compile_modes() -> set[str]:
    import torch._inductor
    return set(torch._inductor.list_mode_options())


def _compile_backends() -> set[str]:
    import torch._dynamo
    return {name for name in torch._dynamo.list_backends(exclude_tags=())
            if "TESTING" not in name and "minifier" not in name}


def _one_of(allowed: Callable[[], set[str]]) -> Callable[[str, Any], Any]:
    def check(key: str, value: Any) -> Any:
        if value is not None and value not in allowed():
            raise UsageError(f"--compileContext: '{key}' must be one of "
                             f"{', '.join(sorted(allowed()))}, got {value!r}")
        return value
    return check


def _boolean(none_allowed: bool) -> Callable[[str, Any], Any]:
    def check(key: str, value: Any) -> Any:
        if not (isinstance(value, bool) or (none_allowed and value is None)):
            raise UsageError(f"--compileContext: '{key}' must be True or False"
                             f"{' or None' if none_allowed else ''}, got {value!r}")
        return value
    return check


# torch.compile's arguments that --compileContext may set, each with its check of the value.
COMPILE_ARGUMENTS = {
    "fullgraph": _boolean(False), "dynamic": _boolean(True), "disable": _boolean(False),
    "mode": _one_of(_compile_modes), "backend": _one_of(_compile_backends),
}


def parse_compile_context(text: str | None) -> tuple[dict, list[str]]:
    """Parse ``--compileContext``: Python literals only, never evaluated as code, every key and
    value checked."""
    if text is None or not text.strip():
        return {}, []
    _check_literal_shape(text)
    try:
        context = ast.literal_eval(text.strip())
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        raise UsageError(f"--compileContext must be a Python dict literal such as "
                         f"\"{{'mode': 'max-autotune'}}\", got: {text[:200]}") from None
    if not isinstance(context, dict):
        raise UsageError(f"--compileContext must be a dict, got {type(context).__name__}")
    context = _literal_booleans(context)
    unknown = sorted(set(map(str, context)) - _compile_keywords())
    if unknown:
        raise UsageError(f"--compileContext: {', '.join(unknown)} not torch.compile arguments "
                         f"(allowed: {', '.join(sorted(COMPILE_ARGUMENTS) + ['options'])})")
    unsupported = sorted(set(context) - set(COMPILE_ARGUMENTS) - {"options"})
    if unsupported:
        raise UsageError(f"--compileContext: {', '.join(unsupported)} cannot be set here "
                         f"(allowed: {', '.join(sorted(COMPILE_ARGUMENTS) + ['options'])})")
    if "mode" in context and "options" in context:
        raise UsageError("--compileContext: torch.compile takes 'mode' or 'options', not both")
    notes: list[str] = []
    for key, check in COMPILE_ARGUMENTS.items():
        if key in context:
            check(key, context[key])
    if "options" in context:
        context["options"] = _inductor_options(context["options"], notes)
    return context, notes


def with_inductor_settings(options: dict, settings: dict) -> dict:
    """torch.compile's arguments with inductor ``settings`` added below the user's: a
    ``mode`` becomes the inductor options it stands for (torch.compile takes a mode or
    options, not both), then ``settings``, then the user's ``options`` over them."""
    options = dict(options)
    mode = options.pop("mode", None)
    import torch._inductor
    merged = {**(torch._inductor.list_mode_options(mode) if mode else {}), **settings,
              **options.pop("options", {})}
    return {**options, "options": merged}
