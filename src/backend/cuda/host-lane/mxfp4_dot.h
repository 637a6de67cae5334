// The host expert lane's MXFP4 dots (included by host_experts.c, after its bf16 ones): the gemv's MXFP4 order
// (gemv.cuh, dot_word_mxfp4), as a reference loop and as an AVX-512 path with the same bits.
// A row of K values (K % 32 == 0) is K / 2 bytes, two E2M1 codes a byte (low nibble first), and K / 32 E8M0 scale
// bytes: value = e2m1 x 2^(s - 127), a float32 exactly (the uploads refuse s > 252, so no weight overflows). Lane l of
// a warp takes the 32-value chunks c = l, l + 32, ... (one 16-byte load and one scale) in turn; each word of 8 values
// of a chunk is summed d = w_0 x_0, then d = fma(w_e, x_e, d) for e = 1 .. 7, and added into the lane's sum,
// acc = acc + d; then the warp's butterfly (lane l adds lane l ^ o, o = 16 .. 1).
#pragma once

// The E2M1 codes' values: sign, 2 exponent bits, 1 mantissa bit (code 8 is -0).
static const float fp4_values[16] __attribute__((aligned(64))) = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                                                    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// An E8M0 byte's power of two, 2^(s - 127) (product.cuh e8m0_to_float: s = 0 is 2^-127, a subnormal float).
static inline float e8m0_scale(uint8_t s) { return EXACT_BITS_TO_FLOAT(s ? (uint32_t)s << 23 : 0x00400000u); }

// The reference order, one chunk at a time; each weight is its code's value times its scale (one exact multiply: the
// GPU's two-step widening gives the same value).
static float mxfp4_dot_ref(const uint8_t* w, const uint8_t* srow, const float* x, int K) {
  float acc[32] = {0};
  for (int c = 0; c < K / 32; c++) {
    const float sc = e8m0_scale(srow[c]);
    for (int i = 0; i < 4; i++) {
      const uint8_t* b = w + (size_t)c * 16 + 4 * i;
      const float* xv = x + (size_t)c * 32 + 8 * i;
      float d = 0.0f;
      for (int e = 0; e < 8; e++) {
        const float wv = EXACT_MUL(fp4_values[(b[e >> 1] >> (4 * (e & 1))) & 15], sc);
        d = e ? EXACT_FMA(wv, xv[e], d) : EXACT_MUL(wv, xv[e]);
      }
      acc[c & 31] = EXACT_ADD(acc[c & 31], d);
    }
  }
  return butterfly_ref(acc);
}

// x laid out for the MXFP4 vector order: in each round of 1,024 values (32 chunks of 32: the warp's 32 loads), value
// 32 l + v at v * 32 + l, so value v of 16 lanes' chunks is 16 floats in a row. A row's last round may be partial (K
// not a multiple of 1,024: gpt-oss's 2,880 is 2 rounds and 26 chunks), so an input vector takes its K rounded up to
// 1,024 (mxfp4_ld).
static inline size_t lane_major32(size_t j) { return (j & ~(size_t)1023) | ((j & 31) << 5) | ((j >> 5) & 31); }
static inline size_t mxfp4_ld(int K) { return ((size_t)K + 1023) & ~(size_t)1023; }

#if defined(__x86_64__)
// The vector path (as dot_avx512_n: N input vectors at once, out[b] with mxfp4_dot_ref's bits for xt[b], lane-major32),
// 16 lanes a register, each half of a round (16 lanes' 16-byte loads, 256 bytes) at a time: transposed as bf16's are
// (transpose_lanes: register m holds word m of each lane's load, values 8m .. 8m + 7), each nibble's value looked up in
// a register of the 16 (vpermps reads an index's low 4 bits, so a shift selects the nibble) and times the lanes'
// scales, then each word's chain run in its lane for every input vector and added into the lane's sum. The last round's
// lanes past the row's chunks load nothing and keep their sums (masked adds). pf as bf16's: a row of the same length
// asked for 512 bytes (a round) at a time.
HE_TARGET static inline __attribute__((always_inline)) void mxfp4_dot_n(const uint8_t* w, const uint8_t* srow, const float* const* xt, const int N, int K,
                                                                        float* out, const char* pf) {
  const __m512 table = _mm512_load_ps(fp4_values);
  const __m512i sub = _mm512_set1_epi32(0x00400000);
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
      __m512i raw[4], v[4], s;
      if (n == 16) {
        for (int r = 0; r < 4; r++) raw[r] = _mm512_loadu_si512(p + 64 * r);
        s = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(srow + c0)));
      } else {
        for (int r = 0; r < 4; r++) {
          const int lanes = n - 4 * r < 0 ? 0 : n - 4 * r > 4 ? 4 : n - 4 * r;
          raw[r] = _mm512_maskz_loadu_epi32((__mmask16)((1u << (4 * lanes)) - 1), p + 64 * r);
        }
        uint8_t tail[16] = {0};
        memcpy(tail, srow + c0, (size_t)n);
        s = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)tail));
      }
      transpose_lanes(raw, v);
      const __m512 sc = _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_test_epi32_mask(s, s), sub, _mm512_slli_epi32(s, 23)));
      const __mmask16 live = (__mmask16)((1u << n) - 1);
#pragma GCC unroll 4
      for (int m = 0; m < 4; m++) {
        __m512 d[HE_DOT_N];
#pragma GCC unroll 8
        for (int e = 0; e < 8; e++) {
          const __m512 wv = _mm512_mul_ps(_mm512_permutexvar_ps(e ? _mm512_srli_epi32(v[m], 4 * e) : v[m], table), sc);
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
// n vectors, HE_DOT_N at a time (each count its own inlined copy); pf as dot_avx512's, on the first pass.
HE_TARGET static void mxfp4_dot_avx512(const uint8_t* w, const uint8_t* srow, const float* const* xt, int n, int K, float* out, const void* pf) {
  for (int i = 0; i < n; i += HE_DOT_N) {
    const char* p = i == 0 ? (const char*)pf : NULL;
    switch (n - i) {
      case 1: mxfp4_dot_n(w, srow, xt + i, 1, K, out + i, p); break;
      case 2: mxfp4_dot_n(w, srow, xt + i, 2, K, out + i, p); break;
      case 3: mxfp4_dot_n(w, srow, xt + i, 3, K, out + i, p); break;
      default: mxfp4_dot_n(w, srow, xt + i, HE_DOT_N, K, out + i, p); break;
    }
  }
}
#else
static void mxfp4_dot_avx512(const uint8_t* w, const uint8_t* srow, const float* const* xt, int n, int K, float* out, const void* pf) {
  (void)w; (void)srow; (void)xt; (void)K; (void)pf;
  for (int i = 0; i < n; i++) out[i] = 0.f;
}
#endif
