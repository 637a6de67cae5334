// The attention half of a layer for one row, block-wide: RMSNorm, q/k/v GEMV, q/k norm, RoPE, KV-cache
// write, decode attention over positions 0..pos, o_proj and the residual add. Used by the layered kernel
// (attn_route) and the fused whole-step kernel (decode_layers).
#pragma once
#include "common.cuh"

// Shared-memory scratch of one row's layer (float offsets, each 16-byte aligned).
struct RowSmem {
  float *x, *xn, *qkv, *att, *rl, *red, *hsum, *scores, *accv;
};

__device__ __forceinline__ int align4(int n) { return (n + 3) & ~3; }

// Lays out the scratch; `extra` floats follow for the caller (returned pointer).
__device__ __forceinline__ float* row_smem(float* sm, const ModelDev& m, RowSmem& s) {
  const int QD = m.nh * m.hd, KD = m.nkv * m.hd;
  const int groups = blockDim.x / QD > 0 ? blockDim.x / QD : 1;
  float* p = sm;
  s.x = p; p += align4(m.H);
  s.xn = p; p += align4(m.H);
  s.qkv = p; p += align4(QD + 2 * KD);
  s.att = p; p += align4(QD);
  s.rl = p; p += align4(m.E);
  s.red = p; p += 32;
  s.hsum = p; p += align4(m.nh);
  s.accv = p; p += align4(groups * QD);
  s.scores = p; p += align4(m.nh * m.max_pos);
  return p;
}

// x (residual, in s.x) -> x + o_proj(attention(norm(x))) for row r at layer `layer`.
// Phase timestamps for profiling (one SM's clock; thread 0 after the barrier that ends a phase).
#define ROW_MARK(i) do { if (prof && threadIdx.x == 0) prof[i] = clock64(); } while (0)

__device__ __forceinline__ void row_attention(const ModelDev& m, const LayerDev& L, int layer, const RowDev& r, RowSmem& s,
                                              long long* prof = nullptr) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int H = m.H, hd = m.hd, nh = m.nh, nkv = m.nkv, QD = nh * hd, KD = nkv * hd;
  ROW_MARK(0);
  block_rmsnorm(s.x, L.in_norm, s.xn, H, m.eps, s.red);
  ROW_MARK(1);
  {
    const bf16_t *qw = L.q_proj, *kw = L.k_proj, *vw = L.v_proj;
    const float* xn = s.xn;
    float* qkv = s.qkv;
    block_gemv_rows(QD + 2 * KD, H,
      [=](int o) { return o < QD ? qw + (size_t)o * H : o < QD + KD ? kw + (size_t)(o - QD) * H : vw + (size_t)(o - QD - KD) * H; },
      [=](int) { return xn; }, [=](int o, float v) { qkv[o] = v; });
  }
  __syncthreads();
  ROW_MARK(2);
  for (int hh = warp; hh < nh + nkv; hh += blockDim.x >> 5) {
    float* v = s.qkv + hh * hd;
    warp_rmsnorm(v, hh < nh ? L.q_norm : L.k_norm, hd, m.eps);
    warp_rope(v, hd, r.pos, m.theta);
  }
  __syncthreads();
  ROW_MARK(3);
  const size_t kvStride = 2 * (size_t)KD; // one position: k[KD] then v[KD]
  float* kvLayer = r.kv + (size_t)layer * r.cap * kvStride;
  for (int i = tid; i < 2 * KD; i += blockDim.x) kvLayer[r.pos * kvStride + i] = s.qkv[QD + i];
  __syncthreads();
  // Scores: a group of hd/4 lanes per (head, position) reads the key row as consecutive 16-byte chunks.
  const int n = r.pos + 1, group = nh / nkv;
  const float scale = 1.0f / sqrtf((float)hd);
  {
    const int chunks = hd >> 2;
    int G = 1;
    while (G < chunks && G < 32) G <<= 1;
    const int gl = lane & (G - 1), gid = tid / G, ng = blockDim.x / G;
    constexpr int R = 4; // positions per group in flight
    for (int base = 0; base < nh * n; base += ng * R) {
      float acc[R];
#pragma unroll
      for (int q = 0; q < R; q++) {
        const int idx = base + q * ng + gid;
        acc[q] = 0.f;
        if (idx < nh * n) {
          const int h = idx / n, p = idx - h * n;
          const float4* kp = reinterpret_cast<const float4*>(kvLayer + p * kvStride + (h / group) * hd);
          const float4* qp = reinterpret_cast<const float4*>(s.qkv + h * hd);
          for (int c = gl; c < chunks; c += G) {
            const float4 k4 = kp[c], q4 = qp[c];
            acc[q] += k4.x * q4.x + k4.y * q4.y + k4.z * q4.z + k4.w * q4.w;
          }
        }
      }
#pragma unroll
      for (int q = 0; q < R; q++) {
        const int idx = base + q * ng + gid;
        for (int off = G >> 1; off > 0; off >>= 1) acc[q] += __shfl_xor_sync(0xffffffffu, acc[q], off);
        if (gl == 0 && idx < nh * n) { const int h = idx / n; s.scores[h * m.max_pos + (idx - h * n)] = acc[q] * scale; }
      }
    }
  }
  __syncthreads();
  ROW_MARK(4);
  // Softmax: a warp per head.
  if (warp < nh) {
    float* sc = s.scores + warp * m.max_pos;
    float mx = -INFINITY;
    for (int p = lane; p < n; p += 32) mx = fmaxf(mx, sc[p]);
    mx = warp_max(mx);
    float sum = 0.f;
    for (int p = lane; p < n; p += 32) { const float e = expf(sc[p] - mx); sc[p] = e; sum += e; }
    sum = warp_sum(sum);
    if (lane == 0) s.hsum[warp] = sum;
  }
  __syncthreads();
  // Weighted values: `groups` thread groups split the positions; partial sums reduced in a fixed order.
  const int groups = blockDim.x / QD > 0 ? blockDim.x / QD : 1;
  for (int t = tid; t < groups * QD; t += blockDim.x) {
    const int g = t / QD, o = t - g * QD, h = o / hd, i = o - h * hd;
    const float* vp = kvLayer + KD + (h / group) * hd + i;
    const float* sc = s.scores + h * m.max_pos;
    float acc = 0.f;
#pragma unroll 8
    for (int p = g; p < n; p += groups) acc += sc[p] * vp[p * kvStride];
    s.accv[t] = acc;
  }
  __syncthreads();
  for (int o = tid; o < QD; o += blockDim.x) {
    float acc = 0.f;
    for (int g = 0; g < groups; g++) acc += s.accv[g * QD + o];
    s.att[o] = acc / s.hsum[o / hd];
  }
  __syncthreads();
  ROW_MARK(5);
  block_gemv(L.o_proj, s.att, s.xn, H, QD);
  __syncthreads();
  for (int i = tid; i < H; i += blockDim.x) s.x[i] += s.xn[i];
  __syncthreads();
  ROW_MARK(6);
}
