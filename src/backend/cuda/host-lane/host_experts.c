// The host's expert lane: threads of the host CPU compute some of a decode step's cold experts from the cold bank's
// pinned memory (read from DRAM at the host's speed, not over the bus), while the GPU computes the rest. The GPU
// posts a request in a mailbox of mapped memory (the rows' inputs, each pick's cold slot or -1, a sequence number);
// the threads compute each of the host's experts once for every row that picked it (its weights read once) and post
// each pick's output row back; the GPU's combine waits for it (kernels/host_exchange.cuh). Every product sums in the GPU
// gemv's order (gemv.cuh, at every batch: bf16, lane l of a warp takes the 8-value chunks c = l, l + 32, ... of a
// row in turn, one fused multiply-add a value; block FP8, the 16-value chunks, each a chain of fused multiply-adds
// added in times its block's scale (fp8_dot.h); MXFP4, the 32-value chunks, each word of 8 a product and a chain of
// fused multiply-adds added in (mxfp4_dot.h); then the warp's butterfly), the biases are added as the gemv's epilogue
// adds them and the activation (SwiGLU, or gpt-oss's clamped one) is exact_math.cuh's, so a pick's output has the bits
// the GPU would give it. One expert a request may be split with the GPU: the host
// computes the first units of its gate | up and the first features of its down product, the GPU the rest, the two
// exchanging their units through the mailbox in between (each unit and feature still summed whole on one side).
// Built by scripts/build-kernels.mjs (cc -O3 -ffp-contract=off); driven by src/backend/cuda/host-lane/lane.ts.
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include "../../../../kernels/exact_math.cuh"

// The mailbox (mirrored by kernels/host_exchange.cuh and host-lane/lane.ts): a request line, an answer line, then the rows'
// inputs x [HE_MAX_PICKS][H] floats at HE_X, the picks' outputs y [HE_MAX_PICKS][H] after them (pick p's at row p)
// and the split expert's units act [HE_MAX_PICKS][I] after those (pick p's at row p).
#define HE_MAX_PICKS 32 // a decode step's picks (rows x picks a row) the GPU's one-warp grouping takes
#define HE_X 512
typedef struct {
  _Atomic uint32_t req_seq; // written last by the GPU
  int32_t layer;            // among the MoE layers
  int32_t n;                // the step's picks (1..HE_MAX_PICKS): rows x k
  int32_t k;                // picks a row: pick p is row p / k's
  int32_t slot[HE_MAX_PICKS]; // pick p's physical slot (a cold row: >= hot_rows) when the host computes it, else -1
  // The split expert's slot (-1: none; its picks' slots are in slot[] too), and the units of its gate | up and the
  // features of its down product the host computes (from 0; the GPU the rest).
  int32_t split_slot, split_units, split_features;
  _Atomic uint32_t gpu_act_seq; // written by the GPU when its units of the split expert are in act
  uint8_t pad1[96];
  _Atomic uint32_t done_seq; // written by the host when y holds the request's outputs
  _Atomic int32_t refused;   // requests the host refused (a slot, layer or count out of range): y zero
  uint32_t gpu_timeouts;     // written by the GPU: waits that gave up
  _Atomic uint32_t host_act_seq; // written by the host when its units of the split expert are in act
  uint8_t pad2[240];
} HeMailbox;
_Static_assert(sizeof(HeMailbox) == HE_X && offsetof(HeMailbox, slot) == 16 && offsetof(HeMailbox, split_slot) == 144 && offsetof(HeMailbox, gpu_act_seq) == 156 &&
               offsetof(HeMailbox, done_seq) == 256 && offsetof(HeMailbox, gpu_timeouts) == 264 && offsetof(HeMailbox, host_act_seq) == 268,
               "mailbox header: host_exchange.cuh, host-lane/lane.ts MAILBOX");
static inline size_t he_y_offset(int H) { return HE_X + (((size_t)4 * H * HE_MAX_PICKS + 63) & ~(size_t)63); }
static inline size_t he_act_offset(int H) { return he_y_offset(H) + (((size_t)4 * H * HE_MAX_PICKS + 63) & ~(size_t)63); }

static inline float bf16_at(const uint16_t* w, size_t i) { return EXACT_BITS_TO_FLOAT((uint32_t)w[i] << 16); }

// The warp's butterfly over its 32 lane sums (lane l adds lane l ^ o, o = 16 .. 1): every reference dot's last step.
static float butterfly_ref(float acc[32]) {
  for (int o = 16; o > 0; o >>= 1) {
    float t[32];
    for (int l = 0; l < 32; l++) t[l] = EXACT_ADD(acc[l], acc[l ^ o]);
    memcpy(acc, t, sizeof t);
  }
  return acc[0];
}

// The reference order, any K % 8 == 0: 32 lane sums, then the butterfly.
static float dot_ref(const uint16_t* w, const float* x, int K) {
  float acc[32] = {0};
  for (int c = 0; c < K / 8; c++)
    for (int e = 0; e < 8; e++) acc[c & 31] = EXACT_FMA(bf16_at(w, (size_t)c * 8 + e), x[c * 8 + e], acc[c & 31]);
  return butterfly_ref(acc);
}

