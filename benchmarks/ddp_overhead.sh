#!/usr/bin/env bash
# Where does data-parallel AMP+NHWC resnet50 lose time? Per-GPU throughput of: one GPU without
# DDP; DDP on one rank (DDP's own cost: hooks, bucket copies, a one-rank all-reduce); two ranks
# with DDP's defaults; and two ranks with each tuning option. Usage: ddp_overhead.sh OUTPUT_DIR
set -uo pipefail
out=${1:?usage: $0 OUTPUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
tool="$here/micro_benchmarking_pytorch.py"
mkdir -p "$out"
common=(--network resnet50 --amp --nhwc --iterations "${ITERATIONS:-100}" --warmup 10 --quiet
        --output-file result.json)

launch() {   # launch NAME NPROC [flags...]: NPROC 0 means a plain single process
  local name=$1 nproc=$2; shift 2
  echo "== $name"
  if [[ $nproc == 0 ]]; then
    "$python" "$tool" "${common[@]}" --batch-size 128 --output-dir "$out/$name" "$@" \
        > "$out/$name.log" 2>&1
  else
    "$python" -m torch.distributed.run --nproc-per-node "$nproc" "$tool" "${common[@]}" \
        --batch-size $((128 * nproc)) --output-dir "$out/$name" "$@" > "$out/$name.log" 2>&1
  fi || { echo "failed"; tail -5 "$out/$name.log"; }
}

launch single 0
launch ddp_one_rank 1
launch ddp_two 2
launch ddp_two_bucket_view 2 --ddp-gradient-as-bucket-view
launch ddp_two_static 2 --ddp-static-graph --ddp-gradient-as-bucket-view
launch ddp_two_bucket100 2 --ddp-bucket-cap-mb 100 --ddp-gradient-as-bucket-view
launch ddp_two_bucket5 2 --ddp-bucket-cap-mb 5 --ddp-gradient-as-bucket-view
"$python" - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
base = None
print(f"{'run':<22} {'GPUs':>4} {'img/s per GPU':>14} {'vs single':>10} {'median ms':>10}")
for name in ("single", "ddp_one_rank", "ddp_two", "ddp_two_bucket_view", "ddp_two_static",
             "ddp_two_bucket100", "ddp_two_bucket5"):
    path = out / name / "result.json"
    if not path.exists():
        print(f"{name:<22} (no result)")
        continue
    doc = json.loads(path.read_text())
    per_gpu = doc["Throughput [img/sec]"] / doc["GPUs"]
    base = base or per_gpu
    median = (doc.get("distributed") or {}).get("all_ranks_stats", doc["timing"]["stats"])["median_ms"]
    print(f"{name:<22} {doc['GPUs']:>4} {per_gpu:>14.1f} {per_gpu / base:>10.3f} {median:>10.3f}")
PY
