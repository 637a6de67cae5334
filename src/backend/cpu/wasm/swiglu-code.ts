// The code of swiglu (assembled into module.ts): the SwiGLU activations of an expert unit's picks from their gate|up
// sums, as wasm/experts.ts computed them in JS (moe-ops.ts `swigluAct` on the float32 sums):
//   swiglu(act, gu, count, inter): for j < count, i < inter, with g = gu[j][i] and u = gu[j][inter + i] (float32):
//     act[j][i] (float64) = f32(f32(g / (1 + exp(-g))) * u)
// gu rows are 2*inter float32 and act rows inter float64: both 8*inter bytes. exp is exp-code.ts's (Math.exp's
// steps); the division in float64 and each rounding as `silu` and `Math.fround` do (a float32 multiply rounds the
// exact product once, as fround of the float64 product of two float32 values does).
import { ADD, DEMOTE, END, MUL, PROMOTE, f32Load, get, i32c, set, u32, I32, vec, whileLt, bump } from './asm.ts';
import { f64c } from './exp-code.ts';

const [ACT, GU, COUNT, INTER] = [0, 1, 2, 3];
const [G, A, GEND, UP, ROWEND] = [4, 5, 6, 7, 8]; // i32
const [FNEG, FADD, FDIV, F32_MUL, CALL] = [0x9a, 0xa0, 0xa3, 0x94, 0x10];
const f64StoreAt0 = [0x39, 3, 0];

/** The body, calling exp as function `expIndex` of the module. */
export function swigluCode(expIndex: number): number[] {
  const body = [
    ...get(INTER), ...i32c(4), MUL, ...set(UP),
    ...get(GU), ...set(G),
    ...get(ACT), ...set(A),
    ...get(GU), ...get(COUNT), ...get(INTER), MUL, ...i32c(8), MUL, ADD, ...set(ROWEND),
    ...whileLt(G, ROWEND, [
      ...get(G), ...get(UP), ADD, ...set(GEND),
      ...whileLt(G, GEND, [
        ...get(A),
        ...get(G), ...f32Load(0), PROMOTE,
        ...f64c(1), ...get(G), ...f32Load(0), PROMOTE, FNEG, CALL, ...u32(expIndex), FADD,
        FDIV, DEMOTE,
        ...get(G), ...get(UP), ADD, ...f32Load(0), F32_MUL, PROMOTE,
        ...f64StoreAt0,
        ...bump(G, 4),
        ...bump(A, 8),
      ]),
      // Past this row's up sums to the next pick's gate sums.
      ...get(G), ...get(UP), ADD, ...set(G),
    ]),
    END,
  ];
  return [...vec([[...u32(5), I32]]), ...body];
}

/** The function's type: four i32 parameters, no result. */
export const swigluType = [0x60, ...vec(Array.from({ length: 4 }, () => [I32])), 0];
