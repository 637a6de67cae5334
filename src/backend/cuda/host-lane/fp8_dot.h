// The host expert lane's block-FP8 dots (included by host_experts.c, after its bf16 ones): the gemv's FP8
// order (gemv.cuh, dot_load_fp8), as a reference loop and as an AVX-512 path with the same bits.
// A row of K float8_e4m3fn values (K % 16 == 0) and its scale row (float32, one scale per s_cols values, s_cols a
// multiple of 16): lane l of a warp takes the 16-value chunks c = l, l + 32, ... in turn; chunk c's products are summed
// by a chain of fused multiply-adds from +0 in value order, d = fma(w_e, x_e, d), and added into the lane's sum times
// the chunk's scale, acc = fma(srow[16 c / s_cols], d, acc); then the warp's butterfly (lane l adds lane l ^ o,
// o = 16 .. 1).
#pragma once

// A float8_e4m3fn byte as a float, exact (the values fp8x8_to_float gives): sign, 4 exponent bits (bias 7), 3 mantissa
// bits; exponent 0 holds the zeros (either sign) and the subnormals m x 2^-9; S.1111.111 is NaN (the uploads refuse
// NaN weights, op_check_finite_fp8, so the lane never sums one; any quiet NaN stands for it here).
static inline float e4m3_value(uint8_t b) {
  const uint32_t e = (b >> 3) & 15, m = b & 7;
  if ((b & 0x7f) == 0x7f) return NAN;
  const float v = e ? EXACT_BITS_TO_FLOAT((e + 120) << 23 | m << 20) : EXACT_MUL((float)m, 0x1p-9f);
  return b & 0x80 ? -v : v;
}

// The reference order, one chunk at a time.
static float fp8_dot_ref(const uint8_t* w, const float* srow, int s_cols, const float* x, int K) {
  float acc[32] = {0};
  for (int c = 0; c < K / 16; c++) {
    float d = 0.0f;
    for (int e = 0; e < 16; e++) d = EXACT_FMA(e4m3_value(w[c * 16 + e]), x[c * 16 + e], d);
    acc[c & 31] = EXACT_FMA(srow[c * 16 / s_cols], d, acc[c & 31]);
  }
  return butterfly_ref(acc);
}

// x laid out for the FP8 vector order: in each block of 256 values (16 chunks of 16: 16 lanes' loads), value
// (16 q + l) * 16 + e at (16 q + e) * 16 + l (K % 256 == 0).
static inline size_t lane_major16(size_t j) { return (j & ~(size_t)255) | ((j & 15) << 4) | ((j >> 4) & 15); }

#if defined(__x86_64__)
// The vector path (as dot_avx512_n: N input vectors at once, out[b] with fp8_dot_ref's bits for xt[b], lane-major16),
// 16 lanes a register: a block of 256 values (16 lanes' 16-byte loads) is transposed as bf16's are (transpose_lanes:
// register m holds dword m of each lane's load, values 4m .. 4m + 3), widened to 4 registers of floats a dword (two
// ways below, the same values), each chunk's chain run in its lane for every input vector, then added in times the
// lanes' scales (fp8_scales16); the butterfly last. pf as bf16's: a row asked for 512 bytes at a time.

// How fp8_scales16 finds the 16 lanes' scales of a 256-value block: s_cols a multiple of 256 (one scale), a divisor of
// 256 (256 / s_cols scales spread by a permute with `idx`), or neither (one at a time).
typedef struct { int one, spread, n; __m512i idx; } Fp8Scales;
HE_TARGET static inline __attribute__((always_inline)) Fp8Scales fp8_scales_plan(int s_cols) {
  Fp8Scales p = {s_cols % 256 == 0, 256 % s_cols == 0, 256 / s_cols, _mm512_setzero_si512()};
  if (p.spread) p.idx = _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), __builtin_ctz((unsigned)s_cols / 16));
  return p;
}
// The scales of block q's 16 chunks (16 q .. 16 q + 15, one a vector lane): chunk c's is srow[16 c / s_cols].
HE_TARGET static inline __attribute__((always_inline)) __m512 fp8_scales16(const float* srow, int s_cols, const Fp8Scales* p, int q) {
  if (p->one) return _mm512_set1_ps(srow[q * 256 / s_cols]);
  if (p->spread) return _mm512_permutexvar_ps(p->idx, _mm512_maskz_loadu_ps((__mmask16)((1u << p->n) - 1), srow + (size_t)q * p->n));
  float s[16];
  for (int l = 0; l < 16; l++) s[l] = srow[(q * 256 + 16 * l) / s_cols];
  return _mm512_loadu_ps(s);
}

