// Decode products (at most B rows per group, B <= 16): bandwidth-bound, so every weight byte is read once per
// step and the whole chip streams. Grid (ceil(O / (8 R)), groups); a block of 8 warps, each warp R output
// features (SWIGLU: R (gate, up) pairs) for all of the group's rows. A lane reads 16 bytes of a weight row
// per pass (bf16: 8 values, block FP8: 16, MXFP4: 32 and one scale; a warp: 512 consecutive bytes), several passes in flight; the
// group's input rows sit in shared memory (K in chunks that fit), read as float4. Sums are fp32 in a fixed
// order (lane partials, then a butterfly): the same bits whatever the placement of the rows in the banks. bf16:
// lane l takes the chunks of 8 values c = l, l + 32, ... in turn, one fused multiply-add a value (fma8_bf16); block
// FP8: the chunks of 16 values (one load) c = l, l + 32, ..., each summed by a chain of fused multiply-adds from +0
// and added in times its block's scale (dot_load_fp8); MXFP4: the chunks of 32 values (one load and its scale byte)
// c = l, l + 32, ..., each word of 8 values scaled (exact), summed by a product and a chain of fused multiply-adds
// and added in (dot_word_mxfp4). All three are the orders the host expert lane keeps (native/host_experts.c,
// fp8_dot.h, mxfp4_dot.h), so a cold expert it computes has these bits too.
#pragma once
#include "product.cuh"

#define GEMV_WARPS 8

// Blocks a SM a gemv entry is compiled for (its launch bounds: step.cu), and the 16-byte loads a lane keeps in flight
// (gemv_body's LOADS). bf16 at batch 1: 4 loads a lane at 4 blocks a SM (<= 64 registers) streams better than 8 at 2
// (more warps to hide each round trip, the expert products in one wave); batch 4: 3 blocks a SM (docs/results.md).
#define GEMV_MIN_BLOCKS(B, WF) ((WF) != WF_BF16 ? 1 : (B) == 1 ? 4 : (B) == 4 ? 3 : 1)
template <int B, int WF>
__host__ __device__ constexpr int gemv_loads() {
  return (B == 1 && WF == WF_BF16 ? 4 : (B <= 2 ? 8 : (B <= 4 ? 4 : 2))) / (WF == WF_MXFP4 && B <= 4 ? 2 : 1);
}

// RMSNorm of the n staged rows (K == KS: whole rows in shared memory), in place, in the order op_residual_norm's
// norm_in_gemv_order keeps (so a batch-1 step's input norm has the same bits fused into q | k | v or not); block (0, 0)
// also writes them out (unless norm_out is null). Ends with a barrier.
template <int B>
__device__ __forceinline__ void norm_staged(const GemmProblem& p, float* xs, int K, int n, const int* in_rows) {
  __shared__ float red[GEMV_WARPS][B];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int b = 0; b < B; b++) {
    float ss = 0.f;
    if (b < n) for (int k = threadIdx.x; k < K; k += blockDim.x) ss = __fmaf_rn(xs[b * K + k], xs[b * K + k], ss);
    ss = warp_sum(ss);
    if (lane == 0) red[warp][b] = ss;
  }
  __syncthreads();
  const bool out = p.norm_out && blockIdx.x == 0 && blockIdx.y == 0;
#pragma unroll
  for (int b = 0; b < B; b++) {
    if (b >= n) continue;
    float ss = 0.f;
    for (int w = 0; w < GEMV_WARPS; w++) ss += red[w][b];
    const float inv = 1.0f / sqrtf(ss / (float)K + p.eps);
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
      const float v = bf2f(p.norm_w[k]) * (xs[b * K + k] * inv);
      xs[b * K + k] = v;
      if (out) p.norm_out[(size_t)in_rows[b] * K + k] = v;
    }
  }
  __syncthreads();
}

// A lane's dot of one 16-byte FP8 weight load, its 16 values widened (exact) into w, with the staged inputs at x:
// d = fma(w_e, x_e, d) from d = +0 for e = 0 .. 15, in value order; the caller adds it in times the block's scale,
// acc = fma(sc, d, acc). Every operation is an explicit intrinsic (nvcc neither contracts nor reorders them), so the
// host expert lane (native/host_experts.c, fp8_dot_ref) repeats the order exactly. 17 fused operations a 16-value load
// a row: the gemv stays bound by the weights' bytes. (The CPU spec scales each value first, float32(e4m3 x scale), and
// sums in its own order: the GPU meets it within a tolerance.) bf16 loads go through fma8_bf16; MXFP4 has its own loop.
__device__ __forceinline__ float dot_load_fp8(const float* __restrict__ x, const float* w) {
  float a = 0.f;
#pragma unroll
  for (int q = 0; q < 4; q++) {
    const float4 xv = *reinterpret_cast<const float4*>(x + 4 * q);
    a = __fmaf_rn(w[4 * q], xv.x, a);
    a = __fmaf_rn(w[4 * q + 1], xv.y, a);
    a = __fmaf_rn(w[4 * q + 2], xv.z, a);
    a = __fmaf_rn(w[4 * q + 3], xv.w, a);
  }
  return a;
}

