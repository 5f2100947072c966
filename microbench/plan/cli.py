"""Command line -> a :class:`~microbench.settings.config.Plan` of frozen BenchConfigs.

Flags keep the older tool's spellings (``--batch-size``, ``--fp16 1``, ``--compileContext``,
``--distributed_dataparallel``...) beside kebab-case aliases. A flag that sets a config field is
added with :func:`_setting`, which takes its spelling, destination and default from the field's
schema (:mod:`microbench.settings.config`), so ``to_config``, ``--rerun`` and the preset read one
declaration. Argv is parsed once (:func:`parse_args`). Validation happens here, so a bad value
fails before any model is built: one line on stderr, exit 2.
"""
from __future__ import annotations

import argparse
import itertools
import math
import os
import shlex
import sys
from dataclasses import asdict, replace
from typing import Any, Iterable, Sequence

from microbench import __version__
from microbench.models import names
from microbench.models.llama_config import ATTENTION_IMPLS
from microbench.settings import identity, quantization
from microbench.settings.precision import (CHOICES, FP8_RECIPES, TABLE,
                                           from_older_flags, lookup)
from microbench.plan import rerun
from microbench.settings.argtypes import (MAX_BATCH, MAX_BUCKET_CAP_MB, MAX_DEVICE_INDEX,
                                          MAX_DIST_TIMEOUT_S, MIN_DIST_TIMEOUT_S,
                                          MAX_IMAGE_SIZE, MAX_ITERATIONS,
                                          MAX_MEMORY_GB, MAX_PEAK_TFLOPS, MAX_PEAK_BANDWIDTH,
                                          MAX_PROFILER_STEPS, MAX_RANKS, MAX_SEED, MAX_SEQ_LEN,
                                          MAX_TELEMETRY_MS, MAX_TRIALS, MAX_VOCAB, MAX_WARMUP,
                                          HelpFormatter, OneLineParser, bounded_int, choices,
                                          finite_float, keyword_dict, label_text, list_of,
                                          name_list, positive_int, dist_url, path_text,
                                          positive_ints, zero_or_one)
from microbench.settings.compile_options import COMPILE_MODES, parse_compile_context
from microbench.settings.config import (AB_ROUNDS, DERIVED, INVERSE, MODES, PARALLEL, PRESETS,
                                        SCHEMA, SWITCH, VALUE, ABPlan, BenchConfig, Plan,
                                        as_command_line, field_of_dest, measured_fields,
                                        replayed_fields, spelled, sweep_axes, validate)
from microbench.platform import gpu_presence
from microbench.platform.errors import UsageError


def _setting(group: argparse._ArgumentGroup, name: str, *aliases: str, **kwargs: Any) -> None:
    """Add the flag of config field ``name`` as its schema declares it: spelling, destination,
    default (a list for a sweep axis, whose ``choices`` are a comma-separated list's), and
    ``store_true`` for switches."""
    item = SCHEMA[name]
    if item.kind in (SWITCH, INVERSE):
        kwargs["action"] = "store_true"
    else:
        axis_list = item.axis and item.default is not None
        kwargs["default"] = [item.default] if axis_list else item.default
        if item.axis and "choices" in kwargs:
            kwargs["type"] = choices(kwargs.pop("choices"))
    group.add_argument(item.flag, *aliases, dest=item.dest, **kwargs)


# The terms --help and the summaries use, explained on one page (issue 56: jargon before any
# explanation); each is an anchor of docs/glossary.md (tests/plan/test_cli.py checks).
GLOSSARY_TERMS = ("MFU", "MBU", "TTFT", "ITL", "CV", "p90", "prediction interval",
                  "confidence interval", "inductor", "gloo", "NCCL", "AMP", "TF32",
                  "channels-last", "CUDA graphs", "DDP", "FSDP")
