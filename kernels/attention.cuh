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

// Phase timestamps for profiling (one SM's clock; thread 0 after the barrier that ends a phase).
#define ROW_MARK(i) do { if (prof && threadIdx.x == 0) prof[i] = clock64(); } while (0)

// The projections into s.qkv: RMSNorm, q/k/v GEMV, q/k norm and RoPE at r.pos.
__device__ __forceinline__ void row_qkv(const ModelDev& m, const LayerDev& L, const RowDev& r, RowSmem& s, long long* prof) {
  const int tid = threadIdx.x, warp = tid >> 5;
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
}

// s.att (attention output, QD values) -> s.x += o_proj(s.att).
__device__ __forceinline__ void row_out_proj(const ModelDev& m, const LayerDev& L, RowSmem& s) {
  block_gemv(L.o_proj, s.att, s.xn, m.H, m.nh * m.hd);
  __syncthreads();
  for (int i = threadIdx.x; i < m.H; i += blockDim.x) s.x[i] += s.xn[i];
  __syncthreads();
}

// x (residual, in s.x) -> x + o_proj(attention(norm(x))) for row r at layer `layer`, one block walking
// every position (the short-context path, and decode_layers').
__device__ __forceinline__ void row_attention(const ModelDev& m, const LayerDev& L, int layer, const RowDev& r, RowSmem& s,
                                              long long* prof = nullptr) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int hd = m.hd, nh = m.nh, nkv = m.nkv, QD = nh * hd, KD = nkv * hd;
  row_qkv(m, L, r, s, prof);
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
  row_out_proj(m, L, s);
  ROW_MARK(6);
}

// Flash-decoding split (attn_route, n > ATTN_SPLIT_MIN): block j of the row's S blocks takes positions
// [j*C, min(n, (j+1)*C)). Every block computes the row's q/k/v itself (same code, same bits: no wait for a
// producer block); the block of the last chunk writes this position's k/v into the cache, the only position
// of it that the other blocks never read. Each block leaves its chunk's partial in part_row[j] (unnormalized
// value sums, the per-head max and sum of exp); the last block to finish (an atomic count, fenced) merges
// the S partials with the log-sum-exp rescale in chunk order (the same bits whichever block is last), then
// o_proj and the residual. Returns whether this block is that last block; the others are done.
__device__ __forceinline__ bool row_attention_split(const ModelDev& m, const LayerDev& L, int layer, const RowDev& r,
                                                    RowSmem& s, int j, int S, int C, float* part_row, uint32_t* done) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int hd = m.hd, nh = m.nh, nkv = m.nkv, QD = nh * hd, KD = nkv * hd;
  const int stride = QD + 2 * nh; // one partial: acc[QD] | max[nh] | sum[nh]
  row_qkv(m, L, r, s, nullptr);
  const size_t kvStride = 2 * (size_t)KD;
  float* kvLayer = r.kv + (size_t)layer * r.cap * kvStride;
  if (j == S - 1) for (int i = tid; i < 2 * KD; i += blockDim.x) kvLayer[r.pos * kvStride + i] = s.qkv[QD + i];
  __syncthreads();
  const int n = r.pos + 1, p0 = j * C, cnt = min(C, n - p0), group = nh / nkv;
  const float scale = 1.0f / sqrtf((float)hd);
  float* part = part_row + (size_t)j * stride;
  { // scores of the chunk: as row_attention, positions offset by p0
    const int chunks = hd >> 2;
    int G = 1;
    while (G < chunks && G < 32) G <<= 1;
    const int gl = lane & (G - 1), gid = tid / G, ng = blockDim.x / G;
    constexpr int R = 4;
    for (int base = 0; base < nh * cnt; base += ng * R) {
      float acc[R];
#pragma unroll
      for (int q = 0; q < R; q++) {
        const int idx = base + q * ng + gid;
        acc[q] = 0.f;
        if (idx < nh * cnt) {
          const int h = idx / cnt, p = idx - h * cnt;
          const float4* kp = reinterpret_cast<const float4*>(kvLayer + (size_t)(p0 + p) * kvStride + (h / group) * hd);
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
        if (gl == 0 && idx < nh * cnt) { const int h = idx / cnt; s.scores[h * m.max_pos + (idx - h * cnt)] = acc[q] * scale; }
      }
    }
  }
  __syncthreads();
  if (warp < nh) { // the chunk's max and sum of exp per head (a warp per head)
    float* sc = s.scores + warp * m.max_pos;
    float mx = -INFINITY;
    for (int p = lane; p < cnt; p += 32) mx = fmaxf(mx, sc[p]);
    mx = warp_max(mx);
    float sum = 0.f;
    for (int p = lane; p < cnt; p += 32) { const float e = expf(sc[p] - mx); sc[p] = e; sum += e; }
    sum = warp_sum(sum);
    if (lane == 0) { part[QD + warp] = mx; part[QD + nh + warp] = sum; }
  }
  __syncthreads();
  const int groups = blockDim.x / QD > 0 ? blockDim.x / QD : 1;
  for (int t = tid; t < groups * QD; t += blockDim.x) {
    const int g = t / QD, o = t - g * QD, h = o / hd, i = o - h * hd;
    const float* vp = kvLayer + KD + (h / group) * hd + i + (size_t)p0 * kvStride;
    const float* sc = s.scores + h * m.max_pos;
    float acc = 0.f;
#pragma unroll 8
    for (int p = g; p < cnt; p += groups) acc += sc[p] * vp[p * kvStride];
    s.accv[t] = acc;
  }
  __syncthreads();
  for (int o = tid; o < QD; o += blockDim.x) {
    float acc = 0.f;
    for (int g = 0; g < groups; g++) acc += s.accv[g * QD + o];
    part[o] = acc;
  }
  // Publish the partial, then count this block in; the block that brings the count to S merges.
  __threadfence();
  __syncthreads();
  if (tid == 0) s.red[0] = atomicAdd(done, 1u) == (uint32_t)(S - 1) ? 1.f : 0.f;
  __syncthreads();
  if (s.red[0] == 0.f) return false;
  __threadfence();
  if (tid == 0) *done = 0u; // every block of this launch has counted; the next launch starts from zero
  // Merge (L2 reads: the partials were written by other SMs): per head M = max_j m_j, den = sum_j l_j e^(m_j - M);
  // weight of chunk j = e^(m_j - M) / den; att = sum_j weight_j acc_j, in chunk order.
  for (int h = tid; h < nh; h += blockDim.x) {
    float M = -INFINITY;
    for (int q = 0; q < S; q++) M = fmaxf(M, __ldcg(part_row + (size_t)q * stride + QD + h));
    float den = 0.f;
    for (int q = 0; q < S; q++) den += __ldcg(part_row + (size_t)q * stride + QD + nh + h) * expf(__ldcg(part_row + (size_t)q * stride + QD + h) - M);
    s.accv[h] = M;
    s.hsum[h] = den;
  }
  __syncthreads();
  for (int t = tid; t < S * nh; t += blockDim.x) {
    const int q = t / nh, h = t - q * nh;
    s.scores[h * m.max_pos + q] = expf(__ldcg(part_row + (size_t)q * stride + QD + h) - s.accv[h]) / s.hsum[h];
  }
  __syncthreads();
  for (int o = tid; o < QD; o += blockDim.x) {
    const float* wq = s.scores + (o / hd) * m.max_pos;
    float acc = 0.f;
    for (int q = 0; q < S; q++) acc += wq[q] * __ldcg(part_row + (size_t)q * stride + o);
    s.att[o] = acc;
  }
  __syncthreads();
  row_out_proj(m, L, s);
  return true;
}
