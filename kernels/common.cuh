// Shared pieces of the kernels: bf16 values, warp and block reductions, the norms, the argmax key. Every sum is
// fp32.
#pragma once
#include <stdint.h>
#include "exact_math.cuh"

typedef uint16_t bf16_t;

__device__ __forceinline__ float bf2f(bf16_t v) { return __uint_as_float(((uint32_t)v) << 16); }

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

// acc plus the dot of 8 bf16 values (a 16-byte load) with x[0..7], one fused multiply-add a value in order: the op
// path gemv's bf16 sum (gemv.cuh), which native/host_experts.c computes to the same bits.
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
