#!/usr/bin/env bash
# Data-parallel scaling of the fast path: resnet50 training at 128 images per GPU with
# --preset fast (CUDA graphs) on one GPU, then three consecutive two-GPU runs under torchrun
# against it, then one two-GPU run with larger DDP buckets. Compilation is paid by the first
# run of each shape; inductor's caches serve the rest.
# Usage: bash benchmarks/fast_scaling.sh OUTPUT_DIR   (EXTRA="..." is appended to every command)
set -uo pipefail
out=${1:?usage: $0 OUTPUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
extra=(${EXTRA:-})
tool="$here/micro_benchmarking_pytorch.py"
common=(--network resnet50 --iterations 50 --warmup 10 --quiet --preset fast)
mkdir -p "$out"

echo "== 1 GPU, --preset fast"
"$python" "$tool" "${common[@]}" --batch-size 128 --output-dir "$out/one" --output-file fast \
    "${extra[@]}" > "$out/one.log" 2>&1 || { echo failed; tail -5 "$out/one.log"; }
for run in 1 2 3; do
  echo "== 2 GPUs, --preset fast, run $run"
  "$python" -m torch.distributed.run --nproc-per-node 2 "$tool" "${common[@]}" \
      --batch-size 256 --scaling-baseline "$out/one/fast.json" --output-dir "$out/two_$run" \
      --output-file fast "${extra[@]}" > "$out/two_$run.log" 2>&1 \
      || { echo failed; tail -5 "$out/two_$run.log"; }
done
echo "== 2 GPUs, --preset fast --ddp-bucket-cap-mb 100"
"$python" -m torch.distributed.run --nproc-per-node 2 "$tool" "${common[@]}" --batch-size 256 \
    --ddp-bucket-cap-mb 100 --scaling-baseline "$out/one/fast.json" --output-dir "$out/two_b100" \
    --output-file fast "${extra[@]}" > "$out/two_b100.log" 2>&1 \
    || { echo failed; tail -5 "$out/two_b100.log"; }

"$python" - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print(f"{'run':<10} {'GPUs':>4} {'img/s':>10} {'per GPU':>9} {'skew':>7} {'efficiency':>10}")
for path in sorted(out.glob("*/*.json")):
    doc = json.loads(path.read_text())
    dist = doc.get("distributed") or {}
    eff, skew = dist.get("scaling_efficiency"), dist.get("skew")
    print(f"{path.parent.name:<10} {doc['GPUs']:>4} {doc['Throughput [img/sec]']:>10.1f} "
          f"{doc['Throughput [img/sec]'] / doc['GPUs']:>9.1f} "
          f"{'-' if skew is None else f'{skew:.2%}':>7} {'-' if eff is None else f'{eff:.1%}':>10}")
notes = json.loads((out / "one" / "fast.json").read_text())["notes"] if (out / "one" / "fast.json").exists() else []
print("\n".join(n for n in notes if "preset" in n))
PY
