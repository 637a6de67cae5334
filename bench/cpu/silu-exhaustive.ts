// The wasm SwiGLU activation (wasm/swiglu-code.ts, with exp-code.ts's port of Math.exp's steps) against the JS spec
// (moe-ops.ts `silu`) on every float32 gate value, 2^32 of them: the check that lets silu run in wasm bit-identically
// on this runtime (simd.test.ts samples the same on every test run). Run: node --import tsx bench/cpu/silu-exhaustive.ts
// (about 2 minutes a core). Prints the mismatches (NaN results compare as NaN, whatever their payload) and exits 1 on any.
import { WasmArena } from '../../src/backend/cpu/wasm/arena.ts';
import { simdKernel } from '../../src/backend/cpu/wasm/kernel.ts';
import { silu } from '../../src/backend/cpu/moe-ops.ts';

const N = 1 << 20;
const arena = new WasmArena();
const k = simdKernel(arena.memory);
const gu = arena.f32(2 * N);
const bits = new Uint32Array(gu.buffer, gu.byteOffset, N);
gu.fill(1, N); // up = 1: the activation is silu(gate) rounded to float32
const act = arena.f64(N);
let bad = 0;
const t0 = performance.now();
for (let hi = 0; hi < 2 ** 32; hi += N) {
  for (let i = 0; i < N; i++) bits[i] = hi + i;
  k.swigluAt(act.byteOffset, gu.byteOffset, 1, N);
  for (let i = 0; i < N; i++) {
    const want = silu(gu[i]!);
    const got = act[i]!;
    if (got !== want && !(Number.isNaN(got) && Number.isNaN(want)) || Object.is(got, -0) !== Object.is(want, -0)) {
      if (bad++ < 20) console.log(`gate bits 0x${(hi + i).toString(16)} (${gu[i]}): wasm ${got}, JS ${want}`);
    }
  }
  if ((hi / N) % 512 === 511) console.log(`${(((hi + N) / 2 ** 32) * 100).toFixed(0)}% (${((performance.now() - t0) / 1e3).toFixed(0)} s)`);
}
console.log(`silu over all 2^32 float32 gates: ${bad} mismatches (node ${process.version})`);
process.exit(bad === 0 ? 0 : 1);
