// Kernels of the big-geometry tiered benchmark: a SwiGLU expert FFN over bf16 rows addressed through a
// device slot table (hot bank in HBM, cold bank in mapped pinned host memory read in place, staging rows
// in HBM), a pick counter, a random fill, and a row copy.
//
// Expert row layout (bf16, row-major): W_gate [I][D], W_up [I][D], W_down [D][I]; D = hidden, I = intermediate.
// Work item (8 int32): expert, ntok, tok[0..MAXT-1], pad.
#include <cuda_bf16.h>
#include <stdint.h>

#define MAXT 4
#define ITEM_INTS 8

struct Banks {
  const __nv_bfloat16* hot;      // hot bank of this layer: H rows
  const __nv_bfloat16* cold;     // cold bank of this layer (device pointer of mapped host memory): C rows
  const __nv_bfloat16* staging;  // staging rows (shared by all layers)
  int H;
  int C;
};

__device__ __forceinline__ const __nv_bfloat16* row_of(const Banks& b, int slot, size_t rowElems) {
  if (slot < b.H) return b.hot + (size_t)slot * rowElems;
  if (slot < b.H + b.C) return b.cold + (size_t)(slot - b.H) * rowElems;
  return b.staging + (size_t)(slot - b.H - b.C) * rowElems;
}

__device__ __forceinline__ void acc8(const uint4 w, const float* xs, float& acc) {
  // x as two 16-byte shared loads (scalar loads at this stride would be 8-way bank conflicts).
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&w);
  const float4 a = reinterpret_cast<const float4*>(xs)[0];
  const float4 c = reinterpret_cast<const float4*>(xs)[1];
  float2 f0 = __bfloat1622float2(p[0]), f1 = __bfloat1622float2(p[1]);
  float2 f2 = __bfloat1622float2(p[2]), f3 = __bfloat1622float2(p[3]);
  acc = fmaf(f0.x, a.x, acc); acc = fmaf(f0.y, a.y, acc); acc = fmaf(f1.x, a.z, acc); acc = fmaf(f1.y, a.w, acc);
  acc = fmaf(f2.x, c.x, acc); acc = fmaf(f2.y, c.y, acc); acc = fmaf(f3.x, c.z, acc); acc = fmaf(f3.y, c.w, acc);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Gate/up: a[item][t][j] = silu(Wg[j].x_t) * (Wu[j].x_t). grid (I / 8, items), block 256: one warp per j.
