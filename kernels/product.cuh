// The products' shared pieces: one kernel per op spread over every SM (hidden 2048-7168, experts of 256-2048 rows,
// 4-128 heads; tiny models too, their experts padded to the 32-value K slices). Weights are as stored: bf16, or block FP8 (float8_e4m3fn
// bytes and a float32 scale per block, value = e4m3 x scale); activations and sums are fp32.
// Mirrored by src/backend/cuda/step/kernel-args.ts (GemmProblem's bytes).
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cstddef>
#include "common.cuh"

// One matrix product of the step: y[out row][o] = epi(x[in row] . w[o]) for every row of every group.
// Dense (grp_n == null): one group, rows 0..rows-1, weights `w` [O][K], in row = out row = r.
// Grouped (the experts): group g = the picks of one expert; its rows are pick indices
// p = grp_rows[grp_start[g] + i]; in row = p / x_div (the token for gate/up, the pick for down), out row = p;
// weights: the bank row grp_slot[g] of the expert (the routing resolves it: hot or cold bank) + w_off bytes.
// Block FP8 weights (the kernels' WF_FP8 variants) carry a scale grid: weight row r, value k has the scale
// scales[(r / s_rows) * s_ld + k / s_cols] (the checkpoint's [128, 128] blocks; matrices stacked in one
// product, gate | up or q | k | v, share one grid of s_rows-row scale rows: fp8-grid.ts).
// MXFP4 weights (WF_MXFP4, gpt-oss experts as the hub stores them): a row is K/2 bytes, two E2M1 values a
// byte (low nibble first), and K/32 E8M0 scale bytes (value = e2m1 x 2^(scale - 127)), row r's at
// scales + r * s_ld bytes.
// Biases (gpt-oss): the dense product's bias [O] bf16 at `bias`, a grouped one's in the bank row at b_off
// bytes (b_off < 0: none), indexed by weight row. SWIGLU: gate unit j is weight row j and up row O + j, or
// with gu_interleave rows 2j and 2j + 1 (gpt-oss's gate_up_proj); limit > 0 clamps it (clamped SwiGLU).
struct GemmProblem {
  const float* x;       // [in rows][ldx]
  float* y;             // [out rows][ldy]
  const float* res;     // EPI_ADD: y = res + acc (may alias y); else null
  const void* w;        // dense weights [O][K] (null when grouped)
  const int32_t* grp_n; // device: number of groups (null = dense)
  const int32_t* grp_slot;  // [groups] group -> bank slot of its expert
  const int32_t* grp_start; // [groups + 1]
  const int32_t* grp_rows;  // [picks]
  const float* pick_w;      // EPI_COMBINE: the row's pick weights in router order [rows]; else null
  const uint8_t* hot;
  const uint8_t* cold;
  const int32_t* tile_n;     // TC grouped: number of 64-row tiles (device)
  const int32_t* tile_group; // [tiles] group of each tile
  const int32_t* tile_row0;  // [tiles] first row (within the group) of each tile
  long long row_bytes;       // bytes of one bank row
  long long w_off;           // byte offset of this product's matrix inside a bank row
  int32_t ldx, ldy, O, K, rows, x_div, hot_rows, pad;
  // Dense gemv only, K staged whole: the input rows are RMSNorm'ed (times norm_w) in shared memory first,
  // and block (0, 0) writes the normalized rows to norm_out (the post-attention norm fused into the router).
  const bf16_t* norm_w;
  float* norm_out;
  float eps;
  int32_t pad2;
  // WF_FP8 / WF_MXFP4: the dense matrix's scales (float grid, or E8M0 bytes; grouped: null, they sit in the
  // bank row at s_off bytes).
  const float* scales;
  long long s_off;
  int32_t s_rows, s_cols, s_ld, pad3;
  const bf16_t* bias;
  long long b_off;
  float limit, alpha;
  int32_t gu_interleave, pad4;
  // Gemv: the first weight loads are issued before waiting for the kernel before (PDL), so they stream while it
  // finishes. Dense weights never depend on an earlier kernel; a grouped product's do on its groups, so the host
  // sets it only where those were written before the kernel just before (gemv_body).
  int32_t early;
  // L2_* bits: how the weights stream through L2 (l2_policy).
  int32_t l2;
  // Grouped gemv at a host lane step: {slot, first feature} of the expert the lane split with the GPU (host_exchange.cuh's
  // state; slot -1: none): of its group the product computes the features from there on (the host the ones before).
  const int32_t* part;
};

// layout.ts writes these bytes (GEMM_PROBLEM_BYTES and each field's offset): keep the two in step.
static_assert(sizeof(GemmProblem) == 264 && offsetof(GemmProblem, early) == 248 && offsetof(GemmProblem, l2) == 252 && offsetof(GemmProblem, part) == 256,
              "GemmProblem: layout.ts GEMM_PROBLEM_BYTES, encodeGemm (early loads, L2)");