EPILOG = (f"Terms ({', '.join(GLOSSARY_TERMS)}): docs/glossary.md. Every flag by purpose: "
          f"docs/flags.md. Exit codes: docs/guarantees.md.")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        description="Benchmark PyTorch training and inference of a model on a GPU (ROCm or CUDA) "
                    "or the CPU: warm-up apart, device-event timing, every sample kept.",
        epilog=EPILOG, formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")

    model = parser.add_argument_group("model and workload")
    _setting(model, "network", "--model", type=name_list, metavar="NAME[,NAME]",
             help="model to run: any torchvision classification, segmentation or video "
                  "model, shufflenet, xception, or an older alias (SqueezeNet, "
                  "resnext50), llama_tiny/llama_medium/llama_1b, hf:<model_type>; a "
                  "comma-separated list sweeps. --model is timm's spelling")
    model.add_argument("--list-networks", action="store_true",
                       help="print the model names and exit")
    _setting(model, "batch_size", type=positive_ints, metavar="N[,N]",
             help=f"images (or clips) per iteration, at most {MAX_BATCH:,}; a "
                  f"comma-separated list sweeps")
    _setting(model, "image_size", "--img-size", type=bounded_int(1, MAX_IMAGE_SIZE), metavar="PX",
             help="input height and width (default: the model's native size, e.g. "
                  "224, 299 for inception_v3, 112 for r3d_18); --img-size is timm's "
                  "spelling")
    _setting(model, "mode", type=choices(MODES), metavar="MODE[,MODE]",
             help="training: forward, loss, backward, SGD step; inference: forward "
                  "in inference mode with the model in eval(); generate (llama_*): "
                  "prefill a prompt, then decode token by token with a KV cache; a "
                  "comma-separated list sweeps")
    _setting(model, "opt_step", type=bounded_int(1, MAX_ITERATIONS), metavar="N",
             help="training: accumulate gradients over N iterations per optimizer step")
    _setting(model, "seed", type=bounded_int(0, MAX_SEED), metavar="N",
             help="seed for weights and inputs (0 to 2**63-1)")
    model.add_argument("--rerun", default=None, type=path_text, metavar="RESULT.json",
                       help="repeat the run a result file stores: its configuration, as flags, "
                            "with the flags given here added or replacing them (output "
                            "locations and the launch are this invocation's)")

    timing = parser.add_argument_group("timing")
    _setting(timing, "iterations", type=bounded_int(1, MAX_ITERATIONS), metavar="N",
             help=f"timed iterations (each one is a sample), at most "
                  f"{MAX_ITERATIONS:,}")
    _setting(timing, "warmup", type=bounded_int(0, MAX_WARMUP), metavar="N",
             help=f"untimed warm-up iterations before the timed ones, at most "
                  f"{MAX_WARMUP:,}")
    _setting(timing, "repeat", type=bounded_int(1, MAX_TRIALS), metavar="N",
             help="independent trials (fresh model, optimizer and inputs each); the "
                  "headline is their geometric mean, with its 95%% confidence interval and a "
                  "95%% prediction interval for the next run; in a sweep the trials of all "
                  "configurations interleave (default: 1; with --max-noise: the fewest "
                  "trials, at least 3)")
    _setting(timing, "trials", choices=("processes", "in-process"),
             help="with --repeat: run each trial in a fresh worker process with its own seed "
                  "(processes: the compiler, autotuning and allocator start cold each time, "
                  "as they do between runs) or all of them in this process (in-process)")
    _setting(timing, "max_noise_pct", type=finite_float(0, 100), metavar="PCT",
             help="add trials until the 95%% CI's half-width is below PCT percent of the "
                  "headline, or --max-trials or --time-limit stops it (the run says which)")
    _setting(timing, "max_trials", type=bounded_int(2, MAX_TRIALS), metavar="N",
             help="with --max-noise: the most trials (default: 20)")
    _setting(timing, "time_limit_s", type=finite_float(0, MAX_DIST_TIMEOUT_S), metavar="S",
             help="with --max-noise: start no trial after S seconds of trials (default: none)")
    _setting(timing, "discard_throttled",
             help="re-run a trial whose SM clock fell below 75%% of its maximum or that saw a "
                  "throttle reason (telemetry), at most 3 times a run; the discarded trials "
                  "stay in the JSON")
    _setting(timing, "telemetry_interval_ms", type=finite_float(0, MAX_TELEMETRY_MS, True),
             metavar="MS",
             help="sample clocks, power, temperature, throttling and energy every MS "
                  "milliseconds during the timed region (NVML or amdsmi); 0: off")
    _setting(timing, "phase_timing",
             help="training: do not split iterations into forward, backward and "
                  "optimizer with two extra device events each")

    precision = parser.add_argument_group(
        "precision (--precision names the mode; --fp16, --amp, --amp-dtype, --amp-opt-level "
        "and --tf32 are the older spellings of the same modes)")
    precision.add_argument("--precision", type=choices(CHOICES), default=None,
                           metavar="P[,P]",
                           help="the precision mode: " + "; ".join(
                               f"{row.name} ({row.older_flags})" for row in TABLE)
                           + "; amp = amp-fp16 (default: fp32). A comma-separated list sweeps")
    precision.add_argument("--fp16", type=int, choices=(0, 1), default=0,
                           help="1: whole network in FP16 (norm layers FP32) with FP32 master "
                                "weights")
    precision.add_argument("--amp", action="store_true",
                           help="automatic mixed precision: autocast (+ gradient scaling for fp16)")
    precision.add_argument("--amp-dtype", choices=("fp16", "bf16"), default="fp16",
                           help="autocast type for --amp; bf16 needs no gradient scaling")
    precision.add_argument("--amp-opt-level", type=int, choices=(0, 1, 2, 3), default=None,
                           help="older APEX level, mapped: 0 fp32, 1 --amp, 2 and 3 --fp16 1")
    precision.add_argument("--tf32", type=int, choices=(0, 1), default=0,
                           help="1: allow TF32 for FP32 matmuls and convolutions; 0 keeps IEEE "
                                "FP32")
    _setting(precision, "fp8_recipe", choices=FP8_RECIPES,
             help="with --precision fp8: torchao's scaling recipe, tensorwise (one scale per "
                  "tensor; FP8 all-gather under --parallel fsdp) or rowwise (one per row)")
    _setting(precision, "quantize", type=choices(tuple(quantization.FORMATS)),
             metavar="Q[,Q]",
             help="inference and generate: quantize the BF16 weights with torchao's quantize_: "
                  + quantization.quantize_help()
                  + ". Picks --precision bf16 unless given; a list sweeps; needs torchao")
    _setting(precision, "quant_layout", choices=tuple(quantization.LAYOUTS),
             help="with --quantize: the weights' packing, which picks the kernel: "
                  + quantization.layout_help()
                  + ". A layout a format does not have, or this device cannot run, is refused")

    fast = parser.add_argument_group("the fast path")
    _setting(fast, "preset", choices=PRESETS,
             help="fast: the levers that measured fastest for this model family and "
                  "device (channels-last, BF16/FP16 AMP, fused optimizer, "
                  "torch.compile, cudnn.benchmark; DDP bucket views); explicit flags "
                  "win, and the run prints the flags that reproduce it")
    _setting(fast, "optimizer_impl", choices=("foreach", "fused"),
             help="training: SGD's multi-tensor (foreach, PyTorch's own choice on GPUs) "
                  "or fused kernel; fused also takes AMP's scale and inf check on the "
                  "device, removing GradScaler's host sync")
    _setting(fast, "cudnn_benchmark", type=zero_or_one, metavar="{0,1}",
             help="1: let cuDNN (MIOpen's find mode on ROCm) time convolution "
                  "algorithms and keep the fastest; 0: its heuristics (PyTorch's "
                  "default). MIOPEN_FIND_ENFORCE=3 also tunes on ROCm")

    layout = parser.add_argument_group("memory layout and compilation")
    _setting(layout, "nhwc", "--channels-last",
             help="channels-last memory format for model and input (--channels-last "
                  "is timm's spelling)")
    _setting(layout, "compile",
             help="torch.compile the model")
    layout.add_argument("--compileContext", "--compile-context", dest="compile_context",
                        default=None, metavar="DICT",
                        help="torch.compile keyword arguments as a Python dict literal, e.g. "
                             "\"{'mode': 'max-autotune', 'fullgraph': 'True'}\"; read as "
                             "literals, never run. Keys: fullgraph, dynamic, disable, mode, "
                             "backend, options; 'options' takes only inductor performance "
                             "settings from an allow-list (README), none that names a program, "
                             "a path or a file to write")

    device = parser.add_argument_group("device")
    _setting(device, "device", metavar="DEV",
             help="auto (GPU when there is one, else CPU), cuda, cuda:N or cpu; "
                  "ROCm GPUs are 'cuda' too")

    output = parser.add_argument_group("output")
    _setting(output, "output_dir", type=path_text, metavar="DIR",
             help="where the JSON result and the CSV summary go")
    _setting(output, "output_file", type=path_text, metavar="NAME",
             help="JSON result file name inside --output-dir, no directory part "
                  "(default: built from network, mode, precision and batch size)")
    _setting(output, "csv_file", type=path_text, metavar="PATH",
             help="CSV to append one row to (default: <output-dir>/benchmark_summary.csv)")
    _setting(output, "write_files",
             help="write no JSON or CSV, only print")
    _setting(output, "quiet",
             help="no per-iteration lines")
    _setting(output, "label", type=label_text, metavar="TEXT",
             help="a name for this run stored in its result (a nightly date, a commit), "
                  "which microbench-report --history --by label orders by (default: none)")
    _add_language_args(parser)
    _add_data_args(parser)
    _add_distributed_args(parser)
    _add_sharding_args(parser)
    _add_profiler_args(parser)
    _add_sweep_args(parser)
    return parser


