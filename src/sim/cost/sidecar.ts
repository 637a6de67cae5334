// Sidecar: cold experts computed on another device (the host CPU) in parallel with the hot ones on the GPU.
import { V4_FLASH, type CostProfile } from './cost-model.ts';

const HBM_BYTES_PER_US = 4.3e12 / 1e6; // H200 HBM
const SIDECAR_BYTES_PER_US = 150e9 / 1e6; // effective host DRAM bandwidth of the CPU computing cold experts (assumed)
const SYNC_US = 10; // activations to and from the sidecar per layer with cold work (assumed)
const H2D_BYTES_PER_US = 55e9 / 1e6;

export const sidecar: CostProfile = {
  name: 'sidecar',
  description:
    'H200 + CPU sidecar: hot experts on the GPU from HBM at 4.3 TB/s; cold experts computed by the CPU ' +
    'reading its own DRAM at an assumed 150 GB/s (120 us per expert, all of its tokens in one pass) plus ' +
    '10 us of activation transfer per layer with cold work. Per layer the step waits for the longer of the ' +
    'two, so cold work is free while it stays under the hot time. Swaps and copies as on h200-pcie. ' +
    'Base (non-MoE) step time 4.0 ms (assumed).',
  target: V4_FLASH,
  baseStepUs: 4000,
  layerUs: (w) => {
    const hotUs = w.hotTouched * (V4_FLASH.expertBytes / HBM_BYTES_PER_US);
    const coldUs = w.coldTouched > 0 ? w.coldTouched * (V4_FLASH.expertBytes / SIDECAR_BYTES_PER_US) + SYNC_US : 0;
    return Math.max(hotUs, coldUs);
  },
  swapUs: (2 * V4_FLASH.expertBytes) / H2D_BYTES_PER_US,
  copyUs: V4_FLASH.expertBytes / H2D_BYTES_PER_US,
};
