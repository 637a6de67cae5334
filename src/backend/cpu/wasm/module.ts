// The bytes of the SIMD kernel module, assembled by hand (no toolchain) over an imported shared memory:
// linear_tab and linear_tab1 (one input row) from tile-code.ts (every linear layer and expert, linalg.ts `dot`
// exactly; their _bf16 twins over bf16 weight rows kept as stored), attn_scores and attn_wsum from attention-code.ts, combine (an MoE layer's picks summed in router order) from combine-code.ts,
// exp (Math.exp's steps) from exp-code.ts and swiglu (an expert unit's activations) from swiglu-code.ts.
import { scoresCode, wsumCode } from './attention-code.ts';
import { tab1Code, tabCode, tabType } from './tile-code.ts';
import { combineCode } from './combine-code.ts';
import { expCode, expType } from './exp-code.ts';
import { swigluCode, swigluType } from './swiglu-code.ts';
import { u32, section, vec, I32 } from './asm.ts';

/** Most 64 KiB pages of the imported memory (4 GiB, all a 32-bit address reaches). */
export const MAX_PAGES = 65536;

/**
 * The module's bytes (imports a shared memory of at most MAX_PAGES pages). `fma`: linear_tab and attn_scores add
 * their exact products with relaxed_madd (relaxed SIMD; the same sums either way: asm.ts exactMulAdd).
 */
export function linearModuleBytes(fma = false): Uint8Array {
  const maxPages = MAX_PAGES;
  const attnType = [0x60, ...vec(Array.from({ length: 6 }, () => [I32])), 0];
  const name = (s: string): number[] => [...u32(s.length), ...[...s].map((c) => c.charCodeAt(0))];
  const fn = (c: number[]): number[] => [...u32(c.length), ...c];
  const bytes = [
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
    ...section(1, vec([attnType, tabType, expType, swigluType])),
    // import env.memory: shared memory, min 1 page (any larger memory satisfies it), max maxPages.
    ...section(2, vec([[...name('env'), ...name('memory'), 0x02, 0x03, ...u32(1), ...u32(maxPages)]])),
    ...section(3, vec([u32(0), u32(0), u32(1), u32(0), u32(2), u32(3), u32(1), u32(1), u32(1)])),
    ...section(7, vec([
      [...name('attn_scores'), 0x00, ...u32(0)],
      [...name('attn_wsum'), 0x00, ...u32(1)],
      [...name('linear_tab'), 0x00, ...u32(2)],
      [...name('combine'), 0x00, ...u32(3)],
      [...name('exp'), 0x00, ...u32(4)],
      [...name('swiglu'), 0x00, ...u32(5)],
      [...name('linear_tab1'), 0x00, ...u32(6)],
      [...name('linear_tab_bf16'), 0x00, ...u32(7)],
      [...name('linear_tab1_bf16'), 0x00, ...u32(8)],
    ])),
    ...section(10, vec([fn(scoresCode(fma)), fn(wsumCode), fn(tabCode(fma)), fn(combineCode), fn(expCode), fn(swigluCode(4)), fn(tab1Code(fma)), fn(tabCode(fma, true)), fn(tab1Code(fma, true))])),
  ];
  return Uint8Array.from(bytes);
}
