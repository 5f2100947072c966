#!/usr/bin/env bash
# The node check against issue 52's targets, on one host of NGPUS GPUs (4, or 2 or more):
#   1. a healthy node: nothing flagged in 5 of 5 runs, each within 2 minutes, and no NCCL
#      "unbatched P2P op" warning in their logs (the first run saves the baseline of target 3);
#   2. one GPU (the last) kept busy by another process's loop of large matrix products: that
#      GPU, and only it, flagged in 3 of 3 runs;
#   3. every GPU kept busy at once: with --baseline from the healthy run every GPU, and the
#      links (the all-reduce, and the pairs outside --reduced), flagged in 3 of 3 runs;
#      without it the summary says the node was judged only against itself;
#   4. the all-reduce bus bandwidth at the tool's largest size at least 0.9x what a tight
#      all_reduce loop written here measures on the same GPUs.
# One PASS or FAIL line per target; logs, result documents and the scripts it wrote under OUT.
#
#   benchmarks/node_check.sh 4 "$OUT"            # the targets in full: about 12 minutes on 4 GPUs
#   benchmarks/node_check.sh 4 "$OUT" --reduced  # about 8 minutes: 3 healthy runs, 2 of each
#                                                # busy target (the all-busy ones --quick), --samples 5
# PYTHON=python3 by default.
set -u

