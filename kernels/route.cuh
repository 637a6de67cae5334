// Route-and-split: router logits -> weights of the top-k -> bank slots via the slot table -> one relaxed
// atomic add per pick into the counter row (when counting). Run by one warp.
// Modes: softmax over all experts then top-k (Qwen3, Mixtral, OLMoE), renormalized over the k or not; or
// top-k of the logits then softmax over the k (gpt-oss, its router bias already in the logits); or DeepSeek-V3's
// group-limited sigmoid choice (warp_route_group).
#pragma once
#include "common.cuh"

enum { ROUTE_SOFTMAX = 0, ROUTE_SOFTMAX_RENORM = 1, ROUTE_TOPK_SOFTMAX = 2, ROUTE_SIGMOID_GROUP = 3 };

// A float's order as an unsigned key (larger value, larger key; -0 == +0), NaN taken as -inf; 0 is below every
// value's key.
__device__ __forceinline__ unsigned order_key(float x) {
  unsigned b = __float_as_uint(fmaxf(x, -INFINITY)); // fmaxf(NaN, -inf) = -inf
  if (b == 0x80000000u) b = 0u;                       // -0 ties +0, as the float compare does
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The k largest of `v` (E <= 32 * V values) into out_e / out_w [K], largest first, ties to the lower id
// (torch.topk), NaN as -inf: each lane holds its V values in registers; a round is a warp max of the lanes' best
// keys and a warp min of the tied lanes' ids (redux.sync, no shuffle chain), the winner's lane writing it out and
// dropping it: no shuffle chain a round (what it bought: docs/results.md).
template <int V>
__device__ __forceinline__ void warp_topk_regs(const float* v, int E, int K, int32_t* out_e, float* out_w) {
  const int lane = threadIdx.x & 31;
  float val[V];
  unsigned key[V];
#pragma unroll
  for (int m = 0; m < V; m++) {
    const int e = lane + 32 * m;
    val[m] = e < E ? v[e] : 0.f;
    key[m] = e < E ? order_key(val[m]) : 0u;
  }
  for (int k = 0; k < K; k++) {
    // This lane's best: the largest key, the lowest id on ties (ids grow with m).
    unsigned kb = 0u;
    int mb = 0;
#pragma unroll
    for (int m = 0; m < V; m++) if (key[m] > kb) { kb = key[m]; mb = m; }
    const unsigned top = __reduce_max_sync(0xffffffffu, kb);
    const int id = lane + 32 * mb;
    const unsigned win = __reduce_min_sync(0xffffffffu, kb == top ? (unsigned)id : 0xffffffffu);
    if ((int)win == id) {
      out_e[k] = id;
#pragma unroll
      for (int m = 0; m < V; m++) if (m == mb) { out_w[k] = val[m]; key[m] = 0u; }
    }
  }
  __syncwarp();
}

// The k largest of `v` (E <= 1024 values) into out_e / out_w [K], largest first, ties to the lower id (torch.topk), NaN
// as -inf. Up to 512 values from registers (warp_topk_regs); beyond, the same rounds with each lane's values read
// from `v` every round and the lane's taken ones in a 32-bit mask (bit m: value lane + 32 m), so `v` is left as it
// is and a taken value is never taken again, whatever the rest hold (-inf, NaN).
__device__ __forceinline__ void warp_topk(const float* v, int E, int K, int32_t* out_e, float* out_w) {
  if (E <= 128) return warp_topk_regs<4>(v, E, K, out_e, out_w);
  if (E <= 256) return warp_topk_regs<8>(v, E, K, out_e, out_w);
  if (E <= 512) return warp_topk_regs<16>(v, E, K, out_e, out_w);
  const int lane = threadIdx.x & 31;
  unsigned taken = 0u;
  for (int k = 0; k < K; k++) {
    unsigned kb = 0u;
    int mb = 0;
    for (int m = 0, e = lane; e < E; m++, e += 32) {
      const unsigned key = ((taken >> m) & 1u) ? 0u : order_key(v[e]);
      if (key > kb) { kb = key; mb = m; }
    }
    const unsigned top = __reduce_max_sync(0xffffffffu, kb);
    const int id = lane + 32 * mb;
    const unsigned win = __reduce_min_sync(0xffffffffu, kb == top ? (unsigned)id : 0xffffffffu);
    if ((int)win == id) {
      out_e[k] = id;
      out_w[k] = v[id];
      taken |= 1u << mb;
    }
  }
  __syncwarp();
}

// `logits` (E values, shared memory; the softmax modes overwrite them with probabilities) -> out_e/out_w/out_slot
// [K] (shared or global). Ties in probability go to the lower expert id (torch.topk).
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
  warp_topk(logits, E, K, out_e, out_w);
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

// DeepSeek-V3's noaux_tc (routers.ts groupLimitedTopk, the spec): scores = sigmoid(logits); the choice = score +
// bias, kept in the topk_group of n_group (<= 32) groups whose best two choices sum highest (ties to the lower
// group; the other experts' choice is 0, as transformers masks them); top-k of the choice (ties to the
// lower id; the choice is scratch after); weights = the k unbiased scores over their sum (+ 1e-20, when renorm) x scaling, then ordered by
// descending weight (stable), as the CPU writes them. `lg`: the logits (E, overwritten with the scores); `ch`:
// E floats of scratch; outputs as warp_route's.
__device__ __forceinline__ void warp_route_group(float* lg, float* ch, int E, int K, const float* __restrict__ bias, int n_group,
                                                 int topk_group, float scaling, bool renorm, const int32_t* __restrict__ slots,
                                                 int32_t* out_e, float* out_w, int32_t* out_slot, uint32_t* counter_row) {
  const int lane = threadIdx.x & 31, per = E / n_group;
  for (int e = lane; e < E; e += 32) {
    const float s = 1.0f / (1.0f + expf(-lg[e]));
    lg[e] = s;
    ch[e] = s + bias[e];
  }
  __syncwarp();
  float gs = -INFINITY; // lane g: group g's best two choices, summed
  if (lane < n_group) {
    float a = -INFINITY, b = -INFINITY;
    for (int e = lane * per; e < (lane + 1) * per; e++) {
      const float v = ch[e];
      if (v > a) { b = a; a = v; } else if (v > b) b = v;
    }
    gs = a + b;
  }
  int grank = 0;
  for (int g = 0; g < n_group; g++) {
    const float o = __shfl_sync(0xffffffffu, gs, g);
    grank += (o > gs || (o == gs && g < lane)) ? 1 : 0;
  }
  const unsigned keep = __ballot_sync(0xffffffffu, lane < n_group && grank < topk_group);
  for (int e = lane; e < E; e += 32)
    if (!((keep >> (e / per)) & 1u)) ch[e] = 0.f;
  __syncwarp();
  warp_topk(ch, E, K, out_e, out_w); // out_w: the choice scores, replaced by the weights below
  float sum = 0.f;
  for (int j = 0; j < K; j++) sum += lg[out_e[j]]; // choice order, as the CPU sums
  const float den = sum + 1e-20f;
  if (lane < K) {
    const float s = lg[out_e[lane]];
    out_w[lane] = (renorm ? s / den : s) * scaling;
  }
  __syncwarp();
  if (lane == 0) { // descending weight, stable (insertion sort of K <= 32)
    for (int j = 1; j < K; j++) {
      const int id = out_e[j];
      const float v = out_w[j];
      int i = j - 1;
      for (; i >= 0 && out_w[i] < v; i--) { out_e[i + 1] = out_e[i]; out_w[i + 1] = out_w[i]; }
      out_e[i + 1] = id;
      out_w[i + 1] = v;
    }
  }
  __syncwarp();
  if (lane < K) {
    const int e = out_e[lane];
    out_slot[lane] = slots[e];
    if (counter_row) atomicAdd(counter_row + e, 1u); // relaxed, as warp_route's
  }
  __syncwarp();
}
