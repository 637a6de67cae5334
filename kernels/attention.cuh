// Attention, for any mix of rows (decode rows of many sequences, or a prefill chunk of one):
// qk_rope_kv normalizes and rotates q and k in place and writes this row's k and v into its sequence's KV
// cache; attend then reads positions 0..pos of the row's cache (the last `window` of them on a sliding layer;
// a prefill chunk whose k/v were all written first stays causal), a block per (row, kv head, split of the
// positions), online softmax in fp32, and attend_merge combines the splits by log-sum-exp (with the head's
// sink logit, gpt-oss). The KV cache is paged: one pool of blocks, each bs positions of every layer ([block][layer]
// [bs][width] values of the pool's dtype: float32, bf16 or fp8 e4m3, rounded as src/backend/kv-dtype.ts defines), and a
// row reads its sequence's blocks through its block table.
#pragma once
#include "product.cuh"

// How a layer attends: q/k RMSNorm weights per head (null: none), RoPE's inverse frequencies [hd / 2] (the
// spec's, YaRN included) and the factor cos and sin are scaled by, a sink logit per head (bf16, null: none:
// gpt-oss's join every softmax), and a sliding window (attend to the last `window` positions; 0: all).
struct AttnParams {
  const bf16_t* q_norm;
  const bf16_t* k_norm;
  const float* inv_freq;
  const bf16_t* sinks;
  float eps, mscale;
  int32_t window, pad;
};
static_assert(sizeof(AttnParams) == 48 && offsetof(AttnParams, eps) == 32 && offsetof(AttnParams, window) == 40, "AttnParams: layout.ts encodeAttn");

// Rotate-half RoPE of one head vector (d values) at `pos`, by one warp, in place: angle = pos x inv_freq[i]
// in float32, cos and sin times mscale (the CPU's tables: attention-ops.ts, family-attention.ts).
__device__ __forceinline__ void warp_rope_tab(float* x, int d, int pos, const float* __restrict__ inv_freq, float mscale) {
  const int lane = threadIdx.x & 31, half = d >> 1;
  for (int i = lane; i < half; i += 32) {
    const float angle = (float)pos * inv_freq[i];
    float sn, cs;
    sincosf(angle, &sn, &cs);
    cs *= mscale;
    sn *= mscale;
    const float a = x[i], b = x[half + i];
    x[i] = a * cs - b * sn;
    x[half + i] = b * cs + a * sn;
  }
  __syncwarp();
}

// The first position row position `n - 1` attends to.
__device__ __forceinline__ int attend_from(int n, int window) { return window > 0 ? max(0, n - window) : 0; }

// Per-row inputs of a step (device arrays written by the host each step) and the KV pool they address.
struct OpRows {
  const int32_t* token;        // [T]
  const int32_t* pos;          // [T]
  const int32_t* const* table; // [T] the row's block table: block ids, entry i holding positions [i bs, (i + 1) bs)
  void* pool;                  // [blocks][layers][bs][width] values of `dtype`
  int32_t bs, layers, dtype, pad;
};
static_assert(sizeof(OpRows) == 48, "OpRows: kernel-args.ts encodeRows");

enum { KV_F32 = 0, KV_BF16 = 1, KV_FP8 = 2 };

// Index (in values) of row t's entry of `layer` at `pos`, `width` values a position.
__device__ __forceinline__ size_t kv_index(const OpRows& r, int t, int layer, int pos, int width) {
  const int32_t b = r.table[t][pos / r.bs];
  return (((size_t)b * r.layers + layer) * r.bs + pos % r.bs) * (size_t)width;
}

// float32 -> bf16 bits, round to nearest even, NaN kept quiet (kv-dtype.ts bf16Bits).
__device__ __forceinline__ uint16_t kv_bf16_bits(float x) {
  const uint32_t b = __float_as_uint(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x40u);
  return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

// A value as the pool stores it (kv-dtype.ts: fp8 e4m3 with saturation, scale 1).
__device__ __forceinline__ void kv_store(const OpRows& r, size_t i, float x) {
  if (r.dtype == KV_F32) reinterpret_cast<float*>(r.pool)[i] = x;
  else if (r.dtype == KV_BF16) reinterpret_cast<uint16_t*>(r.pool)[i] = kv_bf16_bits(x);
  else reinterpret_cast<uint8_t*>(r.pool)[i] = (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}

__device__ __forceinline__ float kv_load(const OpRows& r, size_t i) {
  if (r.dtype == KV_F32) return reinterpret_cast<const float*>(r.pool)[i];
  if (r.dtype == KV_BF16) return __uint_as_float((uint32_t)reinterpret_cast<const uint16_t*>(r.pool)[i] << 16);
  return __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)reinterpret_cast<const uint8_t*>(r.pool)[i], __NV_E4M3)));
}

