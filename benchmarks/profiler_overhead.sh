#!/usr/bin/env bash
# Does profiling change the numbers it sits beside? resnet50, batch 128, --amp --nhwc: the timed
# throughput without any profiler (first and last, to see drift) and with each profiler flag,
# then nsys with the capture range when nsys is installed. Usage: profiler_overhead.sh OUTPUT_DIR
set -uo pipefail
out=${1:?usage: $0 OUTPUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
mkdir -p "$out"
common=(--network resnet50 --batch-size 128 --amp --nhwc --iterations "${ITERATIONS:-50}" --warmup 10 --quiet)

run() {   # run NAME [extra flags...]
  local name=$1; shift
  echo "== $name"
  "$python" "$here/micro_benchmarking_pytorch.py" "${common[@]}" "$@" \
      --output-dir "$out/$name" --output-file result.json > "$out/$name.log" 2>&1
  echo "rc=$?"
  grep -E "^Throughput \[img/sec\] :|^MFU|Achieved|FLOPs per iteration|WARNING|error" "$out/$name.log"
}

run baseline
run autograd_profiler --autograd_profiler
run kineto --kineto --profiler-output "$out/traces/"
run flops_prof_step --flops-prof-step 10
run capture_range --capture-range
run baseline_again
if command -v nsys > /dev/null; then
  echo "== nsys with --capture-range"
  nsys profile --capture-range=cudaProfilerApi --capture-range-end=stop -o "$out/nsys_capture" \
      "$python" "$here/micro_benchmarking_pytorch.py" "${common[@]}" --capture-range \
      --output-dir "$out/nsys" --output-file result.json > "$out/nsys.log" 2>&1
  echo "rc=$?"; grep -E "^Throughput \[img/sec\] :|Generated|report" "$out/nsys.log"
else
  echo "== nsys: not installed on this machine"
fi
"$python" - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = {}
for path in sorted(out.glob("*/result.json")):
    doc = json.loads(path.read_text())
    rows[path.parent.name] = doc
base = rows.get("baseline", {}).get("Throughput [img/sec]")
print(f"{'run':<20} {'img/s':>10} {'vs baseline':>12} {'median ms':>10} {'MFU':>7}")
for name, doc in rows.items():
    tput = doc["Throughput [img/sec]"]
    mfu = (doc.get("flops") or {}).get("mfu")
    ratio = f"{tput / base:.4f}" if base else "-"
    print(f"{name:<20} {tput:>10.1f} {ratio:>12} {doc['timing']['stats']['median_ms']:>10.3f} "
          f"{(f'{mfu:.1%}' if mfu is not None else 'unknown'):>7}")
flops = rows.get("baseline", {}).get("flops") or {}
print("peak used:", flops.get("peak_tflops"), "-", flops.get("peak_source"))
PY
