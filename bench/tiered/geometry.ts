// The big geometry: a DeepSeek-V4.1-Flash-like expert size on a stack that fits one H200 plus host RAM.
// Row = one SwiGLU expert, bf16: 3 * hidden * intermediate * 2 B = 18 MiB at 2048 x 1536.
// 16 layers x 295 hot rows = 83 GiB HBM; 16 x 89 cold rows = 25 GiB pinned host memory.

export interface TieredGeometry {
  readonly layers: number;
  readonly experts: number;
  readonly hotPerLayer: number;
  readonly topK: number;
  readonly hidden: number;
  readonly intermediate: number;
  /** HBM staging rows for exchanges in flight (2 per exchange). */
  readonly stagingRows: number;
}

export const BIG: TieredGeometry = Object.freeze({
  layers: 16, experts: 384, hotPerLayer: 295, topK: 6, hidden: 2048, intermediate: 1536, stagingRows: 64,
});

/** A small geometry for the smoke check (same code paths, seconds to allocate). */
export const SMALL: TieredGeometry = Object.freeze({
  layers: 2, experts: 384, hotPerLayer: 295, topK: 6, hidden: 512, intermediate: 256, stagingRows: 8,
});

export function rowBytes(g: TieredGeometry): number {
  return 3 * g.hidden * g.intermediate * 2;
}

export function coldPerLayer(g: TieredGeometry): number {
  return g.experts - g.hotPerLayer;
}
