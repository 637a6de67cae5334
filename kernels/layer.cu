// Decode-step kernels. Two ways to run a step, same math:
//  - fused (default): decode_layers runs every layer of one row in one block (attention, route-and-split
//    with counting, the row's top-k experts from the banks, combine in router order), then lm_head_argmax.
//    Two launches per step: a 6-layer model is launch-bound, so this is the fast path.
//  - layered: per layer attn_route (one block per row, or per chunk of positions at long contexts: the
//    flash-decoding split, attention.cuh) then expert_ffn (one block per pick), the shape that scales to
//    wide models, big batches and long contexts; kept as the op-level reference of the fused kernel.
#include "common.cuh"
#include "route.cuh"
#include "attention.cuh"

// x[i] = hidden + sum_k w_k * partial_k (k in router order), the residual after layer `prev_layer`'s MoE.
__device__ __forceinline__ void combine_row(const ModelDev& m, const WorkDev& w, int b, int prev_layer, float* x) {
  const int H = m.H, K = m.K;
  const float* wk = w.pick_weight + ((size_t)b * m.L + prev_layer) * K;
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    float acc = 0.f;
    for (int k = 0; k < K; k++) acc += wk[k] * w.partial[((size_t)b * K + k) * H + i];
    x[i] = w.hidden[(size_t)b * H + i] + acc;
  }
  __syncthreads();
}

__device__ __forceinline__ void embed_row(const ModelDev& m, const RowDev& r, float* x) {
  for (int i = threadIdx.x; i < m.H; i += blockDim.x) x[i] = bf2f(m.embed[(size_t)r.token * m.H + i]);
  __syncthreads();
}

__device__ __forceinline__ const bf16_t* bank_row(const ModelDev& m, const LayerDev& L, int slot) {
  const size_t rowElems = (size_t)3 * m.I * m.H;
  return slot < m.hot_rows ? L.hot + (size_t)slot * rowElems : L.cold + (size_t)(slot - m.hot_rows) * rowElems;
}

// attn_route's body. SPLIT = false: one block per row walking every position (the launch of short steps,
// compiled without the split path: with it in the same kernel the short path ran ~1.8 us slower per launch
// on the H200 at the same registers and shared memory). SPLIT = true: attn_route_split, grid (rows, max
// splits), long steps.
template <bool SPLIT>
__device__ __forceinline__ void attn_route_body(int layer, const StepDev* __restrict__ st, WorkDev& w, float* sm) {
  const ModelDev& m = c_model;
  const int b = blockIdx.x, j = SPLIT ? blockIdx.y : 0, tid = threadIdx.x;
  const int K = m.K;
  const RowDev r = st->row[b];
  const size_t pk = ((size_t)b * m.L + layer) * K;
  if (!r.valid) { // padding row of a bucket: leave harmless picks for the expert kernel
    if (j == 0 && tid < K) { w.pick_slot[b * K + tid] = 0; w.pick_weight[pk + tid] = 0.f; w.pick_expert[pk + tid] = 0; }
    return;
  }
  // Grid (rows, max splits): the split count is decided here from the row's position (read from device
  // memory, so one captured graph serves every long step); blocks beyond it exit at once.
  int chunk = 0, S = 1;
  if (SPLIT) {
    S = attn_splits(r.pos + 1, gridDim.y, &chunk);
    if (j >= S) return;
  }
  const LayerDev& L = c_layers[layer];
  RowSmem s;
  row_smem(sm, m, s);
  if (layer == 0) {
    if (tid == 0 && j == 0) w.amax[b] = 0ull;
    embed_row(m, r, s.x);
  } else {
    combine_row(m, w, b, layer - 1, s.x);
  }
  if (!SPLIT || S == 1) {
    row_attention(m, L, layer, r, s);
  } else {
    float* part_row = w.attn_part + (size_t)b * gridDim.y * (m.nh * m.hd + 2 * m.nh);
    if (!row_attention_split(m, L, layer, r, s, j, S, chunk, part_row, w.attn_done + b)) return;
  }
  // One block per row from here (the merging block when split): residual, post-norm, router, picks.
  for (int i = tid; i < m.H; i += blockDim.x) w.hidden[(size_t)b * m.H + i] = s.x[i];
  block_rmsnorm(s.x, L.post_norm, s.xn, m.H, m.eps, s.red);
  for (int i = tid; i < m.H; i += blockDim.x) w.xn[(size_t)b * m.H + i] = s.xn[i];
  block_gemv(L.router, s.xn, s.rl, m.E, m.H);
  __syncthreads();
  if ((tid >> 5) == 0)
    warp_route(s.rl, m.E, K, m.norm_topk, L.slots, w.pick_expert + pk, w.pick_weight + pk, w.pick_slot + b * K,
               st->count ? m.counter + (size_t)layer * m.E : nullptr);
}

// mp (same contents as c_model) is kept in the signatures for the host's ABI.
extern "C" __global__ void __launch_bounds__(1024) attn_route(const ModelDev* __restrict__ mp, int layer,
                                                              const StepDev* __restrict__ st, WorkDev w) {
  extern __shared__ __align__(16) float sm[];
  attn_route_body<false>(layer, st, w, sm);
}

extern "C" __global__ void __launch_bounds__(1024) attn_route_split(const ModelDev* __restrict__ mp, int layer,
                                                                    const StepDev* __restrict__ st, WorkDev w) {
  extern __shared__ __align__(16) float sm[];
  attn_route_body<true>(layer, st, w, sm);
}