def _add_language_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "language models (llama_tiny, llama_medium, llama_1b, hf:<model_type>)")
    _setting(group, "seq_len", type=list_of(bounded_int(1, MAX_SEQ_LEN)), metavar="N[,N]",
             help="tokens per sequence (default: the preset's; 512 for hf:); with "
                  "--mode generate, the positions of the KV cache; a list sweeps")
    _setting(group, "vocab_size", type=bounded_int(1, MAX_VOCAB), metavar="N",
             help="vocabulary size (default: the preset's)")
    _setting(group, "kv_heads", type=positive_int, metavar="N",
             help="key/value heads (grouped-query attention); must divide the heads")
    _setting(group, "attention", type=choices(ATTENTION_IMPLS), metavar="IMPL[,IMPL]",
             help="eager (matmul-softmax-matmul), sdpa (PyTorch chooses the kernel; "
                  "the default), or scaled_dot_product_attention pinned to flash, "
                  "efficient or math; a list sweeps")
    _setting(group, "model_kwargs", nargs="+", metavar="KEY=VALUE",
             help="hf:<model_type>: overrides of the transformers config, e.g. "
                  "hidden_size=1024 num_hidden_layers=8")
    _setting(group, "prompt_len", type=bounded_int(1, MAX_SEQ_LEN), metavar="N",
             help="--mode generate: prompt tokens per sequence (default: 128, or half "
                  "the sequence length)")
    _setting(group, "gen_len", type=bounded_int(1, MAX_SEQ_LEN), metavar="N",
             help="--mode generate: tokens generated per sequence (default: 128, "
                  "within the sequence length)")


# Bounds of the input pipeline's numbers: more loader processes than any host has cores, more
# batches in flight per worker than any memory holds, a generated set larger than a disk's worth.
MAX_WORKERS = 1024
MAX_PREFETCH = 1024
MAX_DATA_IMAGES = 10**7


def _add_data_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "Input data (is the GPU waiting for data? --data loader or folder feeds each step from "
        "a DataLoader and measures the loader alone and the model alone beside it)")
    _setting(group, "data", choices=("synthetic", "loader", "folder"),
             help="synthetic: inputs made once on the device, no loading; loader: a "
                  "generated image set (a token corpus for language models) made once "
                  "into --data-cache; folder: your images in --data-dir")
    _setting(group, "data_format", choices=("jpeg", "png"),
             help="--data loader: the generated set's format")
    _setting(group, "data_cache", type=path_text, metavar="DIR",
             help="--data loader: where generated sets are made once and reused "
                  "(default: $XDG_CACHE_HOME or ~/.cache, /micro_benchmarking_pytorch)")
    _setting(group, "data_images", type=bounded_int(1, MAX_DATA_IMAGES), metavar="N",
             help="--data loader: images of the generated set (sequences of a language "
                  "model's corpus)")
    _setting(group, "data_dir", type=path_text, metavar="DIR",
             help="--data folder: a tree of JPEG, PNG or WebP images, in class folders "
                  "(ImageFolder's layout) or flat")
    _setting(group, "decode", type=choices(("cpu", "gpu")), metavar="WHERE[,WHERE]",
             help="where images are decoded: cpu (torchvision.io in the loader workers) or "
                  "gpu (torchvision.io.decode_jpeg on the device; JPEG only, needs "
                  "--transforms gpu); a list sweeps")
    _setting(group, "transforms", choices=("cpu", "gpu"),
             help="where normalisation and the cast to the input dtype run: in the workers "
                  "(cpu) or after the copy to the device (gpu, which also copies uint8, a "
                  "quarter of the bytes)")
    _setting(group, "workers", type=list_of(bounded_int(0, MAX_WORKERS)), metavar="N[,N]",
             help="loader worker processes per rank; 0 loads in the main process "
                  "(default: the cores this process may use, os.sched_getaffinity, shared "
                  "by the ranks of a host); a list sweeps")
    _setting(group, "pin_memory", type=zero_or_one, metavar="{0,1}",
             help="1: batches in pinned (page-locked) host memory, copied to the GPU "
                  "without blocking; 0: pageable memory")
    _setting(group, "prefetch_factor", type=bounded_int(1, MAX_PREFETCH), metavar="N",
             help="batches each worker keeps in flight")


