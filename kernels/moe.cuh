// Routing: each row's router logits -> top-k and weights (route.cuh's warp_route), then the step's picks grouped by
// expert, so each expert's weights are read once per step however many rows picked it: groups (an expert's bank slot, its picks) in expert order, and for the tensor-
// core path 64-row tiles of each group. Within a group the order of the picks is free (atomics): every row of
// a product is computed on its own, so it changes no result.
#pragma once
#include "product.cuh"
#include "route.cuh"

struct OpGroups {
  int32_t* n;          // [1] groups
  int32_t* slot;       // [E] group -> bank slot of its expert (the products' grp_slot)
  int32_t* start;      // [E + 1] group -> first pick in rows
  int32_t* rows;       // [T * K] pick indices (t * K + k), by group
  int32_t* tile_n;     // [1]
  int32_t* tile_group; // [max tiles]
  int32_t* tile_row0;  // [max tiles]
};

struct OpRoute {
  const float* logits;   // [T][E] router logits
  int32_t* pick_expert;  // [T][L][K] (this layer's at + layer * K)
  float* pick_weight;    // [T][L][K]
  int32_t* pick_slot;    // [T][K] scratch
  const int32_t* slots;  // [E]
  uint32_t* counter;     // this layer's [E] row
  const int32_t* header; // [0] valid rows, [1] count flag
  int32_t T, E, K, LK, layer, mode; // mode: ROUTE_* (route.cuh); layer: among the MoE layers
  // ROUTE_SIGMOID_GROUP (DeepSeek-V3): e_score_correction_bias [E] (float), the groups, the weights' factor and
  // whether they are renormalized.
  const float* choice_bias;
  int32_t n_group, topk_group;
  float scaling;
  int32_t renorm;
};
static_assert(sizeof(OpRoute) == 104 && offsetof(OpRoute, T) == 56 && offsetof(OpRoute, mode) == 76 && offsetof(OpRoute, choice_bias) == 80 &&
              offsetof(OpRoute, renorm) == 100, "OpRoute: layout.ts encodeRoute");

// Shared floats a row's route takes (the logits; with the group choice, its scratch too).
__device__ __forceinline__ int route_scratch(const OpRoute& r) { return r.mode == ROUTE_SIGMOID_GROUP ? 2 * r.E : r.E; }

// `slots`: the slot table (r.slots, or a copy of it in shared memory).
__device__ __forceinline__ void route_pick(const OpRoute& r, const int32_t* slots, float* lg, int32_t* e, float* w, int32_t* slot, uint32_t* counter) {
  if (r.mode == ROUTE_SIGMOID_GROUP) warp_route_group(lg, lg + r.E, r.E, r.K, r.choice_bias, r.n_group, r.topk_group, r.scaling, r.renorm != 0, slots, e, w, slot, counter);
  else warp_route(lg, r.E, r.K, r.mode, slots, e, w, slot, counter);
}

// Row t's route (one warp); `lg` is route_scratch(r) floats of shared scratch for it. With `se`/`sw`/`ss` (shared,
// [T*K]) the picks (experts, weights, slots) are also kept there for a grouping in the same block, and `slots` is the
// slot table as that block loaded it into shared memory.
__device__ __forceinline__ void route_row(const OpRoute& r, int t, float* lg, int32_t* se = nullptr, float* sw = nullptr, int32_t* ss = nullptr,
                                          const int32_t* slots = nullptr) {
  const int lane = threadIdx.x & 31;
  for (int e = lane; e < r.E; e += 32) lg[e] = r.logits[(size_t)t * r.E + e];
  __syncwarp();
  const size_t pk = (size_t)t * r.LK + (size_t)r.layer * r.K;
  const bool counted = r.header[1] != 0 && t < r.header[0];
  if (!se) {
    route_pick(r, r.slots, lg, r.pick_expert + pk, r.pick_weight + pk, r.pick_slot + (size_t)t * r.K, counted ? r.counter : nullptr);
    return;
  }
  int32_t* e = se + t * r.K;
  float* w = sw + t * r.K;
  int32_t* sl = ss + t * r.K;
  route_pick(r, slots, lg, e, w, sl, counted ? r.counter : nullptr);
  if (lane < r.K) { r.pick_expert[pk + lane] = e[lane]; r.pick_weight[pk + lane] = w[lane]; r.pick_slot[(size_t)t * r.K + lane] = sl[lane]; }
}

// Block-wide exclusive scan of one 64-bit value per thread (blockDim.x % 32 == 0); `red` >= 33 words.
__device__ __forceinline__ unsigned long long block_scan_u64(unsigned long long v, unsigned long long* red, unsigned long long* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  unsigned long long inc = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long u = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += u;
  }
  if (lane == 31) red[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    unsigned long long w = lane < nw ? red[lane] : 0ull, wi = w;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const unsigned long long u = __shfl_up_sync(0xffffffffu, wi, o);
      if (lane >= o) wi += u;
    }
    if (lane < nw) red[lane] = wi - w; // exclusive prefix of the warp totals
    if (lane == 31) red[32] = wi;
  }
  __syncthreads();
  const unsigned long long out = red[warp] + inc - v;
  *total = red[32];
  __syncthreads();
  return out;
}

