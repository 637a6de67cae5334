// Shared pieces of the moe-residency kernels: the device-side model/step descriptors (mirrored byte for
// byte by src/backend/cuda/layout.ts) and block/warp helpers. Weights stay bf16 (as stored in the
// checkpoint); every sum is fp32.
#pragma once
#include <stdint.h>
#include "exact_math.cuh"

typedef uint16_t bf16_t;

__device__ __forceinline__ float bf2f(bf16_t v) { return __uint_as_float(((uint32_t)v) << 16); }

// One MoE layer's weights on the device. Expert rows live in two banks addressed through `slots`:
// slot < hot_rows -> hot row `slot` (device memory); else cold row `slot - hot_rows` (mapped host memory).
struct LayerDev {
  const bf16_t* in_norm;   // [H]
  const bf16_t* q_proj;    // [nh*hd][H]
  const bf16_t* k_proj;    // [nkv*hd][H]
  const bf16_t* v_proj;    // [nkv*hd][H]
  const bf16_t* o_proj;    // [H][nh*hd]
  const bf16_t* q_norm;    // [hd]
  const bf16_t* k_norm;    // [hd]
  const bf16_t* post_norm; // [H]
  const bf16_t* router;    // [E][H]
  const bf16_t* hot;       // hot bank: rows of gate[I][H] | up[I][H] | down[H][I]
  const bf16_t* cold;      // cold bank (may be null when every expert is hot)
  const int32_t* slots;    // [E] expert -> slot
};

struct ModelDev {
  int32_t H, nh, nkv, hd, E, K, I, V, L, norm_topk, hot_rows, max_pos;
  float eps, theta;
  const bf16_t* embed;      // [V][H]
  const bf16_t* final_norm; // [H]
  const bf16_t* lm_head;    // [V][H]
  uint32_t* counter;        // [L][E]
  const LayerDev* layers;   // [L]
};

// The model descriptor in constant memory (set once per module at load by the host: cuModuleGetGlobal):
// every field read is a uniform constant-cache hit instead of a dependent global load.
#define MAX_LAYERS 128
__constant__ ModelDev c_model;
__constant__ LayerDev c_layers[MAX_LAYERS];

// One row of a step: a token of one sequence at `pos`; its KV cache is [L][cap][2][nkv*hd] fp32.
struct RowDev {
  int32_t token, pos, valid, cap;
  float* kv;
};

struct StepDev {
  int32_t count; // 1: count this step's picks into the counter (decode steps); same graph either way
  int32_t rows;
  int32_t pad0, pad1;
  RowDev row[1]; // [bucket]
};

// Work buffers of one bucket (B rows), all device memory.
struct WorkDev {
  float* hidden;        // [B][H] residual stream
  float* xn;            // [B][H] post-attention-norm activations (the experts' input)
  int32_t* pick_expert; // [B][L][K] routed expert ids, descending probability
  float* pick_weight;   // [B][L][K] renormalized routing weights
  int32_t* pick_slot;   // [B][K] this layer's picks as bank slots
  float* partial;       // [B][K][H] each pick's expert output (unweighted)
  float* logits;        // [B][V]
  unsigned long long* amax; // [B] packed (ordered logit, ~index) for argmax
  float* attn_part;     // [B][gridDim.y of attn_route][nh*hd + 2*nh] split attention partials: acc | max | sum
  uint32_t* attn_done;  // [B] split blocks of a row done so far (zeroed at alloc; the last block resets it)
};

// Flash-decoding split of the positions (attn_route, layered path). A row whose attention reads more than
// ATTN_SPLIT_MIN positions is split into S chunks of about ATTN_CHUNK positions, S at most max_splits (the
// launch's gridDim.y, chosen by the host from the SM count and the bucket); chunks are balanced and never
// empty. At n <= ATTN_SPLIT_MIN (or max_splits 1) S is 1: the one-block path, unchanged. Mirrored by
// attnSplitsOf in src/backend/cuda/plan.ts.
#define ATTN_SPLIT_MIN 256
#define ATTN_CHUNK 128
__device__ __forceinline__ int attn_splits(int n, int max_splits, int* chunk) {
  if (n <= ATTN_SPLIT_MIN || max_splits <= 1) { *chunk = n; return 1; }
  const int want = (n + ATTN_CHUNK - 1) / ATTN_CHUNK;
  const int s = want < max_splits ? want : max_splits;
  const int c = (n + s - 1) / s;
  *chunk = c;
  return (n + c - 1) / c; // <= s; every chunk [j*c, min(n, (j+1)*c)) non-empty
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum; `red` is shared scratch of >= 32 floats. Every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  return warp_sum(lane < nw ? red[lane] : 0.f); // every warp reduces the partials by shuffles
}

__device__ __forceinline__ float block_max(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  return warp_max(lane < nw ? red[lane] : -INFINITY);
}

