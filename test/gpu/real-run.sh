#!/usr/bin/env bash
# One device call for the real-size checks of every format and family the CUDA backend computes: makes 2-layer
# make-checkpoint folders with references (qwen3-30b-a3b bf16 and --format fp8, mixtral-8x7b, gpt-oss-120b in
# MXFP4, deepseek-v3), then on each the real-size test (greedy tokens vs transformers, CUDA vs CPU, NaN refusal) and, for the
# 128-expert ones, the tiered moves test; and the family fixtures (FAMILY_FIXTURES, generated from the repo)
# against their parity.json. Each stage has its own time limit; logs and a summary in $OUT.
#   source .gpu/boot.sh && bash test/gpu/real-run.sh [stage ...]   (stages: q2 q2f mx2 g2 ds2 ds2y ds2f q16f int4 fixtures; default all but ds2*, q16f and int4;
#   stage times: docs/results.md, "Device call times"). Run nothing else that makes checkpoints beside it: after two
#   concurrent make-checkpoint runs, node once failed to exec (ENOENT).
set -u
OUT=${OUT:-out/real}; mkdir -p "$OUT"
STAGES=${*:-q2 q2f mx2 g2 fixtures}
has() { [[ " $STAGES " == *" $1 "* ]]; }
checkpoint() { local out=${*: -1}; python3 .gpu/make-checkpoint.py "$@" > "/tmp/mk-$(basename "$out").log" 2>&1 || echo "make-checkpoint $* failed" | tee -a "$OUT/summary.txt"; }
has q2 && checkpoint --preset qwen3-30b-a3b --layers 2 --out /tmp/q2 &
has q2f && checkpoint --preset qwen3-30b-a3b --layers 2 --format fp8 --out /tmp/q2f &
has mx2 && checkpoint --preset mixtral-8x7b --layers 2 --out /tmp/mx2 &
has g2 && checkpoint --preset gpt-oss-120b --layers 2 --format mxfp4 --out /tmp/g2 &
{ has ds2 || has ds2y; } && checkpoint --preset deepseek-v3 --layers 2 --out /tmp/ds2 &
has ds2f && checkpoint --preset deepseek-v3 --layers 2 --format fp8 --out /tmp/ds2f &
has q16f && checkpoint --preset qwen3-30b-a3b --layers 16 --format fp8 --out /tmp/q16f &
# int4: qwen3-30b-a3b x 2 layers in each 4-bit format (GPTQ and AWQ groups of 128, compressed-tensors 32), on the CPU
# backend only (CUDA refuses them until the INT4 kernels exist) against their references.
# (The repository's make-checkpoint.py: it writes the 4-bit formats.)
if has int4; then for f in gptq awq ct-int4; do
  python3 fixtures/make/make-checkpoint.py --preset qwen3-30b-a3b --layers 2 --format $f --out /tmp/q2-$f > /tmp/mk-q2-$f.log 2>&1 || echo "make-checkpoint --format $f failed" | tee -a "$OUT/summary.txt" &
done; fi
wait
# ds2y: the same ds2 under DeepSeek's YaRN as the hub's V3 / R1 configs carry it (factor 40, mscale = mscale_all_dim =
# 1), with transformers references made for it (test/gpu/deepseek-yarn-refs.py).
if has ds2y; then
  python3 test/gpu/deepseek-yarn-refs.py --src /tmp/ds2 --out /tmp/ds2y > "$OUT/ds2y-refs.log" 2>&1 || echo "deepseek-yarn-refs.py failed" | tee -a "$OUT/summary.txt"
  tail -2 "$OUT/ds2y-refs.log" | tee -a "$OUT/summary.txt"
fi
if has fixtures; then
  # The five random-weight families (FAMILY_FIXTURES: names, default all): the tests generate each checkpoint
  # from fixtures/<family>/config.json and check it against fixtures/<family>/parity.json.
  FIX=${FAMILY_FIXTURES:-all}
  FAMILY_FIXTURES=$FIX OUT=$OUT timeout 150 node --test-name-pattern="family fixture" dist/gpu-tests.mjs > "$OUT/t-fixtures.log" 2>&1
  echo "fixtures ($FIX) rc=$?: $(grep -cE '^ok ' "$OUT/t-fixtures.log") ok, $(grep -cE '^not ok ' "$OUT/t-fixtures.log") not ok" | tee -a "$OUT/summary.txt"
  grep -E "^# (family|  )" "$OUT/t-fixtures.log" | cut -c1-300 | tee -a "$OUT/summary.txt"
fi
if has int4; then
  for f in gptq awq ct-int4; do
    REAL_CKPT_INT4=/tmp/q2-$f OUT=$OUT timeout 300 node --test-name-pattern="4-bit, CPU" dist/gpu-tests.mjs > "$OUT/t-int4-$f.log" 2>&1
    echo "int4 $f rc=$?: $(grep -cE '^ok ' "$OUT/t-int4-$f.log") ok, $(grep -cE '^not ok ' "$OUT/t-int4-$f.log") not ok" | tee -a "$OUT/summary.txt"
    grep -E "^# real size int4" "$OUT/t-int4-$f.log" | cut -c1-300 | tee -a "$OUT/summary.txt"
  done
fi
# ds2, ds2f (deepseek-v3 x 2 layers, bf16 or block FP8: one dense, one of 256 experts, 23 / 12 GB) and q16f (16
# layers in block FP8, 10 GB): against the references only, no poisoned copy (it would not fit the disk beside
# them) and no CPU twin, for time: at hidden 7168 the CPU holds a MoE layer's experts in 45 GB of float32 (its
# banks take any size since 4dd4043; the first ds2 run, before, threw on a typed array's 2^32 elements); the
# 2-layer q2f keeps the FP8 twin.
# (300 s a stage: g2's 64/128-hot cases hold the host expert lane's at batch 1 and 4)
for c in q2:"real shapes|NaN weight|64/128 hot" q2f:"real shapes|NaN weight|64/128 hot" mx2:"real shapes: greedy|NaN weight" g2:"real shapes|NaN weight|64/128 hot" ds2:"real shapes: greedy" ds2y:"real shapes: greedy" ds2f:"real shapes: greedy" q16f:"real shapes: greedy"; do
  name=${c%%:*}; has "$name" || continue
  dir=/tmp/$name; pat=${c#*:}; cpu=1; [ "${name#ds2}" != "$name" ] || [ "$name" = q16f ] && cpu=0
  REAL_CPU=$cpu REAL_CKPT=$dir TIERED_STEPS=400 OUT=$OUT timeout 300 node --test-name-pattern="$pat" dist/gpu-tests.mjs > "$OUT/t-$name.log" 2>&1
  echo "$name rc=$?: $(grep -cE '^ok ' "$OUT/t-$name.log") ok, $(grep -cE '^not ok ' "$OUT/t-$name.log") not ok" | tee -a "$OUT/summary.txt"
  grep -E "^# (real size|tiered)" "$OUT/t-$name.log" | cut -c1-300 | tee -a "$OUT/summary.txt"
done