// The groups of a decode step's picks (P = valid rows x K <= blockDim.x), in shared memory: se holds the
// picks (route_row's); cnt, cur are E ints; red is the scan's scratch. Counts, one scan over the experts
// (start and rank of each), then every pick takes its slot: the same groups as group_picks.
__device__ __forceinline__ void group_picks_small(const OpRoute& r, OpGroups gr, const int32_t* se, const int32_t* ss, int* cnt, int* cur,
                                                  unsigned long long* red) {
  const int P = r.header[0] * r.K, E = r.E, i = threadIdx.x;
  for (int e = i; e < E; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  if (i < P) atomicAdd(&cnt[se[i]], 1);
  __syncthreads();
  const int per = (E + blockDim.x - 1) / blockDim.x, e0 = i * per;
  unsigned long long mine = 0ull;
  for (int e = e0; e < min(E, e0 + per); e++) mine += (unsigned long long)cnt[e] | ((cnt[e] > 0 ? 1ull : 0ull) << 32);
  unsigned long long total;
  unsigned long long pre = block_scan_u64(mine, red, &total);
  for (int e = e0; e < min(E, e0 + per); e++) {
    const int c = cnt[e];
    cur[e] = (int)(pre & 0xffffffffull);
    if (c > 0) gr.start[pre >> 32] = (int)(pre & 0xffffffffull);
    cnt[e] = (int)(pre >> 32); // from here: the expert's group
    pre += (unsigned long long)c | ((c > 0 ? 1ull : 0ull) << 32);
  }
  if (i == 0) {
    *gr.n = (int)(total >> 32);
    gr.start[total >> 32] = (int)(total & 0xffffffffull);
  }
  __syncthreads();
  if (i < P) {
    gr.rows[atomicAdd(&cur[se[i]], 1)] = i;
    gr.slot[cnt[se[i]]] = ss[i]; // the pick's slot (route_row's), the same for every pick of the group
  }
}

// The groups of at most 32 picks (P = valid rows x K: a decode step of up to 4 rows at top-8), by one warp and no
// barrier: lane i holds pick i (route_row's, in se); its rank by (expert, pick index) places it in rows, and the first
// pick of each expert writes its group's start and slot (the pick's, from route_row). The same groups as
// group_picks_small, each group's picks in pick order. The picks in `skip` (the host lane's) are left out.
__device__ __forceinline__ void group_picks_warp(const OpRoute& r, OpGroups gr, const int32_t* se, const int32_t* ss, int P, unsigned skip = 0u) {
  const int lane = threadIdx.x & 31;
  const bool mine = lane < P && !((skip >> lane) & 1u);
  const int e = mine ? se[lane] : 0x7fffffff;
  int below = 0, same_before = 0; // picks of smaller experts; picks of my expert before me
  for (int j = 0; j < P; j++) {
    const int ej = __shfl_sync(0xffffffffu, e, j);
    below += ej < e;
    same_before += ej == e && j < lane;
  }
  const bool first = mine && same_before == 0;
  const unsigned firsts = __ballot_sync(0xffffffffu, first);
  int groups_below = 0; // distinct smaller experts: my group's index
  for (int j = 0; j < P; j++) {
    const int ej = __shfl_sync(0xffffffffu, e, j);
    groups_below += ((firsts >> j) & 1u) && ej < e;
  }
  if (mine) {
    gr.rows[below + same_before] = lane;
    if (first) {
      gr.start[groups_below] = below;
      gr.slot[groups_below] = ss[lane];
    }
  }
  if (lane == 0) {
    const int n = __popc(firsts);
    *gr.n = n;
    gr.start[n] = P - __popc(skip);
  }
}

// The groups of this layer's picks of the valid rows; one block. `cnt` and `cur` are E ints of shared memory.
// Scan fields (21 bits each): picks, active experts, 64-row tiles.
__device__ __forceinline__ void group_picks(const OpRoute& r, OpGroups gr, int* cnt, int* cur, unsigned long long* red) {
  const int nv = r.header[0], E = r.E, K = r.K;
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < nv * K; i += blockDim.x) {
    const int t = i / K, k = i - t * K;
    atomicAdd(&cnt[r.pick_expert[(size_t)t * r.LK + (size_t)r.layer * K + k]], 1);
  }
  __syncthreads();
  const int per = (E + blockDim.x - 1) / blockDim.x, e0 = threadIdx.x * per;
  unsigned long long mine = 0ull;
  for (int e = e0; e < min(E, e0 + per); e++) {
    const unsigned long long c = (unsigned long long)cnt[e];
    mine += c | ((c > 0 ? 1ull : 0ull) << 21) | (((c + TC_TILE_ROWS - 1) / TC_TILE_ROWS) << 42);
  }
  unsigned long long total;
  unsigned long long pre = block_scan_u64(mine, red, &total);
  const unsigned long long M = (1ull << 21) - 1;
  for (int e = e0; e < min(E, e0 + per); e++) {
    const int c = cnt[e];
    const int s = (int)(pre & M), gi = (int)((pre >> 21) & M), ti = (int)(pre >> 42);
    cur[e] = s;
    cnt[e] = gi; // from here: the expert's group
    if (c > 0) {
      gr.start[gi] = s;
      const int nt = (c + TC_TILE_ROWS - 1) / TC_TILE_ROWS;
      for (int q = 0; q < nt; q++) { gr.tile_group[ti + q] = gi; gr.tile_row0[ti + q] = q * TC_TILE_ROWS; }
    }
    pre += (unsigned long long)c | ((c > 0 ? 1ull : 0ull) << 21) | ((unsigned long long)((c + TC_TILE_ROWS - 1) / TC_TILE_ROWS) << 42);
  }
  if (threadIdx.x == 0) {
    const int groups = (int)((total >> 21) & M);
    *gr.n = groups;
    gr.start[groups] = (int)(total & M);
    *gr.tile_n = (int)(total >> 42);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nv * K; i += blockDim.x) {
    const int t = i / K, k = i - t * K;
    const int e = r.pick_expert[(size_t)t * r.LK + (size_t)r.layer * K + k];
    gr.rows[atomicAdd(&cur[e], 1)] = i;
    gr.slot[cnt[e]] = r.pick_slot[i]; // route_row's slot of the pick ([T][K]: i = t * K + k)
  }
}