// Dot of one bf16 weight row (K values, K % 4 == 0, 8-byte aligned) with x, by one warp; lane 0's
// result is the sum (every lane gets it).
__device__ __forceinline__ float warp_dot_bf16(const bf16_t* __restrict__ w, const float* __restrict__ x, int K) {
  const int lane = threadIdx.x & 31;
  float acc = 0.f;
  for (int k = lane * 4; k < K; k += 128) {
    const uint2 u = *reinterpret_cast<const uint2*>(w + k);
    acc += __uint_as_float(u.x << 16) * x[k] + __uint_as_float(u.x & 0xffff0000u) * x[k + 1] +
           __uint_as_float(u.y << 16) * x[k + 2] + __uint_as_float(u.y & 0xffff0000u) * x[k + 3];
  }
  return warp_sum(acc);
}

// Dot of one bf16 weight row (K values, K % 8 == 0, 16-byte aligned) with x (shared memory, read as a
// broadcast), by one thread: 16-byte loads, several in flight. For the small K of the fixture (<= 256) a
// thread per row keeps every load of a GEMV in flight at once, which is what a latency-bound decode needs.
__device__ __forceinline__ float thread_dot_bf16(const bf16_t* __restrict__ w, const float* __restrict__ x, int K) {
  const uint4* w4 = reinterpret_cast<const uint4*>(w);
  float a0 = 0.f, a1 = 0.f;
#pragma unroll 8
  for (int c = 0; c < (K >> 3); c++) {
    const uint4 u = __ldg(w4 + c);
    const float4 x0 = *reinterpret_cast<const float4*>(x + 8 * c);
    const float4 x1 = *reinterpret_cast<const float4*>(x + 8 * c + 4);
    a0 += __uint_as_float(u.x << 16) * x0.x + __uint_as_float(u.x & 0xffff0000u) * x0.y +
          __uint_as_float(u.y << 16) * x0.z + __uint_as_float(u.y & 0xffff0000u) * x0.w;
    a1 += __uint_as_float(u.z << 16) * x1.x + __uint_as_float(u.z & 0xffff0000u) * x1.y +
          __uint_as_float(u.w << 16) * x1.z + __uint_as_float(u.w & 0xffff0000u) * x1.w;
  }
  return a0 + a1;
}

// acc plus the dot of 8 bf16 values (a 16-byte load) with x[0..7], one fused multiply-add a value in order: the op
// path gemv's bf16 sum (op_gemv.cuh), which native/host_experts.c computes to the same bits.
__device__ __forceinline__ float fma8_bf16(const uint4 u, const float* __restrict__ x, float acc) {
  const float4 x0 = *reinterpret_cast<const float4*>(x);
  const float4 x1 = *reinterpret_cast<const float4*>(x + 4);
  acc = __fmaf_rn(__uint_as_float(u.x << 16), x0.x, acc);
  acc = __fmaf_rn(__uint_as_float(u.x & 0xffff0000u), x0.y, acc);
  acc = __fmaf_rn(__uint_as_float(u.y << 16), x0.z, acc);
  acc = __fmaf_rn(__uint_as_float(u.y & 0xffff0000u), x0.w, acc);
  acc = __fmaf_rn(__uint_as_float(u.z << 16), x1.x, acc);
  acc = __fmaf_rn(__uint_as_float(u.z & 0xffff0000u), x1.y, acc);
  acc = __fmaf_rn(__uint_as_float(u.w << 16), x1.z, acc);
  return __fmaf_rn(__uint_as_float(u.w & 0xffff0000u), x1.w, acc);
}

__device__ __forceinline__ float dot8_bf16(const uint4 u, const float* __restrict__ x) {
  const float4 x0 = *reinterpret_cast<const float4*>(x);
  const float4 x1 = *reinterpret_cast<const float4*>(x + 4);
  return __uint_as_float(u.x << 16) * x0.x + __uint_as_float(u.x & 0xffff0000u) * x0.y +
         __uint_as_float(u.y << 16) * x0.z + __uint_as_float(u.y & 0xffff0000u) * x0.w +
         __uint_as_float(u.z << 16) * x1.x + __uint_as_float(u.z & 0xffff0000u) * x1.y +
         __uint_as_float(u.w << 16) * x1.z + __uint_as_float(u.w & 0xffff0000u) * x1.w;
}

