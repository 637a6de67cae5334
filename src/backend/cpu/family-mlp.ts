// The MLPs outside the banks: a dense layer's SwiGLU MLP and an MoE layer's shared expert (DeepSeek), both
// computed on the calling thread from contiguous rows, never cold; and the bias add of biased projections.
import type { ModelSpec } from '../../model/spec.ts';
import type { ExpertWeights, LayerWeights } from '../../model/weights.ts';
import { swigluExpert } from './moe-ops.ts';

/** y[t][i] += bias[i] for `tokens` rows of bias.length values. */
export function addBias(y: Float32Array, tokens: number, bias: Float32Array): void {
  const n = bias.length;
  for (let t = 0; t < tokens; t++) for (let i = 0; i < n; i++) y[t * n + i] = y[t * n + i]! + bias[i]!;
}

export class FamilyMlps {
  /** Per model layer: the dense MLP's row (gate | up | down), or null. */
  private readonly denseRows: (Float32Array | null)[];
  private readonly sharedRows: (Float32Array | null)[];
  private readonly act: Float32Array;
  private readonly tmp: Float32Array;
  private readonly H: number;

  constructor(private readonly spec: ModelSpec, layers: readonly LayerWeights[]) {
    const row = (e: ExpertWeights | undefined): Float32Array | null => {
      if (!e) return null;
      // check-weights.ts refuses quantized dense and shared MLPs.
      const [gate, up, down] = [e.gate, e.up, e.down] as Float32Array[];
      const r = new Float32Array(gate!.length + up!.length + down!.length);
      r.set(gate!, 0);
      r.set(up!, gate!.length);
      r.set(down!, gate!.length + up!.length);
      return r;
    };
    this.denseRows = layers.map((w) => row(w.dense));
    this.sharedRows = layers.map((w) => row(w.shared));
    this.act = new Float32Array(Math.max(spec.denseIntermediate ?? 0, spec.sharedIntermediate ?? 0));
    this.H = spec.hiddenSize;
    this.tmp = new Float32Array(this.H);
  }

  /** out[t] = dense MLP of layer `l` (x[t]). */
  dense(l: number, out: Float32Array, x: Float32Array, tokens: number): void {
    const H = this.H;
    for (let t = 0; t < tokens; t++) swigluExpert(out, t * H, this.denseRows[l]!, 0, x, t * H, H, this.spec.denseIntermediate!, this.act);
  }

  /** out[t] = out[t] + shared expert of layer `l` (x[t]) (float32 add, as transformers adds the two). */
  addShared(l: number, out: Float32Array, x: Float32Array, tokens: number): void {
    const H = this.H;
    for (let t = 0; t < tokens; t++) {
      swigluExpert(this.tmp, 0, this.sharedRows[l]!, 0, x, t * H, H, this.spec.sharedIntermediate!, this.act);
      for (let i = 0; i < H; i++) out[t * H + i] = out[t * H + i]! + this.tmp[i]!;
    }
  }
}
