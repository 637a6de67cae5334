// A step's rows on the device as the backend writes them (kernel-args.ts stepLayout: header, token, pos, cap, the
// output rows, each row's KV cache), and the OpRows the attention kernels take.
import { encodeRows, stepLayout } from '../../../src/backend/cuda/step/kernel-args.ts';
import type { OpDevice } from './device.ts';

export interface StepRows {
  /** Valid rows (the rest are a bucket's padding) and whether the routing counts them. */
  readonly valid: number;
  readonly count: boolean;
  readonly tokens?: readonly number[];
  readonly pos?: readonly number[];
  readonly cap?: readonly number[];
  readonly kv?: readonly bigint[];
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
  const o = stepLayout(T);
  const h = Buffer.alloc(o.bytes);
  h.writeInt32LE(s.valid, 0);
  h.writeInt32LE(s.count ? 1 : 0, 4);
  for (let i = 0; i < T; i++) {
    h.writeInt32LE(s.tokens?.[i] ?? 0, o.token + 4 * i);
    h.writeInt32LE(s.pos?.[i] ?? 0, o.pos + 4 * i);
    h.writeInt32LE(s.cap?.[i] ?? 1, o.cap + 4 * i);
    h.writeBigUInt64LE(s.kv?.[i] ?? 0n, o.kv + 8 * i);
  }
  (s.out ?? []).forEach((r, i) => h.writeInt32LE(r, o.out + 4 * i));
  const p = dev.upload(h, 'step rows');
  const at = (off: number): bigint => p + BigInt(off);
  return { dev: p, at: o, rows: encodeRows({ token: at(o.token), pos: at(o.pos), cap: at(o.cap), kv: at(o.kv) }) };
}
