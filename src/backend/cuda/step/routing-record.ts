// The routing record of a step's rows, as both CUDA paths copy it back: pinned `host` holds n x LK expert ids
// then n x LK weights (row order); each row's go to its token's place in the step's record.

export function scatterRouting(
  host: Uint8Array, rows: readonly { tokenIndex: number }[], LK: number, routing: Int32Array, routingWeights: Float32Array,
): void {
  const n = rows.length;
  const ids = new Int32Array(host.buffer, host.byteOffset, n * LK);
  const ws = new Float32Array(host.buffer, host.byteOffset + 4 * n * LK, n * LK);
  rows.forEach((r, i) => {
    routing.set(ids.subarray(i * LK, (i + 1) * LK), r.tokenIndex * LK);
    routingWeights.set(ws.subarray(i * LK, (i + 1) * LK), r.tokenIndex * LK);
  });
}