// How a unit is activated from its gate and up sums (biases added), as product.cuh's swiglu_act: the clamped
// SwiGLU when limit > 0, else silu(gate) x up.
static inline float unit_act(float limit, float alpha, float g, float u) {
  return limit > 0.0f ? exact_swiglu_clamped(g, u, limit, alpha) : exact_swiglu(g, u);
}

// x laid out for the vector order: value (g * 32 + l) * 8 + e at (g * 8 + e) * 32 + l (K % 256 == 0).
static inline size_t lane_major(size_t j) { return ((j >> 8) * 8 + (j & 7)) * 32 + ((j >> 3) & 31); }

// Input vectors a weight row's loads serve at once (dot_avx512_n).
#define HE_DOT_N 4

#if defined(__x86_64__)
#define HE_TARGET __attribute__((target("avx512f,fma")))
// 16 lanes' 16-byte loads (4 registers, 4 lanes each) as 4 registers of one dword of every lane (v[m]: dword m, bytes
// 4m .. 4m + 3, of lanes 0 .. 15), by two rounds of two-register permutes.
HE_TARGET static inline __attribute__((always_inline)) void transpose_lanes(const __m512i* in, __m512i* v) {
  // Round 1: of lanes 0-3 (a) and 4-7 (b), dwords 0-1 of lanes 0-7, then dwords 2-3; round 2: dwords m of 16 lanes.
  const __m512i r1lo = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
  const __m512i r1hi = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
  const __m512i r2lo = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
  const __m512i r2hi = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  const __m512i ab01 = _mm512_permutex2var_epi32(in[0], r1lo, in[1]), ab23 = _mm512_permutex2var_epi32(in[0], r1hi, in[1]);
  const __m512i cd01 = _mm512_permutex2var_epi32(in[2], r1lo, in[3]), cd23 = _mm512_permutex2var_epi32(in[2], r1hi, in[3]);
  v[0] = _mm512_permutex2var_epi32(ab01, r2lo, cd01);
  v[1] = _mm512_permutex2var_epi32(ab01, r2hi, cd01);
  v[2] = _mm512_permutex2var_epi32(ab23, r2lo, cd23);
  v[3] = _mm512_permutex2var_epi32(ab23, r2hi, cd23);
}
// The butterfly of 32 lane sums (lo: lanes 0-15, hi: 16-31): o = 16 adds the halves; 8, 4: 256- and 128-bit blocks;
// 2, 1: within 128 bits.
HE_TARGET static inline __attribute__((always_inline)) float butterfly_avx512(__m512 lo, __m512 hi) {
  __m512 s = _mm512_add_ps(lo, hi);
  s = _mm512_add_ps(s, _mm512_shuffle_f32x4(s, s, 0x4e));
  s = _mm512_add_ps(s, _mm512_shuffle_f32x4(s, s, 0xb1));
  s = _mm512_add_ps(s, _mm512_permute_ps(s, 0x4e));
  s = _mm512_add_ps(s, _mm512_permute_ps(s, 0xb1));
  return _mm512_cvtss_f32(s);
}
// The same sums with 16 lanes a register, for N input vectors at once (an expert picked by N rows: its weights are
// loaded and transposed once, each vector keeps its own accumulators, so out[b] has dot_ref's bits for xt[b]): a group
// of 256 values (32 lanes x 8) is 512 bytes; each half (16 lanes) is 4 dwords of bf16 pairs a lane, transposed
// (transpose_lanes) into 4 vectors of one pair each (lane-major), widened by a shift (the even value) and a mask (the
// odd), fused in value order. Inlined with N a constant (dot_avx512 below). pf (or null): a row of
// the same length asked for into L2 a group (512 bytes) at a time as this one is read (HE_PREFETCH).
HE_TARGET static inline __attribute__((always_inline)) void dot_avx512_n(const uint16_t* w, const float* const* xt, const int N, int K, float* out,
                                                                         const char* pf) {
  const __m512i himask = _mm512_set1_epi32((int)0xffff0000u);
  __m512 acc[HE_DOT_N][2];
  for (int b = 0; b < N; b++) acc[b][0] = acc[b][1] = _mm512_setzero_ps();
  for (int g = 0; g < K / 256; g++) {
    if (pf)
      for (int l = 0; l < 8; l++) _mm_prefetch(pf + (size_t)g * 512 + l * 64, _MM_HINT_T1);
    for (int h = 0; h < 2; h++) {
      const __m512i* p = (const __m512i*)(w + (size_t)g * 256 + h * 128);
      const __m512i raw[4] = {_mm512_loadu_si512(p), _mm512_loadu_si512(p + 1), _mm512_loadu_si512(p + 2), _mm512_loadu_si512(p + 3)};
      __m512i v[4];
      transpose_lanes(raw, v);
      for (int i = 0; i < N; i++) {
        const float* xg = xt[i] + (size_t)g * 256 + h * 16;
        __m512 s = acc[i][h];
        for (int m = 0; m < 4; m++) {
          s = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v[m], 16)), _mm512_loadu_ps(xg + (2 * m) * 32), s);
          s = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v[m], himask)), _mm512_loadu_ps(xg + (2 * m + 1) * 32), s);
        }
        acc[i][h] = s;
      }
    }
  }
  for (int i = 0; i < N; i++) out[i] = butterfly_avx512(acc[i][0], acc[i][1]);
}
// n vectors, HE_DOT_N at a time (each count its own inlined copy); pf as dot_avx512_n's, on the first pass.
HE_TARGET static void dot_avx512(const uint16_t* w, const float* const* xt, int n, int K, float* out, const void* pf) {
  for (int i = 0; i < n; i += HE_DOT_N) {
    const char* p = i == 0 ? (const char*)pf : NULL;
    switch (n - i) {
      case 1: dot_avx512_n(w, xt + i, 1, K, out + i, p); break;
      case 2: dot_avx512_n(w, xt + i, 2, K, out + i, p); break;
      case 3: dot_avx512_n(w, xt + i, 3, K, out + i, p); break;
      default: dot_avx512_n(w, xt + i, HE_DOT_N, K, out + i, p); break;
    }
  }
}
// unit_act compiled with FMA instructions (outside a target function its fmaf is a libm call).
HE_TARGET static float unit_act_avx512(float limit, float alpha, float g, float u) { return unit_act(limit, alpha, g, u); }
static int simd_supported(void) { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma"); }
#else
static void dot_avx512(const uint16_t* w, const float* const* xt, int n, int K, float* out, const void* pf) { (void)w; (void)xt; (void)K; (void)pf; for (int i = 0; i < n; i++) out[i] = 0.f; }
static float unit_act_avx512(float limit, float alpha, float g, float u) { return unit_act(limit, alpha, g, u); }
static int simd_supported(void) { return 0; }
#endif
#include "fp8_dot.h"
#include "mxfp4_dot.h"

// How an expert's values are stored (HeRow.format): bf16, block FP8 (float8_e4m3fn bytes and float32 scales), or
// MXFP4 (E2M1 codes two a byte and E8M0 scale bytes).
enum { HE_BF16 = 0, HE_FP8 = 1, HE_MXFP4 = 2 };
// One matrix of an expert's bank row (K values a row): its row r is the row r x step from byte offset w (step 2: gate
// and up rows interleaved in one product, gpt-oss's gate_up_proj). Block FP8 also has its scale grid at byte offset s
// (4-byte aligned), weight row r and value k scaled by grid[(r / s_rows) * s_ld + k / s_cols] (the kernels' grid,
// fp8-grid.ts; s_cols a multiple of 16, so a 16-value load has one scale); MXFP4 its E8M0 bytes at s, s_ld a row (one
// a 32 values). b: its bf16 biases' byte offset (row r's at b + 2 r step), or -1: none.
typedef struct { int64_t w, s, b; int32_t s_rows, s_cols, s_ld, step; } HeMatrix;
// An expert's bank row (lane-row.ts encodes it from a LaneRow): gate [I][H], up [I][H], down [H][I]; limit > 0: the
// clamped SwiGLU with limit and alpha (product.cuh swiglu_act). (Block FP8's gate | up is one product on the GPU, one
// grid: up's grid here starts at the scale row holding up row 0, I / s_rows rows in.)
typedef struct { int32_t format, pad; float limit, alpha; HeMatrix gate, up, down; } HeRow;
_Static_assert(sizeof(HeMatrix) == 40 && sizeof(HeRow) == 136, "HeRow: lane-row.ts HE_ROW_FIELDS");

// Bytes of a row of K values of the format.
static inline int64_t row_bytes_of(int format, int64_t K) { return format == HE_BF16 ? 2 * K : format == HE_FP8 ? K : K / 2; }

// Whether the lane computes a row so laid out at hidden H and expert size I (the vector path also wants H and I
// multiples of 256 for bf16 and FP8: simd_shape).
static int row_ok(const HeRow* rl, int H, int I) {
  if (!rl || H <= 0 || I <= 0) return 0;
  const HeMatrix* m[3] = {&rl->gate, &rl->up, &rl->down};
  const int K[3] = {H, H, I};
  // Gate and up rows one after the other or interleaved (the same way), down's one after the other; a bias or none.
  if (rl->gate.step != rl->up.step || (rl->gate.step != 1 && rl->gate.step != 2) || rl->down.step != 1) return 0;
  for (int i = 0; i < 3; i++)
    if (m[i]->b < -1) return 0;
  if (rl->format == HE_BF16) return H % 8 == 0 && I % 8 == 0;
  if (rl->format == HE_MXFP4) {
    if (H % 32 || I % 32) return 0;
    for (int i = 0; i < 3; i++)
      if (m[i]->s_ld < K[i] / 32) return 0;
    return 1;
  }
  if (rl->format != HE_FP8 || H % 16 || I % 16 || rl->gate.step != 1) return 0;
  for (int i = 0; i < 3; i++)
    if (m[i]->s_rows < 1 || m[i]->s_cols < 16 || m[i]->s_cols % 16 || m[i]->s % 4 || m[i]->s_ld < ((int64_t)K[i] + m[i]->s_cols - 1) / m[i]->s_cols) return 0;
  return 1;
}

// Whether the vector path takes the format at hidden H and expert size I (MXFP4's has a partial last round).
static int simd_shape(int format, int H, int I) { return format == HE_MXFP4 || (H % 256 == 0 && I % 256 == 0); }

// Whether every matrix, scale grid and bias rl names lies inside a bank row of row_bytes (he_start's rows: a layout
// past the row's end would read the next expert, or past the bank).
static int row_fits(const HeRow* rl, int H, int I, int64_t row_bytes) {
  const HeMatrix* m[3] = {&rl->gate, &rl->up, &rl->down};
  const int64_t R[3] = {I, I, H}, K[3] = {H, H, I};
  for (int i = 0; i < 3; i++) {
    const int64_t rows = (R[i] - 1) * m[i]->step + 1; // the rows from the matrix's first to its last
    if (m[i]->w < 0 || m[i]->w + rows * row_bytes_of(rl->format, K[i]) > row_bytes) return 0;
    if (rl->format == HE_FP8 && (m[i]->s < 0 || m[i]->s + 4 * ((rows + m[i]->s_rows - 1) / m[i]->s_rows) * (int64_t)m[i]->s_ld > row_bytes)) return 0;
    if (rl->format == HE_MXFP4 && (m[i]->s < 0 || m[i]->s + rows * (int64_t)m[i]->s_ld > row_bytes)) return 0;
    if (m[i]->b >= 0 && m[i]->b + 2 * rows > row_bytes) return 0;
  }
  return 1;
}

// Where value j of an input vector sits for the vector path of the format (each its own lane-major order).
static inline size_t lane_pos(int format, size_t j) { return format == HE_FP8 ? lane_major16(j) : format == HE_MXFP4 ? lane_major32(j) : lane_major(j); }
// Floats an input vector of K values takes (MXFP4's vector order rounds K up to whole rounds).
static inline size_t vec_ld(int format, int K) { return format == HE_MXFP4 ? mxfp4_ld(K) : (size_t)K; }

// The values of row r of matrix m (K values a row) in an expert's bank row.
static inline const uint8_t* row_values(const uint8_t* row, const HeMatrix* m, int format, int r, int K) {
  return row + m->w + (size_t)r * m->step * row_bytes_of(format, K);
}

// Row r's bias of matrix m (bf16), or +0 when it has none (as the gemv's SwiGLU epilogue adds a missing one).
static inline float bias_of(const uint8_t* row, const HeMatrix* m, int r) {
  if (m->b < 0) return 0.0f;
  uint16_t v;
  memcpy(&v, row + m->b + (size_t)2 * r * m->step, 2);
  return EXACT_BITS_TO_FLOAT((uint32_t)v << 16);
}

// Row r of matrix m with the n inputs x[p] (lane-major when simd), into out[p]. pf (or null): a row to ask for.
static inline void dots(const uint8_t* row, const HeRow* rl, const HeMatrix* m, int r, int K, const float* const* x, int n, float* out, int simd, const void* pf) {
  const uint8_t* w = row_values(row, m, rl->format, r, K);
  if (rl->format == HE_MXFP4) {
    const uint8_t* srow = row + m->s + (size_t)r * m->step * m->s_ld;
    if (simd) mxfp4_dot_avx512(w, srow, x, n, K, out, pf);
    else for (int p = 0; p < n; p++) out[p] = mxfp4_dot_ref(w, srow, x[p], K);
  } else if (rl->format == HE_FP8) {
    const float* srow = (const float*)(row + m->s) + (size_t)(r / m->s_rows) * m->s_ld;
    if (simd) fp8_dot_avx512(w, srow, m->s_cols, x, n, K, out, pf);
    else for (int p = 0; p < n; p++) out[p] = fp8_dot_ref(w, srow, m->s_cols, x[p], K);
  } else {
    if (simd) dot_avx512((const uint16_t*)w, x, n, K, out, pf);
    else for (int p = 0; p < n; p++) out[p] = dot_ref((const uint16_t*)w, x[p], K);
  }
}

// Unit j of an expert picked by n rows: h[p][j] (lane-major when simd) from x[p], the input of the row of pick p.
// pf (or null): the next unit's expert row and unit, whose gate and up rows the vector path asks for as it goes.
typedef struct { const uint8_t* row; int j; } NextUnit;
static inline void gate_up_unit(const uint8_t* row, const HeRow* rl, int H, int j, const float* const* x, float* const* h, int n, int simd, const NextUnit* pf) {
  float g[HE_MAX_PICKS], u[HE_MAX_PICKS];
  dots(row, rl, &rl->gate, j, H, x, n, g, simd, pf ? row_values(pf->row, &rl->gate, rl->format, pf->j, H) : NULL);
  dots(row, rl, &rl->up, j, H, x, n, u, simd, pf ? row_values(pf->row, &rl->up, rl->format, pf->j, H) : NULL);
  const float gb = bias_of(row, &rl->gate, j), ub = bias_of(row, &rl->up, j);
  for (int p = 0; p < n; p++) {
    const float gs = EXACT_ADD(g[p], gb), us = EXACT_ADD(u[p], ub);
    h[p][simd ? lane_pos(rl->format, j) : (size_t)j] = simd ? unit_act_avx512(rl->limit, rl->alpha, gs, us) : unit_act(rl->limit, rl->alpha, gs, us);
  }
}
// Feature f of the expert's down product for its n picks: out[p] from h[p], plus its bias when it has one (epi_store:
// none, none added). pf (or null): a down row to ask for.
static inline void down_feature(const uint8_t* row, const HeRow* rl, int I, int f, const float* const* h, int n, float* out, int simd, const void* pf) {
  dots(row, rl, &rl->down, f, I, h, n, out, simd, pf);
  if (rl->down.b >= 0) {
    const float b = bias_of(row, &rl->down, f);
    for (int p = 0; p < n; p++) out[p] = EXACT_ADD(out[p], b);
  }
}

int he_simd_available(void) { return simd_supported(); }

// The address of a buffer the caller passes (tests stand in host memory for pinned memory with it).
uint64_t he_address(const void* p) { return (uint64_t)(uintptr_t)p; }

// One expert on the calling thread (the tests' entry), its row laid out as rl says: h [I] (plain order) and y [H].
// simd: 1 takes the vector path (the CPU has it and it takes the shape, simd_shape; else returns -1); 0 the reference
// loop. -2: a layout or shape the lane does not compute (row_ok).
int he_expert(const uint8_t* row, const HeRow* rl, int H, int I, const float* x, float* h, float* y, int simd) {
  if (!row_ok(rl, H, I)) return -2;
  if (simd && (!simd_supported() || !simd_shape(rl->format, H, I))) return -1;
  float* xt = calloc(vec_ld(rl->format, H), sizeof(float));
  float* ht = calloc(vec_ld(rl->format, I), sizeof(float));
  if (!xt || !ht) { free(xt); free(ht); return -3; }
#if defined(__x86_64__)
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(0x1f80); // as the lane's threads: nearest, no subnormals flushed (FP8's integer widening multiplies some)
#endif
  if (simd) for (int k = 0; k < H; k++) xt[lane_pos(rl->format, k)] = x[k];
  const float* xs = simd ? xt : x;
  const float* hs = ht;
  for (int j = 0; j < I; j++) gate_up_unit(row, rl, H, j, &xs, &ht, 1, simd, NULL);
  for (int j = 0; j < I; j++) h[j] = simd ? ht[lane_pos(rl->format, j)] : ht[j];
  for (int f = 0; f < H; f++) down_feature(row, rl, I, f, &hs, 1, y + f, simd, NULL);
#if defined(__x86_64__)
  _mm_setcsr(csr);
#endif
  free(xt);
  free(ht);
  return 0;
}

// ---- The lane: threads answering the mailbox ----

// he_start's flags.
#define HE_PIN 1
#define HE_PREFETCH 4

typedef struct Lane Lane;
typedef struct { Lane* lane; int index; int cpu; } Worker;
struct Lane {
  int threads, H, I, layers, hot_rows, cold_rows, simd, flags;
  size_t xld, hld; // floats a row of xt and of ht takes (vec_ld)
  int64_t row_bytes;
  HeRow rl;
  uint64_t* cold; // [layers] host addresses
  HeMailbox* mb;
  float* y;     // the mailbox's outputs
  float* act;   // the mailbox's exchange of the split expert's units
  float* xt;    // [HE_MAX_PICKS][xld] the request's rows' inputs (lane-major when simd)
  float* ht;    // [HE_MAX_PICKS][hld] the picks' units
  _Atomic int stop;
  _Atomic uint32_t bar_count, bar_gen;
  // The request being answered, as thread 0 read it from the mailbox and grouped it (every thread works from this
  // copy, so all agree on it whatever the mailbox holds meanwhile), handed out by job_gen; quit: the threads leave.
  struct {
    uint32_t seq;
    int32_t layer, n, k, quit, ok;
    int32_t experts;                     // distinct slots among the host's picks, in order of first pick (the split expert last)
    int32_t split, split_units, split_features; // whether the last expert is split, and the host's units and features of it
    int32_t ex_slot[HE_MAX_PICKS];       // expert e's physical slot
    int32_t ex_start[HE_MAX_PICKS + 1];  // its picks: pick_of[ex_start[e] .. ex_start[e + 1])
    int32_t pick_of[HE_MAX_PICKS];
    int32_t rows, row[HE_MAX_PICKS];     // the input rows the host's picks read
  } job;
  _Atomic uint32_t job_gen;
  _Atomic uint64_t requests, busy_ns;
  pthread_t* th;
  Worker* workers;
  int started;
};

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}
static inline void relax(void) {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

static void barrier(Lane* L) {
  const uint32_t gen = atomic_load_explicit(&L->bar_gen, memory_order_acquire);
  if (atomic_fetch_add_explicit(&L->bar_count, 1, memory_order_acq_rel) == (uint32_t)L->threads - 1) {
    atomic_store_explicit(&L->bar_count, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&L->bar_gen, 1, memory_order_release);
  } else {
    while (atomic_load_explicit(&L->bar_gen, memory_order_acquire) == gen) relax();
  }
}

// Spins until `ready` says go; after 2 ms of spinning, sleeps 50 us between looks, and after 100 ms 1 ms (a decode
// step posts a request every MoE layer, so a stepping server keeps its threads spinning and an idle one keeps them
// asleep; the first request after a long pause waits up to 1 ms).
typedef int (*Ready)(Lane* L, uint32_t seen, uint32_t* got);
static int spin_until(Lane* L, Ready ready, uint32_t seen, uint32_t* got) {
  uint64_t idle_since = 0;
  int idle = 0;
  for (unsigned spins = 0;; spins++) {
    if (ready(L, seen, got)) return 1;
    if (atomic_load_explicit(&L->stop, memory_order_relaxed)) return 0;
    if (idle) {
      const uint64_t t = now_ns();
      struct timespec d = {0, t - idle_since > 100000000ull ? 1000000 : 50000};
      nanosleep(&d, NULL);
      continue;
    }
    if ((spins & 1023) == 0) {
      const uint64_t t = now_ns();
      if (!idle_since) idle_since = t;
      else idle = t - idle_since > 2000000ull;
    }
    relax();
  }
}

// Thread 0's: a request the GPU posted since `seen` (its sequence number in *got).
static int request_posted(Lane* L, uint32_t seen, uint32_t* got) {
  const uint32_t q = atomic_load_explicit(&L->mb->req_seq, memory_order_acquire);
  if (q == seen) return 0;
  *got = q;
  return 1;
}

// Every thread's, at a split expert: the GPU's units of request `seq` are in the mailbox (*got 1), or the GPU has
// posted a newer request (*got 0: it gave up on this one, or never ran its exchange).
static int gpu_units_in(Lane* L, uint32_t seq, uint32_t* got) {
  if (atomic_load_explicit(&L->mb->gpu_act_seq, memory_order_acquire) == seq) { *got = 1; return 1; }
  if (atomic_load_explicit(&L->mb->req_seq, memory_order_acquire) != seq) { *got = 0; return 1; }
  return 0;
}

// The other threads': thread 0 handed out job `seen + 1` or later.
static int job_handed(Lane* L, uint32_t seen, uint32_t* got) {
  const uint32_t g = atomic_load_explicit(&L->job_gen, memory_order_acquire);
  if (g == seen) return 0;
  *got = g;
  return 1;
}

// [begin, end) of n units for thread t of T: contiguous, so each thread streams whole rows.
static inline void share(int n, int t, int T, int* b, int* e) {
  *b = (int)((int64_t)n * t / T);
  *e = (int)((int64_t)n * (t + 1) / T);
}

// Thread 0's copy of the request at the mailbox, checked and grouped by expert (job.ok 0: refused).
static void take_request(Lane* L, uint32_t seq) {
  const HeMailbox* mb = L->mb;
  L->job.seq = seq;
  const int layer = mb->layer, n = mb->n, k = mb->k;
  int32_t slot[HE_MAX_PICKS];
  int ok = layer >= 0 && layer < L->layers && n >= 1 && n <= HE_MAX_PICKS && k >= 1 && k <= n;
  int host = 0, split_picks = 0;
  const int split_slot = mb->split_slot, su = mb->split_units, sf = mb->split_features;
  for (int p = 0; ok && p < n; p++) {
    slot[p] = mb->slot[p];
    ok = slot[p] == -1 || (slot[p] >= L->hot_rows && slot[p] < L->hot_rows + L->cold_rows);
    host += slot[p] >= 0;
    split_picks += slot[p] >= 0 && slot[p] == split_slot;
  }
  // A split expert: one of the picks' slots, the host's units and features of it some but not all.
  const int split = split_slot != -1;
  if (split) ok = ok && split_picks > 0 && su > 0 && su < L->I && sf > 0 && sf < L->H;
  L->job.ok = ok && host > 0;
  L->job.layer = layer;
  L->job.n = n;
  L->job.k = k;
  if (!L->job.ok) return;
  // Experts in order of their first pick, each with its picks in pick order (so with its rows in row order); the
  // split expert last.
  int m = 0, q = 0, rows = 0, last_row = -1;
  uint32_t done = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int p = 0; p < n; p++) {
      if (slot[p] < 0 || (done >> p) & 1u || (slot[p] == split_slot) != (pass == 1)) continue;
      L->job.ex_slot[m] = slot[p];
      L->job.ex_start[m++] = q;
      for (int r = p; r < n; r++)
        if (slot[r] == slot[p]) { L->job.pick_of[q++] = r; done |= 1u << r; }
    }
  L->job.ex_start[m] = q;
  L->job.experts = m;
  L->job.split = split;
  L->job.split_units = split ? su : 0;
  L->job.split_features = split ? sf : 0;
  for (int p = 0; p < n; p++)
    if (slot[p] >= 0 && p / k != last_row) L->job.row[rows++] = last_row = p / k;
  L->job.rows = rows;
}

