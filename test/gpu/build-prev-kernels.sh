#!/usr/bin/env bash
# Compiles the kernels as they were before the flash-decoding split (git rev, default cf5b4c6) into
# dist/kernels-prev/, with the flags of scripts/build-kernels.mjs. The GPU test "short contexts: the same
# bits as the kernels before the split" loads them (through a backend with attnSplits 1, the old grid) and
# compares every logit bit with today's kernels; without this folder that test is skipped. Run here (needs
# git and nvcc), after `npm run build`, before carrying dist/ to the GPU machine.
set -euo pipefail
REV=${1:-cf5b4c6}
root=$(cd "$(dirname "$0")/../.." && pwd)
out="$root/dist/kernels-prev"
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
for f in $(git -C "$root" ls-tree --name-only "$REV" kernels/); do git -C "$root" show "$REV:$f" > "$src/$(basename "$f")"; done
mkdir -p "$out"
NVCC=${NVCC:-nvcc}
for cu in "$src"/*.cu; do
  "$NVCC" -fatbin -O3 -std=c++17 -lineinfo -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
    -o "$out/$(basename "${cu%.cu}").fatbin" "$cu"
done
echo "build-prev-kernels: kernels of $REV -> $out ($(ls "$out" | tr '\n' ' '))"
