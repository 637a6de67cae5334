// Multi-head latent attention (DeepSeek-V3) in its absorbed form. The KV cache holds, per position, the
// normalized latent c (kv_lora values) and the rotated key part k_rope every head shares (rope values):
// [L][cap][kv_lora + rope] fp32, 576 floats a position at DeepSeek-V3's shapes where the expanded heads would
// take 128 x (192 + 128). kv_b_proj stacks, per head, W_UK (nope rows) then W_UV (vd rows), each kv_lora wide;
// a head's key is [W_UK c, k_rope] and its value W_UV c, so
//   q . k = (W_UK^T q_nope) . c + q_rope . k_rope   and   out = W_UV (sum_p softmax_p c_p):
// the query is absorbed into latent space (mla_q_absorb), attention runs over the latent cache with every
// head against the one shared row (mla_attend), and the value projection comes last (mla_o_absorb). The CPU
// spec (family-attention.ts mlaAttention) expands every head's key and value instead: the same products in
// another summation order.
#pragma once
#include "product.cuh"
#include "attention.cuh"

struct MlaParams {
  const bf16_t* q_a_norm;   // [q_lora]
  const bf16_t* kv_a_norm;  // [kv_lora]
  const void* kv_b;         // [nh * (nope + vd)][kv_lora]: bf16, or (WF_FP8) float8_e4m3fn bytes
  const float* kv_b_scales; // WF_FP8: row r, value c scaled by kv_b_scales[(r / s_rows) * s_ld + c / s_cols] (fp8-grid.ts)
  const float* inv_freq;    // [rope / 2]
  float eps, mscale, scale; // scale: the softmax's, 1 / sqrt(nope + rope) (times YaRN's mscale_all_dim correction squared: MlaSpec.softmaxScale)
  int32_t nh, q_lora, kv_lora, rope, nope, vd, layer;
  int32_t s_rows, s_cols, s_ld, pad;
};
static_assert(sizeof(MlaParams) == 96 && offsetof(MlaParams, eps) == 40 && offsetof(MlaParams, nh) == 52 && offsetof(MlaParams, layer) == 76 &&
              offsetof(MlaParams, s_rows) == 80, "MlaParams: layout.ts encodeMla");

// kv_b's 8 values of row r from column c (c % 8 == 0, inside one scale block), as floats.
template <int WF>
__device__ __forceinline__ void mla_kv_b8(const MlaParams& m, size_t r, int c, float* f) {
  if (WF == WF_FP8) {
    const uint2 u = *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(m.kv_b) + r * m.kv_lora + c);
    fp8x8_to_float(u, f);
    const float sc = m.kv_b_scales[(r / m.s_rows) * m.s_ld + c / m.s_cols];
#pragma unroll
    for (int j = 0; j < 8; j++) f[j] *= sc;
  } else {
    const uint4 u = *reinterpret_cast<const uint4*>(static_cast<const bf16_t*>(m.kv_b) + r * m.kv_lora + c);
    const uint32_t wd[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; j++) { f[2 * j] = __uint_as_float(wd[j] << 16); f[2 * j + 1] = __uint_as_float(wd[j] & 0xffff0000u); }
  }
}

// kv_b's value (r, c) as a float.
template <int WF>
__device__ __forceinline__ float mla_kv_b1(const MlaParams& m, size_t r, int c) {
  if (WF == WF_FP8) {
    const uint8_t b = static_cast<const uint8_t*>(m.kv_b)[r * m.kv_lora + c];
    const __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3);
    return __half2float(*reinterpret_cast<const __half*>(&h)) * m.kv_b_scales[(r / m.s_rows) * m.s_ld + c / m.s_cols];
  }
  return bf2f(static_cast<const bf16_t*>(m.kv_b)[r * m.kv_lora + c]);
}

// Interleaved RoPE (DeepSeek's rope_interleave) of d values src -> dst by one warp: pair (2i, 2i + 1) turns by
// pos x inv_freq[i] (float32, cos and sin times mscale), stored de-interleaved (the turned evens, then the odds)
// as transformers leaves it (family-attention.ts ropeInterleaved). src and dst must not overlap.
__device__ __forceinline__ void warp_rope_interleaved(const float* src, float* dst, int d, int pos, const float* __restrict__ inv_freq,
                                                      float mscale) {
  const int lane = threadIdx.x & 31, half = d >> 1;
  for (int i = lane; i < half; i += 32) {
    float sn, cs;
    sincosf((float)pos * inv_freq[i], &sn, &cs);
    cs *= mscale;
    sn *= mscale;
    const float a = src[2 * i], b = src[2 * i + 1];
    dst[i] = a * cs - b * sn;
    dst[half + i] = b * cs + a * sn;
  }
  __syncwarp();
}

// The index of the row's KV cache entry of `layer` at `pos` (kv_lora + rope values).
__device__ __forceinline__ size_t mla_cache(const OpRows& rows, int t, const MlaParams& m, int pos) {
  return kv_index(rows, t, m.layer, pos, m.kv_lora + m.rope);
}

// Largest qk_rope_head_dim the norm kernel stages (support.ts refuses more).
#define MLA_MAX_ROPE 256

