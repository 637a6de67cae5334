// A step's rows on the device as the backend writes them (kernel-args.ts stepLayout: header, token, pos, the output
// rows, each row's block table), and the OpRows the attention kernels take.
import { encodeRows, stepLayout } from '../../../src/backend/cuda/step/kernel-args.ts';
import type { OpDevice } from './device.ts';

/** A paged KV pool as the attention kernels address it: row t's positions in its blocks `tables[t]`. */
export interface PoolRows {
  readonly pool: bigint;
  readonly blockSize: number;
  readonly layers: number;
  readonly tables: readonly (readonly number[])[];
}

export interface StepRows {
  /** Valid rows (the rest are a bucket's padding) and whether the routing counts them. */
  readonly valid: number;
  readonly count: boolean;
  readonly tokens?: readonly number[];
  readonly pos?: readonly number[];
  readonly kv?: PoolRows;
  /** The rows whose outputs are wanted (the final norm's gather). */
  readonly out?: readonly number[];
}

export interface StepDev {
  /** The step buffer: header at 0 (the routing's), arrays after. */
  readonly dev: bigint;
  readonly at: ReturnType<typeof stepLayout>;
  /** OpRows by value. */
  readonly rows: Uint8Array;
}

export function uploadStep(dev: OpDevice, T: number, s: StepRows): StepDev {
  const maxBlocks = Math.max(1, ...(s.kv?.tables ?? []).map((t) => t.length));
  const o = stepLayout(T, maxBlocks);
  const h = Buffer.alloc(o.bytes);
  h.writeInt32LE(s.valid, 0);
  h.writeInt32LE(s.count ? 1 : 0, 4);
  const p = dev.alloc(o.bytes, 'step rows');
  const tableAt = (slot: number): number => o.tables + 4 * maxBlocks * slot;
  for (let i = 0; i < T; i++) {
    h.writeInt32LE(s.tokens?.[i] ?? 0, o.token + 4 * i);
    h.writeInt32LE(s.pos?.[i] ?? 0, o.pos + 4 * i);
    // Row i's table in slot i (the tests' rows are distinct sequences); rows past the slots share the last one.
    const slot = Math.min(i, o.tableSlots - 1);
    const t = s.kv?.tables[i];
    if (t && slot === i) t.forEach((b, j) => h.writeInt32LE(b, tableAt(slot) + 4 * j));
    h.writeBigUInt64LE(p + BigInt(tableAt(slot)), o.table + 8 * i);
  }
  (s.out ?? []).forEach((r, i) => h.writeInt32LE(r, o.out + 4 * i));
  dev.d.htod(p, h);
  const at = (off: number): bigint => p + BigInt(off);
  return {
    dev: p, at: o,
    rows: encodeRows({ token: at(o.token), pos: at(o.pos), table: at(o.table), pool: s.kv?.pool ?? 0n, blockSize: s.kv?.blockSize ?? 1, layers: s.kv?.layers ?? 1, dtype: 0 }),
  };
}
