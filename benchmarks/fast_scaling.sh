#!/usr/bin/env bash
# Data-parallel scaling of the fast path: resnet50 training at 128 images per GPU with
# --preset fast on one GPU, then three consecutive two-GPU runs under torchrun against it, and one
# two-GPU run of plain --amp --nhwc for comparison. Compilation is paid by the first run of each
# shape; inductor's caches serve the rest.
# Usage: bash benchmarks/fast_scaling.sh OUTPUT_DIR   (EXTRA="..." is appended to every command)
set -uo pipefail
out=${1:?usage: $0 OUTPUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
extra=(${EXTRA:-})
tool="$here/micro_benchmarking_pytorch.py"
common=(--network resnet50 --iterations 50 --warmup 10 --quiet)
mkdir -p "$out"

# Under DDP the preset compiles in the default mode; the one-GPU baseline runs the same settings
# (--scaling-baseline refuses another compile setting).
echo "== 1 GPU, --preset fast --compile-mode default"
"$python" "$tool" "${common[@]}" --preset fast --compile-mode default --batch-size 128 \
    --output-dir "$out/one" --output-file fast "${extra[@]}" > "$out/one.log" 2>&1 \
    || { echo failed; tail -5 "$out/one.log"; }
for run in 1 2 3; do
  echo "== 2 GPUs, --preset fast, run $run"
  "$python" -m torch.distributed.run --nproc-per-node 2 "$tool" "${common[@]}" --preset fast \
      --batch-size 256 --scaling-baseline "$out/one/fast.json" --output-dir "$out/two_$run" \
      --output-file fast "${extra[@]}" > "$out/two_$run.log" 2>&1 \
      || { echo failed; tail -5 "$out/two_$run.log"; }
done
echo "== 1 and 2 GPUs, --preset fast --compile-mode reduce-overhead (CUDA graphs under DDP)"
"$python" "$tool" "${common[@]}" --preset fast --compile-mode reduce-overhead --batch-size 128 \
    --output-dir "$out/one_graphs" --output-file graphs "${extra[@]}" > "$out/one_graphs.log" 2>&1 \
    || echo failed
"$python" -m torch.distributed.run --nproc-per-node 2 "$tool" "${common[@]}" --preset fast \
    --compile-mode reduce-overhead --batch-size 256 --scaling-baseline "$out/one_graphs/graphs.json" \
    --output-dir "$out/two_graphs" --output-file graphs "${extra[@]}" > "$out/two_graphs.log" 2>&1 \
    || { echo failed; tail -5 "$out/two_graphs.log"; }
echo "== 1 and 2 GPUs, --amp --nhwc (this tool's older best flags)"
"$python" "$tool" "${common[@]}" --amp --nhwc --batch-size 128 --output-dir "$out/one_amp" \
    --output-file amp "${extra[@]}" > "$out/one_amp.log" 2>&1 || echo failed
"$python" -m torch.distributed.run --nproc-per-node 2 "$tool" "${common[@]}" --amp --nhwc \
    --batch-size 256 --scaling-baseline "$out/one_amp/amp.json" --output-dir "$out/two_amp" \
    --output-file amp "${extra[@]}" > "$out/two_amp.log" 2>&1 || echo failed

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
