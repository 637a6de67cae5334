// The residual and the norm of a layer's input (op_residual_norm) and the device argmax (op_argmax_rows) against the
// CPU: mode 0 the embedding of each row's token (a fed token: the argmax the step before left in its keys), mode 1
// the residual plus the previous MoE layer's picks combined in router order, mode 2 the residual as it is, each
// RMSNormed; the final norm gathering the rows whose logits are wanted. The argmax on the vocabularies of the
// families, with ties, NaNs, a row of NaNs and signed zeros, into device and mapped host keys.
import { argmaxLaunch, residualNormLaunch } from '../../../src/backend/cuda/step/launches.ts';
import { ARGMAX_BLOCKS } from '../../../src/backend/cuda/memory/workspace.ts';
import { argmaxOfRow } from '../../../src/backend/cuda/step/argmax-keys.ts';
import { routeModeOf } from '../../../src/backend/cuda/step/kernel-args.ts';
import { argmax } from '../../../src/backend/argmax.ts';
import { embedding, rmsnorm } from '../../../src/backend/cpu/linalg.ts';
import { combinePicks } from '../../../src/backend/cpu/moe-ops.ts';
import { bf16Matrix } from '../../../src/model/quant.ts';
import { DRY, type OpDevice } from './device.ts';
import type { Draw } from './draw.ts';
import type { Family } from './shapes.ts';
import { FAMILIES } from './shapes.ts';
import { BAR, nonFinite, normErr, record } from './report.ts';
import { uploadStep } from './step-rows.ts';

/** Rows of the embedding table the tests draw (the kernel reads a token's row; the vocabulary's size does not matter). */
const EMBED_ROWS = 4096;
const MOE_LAYERS = 3, PREV = 1;

/** Logits of `rows` rows of V with the argmax's hard cases: a tie of the maximum, NaNs, a row of NaNs, -0 and +0 as the maximum. */
function argmaxLogits(draw: Draw, rows: number, V: number): Float32Array {
  const x = draw.f32(rows * V, 8);
  if (rows > 1) {
    const [a, b] = [draw.int(V >> 1), (V >> 1) + draw.int(V >> 1)];
    x[V + a] = x[V + b] = 100; // a tie: the lower index wins
    x[V + draw.int(V)] = NaN;
  }
  if (rows > 2) x.fill(NaN, 2 * V, 3 * V); // every logit NaN: 0, as the host's argmax
  if (rows > 3) {
    for (let i = 3 * V; i < 4 * V; i++) x[i] = -Math.abs(x[i]!) - 1;
    x[3 * V + 7] = -0;
    x[3 * V + 5] = 0; // +0 and -0 are one value: index 5 wins
  }
  return x;
}

export function argmaxCases(dev: OpDevice, draw: Draw): void {
  for (const f of [FAMILIES.qwen3, FAMILIES.gptOss, FAMILIES.tiny]) {
    const V = f.spec.vocabSize, rows = 5;
    try {
      const x = argmaxLogits(draw, rows, V);
      const keys = dev.poisoned(8 * rows * ARGMAX_BLOCKS, 'keys');
      const host = dev.mapped(8 * rows * ARGMAX_BLOCKS, 'host keys');
      const l = argmaxLaunch(rows, { logits: dev.upload(x, 'logits'), V, keys, hostKeys: host.dev });
      dev.run(l);
      const got = dev.read(keys, 8 * rows * ARGMAX_BLOCKS);
      let wrong = 0;
      const problems: string[] = [];
      for (let r = 0; r < rows; r++) {
        const want = argmax(x, r * V, V), a = argmaxOfRow(got, r, ARGMAX_BLOCKS), b = argmaxOfRow(host.host, r, ARGMAX_BLOCKS);
        if (a !== want) { wrong++; problems.push(`row ${r}: ${a}, the CPU ${want}`); }
        if (b !== a && !DRY) problems.push(`row ${r}: mapped host keys give ${b}, device keys ${a}`);
      }
      record(l.name, `${f.name} V${V} ${rows} rows (tie, NaN, all NaN, -0/+0)`, 'f32', wrong / rows, 0, problems);
    } finally {
      dev.release();
    }
  }
}

/**
 * op_residual_norm of `n` output rows over T rows of one family's hidden size: mode 0 embeds tokens (two of them fed:
 * the argmax of a logits row op_argmax_rows left in the keys), 1 adds the previous MoE layer's picks, 2 takes hidden;
 * `gather`: output row i from input row out[i] (the final norm).
 */