static_assert(offsetof(GemmProblem, row_bytes) == 112 && offsetof(GemmProblem, ldx) == 128 && offsetof(GemmProblem, norm_w) == 160, "GemmProblem: layout.ts encodeGemm");
static_assert(offsetof(GemmProblem, scales) == 184 && offsetof(GemmProblem, s_rows) == 200, "GemmProblem: layout.ts encodeGemm (scales)");
static_assert(offsetof(GemmProblem, bias) == 216 && offsetof(GemmProblem, b_off) == 224 && offsetof(GemmProblem, limit) == 232 &&
              offsetof(GemmProblem, gu_interleave) == 240, "GemmProblem: layout.ts encodeGemm (biases, clamped SwiGLU)");

// EPI_COMBINE: the expert down product of a batch-1 step adds its picks to the residual itself: warp w of a block
// is pick w (rows = the picks, at most GEMV_WARPS; grp_slot = the routing's pick_slot), and the block's R features
// of every pick are combined in router order, y = res + (0 + w_0 s_0 + w_1 s_1 + ...), as op_residual_norm's mode 1
// combines the picks' partial rows (the same sums, so the same bits).
enum { EPI_STORE = 0, EPI_ADD = 1, EPI_SWIGLU = 2, EPI_COMBINE = 3 };
// How the weights are stored: bf16 values, or float8_e4m3fn bytes with block scales.
enum { WF_BF16 = 0, WF_FP8 = 1, WF_MXFP4 = 2 };

// Programmatic dependent launch: every op kernel is launched with programmatic stream serialization, so it
// may start while the kernel before it finishes. It waits here for that kernel (and so, transitively, for every
// earlier one) to complete and flush before reading or writing anything, then lets the next one launch.
// Without PDL at launch both are no-ops.
// (A dense gemv issues its first weight loads before this: gemv_body.)
__device__ __forceinline__ void pdl_enter() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// How a decode product's weights go through L2 (GemmProblem.l2): L2_EVICT_FIRST: its loads are marked evict-first
// (each weight byte is read once a step), so what the small kernels read and write (activations, the KV cache, the
// routing's arrays) outlives the weight stream instead of coming back from DRAM each layer.
enum { L2_EVICT_FIRST = 1 };

// A cache policy for l2-marked loads: evict-first when asked, else normal.
__device__ __forceinline__ uint64_t l2_policy(bool evict_first) {
  uint64_t pol;
  if (evict_first) asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  else asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}

// 16 bytes of weights through the read-only path, not kept in L1, under an L2 policy (l2_policy).
__device__ __forceinline__ uint4 ld_weights(const void* p, uint64_t pol) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(pol));
  return v;
}

// Rows of one tensor-core tile (the routing builds the grouped tiles of this size).
#define TC_TILE_ROWS 64

// Group g of a product: its rows (count and first) and its expert's bank row (hot or cold; null when dense). The
// count, the group's range and its slot are loaded together, one round trip after the routing's kernel (a g past
// the count reads a stale entry of arrays sized for every expert, and is dropped).
// A group's rows (n from start), its bank row, and its first feature to compute (GemmProblem.part; else 0).
struct GroupRef { int n, start; const uint8_t* row; int from; };
// The bank row of a slot: hot rows first, then the cold bank's.
__device__ __forceinline__ const uint8_t* bank_row(const GemmProblem& p, int slot) {
  return slot < p.hot_rows ? p.hot + (size_t)slot * p.row_bytes : p.cold + (size_t)(slot - p.hot_rows) * p.row_bytes;
}
__device__ __forceinline__ GroupRef group_of(const GemmProblem& p, int g) {
  if (!p.grp_n) return {p.rows, 0, nullptr, 0};
  const int count = *p.grp_n, s0 = p.grp_start[g], s1 = p.grp_start[g + 1], slot = p.grp_slot[g];
  if (g >= count) return {0, 0, nullptr, 0};
  return {s1 - s0, s0, bank_row(p, slot), p.part && slot == p.part[0] ? p.part[1] : 0};
}

// The weights of group g (grouped) or the dense matrix, as bytes.
__device__ __forceinline__ const uint8_t* group_weights(const GemmProblem& p, const uint8_t* row) {
  return row ? row + p.w_off : static_cast<const uint8_t*>(p.w);
}

// The scales of group g (grouped) or the dense matrix: FP8's float grid, or MXFP4's E8M0 bytes (cast back).
__device__ __forceinline__ const float* group_scales(const GemmProblem& p, const uint8_t* row) {
  return row ? reinterpret_cast<const float*>(row + p.s_off) : p.scales;
}