static void answer(Lane* L, int t) {
  const int H = L->H, I = L->I, T = L->threads, simd = L->simd;
  int b, e;
  if (!L->job.ok) {
    // Every thread reads the same copy of the request, so all agree; the outputs go to zero and the GPU goes on.
    if (t == 0) {
      memset(L->y, 0, sizeof(float) * HE_MAX_PICKS * H);
      atomic_fetch_add_explicit(&L->mb->refused, 1, memory_order_relaxed);
    }
    barrier(L);
    return;
  }
  const float* x = (const float*)((const uint8_t*)L->mb + HE_X);
  share(L->job.rows * H, t, T, &b, &e);
  for (int i = b; i < e; i++) {
    const size_t r = (size_t)L->job.row[i / H];
    const int c = i % H;
    L->xt[r * L->xld + (simd ? lane_pos(L->rl.format, c) : (size_t)c)] = x[r * H + c];
  }
  barrier(L);
  // mw whole experts, then (split) the split expert: the host's units of its gate | up (su), features of its down (sf).
  const int m = L->job.experts, k = L->job.k, split = L->job.split, mw = m - split, su = L->job.split_units, sf = L->job.split_features;
  const uint8_t* rows[HE_MAX_PICKS];
  for (int j = 0; j < m; j++) rows[j] = (const uint8_t*)(uintptr_t)L->cold[L->job.layer] + (size_t)(L->job.ex_slot[j] - L->hot_rows) * L->row_bytes;
  // Each expert's picks: their rows' inputs, units and outputs.
  const float* xs[HE_MAX_PICKS];
  float* hs[HE_MAX_PICKS];
  for (int q = 0; q < L->job.ex_start[m]; q++) {
    const int p = L->job.pick_of[q];
    xs[q] = L->xt + (size_t)(p / k) * L->xld;
    hs[q] = L->ht + (size_t)p * L->hld;
  }
  // Each thread takes a contiguous range of units (faster than every T-th unit). HE_PREFETCH (the vector path): the
  // next unit's rows are asked for (into L2) a group at a time while this one is read, the down rows 2 features ahead
  // (asking for a whole unit's rows at once before computing it was slower; docs/results.md).
  const int spread = simd && (L->flags & HE_PREFETCH);
  // The split expert's picks: hs[q0 .. q0 + sp).
  const int q0 = L->job.ex_start[mw], sp = L->job.ex_start[m] - q0;
  if (split) {
    // Its units first, each also written to the mailbox (plain order), so the GPU, which needs them for its features
    // of the down product, has them while the host goes on with its whole experts.
    share(su, t, T, &b, &e);
    for (int j = b; j < e; j++) {
      const NextUnit next = {rows[mw], j + 1};
      gate_up_unit(rows[mw], &L->rl, H, j, xs + q0, hs + q0, sp, simd, spread && j + 1 < e ? &next : NULL);
      for (int q = q0; q < q0 + sp; q++) L->act[(size_t)L->job.pick_of[q] * I + j] = hs[q][simd ? lane_pos(L->rl.format, j) : (size_t)j];
    }
    barrier(L);
    if (t == 0) atomic_store_explicit(&L->mb->host_act_seq, L->job.seq, memory_order_release);
  }
  share(mw * I, t, T, &b, &e);
  for (int u = b; u < e; u++) {
    const int v = u + 1;
    const NextUnit next = {v < e ? rows[v / I] : NULL, v % I};
    const int x0 = L->job.ex_start[u / I];
    gate_up_unit(rows[u / I], &L->rl, H, u % I, xs + x0, hs + x0, L->job.ex_start[u / I + 1] - x0, simd, spread && v < e ? &next : NULL);
  }
  barrier(L);
  share(mw * H, t, T, &b, &e);
  for (int u = b; u < e; u++) {
    const int v = u + 2;
    const int x0 = L->job.ex_start[u / H], np = L->job.ex_start[u / H + 1] - x0, f = u % H;
    float out[HE_MAX_PICKS];
    down_feature(rows[u / H], &L->rl, I, f, (const float* const*)(hs + x0), np, out, simd,
                 spread && v < e ? row_values(rows[v / H], &L->rl.down, L->rl.format, v % H, I) : NULL);
    for (int q = 0; q < np; q++) L->y[(size_t)L->job.pick_of[x0 + q] * H + f] = out[q];
  }
  if (split) {
    // The GPU's units of the split expert (posted after its gate | up, usually long in by now), then the host's
    // features of its down product. (A lane stopping meanwhile, or a GPU that posted a newer request, skips them: the
    // answer no longer matters, but it is still given, so the GPU's stalled lane resumes.)
    uint32_t got = 0;
    const int in = spin_until(L, gpu_units_in, L->job.seq, &got) && got, gu = I - su;
    if (in) {
      share(sp * gu, t, T, &b, &e);
      for (int i = b; i < e; i++) {
        const int q = q0 + i / gu, j = su + i % gu;
        hs[q][simd ? lane_pos(L->rl.format, j) : (size_t)j] = L->act[(size_t)L->job.pick_of[q] * I + j];
      }
    }
    barrier(L);
    if (in) {
      share(sf, t, T, &b, &e);
      for (int f = b; f < e; f++) {
        float out[HE_MAX_PICKS];
        down_feature(rows[mw], &L->rl, I, f, (const float* const*)(hs + q0), sp, out, simd,
                     spread && f + 2 < e ? row_values(rows[mw], &L->rl.down, L->rl.format, f + 2, I) : NULL);
        for (int q = 0; q < sp; q++) L->y[(size_t)L->job.pick_of[q0 + q] * H + f] = out[q];
      }
    }
  }
  barrier(L);
}

