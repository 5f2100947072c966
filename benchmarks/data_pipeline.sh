#!/usr/bin/env bash
# Is the GPU waiting for data? (issue 25). resnet50 training --amp --nhwc at batch 256 fed by the
# generated JPEG set (--data loader, normalisation on the GPU, pinned memory), sweeping the loader
# workers 0,2,4,8,12,15,16 with the plot of pipeline images/s and wait share against workers; then
# resnet18 (a lighter model, so the decoder has to keep up with more images/s) with CPU decode
# against GPU decode (nvJPEG through torchvision.io.decode_jpeg). The set (4096 JPEGs, 384x384)
# is made once into $XDG_CACHE_HOME/micro_benchmarking_pytorch, before the first run's timing.
# Checks printed at the end: --workers 0 is reported input-bound; the best worker count keeps at
# least 0.9 of the model-alone throughput.
# Usage: bash benchmarks/data_pipeline.sh OUTPUT_DIR   (about 5 minutes on a 16-core H100 host;
# ITERATIONS=N changes the timed steps (60), WORKERS=LIST the sweep's worker counts, EXTRA="..."
# is appended to every command)
set -uo pipefail
out=${1:?usage: $0 OUTPUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
extra=(${EXTRA:-})
tool="$here/micro_benchmarking_pytorch.py"
mkdir -p "$out"
pipeline=(--data loader --transforms gpu --pin-memory 1 --iterations "${ITERATIONS:-60}"
          --warmup 5 --quiet)

workers=${WORKERS:-0,2,4,8,12,15,16}
echo "== resnet50 training, amp + nhwc, batch 256, workers $workers"
"$python" "$tool" --network resnet50 --amp --nhwc --batch-size 256 "${pipeline[@]}" \
    --workers "$workers" --output-dir "$out/workers" --plot "$out/workers.png" "${extra[@]}" \
    > "$out/workers.log" 2>&1 || { echo failed; tail -5 "$out/workers.log"; }
sed -n '/^Input pipeline/,/^Results JSON/p' "$out/workers.log"

echo "== resnet50 training, amp + nhwc, batch 256, 16 workers, decode gpu"
"$python" "$tool" --network resnet50 --amp --nhwc --batch-size 256 "${pipeline[@]}" \
    --workers 16 --decode gpu --output-dir "$out/resnet50_gpu" "${extra[@]}" \
    > "$out/resnet50_gpu.log" 2>&1 || { echo failed; tail -5 "$out/resnet50_gpu.log"; }
grep -E "^ *(Pipeline |Loader alone|Model alone|Wait for data|Verdict)" "$out/resnet50_gpu.log"

for decode in cpu gpu; do
  echo "== resnet18 training, amp + nhwc, batch 256, 16 workers, decode $decode"
  "$python" "$tool" --network resnet18 --amp --nhwc --batch-size 256 "${pipeline[@]}" \
      --workers 16 --decode "$decode" --output-dir "$out/resnet18_$decode" "${extra[@]}" \
      > "$out/resnet18_$decode.log" 2>&1 || { echo failed; tail -5 "$out/resnet18_$decode.log"; }
  grep -E "^ *(Pipeline |Loader alone|Model alone|Wait for data|Loader worker|Verdict)" \
      "$out/resnet18_$decode.log"
done

"$python" - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print(f"\n{'run':<22} {'workers':>7} {'decode':>6} {'pipeline':>9} {'loader':>9} {'model':>9} "
      f"{'kept':>5} {'wait p50':>8} {'wait p99':>8}  verdict")
rows = []
for path in sorted(out.glob("*/*.json")):
    if path.name.startswith("sweep_"):
        continue
    data = json.loads(path.read_text()).get("data")
    if not data:
        print(f"{path.parent.name}/{path.name}: no data block")
        continue
    rows.append((path.parent.name, data))
    kept = data["pipeline_per_s"] / data["model_alone_per_s"]
    print(f"{path.parent.name + '/' + path.stem:<22.22} {data['workers']:>7} {data['decode']:>6} "
          f"{data['pipeline_per_s']:>9.0f} {data['loader_alone_per_s']:>9.0f} "
          f"{data['model_alone_per_s']:>9.0f} {kept:>5.0%} {data['wait']['share_median']:>8.1%} "
          f"{data['wait']['share_p99']:>8.1%}  {data['verdict']['kind']}")
sweep = [data for name, data in rows if name == "workers"]
resnet50 = sweep + [data for name, data in rows if name == "resnet50_gpu"]
zero = [data for data in sweep if data["workers"] == 0]
if zero:
    ok = zero[0]["verdict"]["kind"] == "input-bound"
    print(f"{'PASS' if ok else 'FAIL'}: --workers 0 is {zero[0]['verdict']['kind']}")
if resnet50:
    best = max(resnet50, key=lambda data: data["pipeline_per_s"])
    kept = best["pipeline_per_s"] / best["model_alone_per_s"]
    print(f"{'PASS' if kept >= 0.9 else 'FAIL'}: best resnet50 pipeline ({best['workers']} "
          f"workers, decode {best['decode']}) keeps "
          f"{kept:.0%} of the model-alone throughput (target: 90%)")
PY