// Row t of a = [q latent (q_lora) | c (kv_lora) | k_rope (rope)] (q_a_proj | kv_a_proj_with_mqa): the q latent
// RMSNormed in place (q_b_proj's input), c RMSNormed in place too and k_rope turned, both stored into the cache at the
// row's position in its dtype (nothing reads c from `a` after this).
// Grid (T), any block size of whole warps up to 1024.
__device__ __forceinline__ void mla_norm_rope_kv_body(float* a, int lda, OpRows rows, const MlaParams& m) {
  __shared__ float red[32];
  __shared__ float k_rope[MLA_MAX_ROPE];
  const int t = blockIdx.x;
  float* x = a + (size_t)t * lda;
  const size_t kv = mla_cache(rows, t, m, rows.pos[t]);
  block_rmsnorm(x, m.q_a_norm, x, m.q_lora, m.eps, red);
  block_rmsnorm(x + m.q_lora, m.kv_a_norm, x + m.q_lora, m.kv_lora, m.eps, red); // c normalized in place
  if (threadIdx.x < 32) warp_rope_interleaved(x + m.q_lora + m.kv_lora, k_rope, m.rope, rows.pos[t], m.inv_freq, m.mscale);
  __syncthreads();
  for (int i = threadIdx.x; i < m.kv_lora + m.rope; i += blockDim.x) kv_store(rows, kv + i, i < m.kv_lora ? x[m.q_lora + i] : k_rope[i - m.kv_lora]);
}

// q [T][nh][nope + rope] (q_b_proj's output) -> q_lat [T][nh][kv_lora + rope]: W_UK[h]^T q_nope, then q_rope
// turned at the row's position. A block per (head, RT rows): a thread per 8 latent values (16-byte loads along
// W_UK's rows) and one of MLA_QG slices of the nope dims, the slices summed in shared memory. Grid
// (nh, ceil(T / RT)), MLA_QG x 64 threads; dynamic shared memory (RT x nope + MLA_QG x RT x kv_lora) floats
// (RT = MLA_QROWS).
#define MLA_QG 2
#define MLA_QROWS 8
template <int RT, int WF>
__device__ __forceinline__ void mla_q_absorb_body(const float* q, OpRows rows, float* qlat, const MlaParams& m, int T) {
  extern __shared__ __align__(16) float mla_qs[]; // [RT][nope] | [MLA_QG][RT][kv_lora]
  const int h = blockIdx.x, t0 = blockIdx.y * RT;
  const int qk = m.nope + m.rope, D = m.kv_lora + m.rope, nr = min(RT, T - t0);
  for (int i = threadIdx.x; i < RT * m.nope; i += blockDim.x) {
    const int r = i / m.nope, d = i - r * m.nope;
    mla_qs[i] = r < nr ? q[((size_t)(t0 + r) * m.nh + h) * qk + d] : 0.f;
  }
  __syncthreads();
  const int g = threadIdx.x >> 6, c0 = (threadIdx.x & 63) * 8;
  const int per = (m.nope + MLA_QG - 1) / MLA_QG, d0 = g * per, d1 = min(m.nope, d0 + per);
  float* part = mla_qs + RT * m.nope;
  if (c0 < m.kv_lora) {
    float acc[RT][8];
#pragma unroll
    for (int r = 0; r < RT; r++)
#pragma unroll
      for (int j = 0; j < 8; j++) acc[r][j] = 0.f;
    const size_t row0 = (size_t)h * (m.nope + m.vd);
#pragma unroll 4
    for (int d = d0; d < d1; d++) {
      float wf[8];
      mla_kv_b8<WF>(m, row0 + d, c0, wf);
#pragma unroll
      for (int r = 0; r < RT; r++) {
        const float x = mla_qs[r * m.nope + d];
#pragma unroll
        for (int j = 0; j < 8; j++) acc[r][j] += x * wf[j];
      }
    }
#pragma unroll
    for (int r = 0; r < RT; r++)
#pragma unroll
      for (int j = 0; j < 8; j++) part[(g * RT + r) * m.kv_lora + c0 + j] = acc[r][j];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nr * m.kv_lora; i += blockDim.x) {
    const int r = i / m.kv_lora, c = i - r * m.kv_lora;
    float v = 0.f;
#pragma unroll
    for (int gg = 0; gg < MLA_QG; gg++) v += part[(gg * RT + r) * m.kv_lora + c];
    qlat[((size_t)(t0 + r) * m.nh + h) * D + c] = v;
  }
  if (threadIdx.x < 32) {
    for (int r = 0; r < nr; r++) {
      const int t = t0 + r;
      warp_rope_interleaved(q + ((size_t)t * m.nh + h) * qk + m.nope, qlat + ((size_t)t * m.nh + h) * D + m.kv_lora, m.rope, rows.pos[t],
                            m.inv_freq, m.mscale);
    }
  }
}

// Positions a warp scores at once (independent dot products in flight before their softmax update).
#define MLA_PPW 4
// Warps of an attention block: each takes every MLA_WARPS-th run of MLA_PPW positions.
#define MLA_WARPS 8

