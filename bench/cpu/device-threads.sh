#!/usr/bin/env bash
# CPU thread scaling past 2 cores (issue 18) on the GPU machine's host CPU (16 cores; the GPU is not used): bench:cpu
# (dist/bench-cpu.mjs) on a 1-layer Qwen3-30B-A3B-geometry checkpoint from make-checkpoint.py (its 151,936-token
# vocabulary: two layers' bf16 rows would pass the 3 GiB the SIMD kernel's memory may hold, and the JS loops would
# run), at 1 and N threads for N in 2 4 8 16. Tables under $OUT/cpu-threads/, a summary last.
#   source .gpu/boot.sh && node scripts/build.mjs && bash bench/cpu/device-threads.sh [N ...]
set -u
OUT=${OUT:-out}/cpu-threads; mkdir -p "$OUT"
COUNTS=${*:-2 4 8 16}
CKPT=/tmp/q30-1l
[ -f "$CKPT/config.json" ] || python3 fixtures/make/make-checkpoint.py --refs 0 --preset qwen3-30b-a3b --layers 1 --out "$CKPT" > "$OUT/mk.log" 2>&1 || { echo "make-checkpoint failed"; tail -5 "$OUT/mk.log"; exit 1; }
for n in $COUNTS; do
  timeout 300 node dist/bench-cpu.mjs --model "$CKPT" --warm 8 --steps 24 --prompt-tokens 32 --threads "$n" --simd on > "$OUT/threads-$n.md" 2>&1
  echo "threads $n rc=$?"
done
echo "| threads | decode b1 1t | decode b1 Nt | decode b4 1t | decode b4 Nt | prefill 1t | prefill Nt |"
echo "|---|---|---|---|---|---|---|"
for n in $COUNTS; do
  f="$OUT/threads-$n.md"
  val() { grep -E "^\|\s+1 \| $1 +\|\s+$2 \|\s+on \|\s+$3 \|" "$f" | head -1 | awk -F'|' '{gsub(/ /,"",$8); print $8}'; }
  echo "| $n | $(val 'decode \(backend\)' 1 1) | $(val 'decode \(backend\)' "$n" 1) | $(val 'decode \(backend\)' 1 4) | $(val 'decode \(backend\)' "$n" 4) | $(val 'prefill \(backend\)' 1 1) | $(val 'prefill \(backend\)' "$n" 1) |"
done
