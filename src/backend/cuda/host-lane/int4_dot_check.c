// The INT4 dots of int4_dot.h as a library of their own, for its tests (host-lane/lane-int4.test.ts) until the lane's
// row layout takes INT4 experts: host_experts.c (its helpers, butterflies and x layout) with int4_dot.h after it, and
// one entry that lays n input vectors out for the chosen path and returns each dot.
#include "host_experts.c"
#include "int4_dot.h"

// out[i] = the dot of row w (its scales srow, zero points zrow or NULL, bf16 scales or fp16, groups of G) with
// x + i K, by the reference loop (simd 0) or the vector path (simd 1: -1 when this CPU or G has none).
int he_int4_dots(const uint8_t* w, const uint16_t* srow, const uint8_t* zrow, int bf16, int G, const float* x, int n, int K, float* out, int simd) {
  if (K % 32 || G % 8 || K % G || n < 1) return -2;
  if (!simd) {
    for (int i = 0; i < n; i++) out[i] = int4_dot_ref(w, srow, zrow, bf16, G, x + (size_t)i * K, K);
    return 0;
  }
  if (!simd_supported() || !int4_simd_group(G)) return -1;
  const size_t ld = mxfp4_ld(K);
  float* xt = calloc((size_t)n * ld, sizeof(float));
  const float** rows = malloc((size_t)n * sizeof(float*));
  if (!xt || !rows) return -3;
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < K; k++) xt[(size_t)i * ld + lane_major32((size_t)k)] = x[(size_t)i * K + k];
    rows[i] = xt + (size_t)i * ld;
  }
  int4_dot_avx512(w, srow, zrow, bf16, G, rows, n, K, out, NULL);
  free(rows);
  free(xt);
  return 0;
}
