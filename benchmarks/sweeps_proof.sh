#!/usr/bin/env bash
# The workshop's tables in single invocations (issue: sweeps, capacity, comparisons):
# resnet50 training batch sweeps 8..512 in FP32 and AMP+NHWC, the FP32/AMP/FP16 comparison, and
# the largest batch in FP32 and FP16. Usage: sweeps_proof.sh OUTPUT_DIR
set -uo pipefail
out=${1:?usage: $0 OUTPUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
tool="$here/micro_benchmarking_pytorch.py"
quick=(--network resnet50 --iterations "${ITERATIONS:-20}" --warmup 5 --quiet)
batches=8,16,32,64,128,256,512
echo "== batch sweep, fp32"
"$python" "$tool" "${quick[@]}" --batch-size $batches --output-dir "$out/sweep_fp32" \
    --plot "$out/sweep_fp32.png" | tail -12
echo "== batch sweep, amp + nhwc"
"$python" "$tool" "${quick[@]}" --amp --nhwc --batch-size $batches \
    --output-dir "$out/sweep_amp_nhwc" --plot "$out/sweep_amp_nhwc.png" | tail -12
echo "== precision comparison, batch 128"
"$python" "$tool" "${quick[@]}" --precision fp32,amp,fp16 --batch-size 128 \
    --output-dir "$out/precision" --plot "$out/precision.png" | tail -6
for precision in fp32 fp16; do
  flag=(); [[ $precision == fp16 ]] && flag=(--fp16 1)
  echo "== largest batch, $precision"
  "$python" "$tool" "${quick[@]}" "${flag[@]}" --find-max-batch --batch-size 256 \
      --iterations 10 --output-dir "$out/max_$precision" \
      | grep -E "batch [0-9]+:|Largest|Throughput \[img/sec\] :|Peak memory allocated"
done
