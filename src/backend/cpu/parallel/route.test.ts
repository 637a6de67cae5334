// The router job (OP_ROUTE: a step's tokens split between threads, each computing its tokens' logits and routing
// them): bit-identical to the serial compute's router (logits, probabilities, picks and weights, byte for byte) for
// token counts below and above the split, with the JS loops and the SIMD kernel, the workers taking part.
import { test } from 'node:test';
import type { RowCompute } from '../row-compute.ts';
import type { Alloc } from '../alloc.ts';
import { assertSplitMatchesSerial } from './split-harness.ts';
import { mulberry32 } from '../synthetic.ts';
import { bytesOf as bytes } from '../test-helpers.ts';

/** The router's outputs on `compute` for random x and W (the same seed on every compute). */
function routeOn(compute: RowCompute, alloc: Alloc, tokens: number, E: number, H: number, K: number, normalize: boolean): Buffer {
  const rand = mulberry32(tokens * 31 + E);
  const w = alloc.f32(E * H);
  const x = alloc.f32(tokens * H);
  for (const a of [w, x]) for (let i = 0; i < a.length; i++) a[i] = (rand() * 2 - 1) * (rand() < 0.02 ? 0 : 1);
  // Ties: two experts with the same weights.
  w.copyWithin(3 * H, 0, H);
  const logits = alloc.f32(tokens * E);
  const probs = alloc.f32(tokens * E);
  const ids = alloc.i32(tokens * K);
  const weights = alloc.f32(tokens * K);
  compute.route(logits, probs, ids, weights, w, x, tokens, E, H, K, normalize);
  return Buffer.concat([bytes(logits), bytes(probs), bytes(ids), bytes(weights)]);
}

const ROUTE_CASES = [[1, 64, 128, 6, true], [3, 8, 5, 2, false], [4, 64, 128, 6, true], [5, 7, 9, 3, true], [17, 16, 33, 4, false], [128, 64, 128, 6, true]] as const;

for (const simd of [false, true]) {
  test(`the router split by tokens is bit-identical to the serial router (${simd ? 'SIMD kernel' : 'JS loops'})`, () =>
    assertSplitMatchesSerial(simd, ROUTE_CASES, (compute, alloc, [tokens, E, H, K, normalize]) => routeOn(compute, alloc, tokens, E, H, K, normalize),
      ([tokens, E, H, K]) => `tokens ${tokens} experts ${E} hidden ${H} top-${K}`));
}
