#!/usr/bin/env bash
# The node check against issue 47's targets, on one host of NGPUS GPUs (4, or 2):
#   1. a healthy node: nothing flagged in 3 of 3 runs, each within 2 minutes;
#   2. one GPU (the last) kept busy by another process's loop of large matrix products: that
#      GPU, and only it, flagged in 3 of 3 runs;
#   3. the all-reduce bus bandwidth at the tool's largest size at least 0.9x what a tight
#      all_reduce loop written here measures on the same GPUs.
# One PASS or FAIL line per target; logs, result documents and the scripts it wrote under OUT.
#
#   benchmarks/node_check.sh 4 "$OUT"          # PYTHON=python3 by default
set -u

if [ $# -ne 2 ]; then
    echo "usage: $0 NGPUS OUT (NGPUS: 2 or more GPUs of this host; OUT: a folder for logs)" >&2
    exit 2
fi
NGPUS=$1
OUT=$2
PY=${PYTHON:-python3}
case "$NGPUS" in
    ''|*[!0-9]*) echo "NGPUS must be a number, got '$NGPUS'" >&2; exit 2 ;;
esac
if [ "$NGPUS" -lt 2 ]; then
    echo "NGPUS must be 2 or more: a single GPU has no peers to be compared with" >&2
    exit 2
fi
mkdir -p "$OUT" || exit 2
cd "$(dirname "$0")/.." || exit 2
FAILED=0
LIMIT_S=120
BUSY=$((NGPUS - 1))
LOOP_PID=""

say() { echo "$*" | tee -a "$OUT/summary.txt"; }
verdict() {   # verdict NAME OK DETAIL
    if [ "$2" = 1 ]; then say "PASS $1: $3"; else say "FAIL $1: $3"; FAILED=1; fi
}
stop_loop() {
    if [ -n "$LOOP_PID" ]; then
        kill "$LOOP_PID" 2>/dev/null
        wait "$LOOP_PID" 2>/dev/null
        LOOP_PID=""
    fi
}
trap stop_loop EXIT

# flagged_ranks FILE: the flagged ranks of a result document, comma-separated ("" none).
flagged_ranks() {
    "$PY" - "$1" <<'EOF'
import json, sys
try:
    check = json.load(open(sys.argv[1]))["node_check"]
except (OSError, ValueError, KeyError):
    print("unreadable")
    sys.exit(0)
print(",".join(str(g["rank"]) for g in check["gpus"] if g["flagged"]))
EOF
}

# ---------------------------------------------------------------- 1. a healthy node
say "node check on $NGPUS GPUs, $(date -u +%Y-%m-%dT%H:%M:%SZ), logs in $OUT"
for run in 1 2 3; do
    started=$(date +%s)
    "$PY" -m microbench.node --processes "$NGPUS" --json "$OUT/healthy_$run.json" \
        > "$OUT/healthy_$run.log" 2>&1
    code=$?
    took=$(( $(date +%s) - started ))
    flagged=$(flagged_ranks "$OUT/healthy_$run.json")
    ok=0
    [ "$code" = 0 ] && [ "$took" -le "$LIMIT_S" ] && [ -z "$flagged" ] && ok=1
    verdict "healthy run $run" "$ok" "exit $code, ${took} s (limit ${LIMIT_S} s), flagged ranks: '${flagged}'"
done

# ---------------------------------------------------------------- 2. one GPU kept busy
cat > "$OUT/busy_loop.py" <<'EOF'
"""Large matrix products on the one GPU this process sees, until it is killed."""
import sys
import torch

a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    a @ b
torch.cuda.synchronize()
open(sys.argv[1], "w").write("started\n")
while True:
    for _ in range(50):
        c = a @ b
    torch.cuda.synchronize()
EOF
rm -f "$OUT/busy_started"
CUDA_VISIBLE_DEVICES=$BUSY HIP_VISIBLE_DEVICES=$BUSY "$PY" "$OUT/busy_loop.py" "$OUT/busy_started" \
    > "$OUT/busy_loop.log" 2>&1 &
LOOP_PID=$!
for _ in $(seq 1 120); do
    [ -f "$OUT/busy_started" ] && break
    kill -0 "$LOOP_PID" 2>/dev/null || break
    sleep 1
done
if [ ! -f "$OUT/busy_started" ]; then
    verdict "busy GPU $BUSY" 0 "the loop of matrix products did not start (see $OUT/busy_loop.log)"
else
    for run in 1 2 3; do
        "$PY" -m microbench.node --processes "$NGPUS" --json "$OUT/busy_$run.json" \
            > "$OUT/busy_$run.log" 2>&1
        code=$?
        flagged=$(flagged_ranks "$OUT/busy_$run.json")
        ok=0
        [ "$code" = 6 ] && [ "$flagged" = "$BUSY" ] && ok=1
        verdict "busy GPU $BUSY run $run" "$ok" "exit $code (6 expected), flagged ranks: '${flagged}' ('$BUSY' expected)"
    done
fi
stop_loop

# ---------------------------------------------------------------- 3. all-reduce vs a tight loop
cat > "$OUT/allreduce_loop.py" <<'EOF'
"""A tight all_reduce loop at the node check's largest size: nccl-tests' bus bandwidth."""
import os
import time

import torch
import torch.distributed as dist

size = int(os.environ.get("SIZE_BYTES", 512 << 20))
rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
n = dist.get_world_size()
x = torch.ones(size // 4, device="cuda")
for _ in range(5):
    dist.all_reduce(x)
samples = []
for _ in range(8):
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(10):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    elapsed = torch.tensor([time.perf_counter() - start], device="cuda", dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)       # the collective ends with its last rank
    samples.append(size / (elapsed.item() / 10) * 2 * (n - 1) / n / 1e9)
if rank == 0:
    samples.sort()
    print(f"BUSBW_MEDIAN {samples[len(samples) // 2]:.3f} BUSBW_BEST {samples[-1]:.3f}")
dist.destroy_process_group()
EOF
"$PY" -m torch.distributed.run --standalone --nproc-per-node "$NGPUS" "$OUT/allreduce_loop.py" \
    > "$OUT/allreduce_loop.log" 2>&1
loop=$(grep -o 'BUSBW_MEDIAN [0-9.]*' "$OUT/allreduce_loop.log" | awk '{print $2}')
tool=$("$PY" - "$OUT" <<'EOF'
import json, statistics, sys
values = []
for run in (1, 2, 3):
    try:
        check = json.load(open(f"{sys.argv[1]}/healthy_{run}.json"))["node_check"]
    except (OSError, ValueError, KeyError):
        continue
    sizes = check["allreduce"][0]["sizes"]
    if sizes and sizes[-1]["median_gbs"]:
        values.append(sizes[-1]["median_gbs"])
print(f"{statistics.median(values):.3f}" if values else "")
EOF
)
if [ -z "$loop" ] || [ -z "$tool" ]; then
    verdict "all-reduce vs tight loop" 0 "missing a figure: tool '$tool', loop '$loop' (see $OUT/allreduce_loop.log)"
else
    ratio=$("$PY" -c "print(f'{$tool / $loop:.3f}')")
    ok=$("$PY" -c "print(1 if $tool >= 0.9 * $loop else 0)")
    verdict "all-reduce vs tight loop" "$ok" "tool ${tool} GB/s, loop ${loop} GB/s, ratio ${ratio} (at least 0.9)"
fi

say "$( [ "$FAILED" = 0 ] && echo "ALL PASS" || echo "SOME FAILED" )"
exit "$FAILED"