def _add_sweep_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "sweeps, capacity and comparisons (lists in --network, --batch-size, --mode, --precision, "
        "--quantize, --seq-len, --attention, --decode and --workers sweep too)")
    group.add_argument("--compile-mode", type=choices(COMPILE_MODES), default=None,
                       metavar="M[,M]",
                       help="compile modes to run: none, default, reduce-overhead, "
                            "max-autotune, max-autotune-no-cudagraphs")
    group.add_argument("--find-max-batch", action="store_true",
                       help="find the largest batch that fits (doubling, then bisecting), and "
                            "benchmark it")
    group.add_argument("--memory-budget-gb", type=finite_float(0, MAX_MEMORY_GB), default=None,
                       metavar="GB",
                       help="with --find-max-batch: on a GPU, cap PyTorch's allocator as if the "
                            "GPU had only this much memory; on the CPU (where it is required), "
                            "the process's peak resident memory")
    group.add_argument("--max-batch-limit", type=bounded_int(1, MAX_BATCH), default=65536,
                       metavar="N",
                       help="with --find-max-batch: stop growing at this batch")
    group.add_argument("--batch-granularity", type=bounded_int(1, MAX_BATCH), default=8,
                       metavar="N",
                       help="with --find-max-batch: stop bisecting at a multiple of N (1: the "
                            "exact largest batch, at the cost of more probes)")
    group.add_argument("--compare", default=None, type=path_text, metavar="BASELINE.json",
                       help="compare with a result of the same configuration (both sides' "
                            "trials where they have them); exit 5 when throughput dropped "
                            "beyond --tolerance and significantly; a failed gate never "
                            "replaces the baseline")
    group.add_argument("--tolerance", type=finite_float(0, 100, low_inclusive=True),
                       default=5.0, metavar="PCT",
                       help="the smallest throughput change that matters to --compare and "
                            "--ab, in percent (0 to 100; default: 5): a regression is a drop "
                            "beyond it whose 95%% interval excludes no change; within it on "
                            "the whole interval is 'same within N%%'")
    group.add_argument("--ab", default=None, metavar="FLAGS",
                       help="A/B: run this command (A) and the same command with FLAGS added or "
                            "replacing (B), alternating A B A B for --repeat rounds (default: "
                            f"{AB_ROUNDS}), each trial a fresh process; prints the "
                            "ratio B/A, its 95%% interval and faster, slower or no difference "
                            "detected (e.g. --ab \"--nhwc\")")
    group.add_argument("--fail-if", choices=("slower", "never"), default=None,
                       help="exit 5 when --ab finds B slower, or when --compare finds a "
                            "significant regression (slower: the default of --compare; never: "
                            "report only; --ab reports only unless given)")
    group.add_argument("--compare-any-config", action="store_true",
                       help="compare with a baseline of another configuration anyway (refused "
                            "otherwise), printing what differs")
    group.add_argument("--plot", default=None, type=path_text, metavar="FILE.png",
                       help="plot a sweep: throughput and memory against batch size, or bars "
                            "per configuration; the suffix names the format (png, svg, pdf...)")


def _schedule(text: str) -> tuple[int, int, int]:
    try:
        wait, warmup, active = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be WAIT,WARMUP,ACTIVE like 1,2,2, got '{text}'") \
            from None
    if wait < 0 or warmup < 0 or active < 1 or max(wait, warmup, active) > MAX_PROFILER_STEPS:
        raise argparse.ArgumentTypeError(f"needs WAIT >= 0, WARMUP >= 0 and ACTIVE >= 1, each "
                                         f"at most {MAX_PROFILER_STEPS}")
    return wait, warmup, active


def _add_profiler_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "profiling (never inside the timed statistics: separate passes or excluded iterations)")
    _setting(group, "autograd_profiler", "--autograd_profiler",
             help="a ROCTX/NVTX range per timed iteration (a range per operator "
                  "would slow the timed pass, so those come in a separate marked pass "
                  "after it), then operator tables (device time, CPU time, memory) "
                  "from another separate pass")
    _setting(group, "kineto",
             help="torch.profiler pass after the timed one; Chrome traces "
                  "<result>_trace<step>.json and an operator table")
    _setting(group, "profiler_schedule", type=_schedule, metavar="W,U,A",
             help="--kineto schedule: wait, warmup, active steps")
    _setting(group, "profiler_output", type=path_text, metavar="PATH",
             help="directory (or file-name prefix) for --kineto traces (default: "
                  "--output-dir)")
    _setting(group, "flops_prof_step", type=bounded_int(0, MAX_ITERATIONS), metavar="N",
             help="run DeepSpeed's FLOPS profiler on timed iteration N (0-based, "
                  "below --iterations); that iteration is left out of the statistics")
    _setting(group, "peak_tflops", type=finite_float(0, MAX_PEAK_TFLOPS), metavar="T",
             help="dense peak TFLOP/s to compute MFU against (default: the built-in "
                  "table for known GPUs; unknown otherwise)")
    _setting(group, "peak_bandwidth", type=finite_float(0, MAX_PEAK_BANDWIDTH), metavar="GB/S",
             help="peak memory bandwidth in GB/s to compute generation's MBU against "
                  "(default: the built-in table for known GPUs; unknown otherwise)")
    _setting(group, "measure_peaks", type=zero_or_one, metavar="{0,1}",
             help="1: before the timed region, outside it, once per process, measure this "
                  "device's dense GEMM TFLOP/s at the run's compute dtype and its copy GB/s "
                  "(the op bench's matmul and copy), so MFU and MBU are printed against the "
                  "measured peak beside the datasheet's; 0: the datasheet only (default: 1 on "
                  "GPUs, 0 on the CPU)")
    _setting(group, "capture_range",
             help="start the device profiler API just before the timed iterations and "
                  "stop it after (nsys --capture-range=cudaProfilerApi, rocprofv3 "
                  "--selected-regions)")


