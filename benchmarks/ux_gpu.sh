#!/usr/bin/env bash
# What a user sees on a GPU, for the README: a summary with telemetry, a sweep and its plot,
# a Kineto run (library chatter must not reach the terminal) and the largest-batch search.
# Usage: bash benchmarks/ux_gpu.sh OUTPUT_DIR
set -uo pipefail
out=${1:?usage: $0 OUTPUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
tool=("${PYTHON:-python3}" "$here/micro_benchmarking_pytorch.py")
mkdir -p "$out"
echo "== summary"
"${tool[@]}" --network resnet50 --batch-size 128 --amp --nhwc --iterations 50 --warmup 10 \
    --quiet --output-dir "$out/summary" > "$out/summary.log" 2> "$out/summary.err"
echo "== sweep"
"${tool[@]}" --network resnet50 --batch-size 32,64,128,256 --precision fp32,amp-bf16 --nhwc \
    --iterations 20 --warmup 5 --output-dir "$out/sweep" --plot "$out/batch.png" \
    > "$out/sweep.log" 2> "$out/sweep.err"
echo "== kineto"
"${tool[@]}" --network resnet18 --batch-size 64 --iterations 10 --kineto --quiet \
    --output-dir "$out/kineto" > "$out/kineto.log" 2> "$out/kineto.err"
echo "== largest batch"
"${tool[@]}" --network resnet50 --precision amp-bf16 --nhwc --find-max-batch --batch-size 256 \
    --memory-budget-gb 24 --iterations 10 --warmup 3 --quiet --output-dir "$out/max" \
    > "$out/max.log" 2> "$out/max.err"
for name in summary sweep kineto max; do
  echo "== $name: stderr"; cat "$out/$name.err"
done
