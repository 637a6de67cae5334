#!/usr/bin/env bash
# One device call for the real-size checks of every format and family the op path computes: makes 2-layer
# make-checkpoint folders with references (qwen3-30b-a3b bf16 and --format fp8, mixtral-8x7b), then on each
# the real-size test (greedy tokens vs transformers, CUDA vs CPU, NaN refusal) and, for the 128-expert ones, the
# conformance suite and the tiered moves test. Each stage has its own time limit; logs and a summary in $OUT.
#   source .gpu/boot.sh && bash test/gpu/real-run.sh      (about 6 minutes on the H200)
set -u
OUT=${OUT:-out/real}; mkdir -p "$OUT"
python3 .gpu/make-checkpoint.py --preset qwen3-30b-a3b --layers 2 --out /tmp/q2 > /tmp/mk-q2.log 2>&1 &
python3 .gpu/make-checkpoint.py --preset qwen3-30b-a3b --layers 2 --format fp8 --out /tmp/q2f > /tmp/mk-q2f.log 2>&1 &
python3 .gpu/make-checkpoint.py --preset mixtral-8x7b --layers 2 --out /tmp/mx2 > /tmp/mk-mx2.log 2>&1 &
wait
for c in q2:"real shapes|NaN weight|64/128 hot" q2f:"real shapes|NaN weight|64/128 hot" mx2:"real shapes: greedy|NaN weight"; do
  dir=/tmp/${c%%:*}; pat=${c#*:}
  REAL_CKPT=$dir TIERED_STEPS=400 OUT=$OUT timeout 150 node --test-name-pattern="$pat" dist/gpu-tests.mjs > "$OUT/t-${c%%:*}.log" 2>&1
  echo "${c%%:*} rc=$?: $(grep -cE '^ok ' "$OUT/t-${c%%:*}.log") ok, $(grep -cE '^not ok ' "$OUT/t-${c%%:*}.log") not ok" | tee -a "$OUT/summary.txt"
  grep -E "^# (real size|tiered)" "$OUT/t-${c%%:*}.log" | cut -c1-300 | tee -a "$OUT/summary.txt"
done
