#!/usr/bin/env bash
# The GPU suite both ways the GPU rule asks for: with the optional kernels (mslk, FBGEMM's GenAI
# kernels that torchao's int4 layouts call) importable, and without them.
#
#   bash benchmarks/gpu_suite.sh OUT [pytest args...]
#
# Wheels: torchao (and what the machine lacks) in .whl/*.whl, the mslk-cuda wheel in .whl/mslk/.
# With 4 or more GPUs the two suites run at once, each on 2 GPUs of its own (CUDA_VISIBLE_DEVICES
# 0,1 and 2,3: every 2-GPU test still runs under torchrun, and the run costs one suite's time);
# with 2 or 3 GPUs one after the other. Each suite has its own inductor cache, so neither reuses
# kernels compiled where the other's libraries were seen. Logs: OUT/suite_with_mslk.log,
# OUT/suite_without_mslk.log; the last line of each is pytest's result line.
set -uo pipefail
out=${1:?usage: gpu_suite.sh OUT [pytest args...]}
shift
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 4
if ls .whl/mslk/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site-mslk .whl/mslk/*.whl || exit 4
fi
gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())')
echo "GPUs: $gpus; $(python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0))')"

suite() {   # NAME DEVICES PYTHONPATH
    local name=$1 devices=$2 path=$3
    shift 3
    CUDA_VISIBLE_DEVICES=$devices PYTHONPATH=$path PYTHONUNBUFFERED=1 \
        TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-$name \
        python3 -m pytest -m gpu -q -p no:cacheprovider --durations=15 "$@" \
        >"$out/suite_$name.log" 2>&1
    local rc=$? kernels="no mslk"
    PYTHONPATH=$path python3 -c 'import mslk' 2>/dev/null && kernels="mslk importable"
    echo "suite $name (GPUs $devices, $kernels): exit $rc: $(tail -n 1 "$out/suite_$name.log")"
}

if [ "$gpus" -ge 4 ]; then
    suite with_mslk 0,1 /tmp/site-mslk:/tmp/site "$@" &
    suite without_mslk 2,3 /tmp/site "$@" &
    wait
else
    suite with_mslk 0,1 /tmp/site-mslk:/tmp/site "$@"
    suite without_mslk 0,1 /tmp/site "$@"
fi
