#!/usr/bin/env bash
# Data-parallel scaling of resnet50 training at 128 images per GPU, AMP+NHWC and FP32: one GPU,
# then torchrun on each count in GPUS, each with --scaling-baseline pointing at the one-GPU JSON.
# Usage: GPUS="2 4" benchmarks/scaling.sh OUTPUT_DIR
set -uo pipefail
out=${1:?usage: $0 OUTPUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
per_gpu=${PER_GPU_BATCH:-128}
counts=${GPUS:-2}
tool="$here/micro_benchmarking_pytorch.py"
mkdir -p "$out"
common=(--network resnet50 --iterations 50 --warmup 10 --quiet --output-file result.json)

for precision in amp_nhwc fp32; do
  flags=(); [[ $precision == amp_nhwc ]] && flags=(--amp --nhwc)
  dir="$out/$precision"
  echo "== $precision, 1 GPU"
  "$python" "$tool" "${common[@]}" "${flags[@]}" --batch-size "$per_gpu" --output-dir "$dir/1" \
      > "$dir.1.log" 2>&1 || { echo "failed"; tail -5 "$dir.1.log"; }
  for n in $counts; do
    echo "== $precision, $n GPUs"
    "$python" -m torch.distributed.run --nproc-per-node "$n" "$tool" "${common[@]}" "${flags[@]}" \
        --batch-size $((per_gpu * n)) --scaling-baseline "$dir/1/result.json" \
        --output-dir "$dir/$n" > "$dir.$n.log" 2>&1 || { echo "failed"; tail -5 "$dir.$n.log"; }
  done
done
# One DDP tuning variant on the largest count: bigger buckets, gradients as bucket views.
last=${counts##* }
echo "== amp_nhwc, $last GPUs, --ddp-bucket-cap-mb 100 --ddp-gradient-as-bucket-view"
"$python" -m torch.distributed.run --nproc-per-node "$last" "$tool" "${common[@]}" --amp --nhwc \
    --batch-size $((per_gpu * last)) --scaling-baseline "$out/amp_nhwc/1/result.json" \
    --ddp-bucket-cap-mb 100 --ddp-gradient-as-bucket-view --output-dir "$out/amp_nhwc_tuned/$last" \
    > "$out/amp_nhwc_tuned.$last.log" 2>&1 || echo "failed"

"$python" - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print(f"{'config':<14} {'GPUs':>4} {'global img/s':>13} {'per GPU':>9} {'skew':>7} {'efficiency':>10}")
for path in sorted(out.glob("*/*/result.json"), key=lambda p: (p.parent.parent.name, int(p.parent.name))):
    doc = json.loads(path.read_text())
    dist = doc.get("distributed") or {}
    eff = dist.get("scaling_efficiency")
    skew = f"{dist['skew']:.2%}" if dist else "-"
    efficiency = f"{eff:.1%}" if eff else "-"
    print(f"{path.parent.parent.name:<14} {doc['GPUs']:>4} {doc['Throughput [img/sec]']:>13.1f} "
          f"{doc['Throughput [img/sec]'] / doc['GPUs']:>9.1f} {skew:>7} {efficiency:>10}")
    print(f"  ({doc['env']['device_name']}, PyTorch {doc['env']['torch']})") if doc["GPUs"] == 1 else None
PY
