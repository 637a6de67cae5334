// The expert FFN over the banks (layered path): one block per (pick, row), a thread per output row. The
// expert row is found through the slot the route kernel wrote: slot < hot_rows reads the hot bank (device
// memory), else cold row slot - hot_rows (mapped pinned host memory, read in place). Output is the
// unweighted expert output; the next kernel combines in router order.
#include "common.cuh"

extern "C" __global__ void expert_ffn(const ModelDev* __restrict__ mp, int layer, const StepDev* __restrict__ st,
                                      WorkDev w) {
  extern __shared__ __align__(16) float sm[];
  const ModelDev& m = c_model; // mp (same contents) is kept in the signature for the host's ABI
  const int k = blockIdx.x, b = blockIdx.y;
  if (!st->row[b].valid) return;
  const int H = m.H, I = m.I;
  const LayerDev& L = c_layers[layer];
  float* x = sm;
  float* act = x + ((H + 3) & ~3); // [2I]: gate then up, then silu(gate) * up in the first I
  const int slot = w.pick_slot[b * m.K + k];
  const size_t rowElems = (size_t)3 * I * H;
  const bf16_t* row = slot < m.hot_rows ? L.hot + (size_t)slot * rowElems : L.cold + (size_t)(slot - m.hot_rows) * rowElems;
  for (int i = threadIdx.x; i < H; i += blockDim.x) x[i] = w.xn[(size_t)b * H + i];
  __syncthreads();
  block_gemv(row, x, act, 2 * I, H); // gate [I][H] and up [I][H] are contiguous rows
  __syncthreads();
  float a = 0.f;
  if (threadIdx.x < I) a = silu(act[threadIdx.x]) * act[I + threadIdx.x];
  __syncthreads();
  if (threadIdx.x < I) act[threadIdx.x] = a;
  __syncthreads();
  block_gemv(row + (size_t)2 * I * H, act, w.partial + ((size_t)b * m.K + k) * H, H, I);
}
