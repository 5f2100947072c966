#!/usr/bin/env bash
# The reference table: resnet50 at batch 128, training and inference, five precision/layout
# configurations, each through the real CLI. Usage: benchmarks/resnet50_table.sh OUTPUT_DIR
set -euo pipefail
out=${1:?usage: $0 OUTPUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
batch=${BATCH:-128}
iterations=${ITERATIONS:-50}
mkdir -p "$out"
configs=("" "--amp" "--fp16 1" "--amp --nhwc" "--amp --nhwc --compile")
for mode in training inference; do
  for flags in "${configs[@]}"; do
    echo "== $mode ${flags:-fp32}"
    # shellcheck disable=SC2086  # flags are deliberately split into words
    "$python" "$here/micro_benchmarking_pytorch.py" --network resnet50 --batch-size "$batch" \
      --iterations "$iterations" --warmup 10 --mode "$mode" $flags --quiet --output-dir "$out" \
      | grep -E "Dtype|Throughput|Iteration time|Percentiles|Coefficient|Peak memory|Compile|WARNING"
  done
done
"$python" "$here/benchmarks/summarize_csv.py" "$out/benchmark_summary.csv"