if [ $# -lt 2 ] || [ $# -gt 3 ] || { [ $# = 3 ] && [ "$3" != "--reduced" ]; }; then
    echo "usage: $0 NGPUS OUT [--reduced] (NGPUS: 2 or more GPUs of this host; OUT: a folder for logs; --reduced: fewer runs, about 8 minutes on 4 GPUs)" >&2
    exit 2
fi
NGPUS=$1
OUT=$2
REDUCED=${3:-}
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
ALL_RANKS=$(seq -s, 0 $((NGPUS - 1)))
LOOP_PIDS=""
if [ -n "$REDUCED" ]; then
    HEALTHY_RUNS=3; BUSY_RUNS=2; SAMPLES=(--samples 5); ALL_BUSY_MODE=(--quick); MODE="reduced"
else
    HEALTHY_RUNS=5; BUSY_RUNS=3; SAMPLES=(); ALL_BUSY_MODE=(); MODE="full"
fi

say() { echo "$*" | tee -a "$OUT/summary.txt"; }
verdict() {   # verdict NAME OK DETAIL
    if [ "$2" = 1 ]; then say "PASS $1: $3"; else say "FAIL $1: $3"; FAILED=1; fi
}
stop_loops() {
    for pid in $LOOP_PIDS; do
        kill "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    LOOP_PIDS=""
}
trap stop_loops EXIT

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

# flagged_by FILE: which comparisons flagged something ("peers,baseline"; "" none).
flagged_by() {
    "$PY" - "$1" <<'EOF'
import json, sys
try:
    print(",".join(json.load(open(sys.argv[1]))["node_check"].get("flagged_by", [])))
except (OSError, ValueError, KeyError):
    print("unreadable")
EOF
}

# baseline_links FILE: the kinds of link the baseline flagged ("allreduce,p2p"; "" none).
baseline_links() {
    "$PY" - "$1" <<'EOF'
import json, sys
try:
    links = json.load(open(sys.argv[1]))["node_check"]["links"]
except (OSError, ValueError, KeyError):
    print("unreadable")
    sys.exit(0)
print(",".join(sorted({l["kind"] for l in links if (l.get("baseline") or {}).get("flagged")})))
EOF
}

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

# start_loops GPU...: a loop of matrix products on each GPU named; 0 once every one started.
start_loops() {
    local gpu started
    for gpu in "$@"; do
        rm -f "$OUT/busy_started_$gpu"
        CUDA_VISIBLE_DEVICES=$gpu HIP_VISIBLE_DEVICES=$gpu "$PY" "$OUT/busy_loop.py" \
            "$OUT/busy_started_$gpu" > "$OUT/busy_loop_$gpu.log" 2>&1 &
        LOOP_PIDS="$LOOP_PIDS $!"
    done
    for _ in $(seq 1 120); do
        started=0
        for gpu in "$@"; do [ -f "$OUT/busy_started_$gpu" ] && started=$((started + 1)); done
        [ "$started" = $# ] && return 0
        for pid in $LOOP_PIDS; do kill -0 "$pid" 2>/dev/null || return 1; done   # one died
        sleep 1
    done
    return 1
}

# ---------------------------------------------------------------- 1. a healthy node
say "node check on $NGPUS GPUs ($MODE), $(date -u +%Y-%m-%dT%H:%M:%SZ), logs in $OUT"
warned=0
for run in $(seq 1 "$HEALTHY_RUNS"); do
    save=()
    [ "$run" = 1 ] && save=(--save-baseline "$OUT/baseline.json")
    started=$(date +%s)
    "$PY" -m microbench.node --processes "$NGPUS" ${SAMPLES[@]+"${SAMPLES[@]}"} ${save[@]+"${save[@]}"} \
        --json "$OUT/healthy_$run.json" > "$OUT/healthy_$run.log" 2>&1
    code=$?
    took=$(( $(date +%s) - started ))
    flagged=$(flagged_ranks "$OUT/healthy_$run.json")
    grep -q "unbatched" "$OUT/healthy_$run.log" && warned=$((warned + 1))
    ok=0
    [ "$code" = 0 ] && [ "$took" -le "$LIMIT_S" ] && [ -z "$flagged" ] && ok=1
    verdict "healthy run $run of $HEALTHY_RUNS" "$ok" "exit $code, ${took} s (limit ${LIMIT_S} s), flagged ranks: '${flagged}'"
done
verdict "clean console" "$([ "$warned" = 0 ] && echo 1 || echo 0)" "NCCL 'unbatched P2P op' warnings in $warned of $HEALTHY_RUNS healthy logs"

# ---------------------------------------------------------------- 2. one GPU kept busy
if ! start_loops "$BUSY"; then
    verdict "busy GPU $BUSY" 0 "the loop of matrix products did not start (see $OUT/busy_loop_$BUSY.log)"
else
    for run in $(seq 1 "$BUSY_RUNS"); do
        "$PY" -m microbench.node --processes "$NGPUS" ${SAMPLES[@]+"${SAMPLES[@]}"} \
            --json "$OUT/busy_$run.json" > "$OUT/busy_$run.log" 2>&1
        code=$?
        flagged=$(flagged_ranks "$OUT/busy_$run.json")
        ok=0
        [ "$code" = 6 ] && [ "$flagged" = "$BUSY" ] && ok=1
        verdict "busy GPU $BUSY run $run of $BUSY_RUNS" "$ok" "exit $code (6 expected), flagged ranks: '${flagged}' ('$BUSY' expected)"
    done
fi
stop_loops

# ---------------------------------------------------------------- 3. every GPU kept busy
if [ ! -f "$OUT/baseline.json" ]; then
    verdict "every GPU busy" 0 "no baseline: the first healthy run saved none (see $OUT/healthy_1.log)"
elif ! start_loops $(seq 0 "$BUSY"); then
    verdict "every GPU busy" 0 "the loops of matrix products did not all start (see $OUT/busy_loop_*.log)"
else
    for run in $(seq 1 "$BUSY_RUNS"); do
        "$PY" -m microbench.node --processes "$NGPUS" ${SAMPLES[@]+"${SAMPLES[@]}"} ${ALL_BUSY_MODE[@]+"${ALL_BUSY_MODE[@]}"} \
            --baseline "$OUT/baseline.json" --json "$OUT/all_busy_$run.json" \
            > "$OUT/all_busy_$run.log" 2>&1
        code=$?
        flagged=$(flagged_ranks "$OUT/all_busy_$run.json")
        by=$(flagged_by "$OUT/all_busy_$run.json")
        ok=0
        [ "$code" = 6 ] && [ "$flagged" = "$ALL_RANKS" ] && [[ ",$by," == *",baseline,"* ]] && ok=1
        verdict "every GPU busy with --baseline, run $run of $BUSY_RUNS" "$ok" "exit $code (6 expected), flagged ranks: '${flagged}' ('$ALL_RANKS' expected), flagged by: '$by' (baseline expected)"
        # Issue 62: the links too (the pairs are not measured with --quick, the reduced mode's).
        kinds=$(baseline_links "$OUT/all_busy_$run.json")
        expected="allreduce,p2p"; [ "$MODE" = reduced ] && expected="allreduce"
        ok=0; [ "$kinds" = "$expected" ] && ok=1
        verdict "every GPU busy with --baseline, its links, run $run of $BUSY_RUNS" "$ok" "links the baseline flagged: '${kinds}' ('$expected' expected)"
    done
    "$PY" -m microbench.node --processes "$NGPUS" ${SAMPLES[@]+"${SAMPLES[@]}"} --quick \
        --json "$OUT/all_busy_self.json" > "$OUT/all_busy_self.log" 2>&1
    code=$?
    ok=0
    grep -q "judged only against itself" "$OUT/all_busy_self.log" && ok=1
    verdict "every GPU busy without --baseline" "$ok" "exit $code; the summary says the node was judged only against itself: $([ "$ok" = 1 ] && echo yes || echo no)"
fi
stop_loops

# ---------------------------------------------------------------- 4. all-reduce vs a tight loop
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
tool=$("$PY" - "$OUT" "$HEALTHY_RUNS" <<'EOF'
import json, statistics, sys
values = []
for run in range(1, int(sys.argv[2]) + 1):
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
