#!/usr/bin/env bash
# Transformer workloads on one GPU through the real CLI: llama_tiny and llama_medium training in
# bf16 with every attention implementation, eager and compiled, then generation at batch 1 and 16.
# Usage: PARTS="eager compiled generate" bash benchmarks/llama_proof.sh OUTPUT_DIR
set -uo pipefail
out=${1:?usage: $0 OUTPUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
parts=${PARTS:-eager compiled generate}
tool=("$python" "$here/micro_benchmarking_pytorch.py")
# EXTRA goes last on every command line (a CPU check: EXTRA="--device cpu --batch-size 2 ...").
extra=(${EXTRA:-})
common=(--precision amp-bf16 --iterations ${ITERATIONS:-30} --warmup 10 --quiet --output-dir "$out")
mkdir -p "$out"

for part in $parts; do
  case $part in
    eager)   # every attention implementation, no compile: one sweep per model
      "${tool[@]}" --network llama_tiny --batch-size 8 --attention eager,sdpa,flash,efficient,math \
          "${common[@]}" "${extra[@]}" > "$out/tiny_eager.log" 2>&1 || echo "tiny eager failed"
      "${tool[@]}" --network llama_medium --batch-size 16 --attention eager,sdpa,flash,efficient,math \
          "${common[@]}" "${extra[@]}" > "$out/medium_eager.log" 2>&1 || echo "medium eager failed" ;;
    compiled)   # torch.compile of the explicit formula and of PyTorch's own SDPA choice
      "${tool[@]}" --network llama_tiny --batch-size 8 --attention eager,sdpa --compile-mode default \
          "${common[@]}" "${extra[@]}" > "$out/tiny_compiled.log" 2>&1 || echo "tiny compiled failed"
      "${tool[@]}" --network llama_medium --batch-size 16 --attention eager,sdpa --compile-mode default \
          "${common[@]}" "${extra[@]}" > "$out/medium_compiled.log" 2>&1 || echo "medium compiled failed" ;;
    generate)   # llama_1b: 512-token prompt, 128 new tokens, 1 and 16 concurrent sequences
      for compiled in "" "--compile"; do
        "${tool[@]}" --network llama_1b --mode generate --batch-size 1,16 --prompt-len 512 \
            --gen-len 128 --iterations 5 --warmup 2 --precision amp-bf16 $compiled --quiet \
            --output-dir "$out" "${extra[@]}" > "$out/generate${compiled:+_compiled}.log" 2>&1 \
            || echo "generate $compiled failed"
      done ;;
  esac
done
"$python" -m benchmarks.tables "$out/benchmark_summary.csv"
