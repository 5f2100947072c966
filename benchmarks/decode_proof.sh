#!/usr/bin/env bash
# Issue 34 on one GPU: this tool's generate mode beside gpt-fast (generate.py's recipe), llama_1b,
# batch 1 and 16, two A/B rounds. Compilation first, all four processes at once (CPU-bound;
# nothing is timed), so that the timed rounds after it start from inductor's warm caches and fit
# one job. Usage: bash benchmarks/decode_proof.sh OUT GPT_FAST_CHECKOUT
set -u
OUT=$1; GPTFAST=$2; HERE=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT/warm"
export PYTHONUNBUFFERED=1
for b in 1 16; do
  python3 "$HERE/micro_benchmarking_pytorch.py" --network llama_1b --mode generate --batch-size $b \
    --prompt-len 128 --gen-len 128 --iterations 1 --precision bf16 --compile \
    --compileContext "{'mode': 'reduce-overhead'}" --no-files > "$OUT/warm/tool_b$b.log" 2>&1 &
  python3 "$HERE/benchmarks/generate_vs_gptfast.py" --worker "$GPTFAST" $b 1 1 \
    "$OUT/warm/gptfast_b$b.json" generate.py > "$OUT/warm/gptfast_b$b.log" 2>&1 &
done
wait
python3 "$HERE/benchmarks/generate_vs_gptfast.py" "$OUT/ab" "$GPTFAST" --batches 1,16 \
  --rounds ${ROUNDS:-2} --timeout 200