def _device_ids(text: str) -> tuple[int, ...]:
    try:
        ids = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated GPU indices like 0,1, "
                                         f"got '{text}'") from None
    if len(set(ids)) != len(ids) or min(ids) < 0 or max(ids) > MAX_DEVICE_INDEX:
        raise argparse.ArgumentTypeError(f"must list distinct non-negative indices, got '{text}'")
    return ids


def _add_sharding_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "sharded training (FSDP2), activation checkpointing and the optimizer")
    _setting(group, "parallel", type=choices(PARALLEL), metavar="MODE[,MODE]",
             help="training with several processes (or fsdp with one): ddp replicates the "
                  "model on every rank; fsdp shards parameters, gradients and optimizer "
                  "state over the ranks with FSDP2 (fully_shard per transformer block and "
                  "at the root; llama_* presets, built on the meta device and materialised "
                  "shard by shard); a list sweeps (default: ddp)")
    _setting(group, "reshard_after_forward", type=zero_or_one, metavar="{0,1}",
             help="fsdp: 1 frees a block's gathered parameters after its forward and "
                  "gathers them again for its backward (less memory); 0 keeps them "
                  "(default: 1)")
    _setting(group, "activation_checkpointing", type=choices(("none", "full", "selective")),
             metavar="MODE[,MODE]",
             help="language models in training: full recomputes each transformer block in "
                  "the backward; selective keeps attention and every other projection "
                  "(torchtitan's op policy); a list sweeps (default: none)")
    _setting(group, "optimizer", choices=("sgd", "adamw"),
             help="training: sgd (momentum 0.9, torchvision's ImageNet recipe) or adamw "
                  "(torchtitan's Llama 3 recipe, the one LLM throughput is quoted with); "
                  "--optimizer-impl picks foreach or fused (default: sgd)")


def _add_distributed_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "multi-GPU and multi-node (torchrun and srun need none of the manual flags)")
    _setting(group, "distributed_dataparallel", "--distributed-dataparallel",
             help="manual launch, one process per node or GPU started by hand; needs "
                  "--rank, --world-size, --dist-backend and --dist-url")
    _setting(group, "device_ids", "--device-ids", type=_device_ids, metavar="IDS",
             help="manual launch: GPUs of this process (e.g. 0,1); one worker each")
    _setting(group, "rank", type=bounded_int(0, MAX_RANKS - 1), metavar="N",
             help="manual launch: rank of this process")
    _setting(group, "world_size", type=bounded_int(1, MAX_RANKS), metavar="N",
             help="manual launch: number of processes")
    _setting(group, "dist_backend", choices=("nccl", "gloo"),
             help="process-group backend (default: nccl on GPUs, which is RCCL on "
                  "ROCm; gloo on the CPU)")
    _setting(group, "dist_url", type=dist_url, metavar="URL",
             help="rendezvous address: tcp://HOST:PORT (e.g. tcp://10.0.0.1:29500), env:// "
                  "(MASTER_ADDR and MASTER_PORT) or file:///shared/path")
    _setting(group, "dist_timeout", metavar="S",
             type=finite_float(MIN_DIST_TIMEOUT_S, MAX_DIST_TIMEOUT_S, low_inclusive=True),
             help="seconds that rendezvous and collectives may wait for other ranks")
    _setting(group, "ddp_bucket_cap_mb", type=finite_float(0, MAX_BUCKET_CAP_MB), metavar="MB",
             help="DistributedDataParallel gradient bucket size")
    _setting(group, "ddp_static_graph",
             help="DistributedDataParallel static_graph=True")
    _setting(group, "ddp_gradient_as_bucket_view",
             help="DistributedDataParallel gradient_as_bucket_view=True")
    _setting(group, "ddp_options", type=keyword_dict, metavar="DICT",
             help="DistributedDataParallel's other keywords as a dict literal, e.g. "
                  "\"{'broadcast_buffers': False}\" (the allowed ones: docs/flags.md)")
    _setting(group, "scaling_baseline", type=path_text, metavar="FILE.json",
             help="a single-device result of the same configuration; adds scaling "
                  "efficiency to the summary")



def _check(config: BenchConfig) -> BenchConfig:
    """Rules that hold for every configuration, swept or not, read from the flags alone."""
    validate(config)
    return config


def _check_kinds(configs: Sequence[BenchConfig]) -> None:
    """The rules of each configuration's kind of run. microbench.scenarios imports torch and
    torchvision (seconds; tens on a loaded machine): here, last, once every rule that needs
    neither has passed, so that --help, --version and a refused flag or combination answer
    without them (issues 45 and 64)."""
    from microbench import scenarios
    for config in configs:
        scenarios.check(config)


