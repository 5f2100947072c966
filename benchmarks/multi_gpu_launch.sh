#!/usr/bin/env bash
# Issue 42: the two torchrun commands a new user runs first on several GPUs, exactly as the
# issue gives them (data parallel resnet50 with the fast preset; FSDP llama3_3b with AdamW and
# full activation checkpointing), on N GPUs of one host. Each must exit 0 with one summary.
# Usage: bash benchmarks/multi_gpu_launch.sh N OUTPUT_DIR      (e.g. N=2, then N=4)
set -uo pipefail
n=${1:?usage: $0 N OUTPUT_DIR}
out=${2:?usage: $0 N OUTPUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
cd "$here" || exit 1
status=0
run() {       # NAME, then the tool's flags
    local name=$1; shift
    local started=$SECONDS
    timeout "${LIMIT_S:-300}" torchrun --standalone --nproc-per-node "$n" \
        micro_benchmarking_pytorch.py --output-dir "$out/${name}_$n" "$@" \
        > "$out/${name}_$n.log" 2> "$out/${name}_$n.err"
    local rc=$?
    echo "== $name on $n GPUs: exit $rc in $((SECONDS - started)) s"
    grep -E "^(Num devices|Throughput|Time per mini-batch)|Skew between|tokens/s|per GPU" \
        "$out/${name}_$n.log" | head -8
    [ $rc -eq 0 ] || { status=1; tail -5 "$out/${name}_$n.err"; }
}
run resnet50 --network resnet50 --preset fast --batch-size 256
run llama3_3b --network llama3_3b --parallel fsdp --precision amp-bf16 --optimizer adamw \
    --seq-len 4096 --batch-size 8 --activation-checkpointing full
exit $status
