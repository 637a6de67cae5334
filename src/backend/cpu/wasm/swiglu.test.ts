// The wasm exp (exp-code.ts) against Math.exp, and the wasm SwiGLU activation (swiglu-code.ts) against moe-ops.ts
// `swigluAct`: bit-identical on float32 inputs of every exponent (a stride over all 2^32 patterns: the exhaustive
// run is bench/cpu/silu-exhaustive.ts), the branch edges of fdlibm's exp, and random float64 arguments.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WasmArena } from './arena.ts';
import { simdKernel } from './kernel.ts';
import { swigluAct } from '../moe-ops.ts';
import { mulberry32 } from '../synthetic.ts';

const same = (a: number, b: number): boolean => Object.is(a, b) || (Number.isNaN(a) && Number.isNaN(b));

/** Where fdlibm's exp changes branch (|x| vs 0.5 ln2, 1.5 ln2, 2^-28, the overflow and underflow thresholds), and specials. */
const EDGES = [0, -0, 1, -1, 2, -2, 0.5, Infinity, -Infinity, NaN, 2 ** -28, -(2 ** -28), 2 ** -29, 0.5 * Math.LN2, 1.5 * Math.LN2, -1.5 * Math.LN2,
  709.782712893384, 709.7827128933841, 709.79, 708.4, -708.39, -708.4, -709.1, -744.44, -745.1332191019411, -745.2, 1e-320, -1e-320, Math.LN2, 100, -100];

test('wasm exp is Math.exp bit for bit: float32 inputs of every exponent, branch edges, random float64', () => {
  const k = simdKernel(new WasmArena().memory);
  const f = new Float32Array(1);
  const bits = new Uint32Array(f.buffer);
  const xs: number[] = [...EDGES];
  for (const e of EDGES) xs.push(e * (1 + 2 ** -52), e * (1 - 2 ** -52));
  for (let b = 0; b < 2 ** 32; b += 65_521) {
    bits[0] = b;
    xs.push(f[0]!);
  }
  const rand = mulberry32(3);
  for (let i = 0; i < 200_000; i++) xs.push((rand() - 0.5) * 1500, (rand() - 0.5) * 4);
  for (const x of xs) if (!same(k.exp(x), Math.exp(x))) assert.fail(`exp(${x}): wasm ${k.exp(x)}, Math.exp ${Math.exp(x)}`);
});

test('wasm swiglu is swigluAct bit for bit on every unit row, odd sizes, large, tiny and special sums', () => {
  const arena = new WasmArena();
  const k = simdKernel(arena.memory);
  const rand = mulberry32(9);
  for (const [count, inter] of [[1, 1], [3, 7], [32, 48], [5, 130]] as const) {
    const gu = arena.f32(count * 2 * inter);
    for (let i = 0; i < gu.length; i++) gu[i] = (rand() * 2 - 1) * 10 ** Math.floor(rand() * 8 - 4);
    for (let i = 0; i < Math.min(EDGES.length, inter); i++) gu[i] = -EDGES[i]!;
    const act = arena.f64(count * inter);
    k.swigluAt(act.byteOffset, gu.byteOffset, count, inter);
    for (let j = 0; j < count; j++) {
      for (let i = 0; i < inter; i++) {
        const want = Math.fround(swigluAct(gu[j * 2 * inter + i]!, gu[j * 2 * inter + inter + i]!));
        assert.ok(same(act[j * inter + i]!, want), `count ${count} inter ${inter} pick ${j} unit ${i}: wasm ${act[j * inter + i]}, JS ${want}`);
      }
    }
  }
});
