#!/usr/bin/env bash
# bench:tiered on the lent H200, in one device call (see bench/tiered/README.md):
#   npm run build, and Node for the device in .gpu/ (carry .gpu, dist, node_modules/koffi, node_modules/@koromix);
#   checkpoints come from fixtures/make/make-checkpoint.py, text from fixtures/tiny-moe/prompts.json.gz
#   source .gpu/boot.sh && bash bench/tiered/device-run.sh [1u|4u|mixed|formats|host|budgets|traces|pipeline|check|fp8lane|mxlane|all]
#   (1u, 4u, mixed, all: with the host expert lane unless LANE= is given; mixed: MIXED_USERS="1 4" by default)
# formats: the same 16-layer geometry in bf16 and in block FP8, 64/128 hot, a short shift (issue 14: a cold
# expert read in place costs its stored bytes); it makes only the 16-layer checkpoints.
# Makes the 2-layer and 16-layer qwen3-30b-a3b checkpoints, runs the tiered GPU test (moves landing while greedy
# decode runs) and the benchmark; every stage has its own time limit and the benchmark writes its tables after
# each policy, so a run cut short keeps what it measured. Outputs under $OUT.
set -u
OUT=${OUT:-out/tiered}; mkdir -p "$OUT"
which=${1:-1u}
if [ "$which" = formats ]; then
  # (a folder already made, e.g. with references for the real-size test, is used as it is)
  [ -e /tmp/q16/config.json ] || python3 fixtures/make/make-checkpoint.py --preset qwen3-30b-a3b --layers 16 --out /tmp/q16 --refs 0 > /tmp/mk16.log 2>&1
  [ -e /tmp/q16f/config.json ] || python3 fixtures/make/make-checkpoint.py --preset qwen3-30b-a3b --layers 16 --format fp8 --out /tmp/q16f --refs 0 > /tmp/mk16f.log 2>&1
  for f in q16 q16f; do
    timeout 150 node dist/bench-tiered.mjs --model /tmp/$f --prompts fixtures/tiny-moe/prompts.json.gz --hot 64 --max-doc 256 --fit-steps 1000 \
      --users 1 --phases en+code:600,de+ja:600 --policies all-hot,fixed,adaptive --tag formats-$f --out "$OUT" > "$OUT/formats-$f.log" 2>&1
    echo "formats $f rc=$?"
  done
  grep -hE "^\| (all-hot|fixed|adaptive)" "$OUT"/tiered-formats-*.md | cut -c1-170
  exit 0
