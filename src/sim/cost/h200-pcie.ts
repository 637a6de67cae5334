// H200 with the cold bank in pinned host memory read in place over PCIe (measured here, design.md section 2).
import { V4_FLASH, type CostProfile } from './cost-model.ts';

const HBM_BYTES_PER_US = 4.3e12 / 1e6; // device copy 4.3 TB/s
const IN_PLACE_BYTES_PER_US = 51e9 / 1e6; // kernel reading pinned host memory: 51 GB/s
const H2D_BYTES_PER_US = 55e9 / 1e6; // H2D copy: 55 GB/s

export const h200Pcie: CostProfile = {
  name: 'h200-pcie',
  description:
    'H200 over PCIe: hot experts from HBM at 4.3 TB/s (4.4 us per 17.93 MiB expert), cold experts read in ' +
    'place from pinned host memory at 51 GB/s, one full read per 8-token tile (369 us); a swap moves two ' +
    'rows (one in over H2D at 55 GB/s, one out: 684 us per swap), a copy-on-miss insert moves one (342 us; ' +
    'the host keeps every expert, so an evicted row is dropped). Base (non-MoE) step time 4.0 ms, the same ' +
    'assumption as gb300-c2c (not measured on the H200).',
  target: V4_FLASH,
  baseStepUs: 4000,
  layerUs: (w) => w.hotTouched * (V4_FLASH.expertBytes / HBM_BYTES_PER_US) + w.coldTiles * (V4_FLASH.expertBytes / IN_PLACE_BYTES_PER_US),
  swapUs: (2 * V4_FLASH.expertBytes) / H2D_BYTES_PER_US,
  copyUs: V4_FLASH.expertBytes / H2D_BYTES_PER_US,
};