def _refuse_fp8_on_cpu(configs: Sequence[BenchConfig]) -> None:
    """--precision fp8 training with --device cpu: steps.low_precision.check refuses it after
    the device probe (and any device the flags do not name), here before torch's import (issue
    64: 30 s on a loaded machine for this one line). The other kinds of run refuse FP8 from the
    flags alone (use --quantize), the line to show first (scenarios' rules)."""
    for config in configs:
        if config.precision == "fp8" and config.mode == "training" and \
                config.device.partition(":")[0] == "cpu":
            raise UsageError(FP8_ON_CPU)


FP8_ON_CPU = ("--precision fp8 needs FP8 matrix units, and the CPU has no FP8 matrix units: use "
              "--precision amp-bf16 here")


def refuse_fp8_without_gpu(args: argparse.Namespace) -> None:
    """FP8 training on --device auto where the installed torch can see no GPU, refused before
    its import (:mod:`~microbench.platform.gpu_presence`). Apart from :func:`to_plan`, which
    reads the flags alone: the entry point calls this first; elsewhere the device probe
    refuses it. Every FP8 configuration comes from --precision (no older flag or preset
    chooses it), and a sweep's training rows from --mode."""
    if "fp8" in (args.precision or ()) and "training" in args.mode and \
            args.device == "auto" and gpu_presence.none_visible():
        raise UsageError(FP8_ON_CPU)


# The older precision flags: several destinations that all set the precision field.
_OLDER_PRECISION_DESTS = ("fp16", "amp", "amp_dtype", "amp_opt_level")


def _from_args(args: argparse.Namespace) -> dict:
    """Every field the command line sets directly, by its schema (derived fields excluded)."""
    values = {}
    for name, item in SCHEMA.items():
        if item.kind == DERIVED:
            continue
        value = getattr(args, item.dest)
        if item.axis and item.kind == VALUE:
            value = value[0] if value else None
        elif item.kind == INVERSE:
            value = not value
        elif isinstance(value, list):
            value = tuple(value)
        values[name] = value
    return values


def to_config(args: argparse.Namespace) -> BenchConfig:
    """The configuration of a single run (the first value of any list flag), every rule checked."""
    config = _config(args)
    _check_kinds([config])
    return config


def _config(args: argparse.Namespace) -> BenchConfig:
    """:func:`to_config` without its kind of run's rules (those import torch)."""
    names.check(args.network)          # a typo refused before torch is imported
    compile_options, compile_notes = parse_compile_context(args.compile_context)
    if args.compile_context and not args.compile:
        raise UsageError("--compileContext needs --compile")
    for name in ("output_file", "csv_file", "output_dir", "plot", "profiler_output"):
        value = getattr(args, name)
        if value is not None and not value.strip():
            raise UsageError(f"--{name.replace('_', '-')} must not be empty")
    if args.output_file is not None:
        _check_file_name(args.output_file)
    precision, precision_notes = _precision(args)
    if any(name != "none" for name in args.quantize) and not args.precision \
            and precision == "fp32" and "precision" not in args.explicit:
        # Quantization starts from BF16 weights (torchao's and gpt-fast's baseline), and so
        # does the unquantized row of a --quantize sweep.
        precision = "bf16"
        precision_notes = [*precision_notes, "--quantize quantizes BF16 weights: --precision "
                                             "bf16 chosen (give --precision to choose another)"]
    config = BenchConfig(
        **_from_args(args), precision=precision, tf32=bool(args.tf32),
        compile_options=compile_options, explicit=tuple(sorted(args.explicit)),
        notes=tuple(args.spelling_notes + precision_notes + compile_notes))
    if args.rerun is not None:
        # What runs: the stored settings with the flags given now in their place.
        effective = as_command_line(spelled(config, replayed_fields()))
        config = replace(config, notes=(f"--rerun {args.rerun} runs: {effective}",
                                        *args.rerun_notes, *config.notes))
    return _check(config)


def _check_file_name(name: str) -> None:
    """--output-file is a name inside --output-dir: results stay where the user said they go
    (a name like ../../x.json or /etc/x would write elsewhere)."""
    separators = {"/", "\\", os.sep} | ({os.altsep} if os.altsep else set())
    if any(sep in name for sep in separators) or name in (".", "..") or os.path.isabs(name):
        raise UsageError(f"--output-file {name!r} must be a file name, not a path: put the "
                         f"directory in --output-dir")
    if "\0" in name:
        raise UsageError("--output-file must not hold a NUL character")


def _precision(args: argparse.Namespace) -> tuple[str, list[str]]:
    """The precision mode of the first configuration: --precision, else the older flags."""
    if args.precision:
        if args.fp16 or args.amp or args.tf32 or args.amp_opt_level is not None:
            raise UsageError("--precision replaces --fp16, --amp, --tf32 and --amp-opt-level: "
                             "use one or the other")
        return lookup(args.precision[0]).name, []
    return from_older_flags(args.fp16, args.amp, args.amp_dtype,
                                            args.amp_opt_level, bool(args.tf32))


# Far above any sweep a person means to run in one invocation (each configuration builds its
# model and runs warm-up and timing); a list of 20,000 batch sizes is a mistake.
MAX_SWEEP_CONFIGURATIONS = 1000


def _sweep_values(args: argparse.Namespace) -> list[dict]:
    """One dict of changes per configuration: the product of the sweep axes' lists, in the
    order the schema nests them (network outermost, the batch size innermost)."""
    if args.compile_mode and (args.compile or args.compile_context):
        raise UsageError("--compile-mode replaces --compile and --compileContext: use one")
    axes = [_axis_changes(args, name) for name in sweep_axes()]
    count = math.prod(len(axis) for axis in axes)
    if count > MAX_SWEEP_CONFIGURATIONS:        # first: the lists as typed are the mistake
        raise UsageError(f"the lists given make a sweep of {count:,} configurations, more than "
                         f"the {MAX_SWEEP_CONFIGURATIONS:,} one invocation runs: split it into "
                         f"several invocations")
    for name, axis in zip(sweep_axes(), axes):
        _refuse_repeated_value(args, name, axis)
    return [{key: value for part in combination for key, value in part.items()}
            for combination in itertools.product(*axes)]


