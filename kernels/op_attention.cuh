// Attention of the op path, for any mix of rows (decode rows of many sequences, or a prefill chunk of one):
// qk_rope_kv normalizes and rotates q and k in place and writes this row's k and v into its sequence's KV
// cache; attend then reads positions 0..pos of the row's cache (so a prefill chunk whose k/v were all written
// first stays causal), a block per (row, kv head, split of the positions), online softmax in fp32, and
// attend_merge combines the splits by log-sum-exp. KV cache per sequence: [L][cap][2][nkv*hd] fp32.
#pragma once
#include "op_common.cuh"

// Per-row inputs of a step (device arrays written by the host each step).
struct OpRows {
  const int32_t* token; // [T]
  const int32_t* pos;   // [T]
  const int32_t* cap;   // [T] positions the row's KV cache holds
  float* const* kv;     // [T] the row's KV cache base
};

// q/k RMSNorm over each head, RoPE at the row's position, k and v into the cache. Grid (T, ceil(heads / warps)),
// a warp per head.
__device__ __forceinline__ void qk_rope_kv_body(float* qkv, int ld, OpRows rows, const bf16_t* q_norm, const bf16_t* k_norm,
                                                int layer, int nh, int nkv, int hd, float eps, float theta) {
  const int t = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int pos = rows.pos[t], KD = nkv * hd;
  float* x = qkv + (size_t)t * ld;
  float* kvrow = rows.kv[t] + ((size_t)layer * rows.cap[t] + pos) * 2 * KD;
  const int h = blockIdx.y * (blockDim.x >> 5) + warp;
  if (h < nh + nkv) {
    float* v = x + h * hd;
    warp_rmsnorm(v, h < nh ? q_norm : k_norm, hd, eps);
    warp_rope(v, hd, pos, theta);
    if (h >= nh) {
      const int kh = h - nh;
      for (int i = lane; i < hd; i += 32) {
        kvrow[kh * hd + i] = v[i];
        kvrow[KD + kh * hd + i] = x[(nh + nkv + kh) * hd + i];
      }
    }
  }
}

// One (row, kv head, split): G query heads against positions [j*chunk, min(n, (j+1)*chunk)) of the row's
// cache. A warp per position in turn (lane l holds dims l*HD/32..), each warp an online softmax; the NW warps
// merge in shared memory. S == 1: the normalized output into att; else the partial (max, sum, acc) into part.
template <int HD, int G, int NW>
__device__ __forceinline__ void attend_body(const float* qkv, int ld, OpRows rows, float* att, float* part, int layer, int nh,
                                            int nkv) {
  constexpr int D = HD / 32; // dims per lane
  const int t = blockIdx.x, kh = blockIdx.y, j = blockIdx.z, S = gridDim.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = NW;
  const int KD = nkv * HD;
  const int n = rows.pos[t] + 1;
  const int chunk = (n + S - 1) / S;
  const int p0 = j * chunk, p1 = min(n, p0 + chunk);
  __shared__ float sm_m[NW][G], sm_l[NW][G];
  __shared__ __align__(16) float sm_acc[NW][G][HD];
  float q[G][D];
  const float scale = 1.0f / sqrtf((float)HD);
#pragma unroll
  for (int g = 0; g < G; g++)
#pragma unroll
    for (int d = 0; d < D; d++) q[g][d] = qkv[(size_t)t * ld + (kh * G + g) * HD + lane * D + d];
  float m[G], l[G], acc[G][D];
#pragma unroll
  for (int g = 0; g < G; g++) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int d = 0; d < D; d++) acc[g][d] = 0.f;
  }
  const float* base = rows.kv[t] + (size_t)layer * rows.cap[t] * 2 * KD + kh * HD + lane * D;
  for (int p = p0 + warp; p < p1; p += nw) {
    const float* kp = base + (size_t)p * 2 * KD;
    float k[D], v[D];
#pragma unroll
    for (int d = 0; d < D; d++) { k[d] = kp[d]; v[d] = kp[KD + d]; }
#pragma unroll
    for (int g = 0; g < G; g++) {
      float s = 0.f;
#pragma unroll
      for (int d = 0; d < D; d++) s += q[g][d] * k[d];
      s = warp_sum(s) * scale;
      const float mn = fmaxf(m[g], s);
      const float a = expf(m[g] - mn), e = expf(s - mn);
      l[g] = l[g] * a + e;
#pragma unroll
      for (int d = 0; d < D; d++) acc[g][d] = acc[g][d] * a + e * v[d];
      m[g] = mn;
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < G; g++) { sm_m[warp][g] = m[g]; sm_l[warp][g] = l[g]; }
  }
#pragma unroll
  for (int g = 0; g < G; g++)
#pragma unroll
    for (int d = 0; d < D; d++) sm_acc[warp][g][lane * D + d] = acc[g][d];
  __syncthreads();
  for (int i = threadIdx.x; i < G * HD; i += blockDim.x) {
    const int g = i / HD, d = i - g * HD;
    float M = -INFINITY;
    for (int w = 0; w < nw; w++) M = fmaxf(M, sm_m[w][g]);
    float L = 0.f, A = 0.f;
    if (M > -INFINITY) {
      for (int w = 0; w < nw; w++) {
        const float f = expf(sm_m[w][g] - M); // an empty warp: exp(-inf) = 0
        L += sm_l[w][g] * f;
        A += sm_acc[w][g][d] * f;
      }
    }
    const int head = kh * G + g;
    if (S == 1) {
      att[(size_t)t * nh * HD + head * HD + d] = A / L;
    } else {
      float* pp = part + (((size_t)t * nh + head) * S + j) * (HD + 2);
      pp[d] = A;
      if (d == 0) { pp[HD] = M; pp[HD + 1] = L; }
    }
  }
}

// Splits of one (row, head) merged in split order: grid (T, nh), hd threads.
__device__ __forceinline__ void attend_merge_body(const float* part, float* att, int nh, int hd, int S) {
  const int t = blockIdx.x, head = blockIdx.y, d = threadIdx.x;
  if (d >= hd) return;
  const float* pp = part + ((size_t)t * nh + head) * S * (hd + 2);
  float M = -INFINITY;
  for (int j = 0; j < S; j++) M = fmaxf(M, pp[j * (hd + 2) + hd]);
  float L = 0.f, A = 0.f;
  for (int j = 0; j < S; j++) {
    const float* q = pp + j * (hd + 2);
    if (q[hd + 1] == 0.f) continue; // an empty split (chunk past the row's positions)
    const float f = expf(q[hd] - M);
    L += q[hd + 1] * f;
    A += q[d] * f;
  }
  att[(size_t)t * nh * hd + head * hd + d] = A / L;
}
