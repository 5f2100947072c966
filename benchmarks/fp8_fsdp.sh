#!/usr/bin/env bash
# Issue 58: FP8 training under FSDP2 against BF16, through the real CLI, alternated in one job.
#
#   bash benchmarks/fp8_fsdp.sh OUT            # every case, ROUNDS rounds (about 30-40 min on 4 GPUs)
#   bash benchmarks/fp8_fsdp.sh OUT --quick    # llama3_3b only, one round, fewer steps (~6-8 min)
#
# Cases (CASES="3b 8b 1gpu" by default; --quick: CASES="3b"):
#   3b    llama3_3b, seq 4096, 2 sequences per GPU, FSDP over GPUS GPUs: bf16, tensorwise, rowwise
#   8b    llama3_8b, seq 8192, B8 sequences per GPU (default 1), FSDP over GPUS GPUs: the same three
#   1gpu  llama3_3b, seq 4096, B1 sequences (default 2 on a GPU of 100 GB or more, else 1: the
#         plain run keeps the whole model, gradients and AdamW state): FP8 tensorwise on one GPU
#         without FSDP (plain) and with --parallel fsdp (one rank), the same batch
# Every run: --compile, --activation-checkpointing selective (AC=...), AdamW, ITERATIONS timed
# steps after WARMUP, --measure-peaks 0; the sides of a case alternate in fresh processes
# (A B C A B C). benchmarks/fp8_fsdp.py prints a line per run and PASS/FAIL per target:
# 8B tensorwise >= 1.20x BF16, rowwise >= 1.05x; 3B tensorwise >= 1.10x; one GPU fsdp >= 0.95x
# plain. Logs: OUT/<case>_<side>_<round>.log; results: OUT/<case>_<side>_<round>/.
set -uo pipefail
out=${1:?usage: $0 OUT [--quick]}
quick=0; [ "${2:-}" = "--quick" ] && quick=1
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
gpus=${GPUS:-$("$python" -c 'import torch; print(torch.cuda.device_count())')}
if [ "$quick" = 1 ]; then
  cases=${CASES:-3b}; rounds=${ROUNDS:-1}; iterations=${ITERATIONS:-8}; warmup=${WARMUP:-3}
else
  cases=${CASES:-"3b 8b 1gpu"}; rounds=${ROUNDS:-2}; iterations=${ITERATIONS:-15}
  warmup=${WARMUP:-4}
fi
big=$("$python" -c 'import torch; print(int(torch.cuda.get_device_properties(0).total_memory > 100e9))')
b1=${B1:-$([ "$big" = 1 ] && echo 2 || echo 1)}; b8=${B8:-1}
mkdir -p "$out"
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
common=(--optimizer adamw --compile --activation-checkpointing "${AC:-selective}"
        --iterations "$iterations" --warmup "$warmup" --measure-peaks 0 --quiet)
declare -A precision=([bf16]="--precision amp-bf16"
                      [tensorwise]="--precision fp8 --fp8-recipe tensorwise"
                      [rowwise]="--precision fp8 --fp8-recipe rowwise")

run() {      # run NAME NPROC ARGS...: one result directory and one log per run
  local name=$1 nproc=$2; shift 2
  local launch=("$python")
  [ "$nproc" -gt 1 ] && launch=("$python" -m torch.distributed.run --standalone
                                --nproc-per-node "$nproc")
  echo "== $name ($(date +%T)): $*"
  (cd "$here" && "${launch[@]}" micro_benchmarking_pytorch.py "$@" "${common[@]}" \
      --output-dir "$out/$name") > "$out/$name.log" 2>&1 \
      || echo "$name failed: $(tail -2 "$out/$name.log")"
  grep -h "^FP8 compile\|^Note: FP8 compile\|FP8 layers" "$out/$name.log" | head -2
}

for round in $(seq 1 "$rounds"); do
  for case in $cases; do
    case $case in
      3b|8b)
        if [ "$case" = 3b ]; then
          shape=(--network llama3_3b --seq-len 4096 --batch-size $((2 * gpus)))
        else
          shape=(--network llama3_8b --seq-len 8192 --batch-size $((b8 * gpus)))
        fi
        for side in bf16 tensorwise rowwise; do
          # shellcheck disable=SC2086
          run "${case}_${side}_${round}" "$gpus" "${shape[@]}" --parallel fsdp ${precision[$side]}
        done ;;
      1gpu)
        shape=(--network llama3_3b --seq-len 4096 --batch-size "$b1" --device cuda)
        # shellcheck disable=SC2086
        run "1gpu_plain_${round}" 1 "${shape[@]}" ${precision[tensorwise]}
        # shellcheck disable=SC2086
        run "1gpu_fsdp_${round}" 1 "${shape[@]}" --parallel fsdp ${precision[tensorwise]} ;;
    esac
  done
done
cd "$here" && "$python" -m benchmarks.fp8_fsdp "$out"
