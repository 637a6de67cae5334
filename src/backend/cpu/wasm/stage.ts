// What linear_tab (tile-code.ts) reads besides the weights, staged in the kernel's memory by the main thread:
// float32 input rows promoted to float64 (exact), and the tables of input and output row addresses. Worker
// threads read what was staged for the job they run; only the main thread stages, between jobs.
import type { WasmArena } from './arena.ts';

export class TabStage {
  private x64: Float64Array = new Float64Array(0);
  private xTab: Int32Array = new Int32Array(0);
  private yTab: Int32Array = new Int32Array(0);

  constructor(private readonly arena: WasmArena) {}

  /** Promotes x[0..n) to float64 rows; returns their byte address. */
  promote(x: Float32Array, n: number): number {
    if (this.x64.length < n) this.x64 = this.arena.f64(nextPow2(n));
    this.x64.set(n === x.length ? x : x.subarray(0, n));
    return this.x64.byteOffset;
  }

  /**
   * Stages y = W x for `rows` rows (x [rows][inDim] promoted, y [rows][outDim]); returns the byte addresses of
   * the output and input tables.
   */
  linear(y: Float32Array, x: Float32Array, rows: number, outDim: number, inDim: number): { yTab: number; xTab: number } {
    const xAt = this.promote(x, rows * inDim);
    if (this.xTab.length < rows) {
      this.xTab = this.arena.i32(nextPow2(rows));
      this.yTab = this.arena.i32(nextPow2(rows));
    }
    for (let r = 0; r < rows; r++) {
      this.xTab[r] = xAt + 8 * r * inDim;
      this.yTab[r] = y.byteOffset + 4 * r * outDim;
    }
    return { yTab: this.yTab.byteOffset, xTab: this.xTab.byteOffset };
  }
}

function nextPow2(n: number): number {
  let p = 16;
  while (p < n) p *= 2;
  return p;
}
