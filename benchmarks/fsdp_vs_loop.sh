#!/usr/bin/env bash
# Issue 44: the tool's sharded LLaMA training against the plainest FSDP2 loop
# (benchmarks/fsdp_tight_loop.py), alternated in one job, one GPU and GPUS GPUs.
#
#   bash benchmarks/fsdp_vs_loop.sh OUT
#
# Environment: GPUS (default: every visible GPU), MODEL=llama3_3b, SEQ=4096, BATCH=2 (per GPU),
# ROUNDS=2, STEPS=10, WARMUP=4, SIZES="1 $GPUS", COMPILE="eager" ("eager compiled" for both),
# TOOLS="tool:." (NAME:DIR pairs: each DIR holds a `microbench` package to run, so two versions
# of the tool can be alternated with the loop), PROFILE=1 (one profiled run of each side at the
# last size: the tool's --kineto operator table and the loop's torch.profiler table).
# Prints one line per run, then the medians and PASS/FAIL against issue 44's target (the tool's
# tokens/s per GPU at least 0.97x the loop's).
set -uo pipefail
out=${1:?usage: $0 OUT}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
gpus=${GPUS:-$("$python" -c 'import torch; print(torch.cuda.device_count())')}
model=${MODEL:-llama3_3b}; seq=${SEQ:-4096}; batch=${BATCH:-2}
rounds=${ROUNDS:-2}; steps=${STEPS:-10}; warmup=${WARMUP:-4}
sizes=${SIZES:-"1 $gpus"}; compile=${COMPILE:-eager}; tools=${TOOLS:-"tool:."}
mkdir -p "$out"
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}

launch() {   # launch NPROC ARGS...: torchrun for every size, one rank per GPU
  local nproc=$1; shift
  "$python" -m torch.distributed.run --standalone --nproc-per-node "$nproc" "$@"
}

tool() {     # tool NAME DIR NPROC MODE [EXTRA...]
  local name=$1 dir=$2 nproc=$3 mode=$4; shift 4
  local flags=(--network "$model" --seq-len "$seq" --batch-size $((batch * nproc))
               --precision amp-bf16 --optimizer adamw --parallel fsdp
               --activation-checkpointing full --iterations "$steps" --warmup "$warmup"
               --measure-peaks 0 --quiet)
  [ "$mode" = compiled ] && flags+=(--compile)
  (cd "$here/$dir" && launch "$nproc" -m microbench "${flags[@]}" "$@" \
      --output-dir "$out/$name") > "$out/$name.log" 2>&1 || echo "$name failed: $(tail -2 "$out/$name.log")"
  "$python" - "$out/$name" "$name" <<'EOF'
import json, sys
from pathlib import Path
paths = sorted(Path(sys.argv[1]).glob("*.json"))
if paths:
    doc = json.loads(paths[-1].read_text())
    print(f"{sys.argv[2]}: {doc['Throughput [tokens/sec]'] / doc['GPUs']:,.0f} tokens/s per GPU")
EOF
}

loop() {     # loop NAME NPROC MODE [EXTRA...]
  local name=$1 nproc=$2 mode=$3; shift 3
  local flags=(--model "$model" --seq-len "$seq" --batch "$batch" --steps "$steps"
               --warmup "$warmup" --json "$out/$name.json")
  [ "$mode" = compiled ] && flags+=(--compile)
  (cd "$here" && launch "$nproc" -m benchmarks.fsdp_tight_loop "${flags[@]}" "$@") \
      > "$out/$name.log" 2>&1 || echo "$name failed: $(tail -2 "$out/$name.log")"
  grep -h "^tight loop" "$out/$name.log" | sed "s/^/$name: /"
}

for n in $sizes; do
  for mode in $compile; do
    for round in $(seq "$rounds"); do
      loop "loop_${n}gpu_${mode}_$round" "$n" "$mode"
      for pair in $tools; do
        tool "${pair%%:*}_${n}gpu_${mode}_$round" "${pair#*:}" "$n" "$mode"
      done
    done
  done
done

if [ "${PROFILE:-1}" = 1 ]; then
  n=${sizes##* }; first=${tools%% *}
  loop "loop_${n}gpu_profile" "$n" eager --profile "$out/profile_loop"
  tool "${first%%:*}_${n}gpu_profile" "${first#*:}" "$n" eager --kineto \
       --profiler-schedule 1,1,2 --profiler-output "$out/profile_tool"
fi

"$python" - "$out" "$sizes" "$compile" "$tools" <<'EOF'
import json, statistics, sys
from pathlib import Path
out, sizes, modes, tools = Path(sys.argv[1]), sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()

def loop_figure(n, mode):
    values = [json.loads(p.read_text())["tokens_per_s_per_gpu"]
              for p in sorted(out.glob(f"loop_{n}gpu_{mode}_[0-9]*.json"))]
    return statistics.median(values) if values else None

def tool_figure(name, n, mode):
    values = []
    for run in sorted(out.glob(f"{name}_{n}gpu_{mode}_[0-9]*")):
        for path in sorted(run.glob("*.json"))[-1:]:
            doc = json.loads(path.read_text())
            values.append(doc["Throughput [tokens/sec]"] / doc["GPUs"])
    return statistics.median(values) if values else None

for n in sizes:
    for mode in modes:
        reference = loop_figure(n, mode)
        for pair in tools:
            name = pair.split(":")[0]
            figure = tool_figure(name, n, mode)
            if reference is None or figure is None:
                print(f"FAIL {name} {n} GPU {mode}: a side has no result")
                continue
            ratio = figure / reference
            verdict = "PASS" if ratio >= 0.97 else "FAIL"
            print(f"{verdict} {name} {n} GPU {mode}: {figure:,.0f} vs loop {reference:,.0f} "
                  f"tokens/s per GPU = {ratio:.3f} (target >= 0.97)")
EOF
