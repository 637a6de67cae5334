#!/usr/bin/env bash
# Where a batch-1 decode step's device time goes, kernel by kernel, with the caches left alone: ncu serializes the
# step's launches (no PDL overlap: each carries its own start and drain) over profile-gpu.mjs's prompt and STEPS
# eager decode steps of a make-checkpoint folder, reads one pass (time and DRAM bytes, no replay), and
# ncu_step_table.py reports the last step. The CSV and ncu's log go to $OUT.
#   source .gpu/boot.sh && bash bench/gpu/ncu-step.sh DIR [STEPS]   (dist/profile-gpu.mjs from `npm run build`)
set -u
MODEL=$1; STEPS=${2:-3}
OUT=${OUT:-out/ncu-step}; mkdir -p "$OUT"
ncu --clock-control none --cache-control none -k regex:^op_ --metrics gpu__time_duration.sum,dram__bytes_read.sum \
  --csv --page raw node dist/profile-gpu.mjs --model "$MODEL" --steps "$STEPS" > "$OUT/ncu-step.csv" 2> "$OUT/ncu-step.err" ||
  { echo "ncu failed (rc $?): $OUT/ncu-step.err"; exit 1; }
python3 "$(dirname "$0")/ncu_step_table.py" "$OUT/ncu-step.csv" "$STEPS"