// Block GEMV over bf16 rows: out(o) = row(o) . x(o) for o in [0, O), K % 8 == 0, rows 16-byte aligned.
// A group of G lanes (G = the power of two covering K/8, at most 32) reads one row as consecutive 16-byte
// chunks (coalesced), R rows per group in flight before any sum; the group reduces by shuffles. Decode is
// latency-bound: what matters is many independent loads in flight and few passes.
template <typename RowFn, typename XFn, typename StoreFn>
__device__ __forceinline__ void block_gemv_rows(int O, int K, RowFn rowp, XFn xp, StoreFn store) {
  constexpr int R = 4;
  const int chunks = K >> 3;
  int G = 1;
  while (G < chunks && G < 32) G <<= 1;
  const int lane = threadIdx.x & 31, gl = lane & (G - 1);
  const int gid = threadIdx.x / G, ng = blockDim.x / G;
  for (int base = 0; base < O; base += ng * R) { // warp-uniform trip count: shuffles stay converged
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.f;
    for (int c0 = 0; c0 < chunks; c0 += G) {
      const int c = c0 + gl;
      uint4 u[R];
#pragma unroll
      for (int r = 0; r < R; r++) {
        const int o = base + r * ng + gid;
        u[r] = (o < O && c < chunks) ? __ldg(reinterpret_cast<const uint4*>(rowp(o)) + c) : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int r = 0; r < R; r++) {
        const int o = base + r * ng + gid;
        if (o < O && c < chunks) acc[r] += dot8_bf16(u[r], xp(o) + 8 * c);
      }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
      for (int off = G >> 1; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
      const int o = base + r * ng + gid;
      if (gl == 0 && o < O) store(o, acc[r]);
    }
  }
}

// out[o] = W[o,:] . x for o in [0, O) (x 16-byte aligned shared memory).
__device__ __forceinline__ void block_gemv(const bf16_t* __restrict__ W, const float* __restrict__ x, float* out, int O, int K) {
  block_gemv_rows(O, K, [=](int o) { return W + (size_t)o * K; }, [=](int) { return x; }, [=](int o, float v) { out[o] = v; });
}

// out[o] = W[o,:] . x for o in [0, O): one warp per output row. x and out may be shared memory.
__device__ __forceinline__ void block_gemv_bf16(const bf16_t* __restrict__ W, const float* __restrict__ x, float* out,
                                                int O, int K) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int o = warp; o < O; o += nw) {
    const float s = warp_dot_bf16(W + (size_t)o * K, x, K);
    if (lane == 0) out[o] = s;
  }
}

// RMSNorm of n values (as torch: x * rsqrt(mean(x^2) + eps) * w), block-wide; in place allowed.
__device__ __forceinline__ void block_rmsnorm(const float* x, const bf16_t* __restrict__ w, float* out, int n, float eps,
                                              float* red) {
  float ss = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += x[i] * x[i];
  ss = block_sum(ss, red);
  const float inv = 1.0f / sqrtf(ss / (float)n + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = bf2f(w[i]) * (x[i] * inv);
  __syncthreads();
}

// RMSNorm of one head vector (d values) by one warp; in place.
__device__ __forceinline__ void warp_rmsnorm(float* x, const bf16_t* __restrict__ w, int d, float eps) {
  const int lane = threadIdx.x & 31;
  float ss = 0.f;
  for (int i = lane; i < d; i += 32) ss += x[i] * x[i];
  ss = warp_sum(ss);
  const float inv = 1.0f / sqrtf(ss / (float)d + eps);
  __syncwarp();
  for (int i = lane; i < d; i += 32) x[i] = bf2f(w[i]) * (x[i] * inv);
  __syncwarp();
}

// Rotate-half RoPE of one head vector (d values) at `pos`, by one warp; in place. Same float32 table
// recipe as transformers (inv_freq = 1 / theta^(2i/d); angle = pos * inv_freq in float32).
__device__ __forceinline__ void warp_rope(float* x, int d, int pos, float theta) {
  const int lane = threadIdx.x & 31, half = d >> 1;
  for (int i = lane; i < half; i += 32) {
    const float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)d);
    const float angle = (float)pos * inv_freq;
    float s, c;
    sincosf(angle, &s, &c);
    const float a = x[i], b = x[half + i];
    x[i] = a * c - b * s;
    x[half + i] = b * c + a * s;
  }
  __syncwarp();
}

// exact_math.cuh's: the host expert lane computes the same bits (native/host_experts.c).
__device__ __forceinline__ float silu(float x) { return exact_silu(x); }

// The largest of the warp's argmax keys (argmax_key), in every lane.
__device__ __forceinline__ unsigned long long warp_max_key(unsigned long long key) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const unsigned long long other = __shfl_xor_sync(0xffffffffu, key, off);
    key = other > key ? other : key;
  }
  return key;
}

// Order-preserving key for argmax by 64-bit atomicMax: larger logit wins, then the lower index (as the host's
// argmax: -0 and +0 are one value, a NaN never wins: key 0, "none").
__device__ __forceinline__ unsigned long long argmax_key(float v, int idx) {
  if (v != v) return 0ull;
  if (v == 0.f) v = 0.f;
  uint32_t u = __float_as_uint(v);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return ((unsigned long long)u << 32) | (unsigned long long)(0xffffffffu - (uint32_t)idx);
}

// The index an argmax_key holds (0 for key 0, "none": as the host's argmax of an all-NaN row; backend.ts bestArgmaxKey).
__device__ __forceinline__ int argmax_key_index(unsigned long long key) {
  return key == 0ull ? 0 : (int)(0xffffffffu - (uint32_t)(key & 0xffffffffull));
}
