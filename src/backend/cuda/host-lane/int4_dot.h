// The host expert lane's INT4 dots (to be included by host_experts.c after mxfp4_dot.h; for now only
// int4_dot_check.c includes it, for its tests): the INT4 gemv's order as host-lane/int4-spec.ts defines it, as a
// reference loop and as an AVX-512 path with the same bits.
// A row of K values (K % 32 == 0) is K / 2 bytes, value c in byte c >> 1, low nibble first (quant.ts Int4Matrix), with a
// 16-bit scale (fp16 or bf16) and a zero point (a byte; 8 for every group of a symmetric matrix, zrow NULL) a group of
// G values (G % 8 == 0): value = (q - z) x s, exact in float32. Lane l of a warp takes the 32-value chunks c = l, l + 32,
// ... (one 16-byte load) in turn; each word of 8 values of a chunk, of one group, is summed d = w_0 x_0, then
// d = fma(w_e, x_e, d) for e = 1 .. 7, and added into the lane's sum, acc = acc + d; then the warp's butterfly.
#pragma once

// An INT4 group's scale from its 16 bits (exact): bf16 is the top half of a float32; fp16 widened, subnormals too.
static inline float int4_scale(uint16_t h, int bf16) {
  if (bf16) return EXACT_BITS_TO_FLOAT((uint32_t)h << 16);
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3ffu;
  if (e == 0) {
    const float v = EXACT_MUL((float)m, 0x1p-24f);
    return sign ? -v : v;
  }
  return EXACT_BITS_TO_FLOAT(sign | (e == 31 ? 0x7f800000u : (e + 112u) << 23) | (m << 13));
}

// The reference order, one word at a time; each weight (q - z) x s, both steps exact.
static float int4_dot_ref(const uint8_t* w, const uint16_t* srow, const uint8_t* zrow, int bf16, int G, const float* x, int K) {
  float acc[32] = {0};
  for (int c = 0; c < K / 32; c++) {
    for (int i = 0; i < 4; i++) {
      const int v = 32 * c + 8 * i, g = v / G;
      const float s = int4_scale(srow[g], bf16), z = zrow ? (float)zrow[g] : 8.0f;
      const uint8_t* b = w + v / 2;
      float d = 0.0f;
      for (int e = 0; e < 8; e++) {
        const float wv = EXACT_MUL((float)((b[e >> 1] >> (4 * (e & 1))) & 15) - z, s);
        d = e ? EXACT_FMA(wv, x[v + e], d) : EXACT_MUL(wv, x[v + e]);
      }
      acc[c & 31] = EXACT_ADD(acc[c & 31], d);
    }
  }
  return butterfly_ref(acc);
}

// Whether the vector path takes groups of G (a chunk's 4 words in one group: G a multiple of 32, as published
// checkpoints' 32, 64 and 128 are).
static inline int int4_simd_group(int G) { return G % 32 == 0; }

