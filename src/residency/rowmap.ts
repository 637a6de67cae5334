// The map: which experts sit in the hot bank and which in the cold bank, row by row (design.md section 4).

/** Per layer, expert ids in hot-bank row order and in cold-bank row order. */
export interface LayerRows {
  readonly hot: readonly number[];
  readonly cold: readonly number[];
}

/**
 * The `rowmap` format, version 1. Geometry (the hot count per layer) is part of the contract:
 * keeping it means no re-tuning and no re-allocation. Each expert appears exactly once per layer.
 */
export interface RowMap {
  readonly version: 1;
  readonly model: string;
  readonly layers: number;
  readonly experts: number;
  readonly hot_per_layer: number;
  readonly layers_map: readonly LayerRows[];
}
