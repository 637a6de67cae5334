#!/usr/bin/env bash
# One device call for the whole GPU check, in priority order, each part bounded so the call ends inside its
# limit: test:gpu (parity, vs CPU, counter, swap churn, serve smoke), the CLI `serve --backend cuda` (one
# request), bench:gpu. (bench:tiered at real size has its own device call: bench/tiered/device-run.sh.)
# After `npm run build`, on a machine with an NVIDIA GPU and Node.js 20+:
#   bash test/gpu/device-run.sh [seconds, default 300]   (where Node comes from a bundle: source .gpu/boot.sh first)
# DRY=1 (here, no GPU): skips the device tests, serves on the cpu backend.
# Everything lands in $OUT/results.tgz (re-packed after each part) plus $OUT/summary.txt.
set -o pipefail
OUT=${OUT:-out/device}
R=/tmp/device-results; rm -rf "$R"; mkdir -p "$R" "$OUT"
BUDGET=${1:-300}; T0=$SECONDS
left() { echo $(( BUDGET - (SECONDS - T0) )); }
pack() { tar czf "$OUT/results.tgz" -C "$R" . ; cp "$R/summary.txt" "$OUT/summary.txt"; }
note() { echo "$*" | tee -a "$R/summary.txt"; }
note "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"

# (The op-by-op tests, ops.gpu.ts, run last in it: ~60 s more.)
t=$SECONDS; if [ -z "$DRY" ]; then OUT="$R" timeout 230 node dist/gpu-tests.mjs 2>&1 | tee "$R/test-gpu.log"; rc=${PIPESTATUS[0]}; else echo dry > "$R/test-gpu.log"; rc=dry; fi
note "test:gpu rc=$rc in $((SECONDS - t)) s: $(grep -cE '^ok ' "$R/test-gpu.log") ok, $(grep -cE '^not ok ' "$R/test-gpu.log") not ok"
grep -E '^# (parity|vs cpu|long context|counter|churn|serve smoke|lifecycle|op |ops )' "$R/test-gpu.log" | cut -c1-400 >> "$R/summary.txt"; pack

# The CLI path (an earlier tree served empty text on cuda): one greedy token-id request.
t=$SECONDS; PORT=18347; BACKEND=${DRY:+cpu}; BACKEND=${BACKEND:-cuda}
node dist/residency.mjs serve --backend $BACKEND --hot 49 --adapt --port $PORT > "$R/cli-serve.log" 2>&1 & spid=$!
timeout 40 node -e '
const url = `http://127.0.0.1:${process.argv[1]}`;
const p = JSON.parse(require("fs").readFileSync("fixtures/tiny-moe/parity.json", "utf8")).cases[7].prompt_ids;
(async () => {
  for (let i = 0; i < 150; i++) { try { await fetch(url + "/health"); break; } catch { await new Promise((r) => setTimeout(r, 200)); } }
  const r = await fetch(url + "/v1/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ prompt: p, max_tokens: 40, temperature: 0, ignore_eos: true }) });
  const j = await r.json();
  console.log(`cli serve --backend cuda: HTTP ${r.status}, ${j.usage?.completion_tokens} tokens, ${j.choices?.[0]?.text?.length} chars: ${JSON.stringify(j.choices?.[0]?.text?.slice(0, 80))}`);
})();' $PORT 2>&1 | tee -a "$R/summary.txt"
kill $spid 2>/dev/null; wait $spid 2>/dev/null
note "cli serve check in $((SECONDS - t)) s"; pack

if [ "$(left)" -gt 150 ]; then
  t=$SECONDS; [ -z "$DRY" ] && { OUT="$R" timeout 50 node dist/bench-gpu.mjs > "$R/bench-gpu.log" 2>&1; rc=$?; }
  note "bench:gpu rc=$rc in $((SECONDS - t)) s"; pack
else note "bench:gpu skipped ($(left) s left)"; fi

note "total $((SECONDS - T0)) s"
echo; cat "$R/summary.txt"