def _refuse_repeated_value(args: argparse.Namespace, name: str, axis: list[dict]) -> None:
    """A list that names one value twice (``--batch-size 8,8``, ``--precision amp,amp-fp16``)
    would run one configuration twice as two rows: refused here, before torch is imported. A
    model named by its name and by an alias is the runner's to find (the model resolved)."""
    if all(change not in axis[:index] for index, change in enumerate(axis)):
        return
    flag, dest = {"precision": ("--precision", "precision"),
                  "compile": ("--compile-mode", "compile_mode")}.get(
        name, (SCHEMA[name].flag, SCHEMA[name].dest))
    given = ",".join(map(str, getattr(args, dest)))
    raise UsageError(f"the sweep lists one configuration twice ({flag} {given}); give each "
                     f"value once (--repeat N measures one configuration N times)")


def _axis_changes(args: argparse.Namespace, name: str) -> list[dict]:
    """The changes one sweep axis makes, one per value of its list (None: not given)."""
    if name == "precision":
        return [_precision_change(value) for value in args.precision or [None]]
    if name == "compile":
        return [_compile_change(mode) for mode in args.compile_mode or [None]]
    return [{name: value} for value in getattr(args, SCHEMA[name].dest) or [None]]


def _precision_change(name: str | None) -> dict:
    if name is None:
        return {}
    row = lookup(name)
    return dict(precision=row.name, tf32=row.tf32)


def _compile_change(mode: str | None) -> dict:
    if mode is None:
        return {}
    return dict(compile=mode != "none",
                compile_options={} if mode in ("none", "default") else {"mode": mode})


def to_plan(args: argparse.Namespace) -> Plan:
    """The plan of this invocation; every rule that the flags alone decide is checked before
    torch is imported (:func:`_check_kinds` comes last)."""
    base = _config(args)
    configs = tuple(_check(replace(base, **change)) for change in _sweep_values(args))
    if args.ab is not None and "repeat" not in args.explicit:
        configs = tuple(replace(config, repeat=AB_ROUNDS) for config in configs)
    plan = _checked_plan(args, base, configs)
    b_configs = [plan.ab.config] if plan.ab is not None else []
    _refuse_fp8_on_cpu([*configs, *b_configs])
    _check_kinds([base, *configs, *b_configs])
    return plan


def _checked_plan(args: argparse.Namespace, base: BenchConfig,
                  configs: tuple[BenchConfig, ...]) -> Plan:
    """The plan, with the rules between its flags checked."""
    plan = Plan(configs=configs, find_max_batch=args.find_max_batch,
                memory_budget_gb=args.memory_budget_gb, max_batch_limit=args.max_batch_limit,
                batch_granularity=args.batch_granularity,
                compare=args.compare, tolerance_pct=args.tolerance,
                compare_any_config=args.compare_any_config, plot=args.plot,
                ab=_ab_plan(args, configs), fail_if=args.fail_if)
    if plan.is_sweep and args.output_file:
        raise UsageError("--output-file names one file, but a sweep writes one result per "
                         "configuration: drop it")
    if (plan.is_sweep or args.find_max_batch) and base.max_noise_pct is not None:
        raise UsageError("--max-noise takes one configuration, not a sweep or --find-max-batch")
    if args.fail_if and not (args.compare or args.ab is not None):
        raise UsageError("--fail-if goes with --compare or --ab")
    if args.compare_any_config and not args.compare:
        raise UsageError("--compare-any-config goes with --compare")
    if plan.is_sweep and (args.compare or args.find_max_batch):
        raise UsageError("--compare and --find-max-batch take one configuration, not a sweep")
    if args.memory_budget_gb is not None and not args.find_max_batch:
        raise UsageError("--memory-budget-gb goes with --find-max-batch")
    if args.plot and not plan.is_sweep:
        raise UsageError("--plot draws a sweep, and this is one configuration: give a list to "
                         "--batch-size, --network, --mode, --precision, --compile-mode or "
                         "--workers")
    return plan


# ---------------------------------------------------------------- parsing argv, once

class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


def _given(parser: argparse.ArgumentParser, words: Sequence[str]) -> dict[str, Any]:
    """The destinations ``words`` set, parsed with every check: a namespace whose every
    destination starts unset keeps argparse from filling in defaults, so what is set was given."""
    defaults = vars(parser.parse_args([]))
    namespace = argparse.Namespace(**{dest: _UNSET for dest in defaults})
    parsed = vars(parser.parse_args(list(words), namespace=namespace))
    return {dest: value for dest, value in parsed.items() if value is not _UNSET}


def _fields_given(dests: Iterable[str]) -> set[str]:
    """The config fields the given destinations set (a preset must not overrule them)."""
    fields = set()
    for dest in dests:
        if dest in _OLDER_PRECISION_DESTS:
            fields.add("precision")
        elif dest == "compile_mode":
            fields |= {"compile", "compile_options"}
        elif (field := field_of_dest(dest)) is not None:
            fields.add(field)
    return fields


# The destinations B may not set (each run of --ab repeats them, or they name A's files).
_AB_REFUSED = frozenset({"ab", "compare", "repeat", "rerun", "output_file"})