fi
if [ "$which" = host ]; then
  # The host expert lane (issue 12): the fixed map and adaptive at 64/128 hot, 1 user (HOST_USERS), without the lane
  # and with it, its split measured (the default) or a fixed share of each layer's cold experts, each in quarters of an
  # expert or, with a suffix /N, N parts an expert (HOST_SPLITS, e.g. "off measured measured/1 0.6/1"), on
  # HOST_THREADS threads (default auto).
  [ -e /tmp/q16/config.json ] || python3 fixtures/make/make-checkpoint.py --preset qwen3-30b-a3b --layers 16 --out /tmp/q16 --refs 0 > /tmp/mk16.log 2>&1
  for split in ${HOST_SPLITS:-off measured measured/1 0.6/1}; do
    sh=${split%/*}; parts=""; [ "$sh" != "$split" ] && parts="--host-expert-parts ${split#*/}"
    lane=""
    [ "$sh" != off ] && lane="--host-experts ${HOST_THREADS:-auto} $parts"
    [ "$sh" != off ] && [ "$sh" != measured ] && lane="$lane --host-expert-share $sh"
    sh=${split/\//-parts}
    timeout 150 node dist/bench-tiered.mjs --model /tmp/q16 --prompts fixtures/tiny-moe/prompts.json.gz --hot 64 --max-doc 256 --fit-steps 1000 \
      --users ${HOST_USERS:-1} --phases ${HOST_PHASES:-en+code:800,de+ja:800} --policies ${HOST_POLICIES:-fixed,adaptive} --tag host-$sh $lane --out "$OUT" > "$OUT/host-$sh.log" 2>&1
    echo "host lane $sh rc=$?"
  done
  grep -h "^\[tiered" "$OUT"/host-*.log | grep -v "fitting\|loaded"
  for f in "$OUT"/tiered-host-*.md; do echo "== $f"; grep -hE "^\| (fixed|adaptive)" "$f" | cut -c1-120; done
  exit 0
fi
if [ "$which" = budgets ]; then
  # Adaptive's budgets on the device (docs/results/sim/sim-budgets-2026-12-03.md: in the simulator drain 16 and
  # half-life 250 halve the cold share after the shift): the defaults beside BUDGETS, with the host expert lane, the
  # shift at 1 user (1,500 steps a phase) and 4 users (600), the 4-user routing recorded for the simulator; within
  # one call (stage times: docs/results.md, "Device call times").
  [ -e /tmp/q16/config.json ] || python3 fixtures/make/make-checkpoint.py --preset qwen3-30b-a3b --layers 16 --out /tmp/q16 --refs 0 > /tmp/mk16.log 2>&1
  B="node dist/bench-tiered.mjs --model /tmp/q16 --prompts fixtures/tiny-moe/prompts.json.gz --hot 64 --max-doc 256 --fit-steps 1000 --host-experts auto --out $OUT"
  NEW=${BUDGETS:-'{"drain_every":16,"half_life_tokens":250}'}
  for u in 1 4; do
    if [ $u = 4 ]; then ph=en+code:600,de+ja:600,en+code:600; first="--policies all-hot,fixed,adaptive --trace-out $OUT/trace-4u"
    else ph=en+code:1500,de+ja:1500,en+code:1500; first="--policies fixed,adaptive"; fi
    timeout 150 $B --users $u --phases $ph $first --tag budgets-default-${u}u > "$OUT/budgets-default-${u}u.log" 2>&1; echo "defaults, $u user(s) rc=$?"
    timeout 100 $B --users $u --phases $ph --policies adaptive --budgets "$NEW" --tag budgets-new-${u}u > "$OUT/budgets-new-${u}u.log" 2>&1; echo "$NEW, $u user(s) rc=$?"
  done
  for f in "$OUT"/tiered-budgets-*.md; do echo "== $f"; grep -hE "^\| (fixed|adaptive)" "$f" | cut -c1-130; done
  exit 0
fi
if [ "$which" = traces ]; then
  # Routing for the simulator (src/sim, `residency simulate --traces DIR --phases recorded`): the all-hot lane's steps of
  # the shift and of mixed traffic, 1 and 4 users, 3,000 steps a phase (TRACE_STEPS), one folder each under $OUT.
  [ -e /tmp/q16/config.json ] || python3 fixtures/make/make-checkpoint.py --preset qwen3-30b-a3b --layers 16 --out /tmp/q16 --refs 0 > /tmp/mk16.log 2>&1
  n=${TRACE_STEPS:-3000}
  for u in 1 4; do
    for t in shift mixed; do
      if [ $t = shift ]; then ph=en+code:$n,de+ja:$n,en+code:$n; else ph=en+code+de+ja+fr+zh_CN:$n; fi
      timeout 150 node dist/bench-tiered.mjs --model /tmp/q16 --prompts fixtures/tiny-moe/prompts.json.gz --hot 64 --max-doc 256 --fit-steps 1000 \
        --users $u --phases $ph --policies all-hot --tag trace-$t-${u}u --trace-out "$OUT/trace-$t-${u}u" --out "$OUT" > "$OUT/trace-$t-${u}u.log" 2>&1
      echo "trace $t $u user(s) rc=$?"
    done
  done
  for d in "$OUT"/trace-*/; do gzip -9 "$d"/*.jsonl; done
  du -sh "$OUT"/trace-*/
  exit 0
fi
if [ "$which" = pipeline ]; then
  # The move pipeline's width (banks' copies in flight, COPIES, default "2 4"): the tiered test, then mixed traffic at
  # 4 users (2,000 steps) and the shift at 1 user (1,500-step phases), fixed and adaptive, with the host lane.
  [ -e /tmp/q2/config.json ] || python3 fixtures/make/make-checkpoint.py --preset qwen3-30b-a3b --layers 2 --out /tmp/q2 > /tmp/mk2.log 2>&1 &
  [ -e /tmp/q16/config.json ] || python3 fixtures/make/make-checkpoint.py --preset qwen3-30b-a3b --layers 16 --out /tmp/q16 --refs 0 > /tmp/mk16.log 2>&1
  wait
  REAL_CKPT=/tmp/q2 TIERED_STEPS=800 OUT=$OUT timeout 100 node --test-name-pattern="64/128 hot" dist/gpu-tests.mjs > "$OUT/t-tiered.log" 2>&1
  echo "tiered GPU test rc=$?"; grep -E "^# (tiered|pass|fail)|^not ok" "$OUT/t-tiered.log"
  B="node dist/bench-tiered.mjs --model /tmp/q16 --prompts fixtures/tiny-moe/prompts.json.gz --hot 64 --max-doc 256 --fit-steps 1000 --host-experts auto --out $OUT"
  first=fixed,
  for c in ${COPIES:-2 4}; do
    timeout 130 $B --users 4 --phases en+code+de+ja+fr+zh_CN:2000 --policies ${first}adaptive --copies-in-flight $c --tag mixed-4u-c$c > "$OUT/mixed-4u-c$c.log" 2>&1; echo "mixed 4 users, $c copies rc=$?"
    timeout 90 $B --users 1 --phases en+code:1500,de+ja:1500,en+code:1500 --policies ${first}adaptive --copies-in-flight $c --tag shift-1u-c$c > "$OUT/shift-1u-c$c.log" 2>&1; echo "shift 1 user, $c copies rc=$?"
    first=
  done
  for f in "$OUT"/tiered-*.md; do echo "== $f"; grep -hE "^\| (fixed|adaptive)" "$f" | cut -c1-150; done
  exit 0
fi
if [ "$which" = check ]; then
  # After a change to the banks or the driver: every GPU test (the backend conformance suite with moves landing on
  # both CUDA paths, the Controller swap churn, the tiered test at real shapes), then fixed vs adaptive on mixed
  # traffic at 4 users (2,000 steps) and on a short shift at 4 users (600-step phases; NO_SHIFT=1 skips it), with the host lane.
  [ -e /tmp/q2/config.json ] || python3 fixtures/make/make-checkpoint.py --preset qwen3-30b-a3b --layers 2 --out /tmp/q2 > /tmp/mk2.log 2>&1 &
  [ -e /tmp/q16/config.json ] || python3 fixtures/make/make-checkpoint.py --preset qwen3-30b-a3b --layers 16 --out /tmp/q16 --refs 0 > /tmp/mk16.log 2>&1
  wait
  REAL_CKPT=/tmp/q2 TIERED_STEPS=800 OUT=$OUT timeout 200 node dist/gpu-tests.mjs > "$OUT/t-gpu.log" 2>&1
  echo "GPU tests rc=$?"; grep -E "^# (tiered|pass|fail)|^not ok" "$OUT/t-gpu.log"
  B="node dist/bench-tiered.mjs --model /tmp/q16 --prompts fixtures/tiny-moe/prompts.json.gz --hot 64 --max-doc 256 --fit-steps 1000 --host-experts auto --out $OUT"
  timeout 130 $B --users 4 --phases en+code+de+ja+fr+zh_CN:2000 --policies fixed,adaptive --tag mixed-4u > "$OUT/mixed-4u.log" 2>&1; echo "mixed 4 users rc=$?"
  if [ -z "${NO_SHIFT:-}" ]; then
    timeout 110 $B --users 4 --phases en+code:600,de+ja:600,en+code:600 --policies fixed,adaptive --tag shift-4u > "$OUT/shift-4u.log" 2>&1; echo "shift 4 users rc=$?"
  fi
  for f in "$OUT"/tiered-*.md; do echo "== $f"; grep -hE "^\| (fixed|adaptive)" "$f" | cut -c1-150; done
  exit 0
fi
if [ "$which" = fp8lane ]; then
  # Block-FP8 experts on the host lane (the FP8 gemv's sums have an explicit order the lane repeats): every
  # GPU test (the FP8 families against the CPU, the lane against all hot on a 2-layer bf16 and a 2-layer FP8
  # checkpoint), then the 16-layer FP8 checkpoint at 64/128 hot, 1 user, a short shift, fixed and adaptive without the
  # lane and with it; last (EXTRA_4U=1) the 4-user shift's LRU and seed lanes on the bf16 checkpoint.
  [ -e /tmp/q2/config.json ] || python3 fixtures/make/make-checkpoint.py --preset qwen3-30b-a3b --layers 2 --out /tmp/q2 > /tmp/mk2.log 2>&1 &
  [ -e /tmp/q2f/config.json ] || python3 fixtures/make/make-checkpoint.py --preset qwen3-30b-a3b --layers 2 --format fp8 --out /tmp/q2f > /tmp/mk2f.log 2>&1 &
  [ -e /tmp/q16f/config.json ] || python3 fixtures/make/make-checkpoint.py --preset qwen3-30b-a3b --layers 16 --format fp8 --out /tmp/q16f --refs 0 > /tmp/mk16f.log 2>&1
  wait
  REAL_CKPT=/tmp/q2 REAL_CKPT_FP8=/tmp/q2f TIERED_STEPS=400 OUT=$OUT timeout 240 node dist/gpu-tests.mjs > "$OUT/t-gpu.log" 2>&1
  echo "GPU tests rc=$?"; grep -E "^# (tiered|host lane|pass|fail)|^not ok" "$OUT/t-gpu.log" | cut -c1-260
  B="node dist/bench-tiered.mjs --model /tmp/q16f --prompts fixtures/tiny-moe/prompts.json.gz --hot 64 --max-doc 256 --fit-steps 1000 --users 1 --out $OUT"
  for lane in off auto; do
    flags=""; [ $lane = auto ] && flags="--host-experts auto"
    timeout 110 $B --phases en+code:800,de+ja:800 --policies fixed,adaptive $flags --tag fp8-lane-$lane > "$OUT/fp8-lane-$lane.log" 2>&1; echo "FP8, lane $lane rc=$?"
  done
  if [ -n "${EXTRA_4U:-}" ]; then
    [ -e /tmp/q16/config.json ] || python3 fixtures/make/make-checkpoint.py --preset qwen3-30b-a3b --layers 16 --out /tmp/q16 --refs 0 > /tmp/mk16.log 2>&1
    timeout 150 node dist/bench-tiered.mjs --model /tmp/q16 --prompts fixtures/tiny-moe/prompts.json.gz --hot 64 --max-doc 256 --fit-steps 1000 --host-experts auto \
      --users 4 --phases en+code:600,de+ja:600,en+code:600 --policies lru,seed --tag shift-4u-lru-seed --out "$OUT" > "$OUT/shift-4u-lru-seed.log" 2>&1; echo "4 users, lru and seed rc=$?"
  fi
  for f in "$OUT"/tiered-*.md; do echo "== $f"; grep -hE "^\| (fixed|adaptive|lru|seed)" "$f" | cut -c1-150; done
  exit 0
fi
if [ "$which" = mxlane ]; then
  # gpt-oss's MXFP4 experts on the host lane (the MXFP4 gemv's sums and the clamped SwiGLU got an explicit order the
  # lane repeats): the lane against all hot on a 2-layer gpt-oss-20b MXFP4 checkpoint (H = I = 2880, 16 of 32 hot),
  # beside the bf16 and FP8 lanes' cases, then every GPU test.
  [ -e /tmp/q2/config.json ] || python3 fixtures/make/make-checkpoint.py --preset qwen3-30b-a3b --layers 2 --out /tmp/q2 > /tmp/mk2.log 2>&1 &
  [ -e /tmp/q2f/config.json ] || python3 fixtures/make/make-checkpoint.py --preset qwen3-30b-a3b --layers 2 --format fp8 --out /tmp/q2f > /tmp/mk2f.log 2>&1 &
  [ -e /tmp/o2/config.json ] || python3 fixtures/make/make-checkpoint.py --preset gpt-oss-20b --layers 2 --format mxfp4 --out /tmp/o2 > /tmp/mko2.log 2>&1
  wait
  REAL_CKPT=/tmp/q2 REAL_CKPT_FP8=/tmp/q2f REAL_CKPT_MXFP4=/tmp/o2 TIERED_STEPS=400 OUT=$OUT timeout 300 node dist/gpu-tests.mjs > "$OUT/t-gpu.log" 2>&1
  echo "GPU tests rc=$?"; grep -E "^# (tiered|host lane|pass|fail)|^not ok" "$OUT/t-gpu.log" | cut -c1-260
  exit 0
fi
# (checkpoints already made by an earlier mode of the same call are used as they are; NO_TEST=1 skips the tiered GPU
# test and its 2-layer checkpoint, for a call that only measures)
[ -n "${NO_TEST:-}" ] || [ -e /tmp/q2/config.json ] || python3 fixtures/make/make-checkpoint.py --preset qwen3-30b-a3b --layers 2 --out /tmp/q2 > /tmp/mk2.log 2>&1 &
[ -e /tmp/q16/config.json ] || python3 fixtures/make/make-checkpoint.py --preset qwen3-30b-a3b --layers 16 --out /tmp/q16 --refs 0 > /tmp/mk16.log 2>&1
wait
if [ "$which" != mixed ] && [ -z "${NO_TEST:-}" ]; then
  # The tiered test (moves landing while greedy decode runs) and the router's top-k at every width.
  REAL_CKPT=/tmp/q2 TIERED_STEPS=800 OUT=$OUT timeout 100 node --test-name-pattern="64/128 hot|op_route" dist/gpu-tests.mjs > "$OUT/t-tiered-$which.log" 2>&1
  echo "tiered GPU test rc=$?"; grep -E "^# (tiered|pass|fail)|^not ok" "$OUT/t-tiered-$which.log"
fi
# LANE: the host expert lane's flags (default: on, its split measured; LANE= runs without it).
B="node dist/bench-tiered.mjs --model /tmp/q16 --prompts fixtures/tiny-moe/prompts.json.gz --hot 64 --max-doc 256 --fit-steps 1000 ${LANE---host-experts auto}"
# One call holds the 1-user lanes or the 4-user ones (time per lane: docs/results.md, "Device call times").
if [ "$which" = 1u ] || [ "$which" = all ]; then
  timeout 330 $B --users 1 --policies all-hot,fixed,adaptive,oracle-phase,lru,seed --out "$OUT" > "$OUT/shift-1u.log" 2>&1; echo "shift 1 user rc=$?"
fi
if [ "$which" = 4u ] || [ "$which" = all ]; then
  # 4 users: 1,200 steps a phase (3,000 would not fit one call with the other lanes). The 3,000 steps a phase
  # take two calls: PHASE_STEPS=3000 POLICIES=all-hot,fixed,adaptive,oracle-phase, then PHASE_STEPS=3000
  # POLICIES=lru,seed TAG=4u-b (time per lane: docs/results.md, "Device call times").
  n=${PHASE_STEPS:-1200}
  timeout ${LIMIT_4U:-400} $B --users 4 --phases en+code:$n,de+ja:$n,en+code:$n --policies ${POLICIES:-all-hot,fixed,adaptive,oracle-phase} \
    ${TAG:+--tag $TAG} --out "$OUT" > "$OUT/shift-4u${TAG:+-$TAG}.log" 2>&1; echo "shift 4 users rc=$?"
fi
if [ "$which" = mixed ] || [ "$which" = all ]; then
  for u in ${MIXED_USERS:-1 4}; do
    timeout 200 $B --users $u --phases en+code+de+ja+fr+zh_CN:3000 --policies fixed,adaptive --tag mixed-${u}u --out "$OUT" > "$OUT/mixed-${u}u.log" 2>&1; echo "mixed $u user(s) rc=$?"
  done
fi
grep -h "^\[tiered" "$OUT"/*.log
grep -hE "^\| (all-hot|fixed|seed|adaptive|lru|oracle)|^counter" "$OUT"/tiered-*.md | cut -c1-170