// Widening by integer operations (AVX-512F; the fallback where VBMI is absent): value 4m + i is byte i of each dword,
// moved to the top (a shift); its sign and 7 bits of exponent and mantissa placed at bits 31 and 26..20 (an arithmetic
// shift by 4 and a mask) make a float of value x 2^-120 (exponent 0: a subnormal float, m x 2^-129), so one multiply by
// 2^120 gives the value, exact (the threads run without denormals-are-zero; a subnormal byte may cost the multiply a
// microcode assist, rare in real weights). NaN bytes come out 480: a block holding one (a zero byte of ~b & 0x7f,
// found a dword at a time) has its lanes' chunk sums made NaN after, as the GPU's would be.
HE_TARGET static inline __attribute__((always_inline)) void fp8_widen_shift(__m512i v, __m512* f) {
  const __m512i keep = _mm512_set1_epi32((int)0x87f00000u);
  const __m512 two120 = _mm512_set1_ps(0x1p120f);
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) {
    const __m512i y = i == 3 ? v : _mm512_slli_epi32(v, 24 - 8 * i);
    f[i] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_srai_epi32(y, 4), keep)), two120);
  }
}
// Whether any of a block's 256 bytes is NaN (S.1111.111): a zero byte of z = ~b & 0x7f, (z - 0x01) & ~z & 0x80 (per
// dword, exact for bytes below 0x80).
HE_TARGET static inline __attribute__((always_inline)) int fp8_block_has_nan(const __m512i* raw) {
  const __m512i low7 = _mm512_set1_epi32(0x7f7f7f7f), ones = _mm512_set1_epi32(0x01010101), top = _mm512_set1_epi32((int)0x80808080u);
  __m512i nan = _mm512_setzero_si512();
  for (int r = 0; r < 4; r++) {
    const __m512i z = _mm512_andnot_si512(raw[r], low7);
    nan = _mm512_or_si512(nan, _mm512_ternarylogic_epi32(_mm512_sub_epi32(z, ones), z, top, 0x20)); // a & ~b & c
  }
  return _mm512_test_epi32_mask(nan, nan) != 0;
}
// The lanes (a bit each) whose 16 bytes of a block hold a NaN: the slow side of a rare branch (never taken on uploaded
// weights, which op_check_finite_fp8 refuses).
static unsigned fp8_nan_lanes(const uint8_t* w) {
  unsigned m = 0;
  for (int l = 0; l < 16; l++)
    for (int e = 0; e < 16; e++) m |= ((w[16 * l + e] & 0x7f) == 0x7f) << l;
  return m;
}
// Block q (256 values, 16 lanes' 16-byte loads) of a row: its bytes in raw, transposed into v (transpose_lanes); pf as
// dot_avx512's (a row asked for 512 bytes at a time). Both widenings below start each block here.
HE_TARGET static inline __attribute__((always_inline)) void fp8_load_block(const uint8_t* w, int q, const char* pf, __m512i* raw, __m512i* v) {
  if (pf && !(q & 1))
    for (int l = 0; l < 8; l++) _mm_prefetch(pf + (size_t)q * 256 + l * 64, _MM_HINT_T1);
  const __m512i* p = (const __m512i*)(w + (size_t)q * 256);
  for (int i = 0; i < 4; i++) raw[i] = _mm512_loadu_si512(p + i);
  transpose_lanes(raw, v);
}
// Both widenings' steps around the widened values f of a block q: each times its 16 inputs into the block's sums d
// (value group j = 4 m + i), and the block's sums times their scales into the lane sums (alternating pairs, q & 1).
HE_TARGET static inline __attribute__((always_inline)) void fp8_fma_group(__m512 f, const float* const* xt, const int N, int q, int j, __m512* d) {
  for (int b = 0; b < N; b++) d[b] = _mm512_fmadd_ps(f, _mm512_loadu_ps(xt[b] + (size_t)q * 256 + j * 16), d[b]);
}
HE_TARGET static inline __attribute__((always_inline)) void fp8_scale_block(const float* srow, int s_cols, const Fp8Scales* plan, int q, const int N,
                                                                            const __m512* d, __m512 (*acc)[2]) {
  const __m512 sc = fp8_scales16(srow, s_cols, plan, q);
  for (int b = 0; b < N; b++) acc[b][q & 1] = _mm512_fmadd_ps(sc, d[b], acc[b][q & 1]);
}
HE_TARGET static inline __attribute__((always_inline)) void fp8_dot_shift_n(const uint8_t* w, const float* srow, int s_cols, const float* const* xt, const int N,
                                                                            int K, float* out, const char* pf) {
  const Fp8Scales plan = fp8_scales_plan(s_cols);
  __m512 acc[HE_DOT_N][2];
  for (int b = 0; b < N; b++) acc[b][0] = acc[b][1] = _mm512_setzero_ps();
  for (int q = 0; q < K / 256; q++) {
    __m512i raw[4], v[4];
    fp8_load_block(w, q, pf, raw, v);
    __m512 d[HE_DOT_N];
    for (int b = 0; b < N; b++) d[b] = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
      __m512 f[4];
      fp8_widen_shift(v[m], f);
#pragma GCC unroll 4
      for (int i = 0; i < 4; i++) fp8_fma_group(f[i], xt, N, q, 4 * m + i, d);
    }
    if (__builtin_expect(fp8_block_has_nan(raw), 0)) {
      const __mmask16 lanes = (__mmask16)fp8_nan_lanes(w + (size_t)q * 256);
      for (int b = 0; b < N; b++) d[b] = _mm512_mask_mov_ps(d[b], lanes, _mm512_set1_ps(NAN));
    }
    fp8_scale_block(srow, s_cols, &plan, q, N, d, acc);
  }
  for (int b = 0; b < N; b++) out[b] = butterfly_avx512(acc[b][0], acc[b][1]);
}