static void* worker_main(void* arg) {
  Worker* w = (Worker*)arg;
  Lane* L = w->lane;
  if (w->cpu >= 0) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(w->cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
  }
#if defined(__x86_64__)
  _mm_setcsr(0x1f80); // round to nearest, no flush of subnormals to zero: the GPU's float rules, whatever the creator's
#endif
  // Thread 0 alone reads the mailbox: it copies each request and hands it out (job_gen); the others take the copy.
  uint32_t seen = atomic_load_explicit(&L->mb->done_seq, memory_order_acquire), gen = 0, got;
  for (;;) {
    if (w->index == 0) {
      const int posted = spin_until(L, request_posted, seen, &got);
      L->job.quit = !posted;
      if (posted) {
        seen = got;
        take_request(L, got);
      }
      atomic_store_explicit(&L->job_gen, ++gen, memory_order_release);
    } else {
      // Stopping waits for thread 0's quit job, so every thread leaves at the same point.
      while (!spin_until(L, job_handed, gen, &got)) relax();
      gen = got;
    }
    if (L->job.quit) break;
    const uint64_t t0 = w->index == 0 ? now_ns() : 0;
    answer(L, w->index);
    if (w->index == 0) {
      atomic_store_explicit(&L->mb->done_seq, L->job.seq, memory_order_release);
      atomic_fetch_add_explicit(&L->requests, 1, memory_order_relaxed);
      atomic_fetch_add_explicit(&L->busy_ns, now_ns() - t0, memory_order_relaxed);
    }
  }
  return NULL;
}