function runResidualNorm(dev: OpDevice, draw: Draw, f: Family, mode: 0 | 1 | 2, T: number, gather: number[] | null): void {
  const s = f.spec, H = s.hiddenSize, K = s.topK, LK = MOE_LAYERS * K, eps = s.rmsNormEps;
  const n = gather ? gather.length : T;
  const inRow = (i: number): number => (gather ? gather[i]! : i);
  try {
    const w = draw.bf16(H, 1);
    const embed = { bits: new Uint16Array(draw.bytes(2 * EMBED_ROWS * H, 'bf16').buffer) };
    const hidden0 = draw.f32(T * H, 4);
    const partial = draw.f32(T * K * H, 1);
    const pickW = draw.f32(T * LK, 1).map(Math.abs);
    // Fed tokens (mode 0): rows 1 and 3 take the argmax of logits rows 0 and 2, as a run-ahead step's rows do.
    const tokens = Array.from({ length: T }, () => draw.int(EMBED_ROWS));
    const logits = draw.f32(4 * EMBED_ROWS, 8);
    const keys = dev.poisoned(8 * 4 * ARGMAX_BLOCKS, 'argmax keys');
    if (mode === 0) {
      dev.run(argmaxLaunch(4, { logits: dev.upload(logits, 'logits'), V: EMBED_ROWS, keys, hostKeys: 0n }));
      if (T > 1) tokens[1] = -1 - 0;
      if (T > 3) tokens[3] = -1 - 2;
    }
    const step = uploadStep(dev, T, { valid: T, count: false, tokens, out: gather ?? [] });
    const hidden = mode === 0 ? dev.poisoned(4 * T * H, 'hidden') : dev.guarded(hidden0, 'hidden');
    const xn = dev.poisoned(4 * n * H, 'xn');
    const l = residualNormLaunch(n, {
      mode, hidden, partial: dev.upload(partial, 'partial'), pickWeight: dev.upload(pickW, 'pickW'), LK, prevLayer: PREV, K,
      rows: gather ? step.dev + BigInt(step.at.out) : 0n, tokens: step.dev + BigInt(step.at.token), fedKeys: keys, embed: dev.upload(embed.bits, 'embed'),
      w: dev.upload(w.bits, 'norm'), out: xn, H, eps,
    });
    dev.run(l);
    // The CPU: each output row's residual, then rmsnorm (weights widened from bf16).
    const table = bf16Matrix(EMBED_ROWS, H, embed.bits);
    const x = new Float32Array(H), want = new Float32Array(n * H), hiddenWant = new Float32Array(hidden0);
    const comb = new Float32Array(H), wk = new Float32Array(K);
    for (let i = 0; i < n; i++) {
      const r = inRow(i);
      if (mode === 0) {
        const t = tokens[r]!;
        embedding(x, 0, table, t >= 0 ? t : argmax(logits, (-1 - t) * EMBED_ROWS, EMBED_ROWS), H);
      } else {
        x.set(hidden0.subarray(r * H, (r + 1) * H));
        if (mode === 1) {
          wk.set(pickW.subarray(r * LK + PREV * K, r * LK + PREV * K + K));
          combinePicks(comb, wk, partial.subarray(r * K * H, (r + 1) * K * H), 1, K, H);
          for (let c = 0; c < H; c++) x[c] = x[c]! + comb[c]!;
        }
      }
      hiddenWant.set(x, r * H);
      rmsnorm(want, i * H, x, 0, w.f32, H, eps);
    }
    const all = dev.readF32(xn, n * H);
    // Padding rows (the last output repeated) of mode 1 may read their row after its first block added the picks:
    // their outputs are never read, so only the first of each run is compared.
    const first = Array.from({ length: n }, (_, i) => i).filter((i) => mode !== 1 || !gather || i === 0 || gather[i] !== gather[i - 1]);
    const pick = (a: Float32Array): Float32Array => Float32Array.from(first.flatMap((i) => Array.from(a.subarray(i * H, (i + 1) * H))));
    const got = pick(all);
    const problems: string[] = [];
    if (nonFinite(all) > 0) problems.push(`${nonFinite(all)} of ${n * H} outputs not written (or not finite)`);
    if (!dev.guardIntact(xn, 4 * n * H)) problems.push('wrote past xn');
    // Modes 0 and 1 write the residual back to hidden (the rows read).
    if (mode !== 2) {
      const hg = dev.readF32(hidden, T * H);
      const rowsRead = new Set(Array.from({ length: n }, (_, i) => inRow(i)));
      const idx = [...rowsRead].flatMap((r) => Array.from({ length: H }, (_, c) => r * H + c));
      const he = normErr(idx.map((j) => hg[j]!), idx.map((j) => hiddenWant[j]!));
      if (!(he <= BAR.f32)) problems.push(`hidden written back: error ${he}`);
    }
    const what = ['embedding (2 fed tokens)', 'residual + picks', 'residual'][mode];
    record(l.name, `${f.name} H${H} mode ${mode} ${what} T${T}${gather ? ` gather ${gather.join(',')}` : ''}`, 'f32', normErr(got, pick(want)), BAR.f32, problems);
  } finally {
    dev.release();
  }
}

export function residualNormCases(dev: OpDevice, draw: Draw): void {
  const { qwen3, mixtral, gptOss, deepseek, tiny } = FAMILIES;
  for (const f of [qwen3, mixtral, gptOss, deepseek, tiny]) {
    dev.raise(f.spec, routeModeOf(f.spec));
    for (const mode of [0, 1, 2] as const) runResidualNorm(dev, draw, f, mode, 5, null);
  }
  // The final norm: the rows whose logits are wanted, after an MoE layer (its picks added) or as they are, padded
  // with the last one as the backend pads them (mode 1: only the first block of a row writes it back, so the picks
  // are added once whatever order the blocks run in).
  runResidualNorm(dev, draw, qwen3, 1, 6, [5, 2, 0, 3]);
  runResidualNorm(dev, draw, qwen3, 1, 6, [4, 1, 1, 1]);
  runResidualNorm(dev, draw, deepseek, 2, 6, [4, 1, 1, 1]);
}
