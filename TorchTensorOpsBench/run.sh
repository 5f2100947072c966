#!/usr/bin/env bash
# Run the op bench's lists (model ops, predefined ops, compute ops) in fp32, fp16 and bf16 and
# keep a log, a JSON and a CSV file of each run under one directory named by date.
#
#   bash TorchTensorOpsBench/run.sh                      # from anywhere
#   DEVICE=cuda:1 bash TorchTensorOpsBench/run.sh --flush-l2 --num-iters 100
#
# Extra arguments go to every run. Environment (defaults in brackets):
#   PYTHON    interpreter                                              [python3]
#   DEVICE    torch device (cuda, cuda:N, cpu)       [cuda when torch sees a GPU, else cpu]
#   LOG_ROOT  where the dated log directory is made             [logs/ beside this script]
#   DTYPES    element types                                           [fp32 fp16 bf16]
#   LISTS     which lists: model predefined compute             [model predefined compute]
#
# A list whose run fails (exit 2 bad input, 3 out of memory, ...) is logged and the next runs;
# the script exits with the first failing status once all are done.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"
DEVICE="${DEVICE:-}"
LOG_ROOT="${LOG_ROOT:-$here/logs}"
DTYPES="${DTYPES:-fp32 fp16 bf16}"
LISTS="${LISTS:-model predefined compute}"

device_args=()
if [[ -n "$DEVICE" ]]; then
    device_args=(--device "$DEVICE")
fi

list_flag() {
    case "$1" in
        model) echo --run-model-ops ;;
        predefined) echo --run-predefined ;;
        compute) echo --run-compute-ops ;;
        *) echo "run.sh: unknown list '$1' in LISTS (use model, predefined, compute)" >&2
           return 2 ;;
    esac
}

first_failure=0
run_list() {
    local list="$1" dtype="$2"
    shift 2
    local flag name status=0
    flag="$(list_flag "$list")"
    name="${list}_ops_${dtype}"
    echo
    echo "########## ${list} ops, ${dtype} ##########"
    # ${arr[@]+...}: an empty array under `set -u` on bash < 4.4.
    "$PYTHON" "$here/torch_tensor_ops_bench.py" "$flag" --dtype "$dtype" \
        ${device_args[@]+"${device_args[@]}"} \
        --output-json "$log_dir/$name.json" --output-csv "$log_dir/$name.csv" "$@" \
        2>&1 | tee "$log_dir/$name.log" || status=$?
    if [[ $status -ne 0 ]]; then
        echo "run.sh: ${list} ops in ${dtype} exited ${status} (see $log_dir/$name.log)" >&2
        if [[ $first_failure -eq 0 ]]; then
            first_failure=$status
        fi
    fi
}

for list in $LISTS; do
    list_flag "$list" > /dev/null  # a typo in LISTS fails before anything runs
done

log_dir="$LOG_ROOT/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$log_dir"
echo "TorchTensorOpsBench run.sh: logs in $log_dir"
for list in $LISTS; do
    for dtype in $DTYPES; do
        run_list "$list" "$dtype" "$@"
    done
done
echo
echo "logs, JSON and CSV files: $log_dir"
exit "$first_failure"
