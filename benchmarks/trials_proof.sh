#!/usr/bin/env bash
# Does the printed prediction interval mean what it says? RUNS invocations (default 5) of the same
# `--repeat 5` resnet50 --amp --nhwc run, one after another on one GPU; each trial is a fresh
# worker process. Then, for each invocation after the first, whether its headline (the geometric
# mean of its trials) falls inside the previous invocation's 95% prediction interval ("next run
# likely in ...") and, for contrast, inside its 95% CI of the geometric mean (which is about the
# headline, not about the next run, and should miss more often). Then two A/B runs: --ab "--nhwc"
# on resnet50 --amp (a known win: expect "faster") and --ab "--seed 2" (no real change: expect
# "no difference detected"); AB_REPEATS (default 1) of each.
# Usage: bash benchmarks/trials_proof.sh OUTPUT_DIR   (RUNS=10, AB_REPEATS=3, EXTRA="..."
# appended; ~5 min on an H100 with the defaults; SKIP_AB=1 leaves the A/B runs out)
set -uo pipefail
out=${1:?usage: $0 OUTPUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
runs=${RUNS:-5}
extra=(${EXTRA:-})
mkdir -p "$out"
for i in $(seq 1 "$runs"); do
    "$python" "$here/micro_benchmarking_pytorch.py" --network resnet50 --batch-size 128 --amp \
        --nhwc --iterations 30 --warmup 10 --repeat 5 --quiet --output-dir "$out" \
        --output-file "invocation_$i" "${extra[@]}" 2>&1 | tee "$out/invocation_$i.log"
done
"$python" - "$out" "$runs" <<'PY'
import json, sys
out, runs = sys.argv[1], int(sys.argv[2])
docs = [json.load(open(f"{out}/invocation_{i}.json")) for i in range(1, runs + 1)]
inside_pi = inside_ci = 0
print("invocation  headline img/s  95% CI of the geometric mean  95% prediction interval")
for i, doc in enumerate(docs, 1):
    t = doc["trials"]
    print(f"{i:>10}  {t['headline']:>14.1f}  {t['ci95_low']:>12.1f} to {t['ci95_high']:<12.1f}"
          f"  {t['prediction95_low']:.1f} to {t['prediction95_high']:.1f}")
for before, after in zip(docs, docs[1:]):
    b, headline = before["trials"], after["trials"]["headline"]
    inside_pi += b["prediction95_low"] <= headline <= b["prediction95_high"]
    inside_ci += b["ci95_low"] <= headline <= b["ci95_high"]
pairs = len(docs) - 1
print(f"next headline inside the previous 95% prediction interval: {inside_pi} of {pairs}")
print(f"next headline inside the previous 95% CI of the geometric mean: {inside_ci} of {pairs}")
headlines = [d["trials"]["headline"] for d in docs]
print(f"headlines moved {(max(headlines) / min(headlines) - 1):.1%} (max/min - 1) across "
      f"{len(docs)} invocations")
PY
[ -n "${SKIP_AB:-}" ] && exit 0
for i in $(seq 1 "${AB_REPEATS:-1}"); do
    for flags in "--nhwc" "--seed 2"; do
        name=$(echo "$flags" | tr -d ' -')
        "$python" "$here/micro_benchmarking_pytorch.py" --network resnet50 --batch-size 128 \
            --amp --iterations 30 --warmup 10 --repeat 5 --quiet --output-dir "$out/ab_${name}_$i" \
            --ab "$flags" "${extra[@]}" 2>&1 | tee "$out/ab_${name}_$i.log" | grep "^A/B: B\|^  [AB]: "
    done
done
