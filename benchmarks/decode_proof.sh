#!/usr/bin/env bash
# Issue 34 on one GPU: this tool's generate mode beside gpt-fast (its generate.py recipe) at
# llama_1b, batch 1 and 16, A/B alternated, and hf:llama at the same shape; every side compiled
# once first, all at the same time and untimed (--warm), so the timed rounds fit one job.
# Usage: bash benchmarks/decode_proof.sh OUT GPT_FAST_CHECKOUT   (ROUNDS=2 by default)
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONUNBUFFERED=1
python3 "$HERE/benchmarks/generate_vs_gptfast.py" "$1" "$2" --batches 1,16 \
  --rounds "${ROUNDS:-2}" --warm --hf --timeout 200
