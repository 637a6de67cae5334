// GB300 with the cold bank in Grace memory read in place over NVLink-C2C (design.md section 2).
import { V4_FLASH, type CostProfile } from './cost-model.ts';

const HBM_BYTES_PER_US = 4.0e12 / 1e6; // ~4 TB/s as the design quotes for this part
const COLD_TILE_US = 45; // a cold expert read in place per 8-token tile over C2C (~340 GB/s)
const COPY_US = 64; // a row copy: the middle of the measured range (docs/results.md, "Cost model inputs")

export const gb300C2c: CostProfile = {
  name: 'gb300-c2c',
  description:
    'GB300: hot experts read from HBM at ~4 TB/s (17.93 MiB -> 4.7 us each), cold experts read in place ' +
    'over NVLink-C2C at ~45 us per 8-token tile, copy-on-miss inserts 64 us (55-72 us measured); a step ' +
    'that applies swaps runs 1.9x the p95 of swap-free steps (host-level measurement). Base (non-MoE) ' +
    'step time 4.0 ms, calibrated so adaptive prose decode at <1% cold share gives ~189 tok/s as measured.',
  target: V4_FLASH,
  baseStepUs: 4000,
  layerUs: (w) => w.hotTouched * (V4_FLASH.expertBytes / HBM_BYTES_PER_US) + w.coldTiles * COLD_TILE_US,
  swapUs: 0,
  copyUs: COPY_US,
  swapStepFactor: 1.9,
};