#if defined(__x86_64__)
// The vector path (as mxfp4_dot_n: N input vectors at once, out[b] with int4_dot_ref's bits for xt[b], laid out
// lane-major32 with K rounded up to whole rounds, mxfp4_ld), 16 lanes a register, each half of a round (16 lanes'
// 16-byte loads) at a time, transposed (transpose_lanes: register m holds word m of each lane's load). Each chunk's scale
// and zero point, widened once a row into sc / zc (the chunk's group: G % 32 == 0), are loaded 16 lanes at once; each
// nibble shifted down, masked, converted, less the zero point, times the scale (exact), then each word's chain run in
// its lane for every input vector and added into the lane's sum. The last round's lanes past the row's chunks load
// nothing and keep their sums (masked adds). pf as mxfp4_dot_n's.
HE_TARGET static inline __attribute__((always_inline)) void int4_dot_n(const uint8_t* w, const float* sc, const float* zc, const float* const* xt, const int N,
                                                                       int K, float* out, const char* pf) {
  const __m512i nib = _mm512_set1_epi32(15);
  const int chunks = K / 32;
  __m512 acc[HE_DOT_N][2];
  for (int b = 0; b < N; b++) acc[b][0] = acc[b][1] = _mm512_setzero_ps();
  for (int q = 0; q * 32 < chunks; q++) {
    if (pf)
      for (int l = 0; l < 8; l++) _mm_prefetch(pf + (size_t)q * 512 + l * 64, _MM_HINT_T1);
    for (int h = 0; h < 2; h++) {
      const int c0 = q * 32 + h * 16, n = chunks - c0 < 16 ? chunks - c0 : 16;
      if (n <= 0) break;
      const uint8_t* p = w + (size_t)c0 * 16;
      const __mmask16 live = (__mmask16)((1u << n) - 1);
      __m512i raw[4], v[4];
      for (int r = 0; r < 4; r++) {
        const int lanes = n - 4 * r < 0 ? 0 : n - 4 * r > 4 ? 4 : n - 4 * r;
        raw[r] = _mm512_maskz_loadu_epi32((__mmask16)((1u << (4 * lanes)) - 1), p + 64 * r);
      }
      transpose_lanes(raw, v);
      const __m512 s = _mm512_maskz_loadu_ps(live, sc + c0), z = _mm512_maskz_loadu_ps(live, zc + c0);
#pragma GCC unroll 4
      for (int m = 0; m < 4; m++) {
        __m512 d[HE_DOT_N];
#pragma GCC unroll 8
        for (int e = 0; e < 8; e++) {
          const __m512 qv = _mm512_cvtepi32_ps(_mm512_and_si512(e ? _mm512_srli_epi32(v[m], 4 * e) : v[m], nib));
          const __m512 wv = _mm512_mul_ps(_mm512_sub_ps(qv, z), s);
          for (int b = 0; b < N; b++) {
            const __m512 xv = _mm512_loadu_ps(xt[b] + (size_t)q * 1024 + (8 * m + e) * 32 + h * 16);
            d[b] = e ? _mm512_fmadd_ps(wv, xv, d[b]) : _mm512_mul_ps(wv, xv);
          }
        }
        for (int b = 0; b < N; b++) acc[b][h] = _mm512_mask_add_ps(acc[b][h], live, acc[b][h], d[b]);
      }
    }
  }
  for (int b = 0; b < N; b++) out[b] = butterfly_avx512(acc[b][0], acc[b][1]);
}
// n vectors, HE_DOT_N at a time (each count its own inlined copy), a row's chunk scales and zero points widened first
// (int4_simd_group(G) must hold); pf as mxfp4_dot_avx512's, on the first pass.
HE_TARGET static void int4_dot_avx512(const uint8_t* w, const uint16_t* srow, const uint8_t* zrow, int bf16, int G, const float* const* xt, int n, int K,
                                      float* out, const void* pf) {
  float sc[K / 32 + 1], zc[K / 32 + 1];
  for (int c = 0; c < K / 32; c++) {
    const int g = 32 * c / G;
    sc[c] = int4_scale(srow[g], bf16);
    zc[c] = zrow ? (float)zrow[g] : 8.0f;
  }
  for (int i = 0; i < n; i += HE_DOT_N) {
    const char* p = i == 0 ? (const char*)pf : NULL;
    switch (n - i) {
      case 1: int4_dot_n(w, sc, zc, xt + i, 1, K, out + i, p); break;
      case 2: int4_dot_n(w, sc, zc, xt + i, 2, K, out + i, p); break;
      case 3: int4_dot_n(w, sc, zc, xt + i, 3, K, out + i, p); break;
      default: int4_dot_n(w, sc, zc, xt + i, HE_DOT_N, K, out + i, p); break;
    }
  }
}
#else
static void int4_dot_avx512(const uint8_t* w, const uint16_t* srow, const uint8_t* zrow, int bf16, int G, const float* const* xt, int n, int K,
                            float* out, const void* pf) {
  (void)w; (void)srow; (void)zrow; (void)bf16; (void)G; (void)xt; (void)K; (void)pf;
  for (int i = 0; i < n; i++) out[i] = 0.f;
}
#endif
