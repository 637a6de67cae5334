// What a model's weights cost in host memory: as held (float32 arrays, quantized matrices as stored), and
// what a float32 copy of every weight would cost (the figure quantized weights kept as stored stay below).
import { isQuantized, matrixBytes, type Matrix } from './quant.ts';
import type { ModelWeights } from './weights.ts';

function isMatrix(v: unknown): v is Matrix {
  return v instanceof Float32Array || (typeof v === 'object' && v !== null && 'format' in v && 'data' in v && 'scales' in v);
}

/** Every distinct weight array or matrix of `w` (a tied lm_head once). */
export function weightMatrices(w: ModelWeights): Matrix[] {
  const seen = new Set<Matrix>();
  const walk = (v: unknown): void => {
    if (isMatrix(v)) seen.add(v);
    else if (Array.isArray(v)) v.forEach(walk);
    else if (typeof v === 'object' && v !== null) Object.values(v).forEach(walk);
  };
  walk(w);
  return [...seen];
}

/** Bytes the weights hold: float32 arrays 4 a value, quantized matrices their stored data and scales. */
export function heldBytes(w: ModelWeights): number {
  return weightMatrices(w).reduce((a, m) => a + matrixBytes(m), 0);
}

/** Bytes a float32 copy of every weight would take (4 a value, quantized matrices dequantized). */
export function float32Bytes(w: ModelWeights): number {
  return weightMatrices(w).reduce((a, m) => a + 4 * (isQuantized(m) ? m.rows * m.cols : m.length), 0);
}