// Widening by table (AVX-512 VBMI: Ice Lake and later, Zen 4 and later): every e4m3 value is a float whose bits below
// 20 are zero, so its top two bytes are all there is: two 128-entry byte tables indexed by the byte's low 7 bits (a
// two-register byte permute each, for a register of 64 bytes at once) give them, the sign ORed in, and one byte
// permute a value places the pair at the top of each lane's float (zeros below). Exact for zeros, subnormals and NaN
// alike, with no float arithmetic.
#define HE_TARGET_VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi,fma")))
static uint8_t fp8_top[128] __attribute__((aligned(64))), fp8_next[128] __attribute__((aligned(64)));
static uint8_t fp8_place[4][64] __attribute__((aligned(64))); // [i]: value 4m + i's two bytes to bytes 2, 3 of each dword
static int fp8_use_vbmi; // the CPU has VBMI (and BW) and the build does not say HE_FP8_NO_VBMI (a build for the tests)
// Filled when the library loads, before any thread runs.
__attribute__((constructor)) static void fp8_tables(void) {
  __builtin_cpu_init(); // (a constructor runs before the CPU model is read otherwise)
#if defined(HE_FP8_NO_VBMI)
  fp8_use_vbmi = 0;
#else
  fp8_use_vbmi = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw");
#endif
  for (int b = 0; b < 128; b++) {
    const float v = e4m3_value((uint8_t)b);
    uint32_t u;
    memcpy(&u, &v, 4);
    fp8_top[b] = (uint8_t)(u >> 24);
    fp8_next[b] = (uint8_t)(u >> 16);
  }
  for (int i = 0; i < 4; i++)
    for (int l = 0; l < 16; l++) {
      fp8_place[i][4 * l + 2] = (uint8_t)(4 * l + i);      // from the second bytes (the first register)
      fp8_place[i][4 * l + 3] = (uint8_t)(64 + 4 * l + i); // from the top bytes (the second)
    }
}
HE_TARGET_VBMI static inline __attribute__((always_inline)) void fp8_dot_vbmi_n(const uint8_t* w, const float* srow, int s_cols, const float* const* xt, const int N,
                                                                                int K, float* out, const char* pf) {
  const __m512i top0 = _mm512_load_si512(fp8_top), top1 = _mm512_load_si512(fp8_top + 64), next0 = _mm512_load_si512(fp8_next), next1 = _mm512_load_si512(fp8_next + 64);
  const __m512i sign = _mm512_set1_epi32((int)0x80808080u);
  const __mmask64 upper = 0xccccccccccccccccull; // bytes 2 and 3 of each dword
  const Fp8Scales plan = fp8_scales_plan(s_cols);
  __m512 acc[HE_DOT_N][2];
  for (int b = 0; b < N; b++) acc[b][0] = acc[b][1] = _mm512_setzero_ps();
  for (int q = 0; q < K / 256; q++) {
    __m512i raw[4], v[4];
    fp8_load_block(w, q, pf, raw, v);
    __m512 d[HE_DOT_N];
    for (int b = 0; b < N; b++) d[b] = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
      const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(top0, v[m], top1), v[m], sign, 0xf8); // a | (b & c)
      const __m512i lo = _mm512_permutex2var_epi8(next0, v[m], next1);
#pragma GCC unroll 4
      for (int i = 0; i < 4; i++) {
        const __m512 f = _mm512_castsi512_ps(_mm512_maskz_permutex2var_epi8(upper, lo, _mm512_load_si512(fp8_place[i]), hi));
        fp8_fma_group(f, xt, N, q, 4 * m + i, d);
      }
    }
    fp8_scale_block(srow, s_cols, &plan, q, N, d, acc);
  }
  for (int b = 0; b < N; b++) out[b] = butterfly_avx512(acc[b][0], acc[b][1]);
}