// A lane's dot of one word (8 values) of an MXFP4 load, widened and scaled (exact) into w, with the staged inputs x0,
// x1: d = w_0 x_0, then d = fma(w_e, x_e, d) for e = 1 .. 7, in value order; the caller adds it into the lane's sum,
// acc = acc + d. Written out in intrinsics as dot_load_fp8 is, so the host expert lane (native/mxfp4_dot.h) repeats it.
__device__ __forceinline__ float dot_word_mxfp4(const float* w, float4 x0, float4 x1) {
  float d = __fmul_rn(w[0], x0.x);
  d = __fmaf_rn(w[1], x0.y, d);
  d = __fmaf_rn(w[2], x0.z, d);
  d = __fmaf_rn(w[3], x0.w, d);
  d = __fmaf_rn(w[4], x1.x, d);
  d = __fmaf_rn(w[5], x1.y, d);
  d = __fmaf_rn(w[6], x1.z, d);
  return __fmaf_rn(w[7], x1.w, d);
}

// EVEN (the _even entries): the O features split evenly over the grid's warps, this warp's from even_feature(p, warp, 0)
// to even_feature(p, warp, 1) (at most R: the host sizes the grid), so a grid of any width covers them; else R
// features from (8x + w) R (EPI_COMBINE: R of every pick a block), those below O.
__device__ __forceinline__ int even_feature(const GemmProblem& p, int warp, int end) {
  const long long n = (long long)gridDim.x * GEMV_WARPS, w = (long long)blockIdx.x * GEMV_WARPS + warp + end;
  return (int)(w * p.O / n);
}

// Input values a warp of an EPI_COMBINE block stages at a time (its pick's row of the K chunk; 8 picks: 64 KiB).
#define COMBINE_KC 2048