// The bias of group g (grouped) or the dense product; null when none.
__device__ __forceinline__ const bf16_t* group_bias(const GemmProblem& p, const uint8_t* row) {
  if (row) return p.b_off >= 0 ? reinterpret_cast<const bf16_t*>(row + p.b_off) : nullptr;
  return p.bias;
}

// SWIGLU's weight rows of gate unit j and up unit j.
__device__ __forceinline__ int gate_row(const GemmProblem& p, int j) { return p.gu_interleave ? 2 * j : j; }
__device__ __forceinline__ int up_row(const GemmProblem& p, int j) { return p.gu_interleave ? 2 * j + 1 : p.O + j; }

// The activation of one unit from its gate and up sums (biases added): silu(gate) x up, or gpt-oss's clamped
// SwiGLU (gate clamped above at limit, up to [-limit, limit], (up + 1) x gate x sigmoid(alpha gate)). Both are
// exact_math.cuh's, so the host expert lane computes the same bits.
__device__ __forceinline__ float swiglu_act(const GemmProblem& p, float g, float u) {
  if (p.limit > 0.f) return exact_swiglu_clamped(g, u, p.limit, p.alpha);
  return exact_swiglu(g, u);
}

// An E8M0 scale byte as a float: 2^(s - 127) (s = 0 gives 2^-127, a subnormal; 255, NaN, is refused at load).
__device__ __forceinline__ float e8m0_to_float(uint32_t s) { return s ? __uint_as_float(s << 23) : 5.877471754e-39f; }

// 32 E2M1 values (16 bytes, low nibble first) as floats, exact: each nibble's sign, exponent and mantissa
// bits placed in an fp16 (s << 15 | em << 9) are the value x 2^-14, two nibbles (k, k + 4 of a word) at once.
__device__ __forceinline__ void fp4x32_to_float(uint4 v, float* f) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
      const uint32_t t = w[i] >> (4 * k);
      const uint32_t h = ((t & 0x00080008u) << 12) | ((t & 0x00070007u) << 9);
      const float2 x = __half22float2(*reinterpret_cast<const __half2*>(&h));
      f[8 * i + k] = x.x * 16384.f;
      f[8 * i + 4 + k] = x.y * 16384.f;
    }
  }
}

// Word i (values 8i..8i+7) of a 16-byte MXFP4 load.
__device__ __forceinline__ uint32_t word_of(uint4 v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// 8 E2M1 values (a word, low nibble first) times their E8M0 scale `s`: value x 2^(s - 127), exact (a power
// of two times an E2M1 value; the fp16 values of fp4x32_to_float's trick are value x 2^-14, scaled by
// 2^(s - 113) in one step while that is a float, s <= 240, else in two).
__device__ __forceinline__ void fp4x8_scaled(uint32_t w, uint32_t s, float* f) {
  const bool one = s <= 240u;
  const float sc = __uint_as_float((one ? s + 14u : s) << 23), pre = one ? 1.f : 16384.f;
#pragma unroll
  for (int k = 0; k < 4; k++) {
    const uint32_t t = w >> (4 * k);
    const uint32_t h = ((t & 0x00080008u) << 12) | ((t & 0x00070007u) << 9);
    const float2 x = __half22float2(*reinterpret_cast<const __half2*>(&h));
    if (one) {
      f[k] = x.x * sc;
      f[4 + k] = x.y * sc;
    } else {
      f[k] = (x.x * pre) * sc;
      f[4 + k] = (x.y * pre) * sc;
    }
  }
}

// Eight float8_e4m3fn values (8 bytes, lowest first) widened to float (exact).
__device__ __forceinline__ void fp8x8_to_float(uint2 v, float* f) {
  const uint32_t w[2] = {v.x, v.y};
#pragma unroll
  for (int i = 0; i < 2; i++) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w[i] >> (16 * h)), __NV_E4M3);
      const float2 t = __half22float2(*reinterpret_cast<const __half2*>(&r));
      f[4 * i + 2 * h] = t.x;
      f[4 * i + 2 * h + 1] = t.y;
    }
  }
}

// The i-th row of a group (from its first, `start`): (in row, out row).
__device__ __forceinline__ void row_of(const GemmProblem& p, int start, int i, int* in_row, int* out_row) {
  if (!p.grp_n) { *in_row = i; *out_row = i; return; }
  const int pk = p.grp_rows[start + i];
  *in_row = pk / p.x_div;
  *out_row = pk;
}

// The epilogue of one output (o, acc) of one row; SWIGLU gets the gate and up sums of output j.
// `bias`: the product's (group_bias), null when none.
__device__ __forceinline__ void epi_store(const GemmProblem& p, int epi, int out_row, int o, float acc, const bf16_t* bias = nullptr) {
  if (bias) acc += bf2f(bias[o]);
  float* y = p.y + (size_t)out_row * p.ldy + o;
  if (epi == EPI_ADD) *y = p.res[(size_t)out_row * p.ldy + o] + acc;
  else *y = acc;
}
