// The code of combine (assembled into module.ts), moe-ops.ts `combinePicks` exactly:
//   combine(out, w, pick, tokens, K, H): out[t*H + o] = demote(sum over k in order of promote(w[t*K+k] * pick[(t*K+k)*H + o]))
// The float32 products are `Math.fround(w * p)` (a float32 multiply rounds the exact product once, as fround of the
// float64 product does: a float32 product fits a float64 exactly), the sums float64 from 0 in k order, two outputs a
// lane pair (f32x4 products of a splatted weight and a float pair, promoted), an odd last output scalar.
import {
  ADD, BLOCK, DEMOTE, END, EQZ, F64_ZERO2, FADD, LOOP, LT_U, MUL, PROMOTE, PROMOTE_LOW, VADD, brIf, f32Load,
  f32Store, f32StoreAt, get, i32c, lane, load64Zero, set, simd, u32, I32, F64, V128, vec, whileLt, bump,
} from './asm.ts';

const [OUT, W, PICK, TOKENS, K, H] = [0, 1, 2, 3, 4, 5];
const [T, O, KK, OA, WA, PA, C, WC, HB] = [6, 7, 8, 9, 10, 11, 12, 13, 14]; // i32
const ACC = 15; // v128
const S = 16; // f64

const F32X4_SPLAT = simd(0x13);
const F32X4_MUL = simd(0xe6);
const F32_MUL = 0x94;

const bumpBy = (l: number, by: number): number[] => [...get(l), ...get(by), ADD, ...set(l)];

/** Over k < K from C = PA + o*4 and WC = WA: `step`, then C += H*4, WC += 4. */
const overK = (step: number[]): number[] => [
  ...get(PA), ...get(O), ...i32c(4), MUL, ADD, ...set(C),
  ...get(WA), ...set(WC),
  ...i32c(0), ...set(KK),
  ...whileLt(KK, K, [...step, ...bumpBy(C, HB), ...bump(WC, 4), ...bump(KK, 1)]),
];

const body: number[] = [
  ...get(H), ...i32c(4), MUL, ...set(HB),
  ...get(OUT), ...set(OA),
  ...get(W), ...set(WA),
  ...get(PICK), ...set(PA),
  ...i32c(0), ...set(T),
  ...whileLt(T, TOKENS, [
    ...i32c(0), ...set(O),
    // Pairs of outputs while o + 1 < H.
    ...BLOCK, ...get(O), ...i32c(1), ADD, ...get(H), LT_U, EQZ, ...brIf(0),
    ...LOOP,
    ...F64_ZERO2, ...set(ACC),
    ...overK([
      ...get(ACC),
      ...get(WC), ...f32Load(0), ...F32X4_SPLAT, ...get(C), ...load64Zero(0), ...F32X4_MUL, ...PROMOTE_LOW,
      ...VADD, ...set(ACC),
    ]),
    ...get(OA), ...get(O), ...i32c(4), MUL, ADD, ...get(ACC), ...lane(0), DEMOTE, ...f32Store,
    ...get(OA), ...get(O), ...i32c(4), MUL, ADD, ...get(ACC), ...lane(1), DEMOTE, ...f32StoreAt(4),
    ...bump(O, 2),
    ...get(O), ...i32c(1), ADD, ...get(H), LT_U, ...brIf(0),
    END,
    END,
    // The odd last output.
    ...whileLt(O, H, [
      ...i32c(0), 0xb7 /* f64.convert_i32_s: 0.0 */, ...set(S),
      ...overK([...get(S), ...get(WC), ...f32Load(0), ...get(C), ...f32Load(0), F32_MUL, PROMOTE, FADD, ...set(S)]),
      ...get(OA), ...get(O), ...i32c(4), MUL, ADD, ...get(S), DEMOTE, ...f32Store,
      ...bump(O, 1),
    ]),
    ...bumpBy(OA, HB),
    ...get(WA), ...get(K), ...i32c(4), MUL, ADD, ...set(WA),
    ...get(PA), ...get(K), ...get(HB), MUL, ADD, ...set(PA),
    ...bump(T, 1),
  ]),
  END,
];

export const combineCode = [...vec([[...u32(9), I32], [...u32(1), V128], [...u32(1), F64]]), ...body];
