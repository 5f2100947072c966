#!/usr/bin/env bash
# How far to trust a number, on one GPU: five independent trials of resnet50 --amp --nhwc with
# telemetry, then the spread between trials against the spread within one, the clocks, power and
# energy per image, and the energy counter checked against power integrated over time.
# Usage: bash benchmarks/trust_proof.sh OUTPUT_DIR   (EXTRA="..." is appended to the command)
set -uo pipefail
out=${1:?usage: $0 OUTPUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
extra=(${EXTRA:-})
mkdir -p "$out"
"$python" "$here/micro_benchmarking_pytorch.py" --network resnet50 --batch-size 128 --amp --nhwc \
    --iterations 50 --warmup 10 --repeat 5 --telemetry-interval 100 --quiet \
    --output-dir "$out" --output-file trust "${extra[@]}" 2>&1 | tee "$out/trust.log"
"$python" - "$out/trust.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
trials, telemetry = doc["trials"], doc["telemetry"]
print(f"trials img/s: {[round(v, 1) for v in trials['values']]}")
print(f"geometric mean {trials['headline']:.1f}, 95% CI {trials['ci95_low']:.1f}..."
      f"{trials['ci95_high']:.1f}, next run likely in {trials['prediction95_low']:.1f}..."
      f"{trials['prediction95_high']:.1f}; CV between trials {trials['cv']:.2%}, "
      f"within trials {trials['within_trial_cv']:.2%} "
      f"(ratio {trials['cv'] / trials['within_trial_cv']:.1f}x)")
for t in trials["per_trial"]:
    print(f"  trial: {t['throughput']:.1f} img/s, within-trial CV {t['stats']['cv']:.2%}")
if telemetry and telemetry.get("available"):
    stats = telemetry["stats"]
    for key in ("sm_clock_mhz", "memory_clock_mhz", "power_w", "temperature_c", "utilization_pct"):
        if stats.get(key):
            s = stats[key]
            print(f"{key}: min {s['min']:.0f} median {s['median']:.0f} max {s['max']:.0f}")
    print(f"energy {telemetry['energy_j']:.1f} J ({telemetry['energy_basis']}), "
          f"{telemetry['joules_per_item']:.4f} J/img, {telemetry['items_per_joule']:.2f} img/J")
    counter, power = telemetry.get("counter_energy_j"), telemetry.get("power_energy_j")
    if counter and power:
        print(f"energy counter {counter:.1f} J vs power x time {power:.1f} J: ratio "
              f"{counter / power:.3f}")
    print(f"throttle reasons seen: {telemetry['throttle_reasons_seen']}; "
          f"SM clock drop {telemetry['sm_clock_drop']}")
else:
    print(f"telemetry: {telemetry}")
PY
