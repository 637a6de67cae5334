// Route-and-split: router logits -> weights of the top-k -> bank slots via the slot table -> one relaxed
// atomic add per pick into the counter row (when counting). Run by one warp.
// Modes: softmax over all experts then top-k (Qwen3, Mixtral, OLMoE), renormalized over the k or not; or
// top-k of the logits then softmax over the k (gpt-oss, its router bias already in the logits).
#pragma once
#include "common.cuh"

enum { ROUTE_SOFTMAX = 0, ROUTE_SOFTMAX_RENORM = 1, ROUTE_TOPK_SOFTMAX = 2 };

// `logits` (E values, shared memory; the softmax modes overwrite them with probabilities) -> out_e/out_w/out_slot [K] (shared or
// global). Ties in probability go to the lower expert id (torch.topk). Top-k by rank: each lane counts the
// experts that beat its own (independent shared-memory reads, no serial rounds of shuffles).
__device__ __forceinline__ void warp_route(float* logits, int E, int K, int mode, const int32_t* __restrict__ slots,
                                           int32_t* out_e, float* out_w, int32_t* out_slot, uint32_t* counter_row) {
  const int lane = threadIdx.x & 31;
  if (mode != ROUTE_TOPK_SOFTMAX) {
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, logits[e]);
    mx = warp_max(mx);
    float s = 0.f;
    for (int e = lane; e < E; e += 32) s += expf(logits[e] - mx);
    s = warp_sum(s);
    for (int e = lane; e < E; e += 32) logits[e] = expf(logits[e] - mx) / s;
    __syncwarp();
  }
  for (int e = lane; e < E; e += 32) {
    const float p = logits[e];
    int rank = 0;
#pragma unroll 16
    for (int j = 0; j < E; j++) {
      const float q = logits[j]; // same address across the warp: a broadcast
      rank += (q > p || (q == p && j < e)) ? 1 : 0;
    }
    if (rank < K) { out_e[rank] = e; out_w[rank] = p; }
  }
  __syncwarp();
  if (mode == ROUTE_TOPK_SOFTMAX) { // softmax over the k chosen logits (the largest first)
    const float top = out_w[0];
    float esum = 0.f;
    for (int j = 0; j < K; j++) esum += expf(out_w[j] - top);
    __syncwarp();
    if (lane < K) out_w[lane] = expf(out_w[lane] - top) / esum;
    __syncwarp();
  }
  float wsum = 0.f;
  for (int j = 0; j < K; j++) wsum += out_w[j]; // rank order, as the CPU sums
  __syncwarp();
  if (lane < K) {
    const int e = out_e[lane];
    if (mode == ROUTE_SOFTMAX_RENORM) out_w[lane] = out_w[lane] / wsum;
    out_slot[lane] = slots[e];
    // Relaxed by design: the host reads the table between steps; no ordering with other memory is needed.
    if (counter_row) atomicAdd(counter_row + e, 1u);
  }
  __syncwarp();
}