template <int B, int R, int EPI, int WF = WF_BF16, bool EVEN = false>
__device__ __forceinline__ void gemv_body(const GemmProblem& p) {
  extern __shared__ __align__(16) float xs[]; // [B][KC]; EPI_COMBINE: [picks][COMBINE_KC], a warp's own row
  constexpr bool COMB = EPI == EPI_COMBINE;
  static_assert(!COMB || B == 1, "EPI_COMBINE: batch 1");
  // With p.early the first weight loads are issued before the wait for the kernel before: dense weights, or a
  // grouped product whose groups an earlier kernel than that one wrote (the expert down product: the routing ran
  // before gate/up), so its group table and bank rows are read early too. Anything else waits first.
  const bool early = p.early != 0;
  if (!early) pdl_enter();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const GroupRef grp = COMB ? GroupRef{1, warp, bank_row(p, p.grp_slot[warp]), 0} : group_of(p, blockIdx.y);
  const int n = grp.n, start = grp.start;
  if (n <= 0) return;
  // An expert split with the host lane: blocks whose features all lie below its split have nothing to compute.
  if (grp.from > 0 && (EVEN ? even_feature(p, GEMV_WARPS - 1, 1) : (blockIdx.x + 1) * GEMV_WARPS * R) <= grp.from) return;
  const uint64_t pol = l2_policy(p.l2 & L2_EVICT_FIRST);
  const int K = p.K;
  constexpr int VPL = WF == WF_MXFP4 ? 32 : (WF == WF_FP8 ? 16 : 8); // values a 16-byte load
  auto bytes_of = [](int k) -> size_t { return (size_t)k * 16 / VPL; }; // bytes of k values
  // Rows of weights this warp reads: STORE/ADD: features o0 + r; SWIGLU: gate rows j0 + r and up rows O + j0 + r.
  constexpr int NW = EPI == EPI_SWIGLU ? 2 * R : R;
  const int f0 = EVEN ? even_feature(p, warp, 0) : (COMB ? blockIdx.x : blockIdx.x * GEMV_WARPS + warp) * R;
  const int f1 = EVEN ? even_feature(p, warp, 1) : 0; // EVEN: the end of this warp's features
  const uint8_t* brow = grp.row;
  const uint8_t* W = group_weights(p, brow);
  const uint8_t* S = WF != WF_BF16 ? reinterpret_cast<const uint8_t*>(group_scales(p, brow)) : nullptr;
  const bf16_t* bias = group_bias(p, brow);
  const uint8_t* wrow[NW];
  const uint8_t* srow[NW]; // FP8: float scales of the row's scale row; MXFP4: the row's scale bytes
  int wrs[NW];
  bool live[NW];
#pragma unroll
  for (int r = 0; r < NW; r++) {
    const int f = f0 + (EPI == EPI_SWIGLU ? (r % R) : r);
    live[r] = (EVEN ? f < f1 : f < p.O) && f >= grp.from;
    const int wr = live[r] ? (EPI == EPI_SWIGLU ? (r < R ? gate_row(p, f) : up_row(p, f)) : f) : 0;
    wrs[r] = wr;
    wrow[r] = W + (size_t)wr * bytes_of(K);
    srow[r] = WF == WF_FP8 ? S + 4 * (size_t)(wr / p.s_rows) * p.s_ld : (WF == WF_MXFP4 ? S + (size_t)wr * p.s_ld : nullptr);
  }
  int in_rows[B];
#pragma unroll
  for (int b = 0; b < B; b++) {
    int ir = 0, orow = 0;
    if (COMB) ir = start; // the pick's activation row (batch 1: pick index = row)
    else if (b < n) row_of(p, start, b, &ir, &orow);
    in_rows[b] = ir;
  }
  float acc[NW][B];
#pragma unroll
  for (int r = 0; r < NW; r++)
#pragma unroll
    for (int b = 0; b < B; b++) acc[r][b] = 0.f;
  // K chunk held in shared memory: B * KS floats <= 64 KiB, KC a multiple of 256.
  constexpr int KC = COMB ? COMBINE_KC : (16384 / B) < 256 ? 256 : (16384 / B);
  // Lane l keeps the chunks c = l mod 32 across K chunks when KC holds whole rounds of 32 loads (32 x VPL values: bf16
  // 256, FP8 512, MXFP4 1,024): then a row's sums have one order at every B, the host lane's. KC = 16384 / B is a
  // multiple of 1,024 for every B <= 16 the gemv is built for, COMBINE_KC 2,048.
  static_assert(KC % 256 == 0, "K chunks of whole 256-value groups");
  static_assert(KC % (32 * VPL) == 0, "K chunks of whole rounds of the warp's loads (the host lane's order)");
  const int KS = min(KC, K); // row stride in shared memory (K % 8 == 0)
  float* const xw = COMB ? xs + warp * KS : xs; // the rows this warp reads
  // U passes of 16 bytes per weight row a group, double-buffered: the next group's loads are in flight while
  // this one's products run, and a chunk's first group is issued before its inputs are staged.
  // MXFP4 carries 4x bf16's values a load: half the loads in flight keep the registers (and occupancy) up.
  constexpr int LOADS = gemv_loads<B, WF>();
  constexpr int U = LOADS / NW > 0 ? LOADS / NW : 1;
  uint4 u[U][NW];
  auto load = [&](uint4 (&dst)[U][NW], int k0, int c0, int chunks) {
#pragma unroll
    for (int j = 0; j < U; j++)
#pragma unroll
      for (int r = 0; r < NW; r++) {
        const int c = c0 + 32 * j;
        dst[j][r] = (live[r] && c < chunks) ? ld_weights(reinterpret_cast<const uint4*>(wrow[r] + bytes_of(k0)) + c, pol) : make_uint4(0, 0, 0, 0);
      }
  };
  for (int k0 = 0; k0 < K; k0 += KC) {
    const int kc = min(KC, K - k0);
    const int chunks = kc / VPL;
    __syncthreads();
    load(u, k0, lane, chunks);
    if (early && k0 == 0) pdl_enter();
    if (COMB) {
      const float4* src = reinterpret_cast<const float4*>(p.x + (size_t)in_rows[0] * p.ldx + k0);
      for (int c = lane; c < (kc >> 2); c += 32) reinterpret_cast<float4*>(xw)[c] = src[c];
    } else {
#pragma unroll
      for (int b = 0; b < B; b++) {
        if (b < n) {
          const float4* src = reinterpret_cast<const float4*>(p.x + (size_t)in_rows[b] * p.ldx + k0);
          for (int c = threadIdx.x; c < (kc >> 2); c += blockDim.x) reinterpret_cast<float4*>(xs + b * KS)[c] = src[c];
        }
      }
    }
    __syncthreads();
    if (!COMB && p.norm_w) norm_staged<B>(p, xs, KS, n, in_rows);
    for (int c0 = lane; c0 < chunks; c0 += 32 * U) {
      uint4 nx[U][NW];
      load(nx, k0, c0 + 32 * U, chunks);
#pragma unroll
      for (int j = 0; j < U; j++) {
        const int c = c0 + 32 * j;
        if (WF == WF_MXFP4 && c < chunks) {
          // A word (8 values) of every row at a time, widened and scaled once (exact: a power of two times an
          // E2M1 value), each input row's 8 values read from shared memory once for all NW rows.
          uint32_t sc[NW];
#pragma unroll
          for (int r = 0; r < NW; r++) sc[r] = srow[r][(k0 >> 5) + c];
#pragma unroll
          for (int i = 0; i < 4; i++) {
            float w[NW][8];
#pragma unroll
            for (int r = 0; r < NW; r++) fp4x8_scaled(word_of(u[j][r], i), sc[r], w[r]);
#pragma unroll
            for (int b = 0; b < B; b++) {
              if (b < n) {
                const float4 x0 = *reinterpret_cast<const float4*>(xw + b * KS + VPL * c + 8 * i);
                const float4 x1 = *reinterpret_cast<const float4*>(xw + b * KS + VPL * c + 8 * i + 4);
#pragma unroll
                for (int r = 0; r < NW; r++) acc[r][b] = __fadd_rn(acc[r][b], dot_word_mxfp4(w[r], x0, x1));
              }
            }
          }
        } else if (WF != WF_MXFP4 && c < chunks) {
#pragma unroll
          for (int r = 0; r < NW; r++) {
            float w[WF == WF_BF16 ? 1 : VPL];
            float sc = 1.f;
            if (WF == WF_FP8) {
              sc = reinterpret_cast<const float*>(srow[r])[(k0 + VPL * c) / p.s_cols];
              fp8x8_to_float(make_uint2(u[j][r].x, u[j][r].y), w);
              fp8x8_to_float(make_uint2(u[j][r].z, u[j][r].w), w + 8);
            }
#pragma unroll
            for (int b = 0; b < B; b++) {
              if (b < n) {
                if (WF == WF_BF16) acc[r][b] = fma8_bf16(u[j][r], xw + b * KS + VPL * c, acc[r][b]);
                else acc[r][b] = __fmaf_rn(sc, dot_load_fp8(xw + b * KS + VPL * c, w), acc[r][b]);
              }
            }
          }
        }
      }
#pragma unroll
      for (int j = 0; j < U; j++)
#pragma unroll
        for (int r = 0; r < NW; r++) u[j][r] = nx[j][r];
    }
  }
#pragma unroll
  for (int r = 0; r < NW; r++)
#pragma unroll
    for (int b = 0; b < B; b++) acc[r][b] = warp_sum(acc[r][b]);
  if constexpr (COMB) {
    // Each pick's sums (its bias added, as epi_store adds it to a partial row), then the block's R features combined
    // in router order onto the residual.
    __shared__ float part[GEMV_WARPS][R];
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < R; r++) part[warp][r] = bias && f0 + r < p.O ? acc[r][0] + bf2f(bias[f0 + r]) : acc[r][0];
    }
    __syncthreads();
    if (threadIdx.x < R && f0 + (int)threadIdx.x < p.O) {
      const int f = f0 + threadIdx.x;
      float s = 0.f;
      for (int k = 0; k < p.rows; k++) s = __fmaf_rn(p.pick_w[k], part[k][threadIdx.x], s); // as op_residual_norm's mode 1
      p.y[f] = p.res[f] + s;
    }
  } else {
    // Lane b writes row b's outputs (every lane holds every sum after the butterfly).
#pragma unroll
    for (int b = 0; b < B; b++) {
      if (b < n && lane == b) {
        int ir, orow;
        row_of(p, start, b, &ir, &orow);
#pragma unroll
        for (int r = 0; r < R; r++) {
          const int f = f0 + r;
          if ((EVEN ? f >= f1 : f >= p.O) || f < grp.from) continue;
          if (EPI == EPI_SWIGLU) {
            const float gb = bias ? bf2f(bias[wrs[r]]) : 0.f, ub = bias ? bf2f(bias[wrs[R + r]]) : 0.f;
            p.y[(size_t)orow * p.ldy + f] = swiglu_act(p, acc[r][b] + gb, acc[R + r][b] + ub);
          } else {
            epi_store(p, EPI, orow, f, acc[r][b], bias);
          }
        }
      }
    }
  }
}

// Shared memory of a launch: 4 * B * min(max(16384 / B, 256), K) bytes; EPI_COMBINE 4 * picks * min(COMBINE_KC, K)
// (gemvSmemBytes in src/backend/cuda/step/kernel-args.ts).
