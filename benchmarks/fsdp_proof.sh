#!/usr/bin/env bash
# Issue 24's one-GPU targets through the real CLI (--parallel, --reshard-after-forward,
# --activation-checkpointing, --optimizer):
#  1. llama3_3b training, AdamW, amp-bf16 (FSDP: BF16 compute, FP32 reduce), selective
#     checkpointing: plain single-device training against --parallel fsdp with one process,
#     alternated three times in fresh processes (A B A B A B) with the same flags otherwise.
#     FSDP with one rank should cost nothing: median tokens/s ratio >= 0.97.
#     Then one FSDP run with --reshard-after-forward 1 (a second local gather per block) for
#     information.
#  2. llama_1b training, eager and compiled: MFU on torchtitan's basis beside the counted MFU.
# The summary (benchmarks/fsdp_proof.py) prints a table and the ratio; exit 5 if it misses.
# Usage: bash benchmarks/fsdp_proof.sh OUTPUT_DIR
#   MODEL=llama3_1b (if llama3_3b does not fit), BATCH=2, SEQ=4096, PARTS="parity mfu",
#   EXTRA="..." appended to every command (a CPU dry run: EXTRA="--device cpu ...").
set -uo pipefail
out=${1:?usage: $0 OUTPUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
model=${MODEL:-llama3_3b}
parts=${PARTS:-parity mfu}
extra=(${EXTRA:-})
tool=("$python" "$here/micro_benchmarking_pytorch.py")
train=(--precision amp-bf16 --optimizer adamw --iterations ${ITERATIONS:-20} --warmup 5 --quiet)
mkdir -p "$out"

run() {   # run NAME ARGS...: one result directory and one log per run
  local name=$1; shift
  echo "== $name: $*"
  "${tool[@]}" "$@" "${train[@]}" --output-dir "$out/$name" "${extra[@]}" \
      > "$out/$name.log" 2>&1 || { echo "$name failed"; tail -5 "$out/$name.log"; }
}

for part in $parts; do
  case $part in
    parity)
      shape=(--network "$model" --batch-size ${BATCH:-2} --seq-len ${SEQ:-4096}
             --activation-checkpointing selective)
      for round in 1 2 3; do
        run "plain_$round" "${shape[@]}"
        run "fsdp_$round" "${shape[@]}" --parallel fsdp --reshard-after-forward 0
      done
      run reshard_fsdp "${shape[@]}" --parallel fsdp --reshard-after-forward 1 ;;
    mfu)
      run llama_1b_eager --network llama_1b --batch-size 8
      run llama_1b_compiled --network llama_1b --batch-size 8 --compile ;;
  esac
done
cd "$here" && "$python" -m benchmarks.fsdp_proof "$out"
