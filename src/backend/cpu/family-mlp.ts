// The MLPs outside the banks: a dense layer's SwiGLU MLP and an MoE layer's shared expert (DeepSeek), both
// computed on the calling thread, never cold: float32 from contiguous rows, or quantized matrices as stored
// (quant-linear.ts, bit-identical to the float32 expert over the dequantized matrices); and the bias add of
// biased projections.
import type { ModelSpec } from '../../model/spec.ts';
import type { ExpertWeights, LayerWeights } from '../../model/weights.ts';
import { isQuantized } from '../../model/quant.ts';
import { swigluExpert } from './moe-ops.ts';
import { quantExpert, type QuantExpert } from './quant-linear.ts';

/** y[t][i] += bias[i] for `tokens` rows of bias.length values. */
export function addBias(y: Float32Array, tokens: number, bias: Float32Array): void {
  const n = bias.length;
  for (let t = 0; t < tokens; t++) for (let i = 0; i < n; i++) y[t * n + i] = y[t * n + i]! + bias[i]!;
}

/** One MLP as the backend computes it: a float32 row (gate | up | down), or its three quantized matrices. */
type MlpRow = { readonly row: Float32Array } | { readonly quant: QuantExpert };

export class FamilyMlps {
  /** Per model layer: the dense MLP, or null. */
  private readonly denseMlps: (MlpRow | null)[];
  private readonly sharedMlps: (MlpRow | null)[];
  private readonly act: Float32Array;
  private readonly tmp: Float32Array;
  private readonly H: number;

  constructor(private readonly spec: ModelSpec, layers: readonly LayerWeights[]) {
    const row = (e: ExpertWeights | undefined): MlpRow | null => {
      if (!e) return null;
      const { gate, up, down } = e;
      // check-weights.ts refuses an MLP that mixes quantized and float32 matrices.
      if (isQuantized(gate) && isQuantized(up) && isQuantized(down)) return { quant: { gate, up, down } };
      const [g, u, d] = [gate, up, down] as Float32Array[];
      const r = new Float32Array(g!.length + u!.length + d!.length);
      r.set(g!, 0);
      r.set(u!, g!.length);
      r.set(d!, g!.length + u!.length);
      return { row: r };
    };
    this.denseMlps = layers.map((w) => row(w.dense));
    this.sharedMlps = layers.map((w) => row(w.shared));
    this.act = new Float32Array(Math.max(spec.denseIntermediate ?? 0, spec.sharedIntermediate ?? 0));
    this.H = spec.hiddenSize;
    this.tmp = new Float32Array(this.H);
  }

  /** out[t] = dense MLP of layer `l` (x[t]). */
  dense(l: number, out: Float32Array, x: Float32Array, tokens: number): void {
    const H = this.H;
    const m = this.denseMlps[l]!;
    for (let t = 0; t < tokens; t++) this.mlp(m, out, t * H, x, t * H, this.spec.denseIntermediate!);
  }

  /** out[t] = out[t] + shared expert of layer `l` (x[t]) (float32 add, as transformers adds the two). */
  addShared(l: number, out: Float32Array, x: Float32Array, tokens: number): void {
    const H = this.H;
    const m = this.sharedMlps[l]!;
    for (let t = 0; t < tokens; t++) {
      this.mlp(m, this.tmp, 0, x, t * H, this.spec.sharedIntermediate!);
      for (let i = 0; i < H; i++) out[t * H + i] = out[t * H + i]! + this.tmp[i]!;
    }
  }

  /** out[outOff..+H) = the MLP of x[xOff..+H) (I intermediate units). */
  private mlp(m: MlpRow, out: Float32Array, outOff: number, x: Float32Array, xOff: number, I: number): void {
    if ('row' in m) swigluExpert(out, outOff, m.row, 0, x, xOff, this.H, I, this.act);
    else quantExpert(out, outOff, -1, m.quant, x, xOff, -1, this.H, I, this.act);
  }
}