def _ab_plan(args: argparse.Namespace, configs: tuple[BenchConfig, ...]):
    """--ab's B: the same command line with FLAGS added or replacing, parsed as A's was."""
    if args.ab is None:
        return None
    try:
        words = shlex.split(args.ab)
    except ValueError as error:                  # an unclosed quote: "'--nhwc"
        raise UsageError(f"--ab {args.ab!r}: cannot split it into flags ({error}); quote B's "
                         f"flags as one word, e.g. --ab \"--batch-size 128\"") from None
    if not words:
        raise UsageError("--ab needs the flags that make B, e.g. --ab \"--nhwc\"")
    if len(configs) > 1 or args.compare or args.find_max_batch or args.output_file:
        raise UsageError("--ab takes one configuration: no sweep, --compare, "
                         "--find-max-batch or --output-file")
    _refuse_abbreviations(words, args.ab)
    if _AB_REFUSED & set(_given(build_parser(), words)):
        raise UsageError(f"--ab {args.ab!r}: B may not change --repeat, --rerun, --compare, "
                         f"--output-file or --ab")
    b_args = parse_args([*args.argv, *words])
    changes = _sweep_values(b_args)
    if len(changes) > 1:
        raise UsageError(f"--ab {args.ab!r} makes B a sweep: give one value")
    b_config = _check(replace(_config(b_args), **changes[0], repeat=configs[0].repeat))
    if replace(b_config, explicit=(), notes=()) == replace(configs[0], explicit=(), notes=()):
        raise UsageError(f"--ab {args.ab!r} changes no setting: B would be A")
    if _measured(b_config) == _measured(configs[0]):
        unused = "; ".join(f"{SCHEMA[name].flag} acts only with {under}"
                           for name, under in identity.without_effect(asdict(b_config)))
        raise UsageError(f"--ab {args.ab!r} changes nothing that is measured "
                         f"({unused or 'only where results go or how they are shown'}): "
                         f"B would be A")
    if configs[0].max_noise_pct is not None:
        raise UsageError("--ab measures --repeat rounds: drop --max-noise")
    return ABPlan(args.ab, b_config, fail_if_slower=args.fail_if == "slower")


def _measured(config: BenchConfig) -> dict:
    """The settings of ``config`` that change what is measured: an output flag (--quiet,
    --csv-file, --no-files), a denominator (--peak-tflops) or a setting that takes no effect
    here (--fp8-recipe without --precision fp8: identity.ONLY_UNDER) makes no B."""
    used = identity.took_effect(asdict(config))
    return {name: used[name] for name in measured_fields()}


def _refuse_abbreviations(words: list[str], flags: str) -> None:
    """B's flags spelled whole: argparse would take ``--output-d X`` for ``--output-dir X`` (or
    ``--rer`` for ``--rerun``), and B would run as something its author did not write; inside
    --ab a word that only starts a flag's name is refused, naming the flags it could be."""
    known = build_parser()._option_string_actions
    for word in words:
        flag = word.partition("=")[0]
        if not flag.startswith("--") or flag == "--" or flag in known:
            continue
        candidates = sorted(name for name in known if name.startswith(flag))
        if candidates:
            raise UsageError(f"--ab {flags!r}: {flag} is not a flag (abbreviations are not "
                             f"taken inside --ab): spell it whole, e.g. "
                             f"{', '.join(candidates[:3])}")


def _joined_ab(argv: list[str]) -> list[str]:
    """``--ab --nhwc`` as ``--ab=--nhwc``: argparse would read B's flags as this command's."""
    joined, words = [], iter(argv)
    for word in words:
        if word == "--ab":
            following = next(words, None)
            joined.append("--ab" if following is None else f"--ab={following}")
        else:
            joined.append(word)
    return joined


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse argv once: the defaults, under the flags a --rerun result stores, under the flags
    given now. ``args.explicit`` holds the config fields given (stored or typed)."""
    argv = _joined_ab(sys.argv[1:] if argv is None else list(argv))
    without_ab = [word for word in argv if not word.startswith("--ab=") and word != "--ab"]
    argv, spelling_notes = _own_spellings(argv)
    parser = build_parser()
    given = _given(parser, argv)
    stored: dict = {}
    notes: list[str] = []
    if given.get("rerun") is not None:
        path = given["rerun"]
        words, notes = rerun.flags_of(path)
        stored = _given(parser, words)
        stored.pop("rerun", None)
    args = argparse.Namespace(**{**vars(parser.parse_args([])), **stored, **given})
    args.explicit = _fields_given({*stored, *given})
    args.rerun_notes, args.spelling_notes = notes, spelling_notes
    args.argv = without_ab             # --ab parses B from these and its own flags
    return args


# timm's benchmark.py spellings that users type from habit: flag -> (our flag, value map).
TIMM_SPELLINGS = {
    "-m": ("--network", {}),
    "-b": ("--batch-size", {}),
    "--num-bench-iter": ("--iterations", {}),
    "--bench": ("--mode", {"train": "training", "inference": "inference"}),
    "--precision": ("--precision", {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}),
}


def _own_spellings(argv: list[str]) -> tuple[list[str], list[str]]:
    """argv with timm's spellings replaced by this tool's own, and a note for each, so that
    what ran is shown in the flags this tool documents."""
    words, notes, index = [], [], 0
    while index < len(argv):
        word = argv[index]
        flag, equals, given = word.partition("=")
        if flag in TIMM_SPELLINGS and (equals or index + 1 < len(argv)):
            ours, values = TIMM_SPELLINGS[flag]
            if not equals:
                index, given = index + 1, argv[index + 1]
            # A list (a sweep's "bfloat16,fp32") is read value by value.
            value = ",".join(values.get(part, part) for part in given.split(","))
            words += [ours, value]
            if (flag, given) != (ours, value):      # our own flag with our own values: no note
                notes.append(f"{flag} {given} is timm's spelling: read as {ours} {value}")
        else:
            words.append(word)
        index += 1
    return words, notes