void he_stop(void* handle);

// Starts `threads` threads answering the mailbox at `mailbox` (mapped pinned memory, zeroed, he_act_offset(H) + 4 x
// HE_MAX_PICKS x I bytes).
// cold: [layers] host addresses of each MoE layer's cold bank, cold_rows rows of row_bytes laid out as rl says (copied);
// physical slot s >= hot_rows is cold row s - hot_rows. flags: HE_PIN pins thread i to the i-th last CPU this process may run on;
// HE_PREFETCH as in answer(). simd: 1 takes the vector path where it applies (the CPU has AVX-512 and it takes the
// shape, simd_shape). Null on failure.
void* he_start(int threads, int H, int I, int layers, int hot_rows, int cold_rows, int64_t row_bytes, const HeRow* rl, const uint64_t* cold,
               void* mailbox, int simd, int flags) {
  const int pin = flags & HE_PIN;
  if (threads < 1 || threads > 1024 || !row_ok(rl, H, I) || !row_fits(rl, H, I, row_bytes) || layers <= 0 || !cold || !mailbox) return NULL;
  Lane* L = calloc(1, sizeof(Lane));
  if (!L) return NULL;
  L->threads = threads; L->H = H; L->I = I; L->layers = layers; L->hot_rows = hot_rows; L->cold_rows = cold_rows; L->flags = flags;
  L->row_bytes = row_bytes;
  L->rl = *rl;
  L->simd = simd && simd_supported() && simd_shape(rl->format, H, I);
  L->xld = vec_ld(rl->format, H);
  L->hld = vec_ld(rl->format, I);
  L->mb = (HeMailbox*)mailbox;
  L->y = (float*)((uint8_t*)mailbox + he_y_offset(H));
  L->act = (float*)((uint8_t*)mailbox + he_act_offset(H));
  L->cold = malloc(sizeof(uint64_t) * layers);
  L->xt = aligned_alloc(64, ((sizeof(float) * HE_MAX_PICKS * L->xld + 63) / 64) * 64);
  L->ht = aligned_alloc(64, ((sizeof(float) * HE_MAX_PICKS * L->hld + 63) / 64) * 64);
  L->th = calloc(threads, sizeof(pthread_t));
  L->workers = calloc(threads, sizeof(Worker));
  if (!L->cold || !L->xt || !L->ht || !L->th || !L->workers) { he_stop(L); return NULL; }
  // (MXFP4's vector order reads the padding past a row's values in lanes whose sums it then leaves alone: zeros.)
  memset(L->xt, 0, sizeof(float) * HE_MAX_PICKS * L->xld);
  memset(L->ht, 0, sizeof(float) * HE_MAX_PICKS * L->hld);
  memcpy(L->cold, cold, sizeof(uint64_t) * layers);
  int cpus[1024], ncpu = 0;
  cpu_set_t allowed;
  if (pin && sched_getaffinity(0, sizeof allowed, &allowed) == 0)
    for (int c = 0; c < CPU_SETSIZE && ncpu < 1024; c++) if (CPU_ISSET(c, &allowed)) cpus[ncpu++] = c;
  for (int i = 0; i < threads; i++) {
    L->workers[i] = (Worker){L, i, pin && ncpu >= threads ? cpus[ncpu - threads + i] : -1};
    if (pthread_create(&L->th[i], NULL, worker_main, &L->workers[i]) != 0) { he_stop(L); return NULL; }
    L->started = i + 1;
  }
  return L;
}

// Whether the lane computes in vectors (1) or the reference loop (0).
int he_lane_simd(void* handle) { return handle ? ((Lane*)handle)->simd : -1; }

// Requests answered and the time the threads spent on them (ns), since the start.
void he_stats(void* handle, uint64_t* out) {
  Lane* L = (Lane*)handle;
  out[0] = atomic_load(&L->requests);
  out[1] = atomic_load(&L->busy_ns);
}

// Stops and joins the threads, then frees the lane (the mailbox and banks are the caller's).
void he_stop(void* handle) {
  Lane* L = (Lane*)handle;
  if (!L) return;
  atomic_store(&L->stop, 1);
  for (int i = 0; i < L->started; i++) pthread_join(L->th[i], NULL);
  free(L->cold);
  free(L->xt);
  free(L->ht);
  free(L->th);
  free(L->workers);
  free(L);
}
