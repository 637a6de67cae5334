// Float arithmetic that the GPU kernels and the host's expert lane (native/host_experts.c) compute to the same
// bits: every multiply, add, fused multiply-add and divide is written out (no contraction either way: nvcc's
// __f*_rn intrinsics; the host compiles with -ffp-contract=off), and exp is a polynomial of those, not the
// GPU's approximate ex2 instruction. A cold expert computed by the host then equals the same expert read by
// the GPU, bit for bit, so where an expert runs never changes a result.
#pragma once
#ifdef __CUDACC__
#define EXACT_FN __host__ __device__ __forceinline__
#define EXACT_MUL(a, b) __fmul_rn(a, b)
#define EXACT_ADD(a, b) __fadd_rn(a, b)
#define EXACT_FMA(a, b, c) __fmaf_rn(a, b, c)
#define EXACT_DIV(a, b) __fdiv_rn(a, b)
#define EXACT_BITS_TO_FLOAT(u) __uint_as_float(u)
#else
#include <math.h>
#include <stdint.h>
#include <string.h>
#define EXACT_FN static inline
#define EXACT_MUL(a, b) ((a) * (b))
#define EXACT_ADD(a, b) ((a) + (b))
#define EXACT_FMA(a, b, c) fmaf(a, b, c)
#define EXACT_DIV(a, b) ((a) / (b))
static inline float exact_bits_to_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
#define EXACT_BITS_TO_FLOAT(u) exact_bits_to_float(u)
#endif

// e^x within 2 ulp for x in [-87, 88]; below that 0, above +inf (NaN stays NaN). n = round(x / ln 2),
// r = x - n ln 2 in two steps (Cody-Waite), e^r by Cephes' expf polynomial, times 2^n built from its bits.
EXACT_FN float exact_expf(float x) {
  if (x != x) return x;
  if (x > 88.0f) return EXACT_BITS_TO_FLOAT(0x7f800000u);
  if (x < -87.0f) return 0.0f;
  const float n = rintf(EXACT_MUL(x, 1.44269504088896341f));
  float r = EXACT_FMA(n, -0.693359375f, x);
  r = EXACT_FMA(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = EXACT_FMA(p, r, 1.3981999507e-3f);
  p = EXACT_FMA(p, r, 8.3334519073e-3f);
  p = EXACT_FMA(p, r, 4.1665795894e-2f);
  p = EXACT_FMA(p, r, 1.6666665459e-1f);
  p = EXACT_FMA(p, r, 5.0000001201e-1f);
  p = EXACT_FMA(p, EXACT_MUL(r, r), r);
  p = EXACT_ADD(p, 1.0f);
  return EXACT_MUL(p, EXACT_BITS_TO_FLOAT((uint32_t)((int)n + 127) << 23));
}

// silu(g) = g / (1 + e^-g).
EXACT_FN float exact_silu(float g) { return EXACT_DIV(g, EXACT_ADD(1.0f, exact_expf(-g))); }

// SwiGLU's unit: silu(gate) x up.
EXACT_FN float exact_swiglu(float g, float u) { return EXACT_MUL(exact_silu(g), u); }

// gpt-oss's clamped SwiGLU unit (limit > 0): gate clamped above at limit, up to [-limit, limit] (fminf / fmaxf: a NaN
// sum gives way to the bound), then (up + 1) x (gate x sigmoid(alpha gate)), sigmoid(v) = 1 / (1 + e^-v).
EXACT_FN float exact_swiglu_clamped(float g, float u, float limit, float alpha) {
  g = fminf(g, limit);
  u = fminf(fmaxf(u, -limit), limit);
  const float sig = EXACT_DIV(1.0f, EXACT_ADD(1.0f, exact_expf(-EXACT_MUL(g, alpha))));
  return EXACT_MUL(EXACT_ADD(u, 1.0f), EXACT_MUL(g, sig));
}