// x: [tokens][D] fp32. slots: [experts] slot table of this layer. D % 256 == 0.
extern "C" __global__ void __launch_bounds__(256) ffn_gate_up(
    Banks b, const int* __restrict__ slots, const int* __restrict__ items, const float* __restrict__ x,
    float* __restrict__ act, int D, int I) {
  extern __shared__ float xs[];  // [MAXT][D]
  const int item = blockIdx.y;
  const int* it = items + item * ITEM_INTS;
  const int nt = it[1];
  for (int t = 0; t < nt; t++)
    for (int i = threadIdx.x; i < D; i += blockDim.x) xs[t * D + i] = x[(size_t)it[2 + t] * D + i];
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int j = blockIdx.x * 8 + (threadIdx.x >> 5);
  if (j >= I) return;
  const size_t rowElems = (size_t)3 * I * D;
  const __nv_bfloat16* w = row_of(b, slots[it[0]], rowElems);
  const uint4* wg = reinterpret_cast<const uint4*>(w + (size_t)j * D);
  const uint4* wu = reinterpret_cast<const uint4*>(w + (size_t)(I + j) * D);
  float g[MAXT] = {0.f, 0.f, 0.f, 0.f};
  float u[MAXT] = {0.f, 0.f, 0.f, 0.f};
  const int chunks = D / 8;  // 16-byte chunks per row
  // All loads of the warp's two rows in flight before use (D = 2048: 8 per row per lane).
  for (int c0 = 0; c0 < chunks; c0 += 32 * 8) {
    uint4 vg[8], vu[8];
#pragma unroll
    for (int k = 0; k < 8; k++) {
      const int c = c0 + k * 32 + lane;
      if (c < chunks) { vg[k] = __ldcs(wg + c); vu[k] = __ldcs(wu + c); }
    }
#pragma unroll
    for (int k = 0; k < 8; k++) {
      const int c = c0 + k * 32 + lane;
      if (c >= chunks) break;
#pragma unroll
      for (int t = 0; t < MAXT; t++) {
        if (t < nt) { acc8(vg[k], xs + t * D + c * 8, g[t]); acc8(vu[k], xs + t * D + c * 8, u[t]); }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < MAXT; t++) {
    if (t < nt) {
      const float gs = warp_sum(g[t]);
      const float us = warp_sum(u[t]);
      if (lane == 0) act[((size_t)item * MAXT + t) * I + j] = gs / (1.f + __expf(-gs)) * us;
    }
  }
}

// Down: y[item][t][i] = Wd[i].a[item][t]. grid (D / 8, items), block 256: one warp per output i. I % 256 == 0.
extern "C" __global__ void __launch_bounds__(256) ffn_down(
    Banks b, const int* __restrict__ slots, const int* __restrict__ items, const float* __restrict__ act,
    float* __restrict__ y, int D, int I) {
  extern __shared__ float as[];  // [MAXT][I]
  const int item = blockIdx.y;
  const int* it = items + item * ITEM_INTS;
  const int nt = it[1];
  for (int t = 0; t < nt; t++)
    for (int i = threadIdx.x; i < I; i += blockDim.x) as[t * I + i] = act[((size_t)item * MAXT + t) * I + i];
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int i = blockIdx.x * 8 + (threadIdx.x >> 5);
  if (i >= D) return;
  const size_t rowElems = (size_t)3 * I * D;
  const __nv_bfloat16* w = row_of(b, slots[it[0]], rowElems) + (size_t)2 * I * D;
  const uint4* wd = reinterpret_cast<const uint4*>(w + (size_t)i * I);
  float acc[MAXT] = {0.f, 0.f, 0.f, 0.f};
  const int chunks = I / 8;
  for (int c0 = 0; c0 < chunks; c0 += 32 * 8) {
    uint4 v[8];
#pragma unroll
    for (int k = 0; k < 8; k++) {
      const int c = c0 + k * 32 + lane;
      if (c < chunks) v[k] = __ldcs(wd + c);
    }
#pragma unroll
    for (int k = 0; k < 8; k++) {
      const int c = c0 + k * 32 + lane;
      if (c >= chunks) break;
#pragma unroll
      for (int t = 0; t < MAXT; t++) if (t < nt) acc8(v[k], as + t * I + c * 8, acc[t]);
    }
  }
#pragma unroll
  for (int t = 0; t < MAXT; t++) {
    if (t < nt) {
      const float s = warp_sum(acc[t]);
      if (lane == 0) y[((size_t)item * MAXT + t) * D + i] = s;
    }
  }
}

// The pick counter (what the engine's route kernel adds): counts[layer * E + expert] += 1 per pick.
extern "C" __global__ void count_picks(const uint16_t* __restrict__ picks, int n, int layers, int topK, int E,
                                       unsigned int* __restrict__ counts) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int l = (i / topK) % layers;
  atomicAdd(counts + l * E + picks[i], 1u);
}

__device__ __forceinline__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
  return (uint32_t)x;
}

// Random bf16 in [-scale, scale): weights must not be zeros (zeros hide wrong indexing and run faster).
extern "C" __global__ void fill_bf16(__nv_bfloat16* p, unsigned long long n, unsigned long long seed, float scale) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float u = (hash32(seed * 0x9e3779b97f4a7c15ULL + i) >> 8) * (1.f / 16777216.f);
    p[i] = __float2bfloat16((2.f * u - 1.f) * scale);
  }
}

extern "C" __global__ void fill_f32(float* p, unsigned long long n, unsigned long long seed, float scale) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float u = (hash32(seed * 0x9e3779b97f4a7c15ULL + i) >> 8) * (1.f / 16777216.f);
    p[i] = (2.f * u - 1.f) * scale;
  }
}
