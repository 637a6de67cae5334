#!/usr/bin/env bash
# Decode and prefill tok/s at real size for the families beyond Qwen3 (issue 13), all experts in HBM, through
# the product's CUDA backend (dist/bench-real.mjs, its per-kernel table too): deepseek-v3 x 4 layers (3 dense,
# 1 of 256 experts; 25 GB) and gpt-oss-120b x 8 layers in MXFP4 (two 4-layer make-checkpoint runs joined by
# join-checkpoints.py: make-checkpoint runs out of GPU memory past ~4). One checkpoint on the disk at a time;
# tables and JSON under $OUT/<stage>/.
#   source .gpu/boot.sh && bash bench/gpu/families-real.sh [ds4] [ds4f] [g8]   (default all; ds4f: deepseek-v3 x 4 in
#   block FP8, its hub format)
set -u
OUT=${OUT:-out/families}; mkdir -p "$OUT"
STAGES=${*:-ds4 ds4f g8}
has() { [[ " $STAGES " == *" $1 "* ]]; }
mk() { local out=${*: -1}; python3 fixtures/make/make-checkpoint.py --refs 0 "$@" > "$OUT/mk-$(basename "$out").log" 2>&1 || { echo "make-checkpoint $* failed"; return 1; }; }
bench() {
  mkdir -p "$OUT/$2"
  timeout 300 node dist/bench-real.mjs --model "$1" --steps 64 --out "$OUT/$2" > "$OUT/$2/table.md" 2> "$OUT/$2/stderr.log"
  echo "$2 rc=$?"; head -11 "$OUT/$2/table.md"
}
if has ds4; then
  mk --preset deepseek-v3 --layers 4 --out /tmp/ds4 && bench /tmp/ds4 ds4
  rm -rf /tmp/ds4
fi
if has ds4f; then
  mk --preset deepseek-v3 --layers 4 --format fp8 --out /tmp/ds4f && bench /tmp/ds4f ds4f
  rm -rf /tmp/ds4f
fi
if has g8; then
  mk --preset gpt-oss-120b --layers 4 --format mxfp4 --seed 0 --out /tmp/g4a && mk --preset gpt-oss-120b --layers 4 --format mxfp4 --seed 1 --out /tmp/g4b &&
    python3 bench/gpu/join-checkpoints.py /tmp/g4a /tmp/g4b /tmp/g8 > "$OUT/join.log" 2>&1 && bench /tmp/g8 g8
  rm -rf /tmp/g4a /tmp/g4b /tmp/g8
fi