// Row t, head h: softmax((q_lat . [c, k_rope]) x scale) over positions 0..pos of the row's latent cache, and
// o_lat [T][nh][kv_lora] = sum_p softmax_p c_p. A block per (row, head); its warps split the positions, each
// an online softmax in fp32, merged by log-sum-exp in shared memory. Grid (T, nh); dynamic shared memory
// (D + MLA_WARPS x (kv_lora + 2)) floats.
__device__ __forceinline__ void mla_attend_body(const float* qlat, OpRows rows, float* olat, const MlaParams& m) {
  extern __shared__ __align__(16) float mla_sm[]; // q [D] | sums [MLA_WARPS][kv_lora] | (max, sum) [MLA_WARPS]
  const int t = blockIdx.x, h = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int D = m.kv_lora + m.rope, n = rows.pos[t] + 1;
  float* qv = mla_sm;
  float* acc = mla_sm + D + warp * m.kv_lora;
  float* ml = mla_sm + D + MLA_WARPS * m.kv_lora;
  const float* src = qlat + ((size_t)t * m.nh + h) * D;
  for (int i = threadIdx.x; i < D; i += blockDim.x) qv[i] = src[i];
  for (int i = lane; i < m.kv_lora; i += 32) acc[i] = 0.f;
  __syncthreads();
  float mx = -INFINITY, l = 0.f;
  for (int p0 = warp * MLA_PPW; p0 < n; p0 += MLA_WARPS * MLA_PPW) {
    float s[MLA_PPW];
    size_t kp[MLA_PPW];
#pragma unroll
    for (int j = 0; j < MLA_PPW; j++) {
      s[j] = 0.f;
      kp[j] = 0;
      if (p0 + j < n) {
        kp[j] = mla_cache(rows, t, m, p0 + j);
        for (int i = lane; i < D; i += 32) s[j] += qv[i] * kv_load(rows, kp[j] + i);
      }
    }
    float mn = mx;
#pragma unroll
    for (int j = 0; j < MLA_PPW; j++) { // p0 + j < n is the same for the whole warp
      s[j] = p0 + j < n ? warp_sum(s[j]) * m.scale : -INFINITY;
      mn = fmaxf(mn, s[j]);
    }
    const float corr = expf(mx - mn);
    float e[MLA_PPW], es = 0.f;
#pragma unroll
    for (int j = 0; j < MLA_PPW; j++) { e[j] = expf(s[j] - mn); es += e[j]; }
    l = l * corr + es;
    for (int i = lane; i < m.kv_lora; i += 32) {
      float a = acc[i] * corr;
#pragma unroll
      for (int j = 0; j < MLA_PPW; j++)
        if (p0 + j < n) a += e[j] * kv_load(rows, kp[j] + i);
      acc[i] = a;
    }
    mx = mn;
  }
  if (lane == 0) { ml[2 * warp] = mx; ml[2 * warp + 1] = l; } // a warp without positions: (-inf, 0)
  __syncthreads();
  float M = -INFINITY;
#pragma unroll
  for (int w = 0; w < MLA_WARPS; w++) M = fmaxf(M, ml[2 * w]);
  float L = 0.f, f[MLA_WARPS];
#pragma unroll
  for (int w = 0; w < MLA_WARPS; w++) { f[w] = expf(ml[2 * w] - M); L += ml[2 * w + 1] * f[w]; }
  const float inv = 1.f / L;
  float* out = olat + ((size_t)t * m.nh + h) * m.kv_lora;
  for (int i = threadIdx.x; i < m.kv_lora; i += blockDim.x) {
    float a = 0.f;
#pragma unroll
    for (int w = 0; w < MLA_WARPS; w++) a += mla_sm[D + w * m.kv_lora + i] * f[w];
    out[i] = a * inv;
  }
}

// o_lat [T][nh][kv_lora] -> att [T][nh * vd]: att[t][h * vd + d] = W_UV[h][d] . o_lat[t][h]. A warp an output
// (its weight row held in registers, kv_lora <= 32 x MLA_MAX_C), every row in turn; grid ceil(nh * vd / warps).
#define MLA_MAX_C 16
template <int WF>
__device__ __forceinline__ void mla_o_absorb_body(const float* olat, float* att, const MlaParams& m, int T) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int f = blockIdx.x * (blockDim.x >> 5) + warp;
  if (f >= m.nh * m.vd) return;
  const int h = f / m.vd, d = f - h * m.vd, nc = m.kv_lora >> 5;
  const size_t row = (size_t)h * (m.nope + m.vd) + m.nope + d;
  float wr[MLA_MAX_C];
#pragma unroll
  for (int j = 0; j < MLA_MAX_C; j++) wr[j] = j < nc ? mla_kv_b1<WF>(m, row, lane + 32 * j) : 0.f;
  for (int t = 0; t < T; t++) {
    const float* x = olat + ((size_t)t * m.nh + h) * m.kv_lora;
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < MLA_MAX_C; j++)
      if (j < nc) acc += wr[j] * x[lane + 32 * j];
    acc = warp_sum(acc);
    if (lane == 0) att[(size_t)t * m.nh * m.vd + f] = acc;
  }
}
