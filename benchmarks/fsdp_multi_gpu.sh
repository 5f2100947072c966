#!/usr/bin/env bash
# Issue 27: FSDP2 Llama-3 training on several GPUs of one host, through torchrun and the CLI.
#  1. scaling: llama3_3b (fits one GPU) under --parallel fsdp on 1 GPU, then on every GPU of the
#     host (GPUS), three rounds alternated; the efficiency is tokens/s per GPU at N over at 1.
#  2. llama3_8b on GPUS GPUs: AdamW, amp-bf16 (BF16 compute, FP32 gradient reduction), sequence
#     SEQ, BATCH sequences per GPU, selective checkpointing, eager then compiled, three runs
#     each: tokens/s per GPU, MFU on torchtitan's basis, peak memory per rank. torchtitan's
#     published Llama 3.1 8B figures to put beside it: 5,762 tokens/s/GPU with FSDP on 8 H100s,
#     6,667 compiled, 33-39% MFU; 10,938 tokens/s/GPU on H200 with Float8.
#  3. with 8 GPUs: resnet50 --preset fast DDP scaling, 1 GPU against 8 (target: >= 90%).
# Usage: bash benchmarks/fsdp_multi_gpu.sh OUTPUT_DIR
#   GPUS=2 (default: every visible GPU), MODEL=llama3_8b (llama3_3b if 8B does not fit),
#   SCALE_MODEL=llama3_3b (the scaling model),
#   SEQ=8192, BATCH=1, AC=selective (full to fit more), PARTS="scaling 8b resnet",
#   EXTRA="..." appended to every command.
set -uo pipefail
out=${1:?usage: $0 OUTPUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
gpus=${GPUS:-$("$python" -c 'import torch; print(torch.cuda.device_count())')}
model=${MODEL:-llama3_8b}
scale_model=${SCALE_MODEL:-llama3_3b}
seq=${SEQ:-8192}
batch=${BATCH:-1}
parts=${PARTS:-scaling 8b resnet}
extra=(${EXTRA:-})
script="$here/micro_benchmarking_pytorch.py"
llm=(--precision amp-bf16 --optimizer adamw --parallel fsdp --iterations ${ITERATIONS:-20}
     --warmup 5 --quiet --activation-checkpointing ${AC:-selective})
mkdir -p "$out"

run() {   # run NAME NPROC ARGS...: one result directory and one log per run
  local name=$1 nproc=$2; shift 2
  echo "== $name ($nproc GPU): $*"
  local launch=("$python" "$script")
  [ "$nproc" -gt 1 ] && launch=("$python" -m torch.distributed.run --standalone
                                 --nproc-per-node "$nproc" "$script")
  "${launch[@]}" "$@" --output-dir "$out/$name" "${extra[@]}" > "$out/$name.log" 2>&1 \
      || { echo "$name failed"; tail -5 "$out/$name.log"; }
}

for part in $parts; do
  case $part in
    scaling)   # --batch-size is the global batch under torchrun: BATCH per GPU at every size
      for round in 1 2 3; do
        run "3b_1gpu_$round" 1 --network "$scale_model" --seq-len "$seq" --batch-size "$batch" \
            "${llm[@]}"
        run "3b_${gpus}gpu_$round" "$gpus" --network "$scale_model" --seq-len "$seq" \
            --batch-size $((batch * gpus)) "${llm[@]}"
      done ;;
    8b)
      for round in 1 2 3; do
        run "8b_${gpus}gpu_eager_$round" "$gpus" --network "$model" --seq-len "$seq" \
            --batch-size $((batch * gpus)) "${llm[@]}"
        run "8b_${gpus}gpu_compiled_$round" "$gpus" --network "$model" --seq-len "$seq" \
            --batch-size $((batch * gpus)) "${llm[@]}" --compile
      done ;;
    resnet)
      [ "$gpus" -ge 8 ] || { echo "resnet: needs 8 GPUs, have $gpus: skipped"; continue; }
      run resnet50_1gpu 1 --network resnet50 --preset fast --batch-size 256 --quiet
      base=$(ls "$out"/resnet50_1gpu/*.json 2>/dev/null | head -1)
      run resnet50_8gpu 8 --network resnet50 --preset fast --batch-size 2048 --quiet \
          ${base:+--scaling-baseline "$base"} ;;
  esac
done
cd "$here" && "$python" -m benchmarks.fsdp_proof "$out" --table-only
"$python" - "$out" "$gpus" "$scale_model" <<'EOF'
import json, statistics, sys
from pathlib import Path
out, gpus, scale_model = Path(sys.argv[1]), sys.argv[2], sys.argv[3]

def per_gpu(pattern):
    values = []
    for path in sorted(out.glob(pattern)):
        doc = json.loads(path.read_text())
        values.append(doc["Throughput [tokens/sec]"] / doc["GPUs"])
    return statistics.median(values) if values else None

one, many = per_gpu("3b_1gpu_*/*.json"), per_gpu(f"3b_{gpus}gpu_*/*.json")
if one and many:
    print(f"{scale_model} FSDP scaling 1 -> {gpus} GPUs: {many / one:.1%} per-GPU efficiency "
          f"(median tokens/s per GPU {one:,.0f} -> {many:,.0f})")
for path in sorted(out.glob("resnet50_8gpu/*.json")):
    dist = json.loads(path.read_text()).get("distributed") or {}
    print(f"resnet50 --preset fast DDP scaling on 8 GPUs: {dist.get('scaling_efficiency')}")
EOF
