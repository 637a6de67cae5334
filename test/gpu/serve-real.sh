#!/usr/bin/env bash
# On the GPU machine: `residency serve --backend cuda --gpu-memory-utilization 0.9 --max-model-len 8192` on a
# real-size checkpoint answers a streamed greedy completion with the same text as `residency generate`.
#   bash test/gpu/serve-real.sh MODEL_DIR [PORT]
set -o pipefail
M=$1; PORT=${2:-18400}; IDS=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16
gen=$(node dist/residency.mjs generate --model "$M" --backend cuda --prompt-ids $IDS --max-tokens 24 --ignore-eos --json --max-model-len 8192 2>/dev/null) || { echo "serve-real: generate failed"; exit 1; }
node dist/residency.mjs serve --model "$M" --backend cuda --hot 128 --gpu-memory-utilization 0.9 --max-model-len 8192 --port $PORT > /tmp/serve-real.log 2>&1 & pid=$!
GEN="$gen" timeout 120 node -e '
const url = `http://127.0.0.1:${process.argv[1]}`;
(async () => {
  for (let i = 0; i < 600; i++) { try { if ((await fetch(url + "/health")).ok) break; } catch {} await new Promise((r) => setTimeout(r, 200)); }
  const ids = process.argv[2].split(",").map(Number);
  const r = await fetch(url + "/v1/completions", { method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt: ids, max_tokens: 24, temperature: 0, ignore_eos: true, stream: true }) });
  let text = "", chunks = 0;
  for (const line of (await r.text()).split("\n")) {
    if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
    const j = JSON.parse(line.slice(6)); text += j.choices?.[0]?.text ?? ""; chunks++;
  }
  const want = JSON.parse(process.env.GEN).text;
  console.log(`serve --backend cuda (real size): HTTP ${r.status}, ${chunks} chunks, streamed text ${text === want ? "==" : "!="} generate text (${JSON.stringify(text.slice(0, 60))})`);
  process.exit(text === want ? 0 : 1);
})();' $PORT $IDS; rc=$?
kill $pid 2>/dev/null; wait $pid 2>/dev/null
grep -iE "hot|budget|KV|listening|error" /tmp/serve-real.log | head -5
exit $rc