// n vectors, HE_DOT_N at a time (each count its own inlined copy), each widening compiled for its instruction set;
// pf as dot_avx512's, on the first pass.
HE_TARGET static void fp8_dot_shift(const uint8_t* w, const float* srow, int s_cols, const float* const* xt, int n, int K, float* out, const void* pf) {
  for (int i = 0; i < n; i += HE_DOT_N) {
    const char* p = i == 0 ? (const char*)pf : NULL;
    switch (n - i) {
      case 1: fp8_dot_shift_n(w, srow, s_cols, xt + i, 1, K, out + i, p); break;
      case 2: fp8_dot_shift_n(w, srow, s_cols, xt + i, 2, K, out + i, p); break;
      case 3: fp8_dot_shift_n(w, srow, s_cols, xt + i, 3, K, out + i, p); break;
      default: fp8_dot_shift_n(w, srow, s_cols, xt + i, HE_DOT_N, K, out + i, p); break;
    }
  }
}
HE_TARGET_VBMI static void fp8_dot_vbmi(const uint8_t* w, const float* srow, int s_cols, const float* const* xt, int n, int K, float* out, const void* pf) {
  for (int i = 0; i < n; i += HE_DOT_N) {
    const char* p = i == 0 ? (const char*)pf : NULL;
    switch (n - i) {
      case 1: fp8_dot_vbmi_n(w, srow, s_cols, xt + i, 1, K, out + i, p); break;
      case 2: fp8_dot_vbmi_n(w, srow, s_cols, xt + i, 2, K, out + i, p); break;
      case 3: fp8_dot_vbmi_n(w, srow, s_cols, xt + i, 3, K, out + i, p); break;
      default: fp8_dot_vbmi_n(w, srow, s_cols, xt + i, HE_DOT_N, K, out + i, p); break;
    }
  }
}
static void fp8_dot_avx512(const uint8_t* w, const float* srow, int s_cols, const float* const* xt, int n, int K, float* out, const void* pf) {
  if (fp8_use_vbmi) fp8_dot_vbmi(w, srow, s_cols, xt, n, K, out, pf);
  else fp8_dot_shift(w, srow, s_cols, xt, n, K, out, pf);
}
#else
static void fp8_dot_avx512(const uint8_t* w, const float* srow, int s_cols, const float* const* xt, int n, int K, float* out, const void* pf) {
  (void)w; (void)srow; (void)s_cols; (void)xt; (void)K; (void)pf;
  for (int i = 0; i < n; i++) out[i] = 0.f;
}
#endif