// Every layer of one row in one block. Ends with the final residual in w.hidden (lm_head_argmax with
// combine_last = 0 reads it).
// `profile` (null in production): per layer 16 clock64 phase marks of row 0, for the benchmark's breakdown.
extern "C" __global__ void __launch_bounds__(1024) decode_layers(const ModelDev* __restrict__ mp,
                                                                 const StepDev* __restrict__ st, WorkDev w,
                                                                 long long* profile) {
  extern __shared__ __align__(16) float sm[];
  const ModelDev& m = c_model; // mp (same contents) is kept in the signature for the host's ABI
  const int b = blockIdx.x, tid = threadIdx.x;
  const RowDev r = st->row[b];
  if (!r.valid) return;
  const int H = m.H, K = m.K, I = m.I;
  RowSmem s;
  float* p = row_smem(sm, m, s);
  float* act = p; p += align4(K * 2 * I); // gate | up per pick
  float* actv = p; p += align4(K * I);    // silu(gate) * up per pick
  float* part = p; p += align4(K * H);    // each pick's expert output
  float* pw = p; p += align4(K);
  int32_t* pe = reinterpret_cast<int32_t*>(p); p += align4(K);
  int32_t* ps = reinterpret_cast<int32_t*>(p);
  if (tid == 0) w.amax[b] = 0ull;
  embed_row(m, r, s.x);
  for (int layer = 0; layer < m.L; layer++) {
    const LayerDev& L = c_layers[layer];
    long long* prof = profile && b == 0 ? profile + layer * 16 : nullptr;
    row_attention(m, L, layer, r, s, prof);
    block_rmsnorm(s.x, L.post_norm, s.xn, H, m.eps, s.red);
    block_gemv(L.router, s.xn, s.rl, m.E, H);
    __syncthreads();
    ROW_MARK(7);
    if (tid < K) pe[tid] = tid; // valid ids even if the router produced NaN (never read otherwise)
    if ((tid >> 5) == 0) {
      warp_route(s.rl, m.E, K, m.norm_topk, L.slots, pe, pw, ps, st->count ? m.counter + (size_t)layer * m.E : nullptr);
      const size_t pk = ((size_t)b * m.L + layer) * K;
      if (tid < K) { w.pick_expert[pk + tid] = pe[tid]; w.pick_weight[pk + tid] = pw[tid]; }
    }
    __syncthreads();
    ROW_MARK(8);
    // The row's K experts: gate/up rows, then silu * up, then down rows; a thread per output row.
    {
      const float* xn = s.xn;
      block_gemv_rows(K * 2 * I, H,
        [&](int t) { const int k = t / (2 * I); return bank_row(m, L, ps[k]) + (size_t)(t - k * 2 * I) * H; },
        [=](int) { return xn; }, [=](int t, float v) { act[t] = v; });
    }
    __syncthreads();
    ROW_MARK(9);
    for (int t = tid; t < K * I; t += blockDim.x) {
      const int k = t / I, j = t - k * I;
      actv[t] = silu(act[k * 2 * I + j]) * act[k * 2 * I + I + j];
    }
    __syncthreads();
    block_gemv_rows(K * H, I,
      [&](int t) { const int k = t / H; return bank_row(m, L, ps[k]) + (size_t)2 * I * H + (size_t)(t - k * H) * I; },
      [=](int t) { return actv + (t / H) * I; }, [=](int t, float v) { part[t] = v; });
    __syncthreads();
    ROW_MARK(10);
    for (int i = tid; i < H; i += blockDim.x) {
      float acc = 0.f;
      for (int k = 0; k < K; k++) acc += pw[k] * part[k * H + i]; // router order, fp32
      s.x[i] += acc;
    }
    __syncthreads();
    ROW_MARK(11);
  }
  for (int i = tid; i < H; i += blockDim.x) w.hidden[(size_t)b * H + i] = s.x[i];
}

// Final norm + LM head + argmax: grid (ceil(V / rows_per_block), B), grouped-lane GEMV rows. With
// combine_last, each block first recombines the last layer's expert outputs (layered path; cheap: H
// values). One 64-bit atomicMax per warp finds the greedy token.
extern "C" __global__ void lm_head_argmax(const ModelDev* __restrict__ mp, const StepDev* __restrict__ st, WorkDev w,
                                          int combine_last, int rows_per_block) {
  extern __shared__ __align__(16) float sm[];
  const ModelDev& m = c_model; // mp (same contents) is kept in the signature for the host's ABI
  const int b = blockIdx.y, lane = threadIdx.x & 31;
  if (!st->row[b].valid) return;
  float* x = sm;
  float* red = x + align4(m.H);
  if (combine_last) {
    combine_row(m, w, b, m.L - 1, x);
  } else {
    for (int i = threadIdx.x; i < m.H; i += blockDim.x) x[i] = w.hidden[(size_t)b * m.H + i];
    __syncthreads();
  }
  block_rmsnorm(x, m.final_norm, x, m.H, m.eps, red);
  const int o0 = blockIdx.x * rows_per_block, rows = min(rows_per_block, m.V - o0);
  float* logits = w.logits + (size_t)b * m.V + o0;
  unsigned long long* keys = reinterpret_cast<unsigned long long*>(red + 32); // [rows_per_block]
  const bf16_t* W = m.lm_head + (size_t)o0 * m.H;
  const int H = m.H;
  block_gemv_rows(rows, H, [=](int o) { return W + (size_t)o * H; }, [=](int) { return (const float*)x; },
    [=](int o, float v) { logits[o] = v; keys[o] = argmax_key(v, o0 + o); });
  __syncthreads();
  unsigned long long key = 0ull;
  for (int o = threadIdx.x; o < rows; o += blockDim.x) key = keys[o] > key ? keys[o] : key;
  key = warp_max_key(key);
  if (lane == 0 && key) atomicMax(w.amax + b, key);
}
