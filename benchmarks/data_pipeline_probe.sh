#!/usr/bin/env bash
# The input pipeline on one GPU before its flags are wired (issue 25): resnet50 training with
# --amp --nhwc at batch 256, loader workers 0,2,4,8,16, then resnet18 with 16 workers, CPU against
# GPU decode; each with the model alone in the same process. The generated set (4096 JPEGs,
# 384x384) is made once into the user's cache directory before the first measurement.
# Usage: bash benchmarks/data_pipeline_probe.sh OUTPUT_DIR   (about 4 minutes on a 16-core H100
# host; OUTPUT_DIR/resnet50.{json,png,log}, OUTPUT_DIR/resnet18.{json,png,log})
set -uo pipefail
out=${1:?usage: $0 OUTPUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
mkdir -p "$out"
probe="$here/benchmarks/data_pipeline_probe.py"
"$python" "$probe" "$out" --network resnet50 --workers 0,2,4,8,16 2>&1 | tee "$out/resnet50.log"
"$python" "$probe" "$out" --network resnet18 --workers 16 --decode cpu,gpu 2>&1 \
    | tee "$out/resnet18.log"
