#!/usr/bin/env bash
# Issue-6 smoke on the GPU: generate with a cold bank and the live residency controller (GO file present),
# then all-hot; the tokens must be identical (swaps and placement are lossless).
#   bash bench/gpu/cold-generate.sh                       # --hot 40
#   MAP=map.json PRIOR=dump.json bash bench/gpu/cold-generate.sh   # --map MAP (e.g. 49 hot) and a seed prior
#   BACKEND=cpu ... runs the same on the CPU backend (a dry run of this script).
P=2020,348,1724,891,363,3030,3497,14,1930,4882,199,2084,356,51,312,1571,1943,68,48,294,314,8,2133,9,408,311,532,1146,1688,4798,7,1552,1146,1688,363,1,7,1552,1146,1688,363,31,4882,199,93,199,1554,324
BACKEND=${BACKEND:-cuda}
PLACE="--hot 40"; [ -n "$MAP" ] && PLACE="--map $MAP"
EXTRA=""; [ -n "$PRIOR" ] && EXTRA="--prior $PRIOR"
RES=${RES:-node dist/residency.mjs}
rm -rf /tmp/rd && mkdir -p /tmp/rd && touch /tmp/rd/GO
$RES generate --backend $BACKEND $PLACE $EXTRA --residency-dir /tmp/rd --prompt-ids $P --max-tokens 600 --ignore-eos --json > /tmp/cold.json 2> /tmp/cold.err
$RES generate --backend $BACKEND --prompt-ids $P --max-tokens 600 --ignore-eos --json > /tmp/hot.json 2> /tmp/hot.err
echo "generate --backend $BACKEND $PLACE $EXTRA --residency-dir /tmp/rd:"; grep -h "prior\|error\|Error" /tmp/cold.err | head -3; tail -1 /tmp/cold.err; tail -1 /tmp/hot.err
node -e "const a=require('/tmp/cold.json').tokens, b=require('/tmp/hot.json').tokens; console.log('cold+swaps vs all-hot tokens identical:', JSON.stringify(a)===JSON.stringify(b), a.length)"
echo "swaps applied: $(cat /tmp/rd/swaps.jsonl 2>/dev/null | wc -l); telemetry lines: $(cat /tmp/rd/telemetry.jsonl 2>/dev/null | wc -l)"; tail -1 /tmp/rd/telemetry.jsonl 2>/dev/null | cut -c1-300