// q/k RMSNorm over each head, RoPE at the row's position, k and v into the cache. Grid (T, ceil(heads / warps)),
// a warp per head.
__device__ __forceinline__ void qk_rope_kv_body(float* qkv, int ld, OpRows rows, AttnParams ap, int layer, int nh, int nkv, int hd) {
  const int t = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int pos = rows.pos[t], KD = nkv * hd;
  float* x = qkv + (size_t)t * ld;
  const size_t kvrow = kv_index(rows, t, layer, pos, 2 * KD);
  const int h = blockIdx.y * (blockDim.x >> 5) + warp;
  if (h < nh + nkv) {
    float* v = x + h * hd;
    const bf16_t* nw = h < nh ? ap.q_norm : ap.k_norm;
    if (nw) warp_rmsnorm(v, nw, hd, ap.eps); // null: a family without q/k norms
    warp_rope_tab(v, hd, pos, ap.inv_freq, ap.mscale);
    if (h >= nh) {
      const int kh = h - nh;
      for (int i = lane; i < hd; i += 32) {
        kv_store(rows, kvrow + kh * hd + i, v[i]);
        kv_store(rows, kvrow + KD + kh * hd + i, x[(nh + nkv + kh) * hd + i]);
      }
    }
  }
}

// One (row, kv head, split): G query heads against positions [j*chunk, min(n, (j+1)*chunk)) of the row's
// cache. A warp per position in turn (lane l holds dims l*HD/32..), each warp an online softmax; the NW warps
// merge in shared memory. S == 1: the normalized output into att; else the partial (max, sum, acc) into part.
// The norm/RoPE pass a decode row's attention does first (FUSED: the row's q and k are normalized and
// rotated in shared memory, and the block whose split holds the row's position writes its k and v into the
// cache before any position is read), so a decode layer needs no separate qk_rope_kv launch.
// With a window, the positions are [n - window, n); sinks join the softmax where the splits are combined.
template <int HD, int G, int NW, bool FUSED>
__device__ __forceinline__ void attend_body(const float* qkv, int ld, OpRows rows, float* att, float* part, int layer, int nh,
                                            int nkv, AttnParams qn) {
  constexpr int D = HD / 32; // dims per lane
  const int t = blockIdx.x, kh = blockIdx.y, j = blockIdx.z, S = gridDim.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = NW;
  const int KD = nkv * HD;
  const int n = rows.pos[t] + 1;
  const int lo = attend_from(n, qn.window);
  const int chunk = (n - lo + S - 1) / S;
  const int p0 = lo + j * chunk, p1 = min(n, p0 + chunk);
  __shared__ float sm_m[NW][G], sm_l[NW][G];
  __shared__ __align__(16) float sm_acc[NW][G][HD];
  float q[G][D];
  const float scale = 1.0f / sqrtf((float)HD);
  const float* qsrc = qkv + (size_t)t * ld + kh * G * HD;
  if (FUSED) {
    // sm_acc doubles as the scratch of the G query heads and the kv head (G + 1 <= NW * G rows of HD).
    float* sq = &sm_acc[0][0][0];
    const float* x = qkv + (size_t)t * ld;
    for (int i = threadIdx.x; i < (G + 1) * HD; i += blockDim.x) sq[i] = i < G * HD ? x[kh * G * HD + i] : x[(nh + kh) * HD + i - G * HD];
    __syncthreads();
    for (int h = warp; h < G + 1; h += NW) {
      const bf16_t* nw = h < G ? qn.q_norm : qn.k_norm;
      if (nw) warp_rmsnorm(sq + h * HD, nw, HD, qn.eps); // null: a family without q/k norms
      warp_rope_tab(sq + h * HD, HD, n - 1, qn.inv_freq, qn.mscale);
    }
    __syncthreads();
    if ((n - 1 - lo) / chunk == j) { // this split holds the row's own position: its k and v go to the cache first
      const size_t kvrow = kv_index(rows, t, layer, n - 1, 2 * KD);
      for (int i = threadIdx.x; i < HD; i += blockDim.x) {
        kv_store(rows, kvrow + kh * HD + i, sq[G * HD + i]);
        kv_store(rows, kvrow + KD + kh * HD + i, x[(nh + nkv + kh) * HD + i]);
      }
    }
    qsrc = sq;
  }
#pragma unroll
  for (int g = 0; g < G; g++)
#pragma unroll
    for (int d = 0; d < D; d++) q[g][d] = qsrc[g * HD + lane * D + d];
  if (FUSED) __syncthreads(); // q read, the cache row written: sm_acc is free again
  float m[G], l[G], acc[G][D];
#pragma unroll
  for (int g = 0; g < G; g++) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int d = 0; d < D; d++) acc[g][d] = 0.f;
  }
  const int lane_off = kh * HD + lane * D; // this lane's dims of the kv head
  // The next position's k and v are in flight while this one's scores and values are computed.
  float k[D], v[D];
  if (p0 + warp < p1) {
    const size_t kp = kv_index(rows, t, layer, p0 + warp, 2 * KD) + lane_off;
#pragma unroll
    for (int d = 0; d < D; d++) { k[d] = kv_load(rows, kp + d); v[d] = kv_load(rows, kp + KD + d); }
  }
  for (int p = p0 + warp; p < p1; p += nw) {
    float kn[D], vn[D];
    if (p + nw < p1) {
      const size_t kp = kv_index(rows, t, layer, p + nw, 2 * KD) + lane_off;
#pragma unroll
      for (int d = 0; d < D; d++) { kn[d] = kv_load(rows, kp + d); vn[d] = kv_load(rows, kp + KD + d); }
    }
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
#pragma unroll
    for (int d = 0; d < D; d++) { k[d] = kn[d]; v[d] = vn[d]; }
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
  // The warps' merge: each head's max over the warps, each warp's factor and the head's sum, once a head (G x NW
  // exponentials, not G x HD x NW: the block is issue-bound at batch 1), then every dim sums its warps' values.
  __shared__ float sm_f[NW][G], sm_M[G], sm_L[G];
  if (threadIdx.x < G) {
    const int g = threadIdx.x;
    float M = -INFINITY;
    for (int w = 0; w < nw; w++) M = fmaxf(M, sm_m[w][g]);
    float L = 0.f;
    if (M > -INFINITY) {
      for (int w = 0; w < nw; w++) {
        const float f = expf(sm_m[w][g] - M); // an empty warp: exp(-inf) = 0
        sm_f[w][g] = f;
        L += sm_l[w][g] * f;
      }
    }
    sm_M[g] = M;
    sm_L[g] = L;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G * HD; i += blockDim.x) {
    const int g = i / HD, d = i - g * HD;
    const float M = sm_M[g];
    float L = sm_L[g], A = 0.f;
    if (M > -INFINITY) {
      for (int w = 0; w < nw; w++) A += sm_acc[w][g][d] * sm_f[w][g];
    }
    const int head = kh * G + g;
    if (S == 1) {
      if (qn.sinks) { // the sink's logit joins the softmax (it adds to the sum, no value)
        const float sk = bf2f(qn.sinks[head]), M2 = fmaxf(M, sk), f = expf(M - M2);
        L = L * f + expf(sk - M2);
        A *= f;
      }
      att[(size_t)t * nh * HD + head * HD + d] = A / L;
    } else {
      float* pp = part + (((size_t)t * nh + head) * S + j) * (HD + 2);
      pp[d] = A;
      if (d == 0) { pp[HD] = M; pp[HD + 1] = L; }
    }
  }
}

// Splits of one (row, head) merged in split order (and the head's sink, when given): grid (T, nh), hd threads.
__device__ __forceinline__ void attend_merge_body(const float* part, float* att, int nh, int hd, int S, const bf16_t* sinks) {
  const int t = blockIdx.x, head = blockIdx.y, d = threadIdx.x;
  if (d >= hd) return;
  const float* pp = part + ((size_t)t * nh + head) * S * (hd + 2);
  const float sk = sinks ? bf2f(sinks[head]) : -INFINITY;
  float M = sk;
  for (int j = 0; j < S; j++) M = fmaxf(M, pp[j * (hd + 2) + hd]);
  float L = sinks ? expf(sk - M) : 0.f, A = 0.f;
  for (int j = 0; j < S; j++) {
    const float* q = pp + j * (hd + 2);
    if (q[hd + 1] == 0.f) continue; // an empty split (chunk past the row's positions)
    const float f = expf(q[hd] - M);
    L += q[hd + 1] * f;
    A += q[d] * f;
  }
  att[(size_t)t * nh * hd + head * hd + d] = A / L;
}
