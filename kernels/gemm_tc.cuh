// Prefill and batched products on the tensor cores: bf16 mma.sync m16n8k16 with fp32 accumulation. The
// weights are bf16 as stored, or block FP8 or MXFP4 widened to bf16 (exactly) on their way to shared memory; each
// fp32 activation is split into two bf16 parts (hi = bf16(x), lo = bf16(x - hi)) and both are multiplied, so
// the products keep ~16 bits of the activation (relative error ~1e-5 per product instead of bf16's ~4e-3):
// the CPU spec's float32 results within the vs-CPU bar.
// Block tile: 64 rows x 64 weight rows (SWIGLU: 32 gate + the 32 matching up rows) x 32 of K, 4 warps of
// 32 x 32; the next K slice is loaded into registers while the tensor cores work on this one.
// Grid (ceil(O / 64) or ceil(I / 32) for SWIGLU, row tiles); K % 32 == 0.
#pragma once
#include <cuda_bf16.h>
#include "product.cuh"

#define TC_BM TC_TILE_ROWS
#define TC_BN 64
#define TC_BK 32
#define TC_LD (TC_BK + 8) // 80-byte rows: ldmatrix's 8 row reads hit 8 distinct bank groups

__device__ __forceinline__ void ldsm_x4(const void* p, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
}

__device__ __forceinline__ void mma_bf16(float* c, const uint32_t* a, const uint32_t* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two fp32 -> (hi, lo) bf16 pairs packed as 32-bit words.
__device__ __forceinline__ void split2(float a, float b, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat16 ha = __float2bfloat16_rn(a), hb = __float2bfloat16_rn(b);
  const __nv_bfloat16 la = __float2bfloat16_rn(a - __bfloat162float(ha)), lb = __float2bfloat16_rn(b - __bfloat162float(hb));
  hi = (uint32_t)__bfloat16_as_ushort(ha) | ((uint32_t)__bfloat16_as_ushort(hb) << 16);
  lo = (uint32_t)__bfloat16_as_ushort(la) | ((uint32_t)__bfloat16_as_ushort(lb) << 16);
}

// 16 float8_e4m3fn values as 16 bf16 (exact: every e4m3 value is a bf16 value), packed in two uint4.
__device__ __forceinline__ void fp8x16_to_bf16(uint4 v, uint4& lo, uint4& hi) {
  float f[16];
  fp8x8_to_float(make_uint2(v.x, v.y), f);
  fp8x8_to_float(make_uint2(v.z, v.w), f + 8);
  uint32_t w[8];
#pragma unroll
  for (int i = 0; i < 8; i++) {
    w[i] = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(f[2 * i])) | ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(f[2 * i + 1])) << 16);
  }
  lo = make_uint4(w[0], w[1], w[2], w[3]);
  hi = make_uint4(w[4], w[5], w[6], w[7]);
}

// 16 E2M1 values (8 bytes, low nibble first) times their block's scale as 16 bf16 (exact: a power of two
// times an E2M1 value is a bf16 value), packed in two uint4.
__device__ __forceinline__ void fp4x16_to_bf16(uint2 v, float scale, uint4& lo, uint4& hi) {
  float f[32];
  fp4x32_to_float(make_uint4(v.x, v.y, 0, 0), f);
  uint32_t w[8];
#pragma unroll
  for (int i = 0; i < 8; i++) {
    w[i] = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(f[2 * i] * scale)) | ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(f[2 * i + 1] * scale)) << 16);
  }
  lo = make_uint4(w[0], w[1], w[2], w[3]);
  hi = make_uint4(w[4], w[5], w[6], w[7]);
}

// WF_MXFP4: the weights widen to bf16 with their scale applied (exact), straight into the sums.
// WF_FP8: the weights' e4m3 values go through the tensor cores as bf16 (exact), summed over one scale
// block of K (s_cols, a multiple of 32) in `part`, then acc += part x that block's scale of each weight row.
template <int EPI, int WF = WF_BF16>
__device__ __forceinline__ void gemm_tc_body(const GemmProblem& p) {
  __shared__ __align__(16) bf16_t Ahi[TC_BM][TC_LD];
  __shared__ __align__(16) bf16_t Alo[TC_BM][TC_LD];
  __shared__ __align__(16) bf16_t Bs[TC_BN][TC_LD];
  int g = 0, r0;
  if (p.grp_n) {
    const int t = blockIdx.y;
    if (t >= *p.tile_n) return;
    g = p.tile_group[t];
    r0 = p.tile_row0[t];
  } else {
    r0 = blockIdx.y * TC_BM;
  }
  const GroupRef grp = group_of(p, g);
  const int n = grp.n, start = grp.start;
  if (r0 >= n) return;
  const int mrows = min(TC_BM, n - r0);
  const uint8_t* brow = grp.row;
  const uint8_t* W = group_weights(p, brow);
  // Bytes of k values of a weight row.
  auto bytes_of = [](size_t k) -> size_t { return WF == WF_MXFP4 ? k / 2 : (WF == WF_FP8 ? k : 2 * k); };
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 1, wn = warp >> 1;
  const int K = p.K;

  // This thread's share of the loads: A row tid/2, 16 floats at (tid&1)*16; B row tid/2, 16 bf16 likewise.
  const int lrow = tid >> 1, lcol = (tid & 1) * 16;
  const float* xa = nullptr;
  if (lrow < mrows) {
    int ir, orow;
    row_of(p, start, r0 + lrow, &ir, &orow);
    xa = p.x + (size_t)ir * p.ldx + lcol;
  }
  // The weight row of shared-memory B row `sr` (-1 past O).
  auto weight_row = [&](int sr) -> int {
    const int f = EPI == EPI_SWIGLU ? blockIdx.x * 32 + (sr & 31) : blockIdx.x * TC_BN + sr;
    if (f >= p.O) return -1;
    if (EPI == EPI_SWIGLU) return sr >= 32 ? up_row(p, f) : gate_row(p, f);
    return f;
  };
  const uint8_t* wb = nullptr;
  const uint8_t* sb = nullptr; // MXFP4: this thread's B row's scale bytes
  {
    const int wr = weight_row(lrow);
    if (wr >= 0) wb = W + bytes_of((size_t)wr * K + lcol);
    if (WF == WF_MXFP4 && wr >= 0) sb = reinterpret_cast<const uint8_t*>(group_scales(p, brow)) + (size_t)wr * p.s_ld;
  }
  float4 ra[4];
  uint4 rb[2];
  uint32_t rs = 0; // MXFP4: the slice's scale byte
  auto load = [&](int k0) {
#pragma unroll
    for (int i = 0; i < 4; i++) ra[i] = xa ? *reinterpret_cast<const float4*>(xa + k0 + 4 * i) : make_float4(0.f, 0.f, 0.f, 0.f);
    if (WF == WF_MXFP4) {
      const uint2 v = wb ? __ldg(reinterpret_cast<const uint2*>(wb + bytes_of(k0))) : make_uint2(0, 0);
      rb[0] = make_uint4(v.x, v.y, 0, 0);
      rs = sb ? sb[k0 >> 5] : 0u;
    } else {
#pragma unroll
      for (int i = 0; i < (WF == WF_FP8 ? 1 : 2); i++) rb[i] = wb ? __ldg(reinterpret_cast<const uint4*>(wb + bytes_of(k0)) + i) : make_uint4(0, 0, 0, 0);
    }
  };
  // FP8: the scale row of each accumulator column this thread holds (B fragment ni, column 2 (lane % 4) + e).
  const float* srow[4][2];
  if (WF == WF_FP8) {
    const float* S = group_scales(p, brow);
#pragma unroll
    for (int ni = 0; ni < 4; ni++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int np = ni >> 1;
        const int base = EPI == EPI_SWIGLU ? np * 32 + wn * 16 : wn * 32 + np * 16;
        const int wr = weight_row(base + (ni & 1) * 8 + (lane & 3) * 2 + e);
        srow[ni][e] = S + (size_t)(wr < 0 ? 0 : wr / p.s_rows) * p.s_ld;
      }
  }
  float acc[2][4][4], part[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int q = 0; q < 4; q++) acc[i][j][q] = part[i][j][q] = 0.f;
  load(0);
  for (int k0 = 0; k0 < K; k0 += TC_BK) {
    __syncthreads();
    {
      uint32_t hi[8], lo[8];
#pragma unroll
      for (int i = 0; i < 4; i++) {
        split2(ra[i].x, ra[i].y, hi[2 * i], lo[2 * i]);
        split2(ra[i].z, ra[i].w, hi[2 * i + 1], lo[2 * i + 1]);
      }
      uint4* ah = reinterpret_cast<uint4*>(&Ahi[lrow][lcol]);
      uint4* al = reinterpret_cast<uint4*>(&Alo[lrow][lcol]);
      ah[0] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      ah[1] = make_uint4(hi[4], hi[5], hi[6], hi[7]);
      al[0] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
      al[1] = make_uint4(lo[4], lo[5], lo[6], lo[7]);
      uint4* bs = reinterpret_cast<uint4*>(&Bs[lrow][lcol]);
      if (WF == WF_FP8) {
        fp8x16_to_bf16(rb[0], bs[0], bs[1]);
      } else if (WF == WF_MXFP4) {
        fp4x16_to_bf16(make_uint2(rb[0].x, rb[0].y), e8m0_to_float(rs), bs[0], bs[1]);
      } else {
        bs[0] = rb[0];
        bs[1] = rb[1];
      }
    }
    __syncthreads();
    if (k0 + TC_BK < K) load(k0 + TC_BK);
#pragma unroll
    for (int kk = 0; kk < TC_BK; kk += 16) {
      uint32_t ahi[2][4], alo[2][4], b[4][2];
#pragma unroll
      for (int mi = 0; mi < 2; mi++) {
        const int r = wm * 32 + mi * 16 + (lane & 15), c = kk + (lane >> 4) * 8;
        ldsm_x4(&Ahi[r][c], ahi[mi][0], ahi[mi][1], ahi[mi][2], ahi[mi][3]);
        ldsm_x4(&Alo[r][c], alo[mi][0], alo[mi][1], alo[mi][2], alo[mi][3]);
      }
#pragma unroll
      for (int np = 0; np < 2; np++) {
        const int base = EPI == EPI_SWIGLU ? np * 32 + wn * 16 : wn * 32 + np * 16;
        const int r = base + (lane & 7) + ((lane >> 4) << 3), c = kk + ((lane >> 3) & 1) * 8;
        ldsm_x4(&Bs[r][c], b[2 * np][0], b[2 * np][1], b[2 * np + 1][0], b[2 * np + 1][1]);
      }
#pragma unroll
      for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) {
          float* c = WF == WF_FP8 ? part[mi][ni] : acc[mi][ni];
          mma_bf16(c, ahi[mi], b[ni]);
          mma_bf16(c, alo[mi], b[ni]);
        }
    }
    if (WF == WF_FP8 && ((k0 + TC_BK) % p.s_cols == 0 || k0 + TC_BK >= K)) {
      const int kb = k0 / p.s_cols;
#pragma unroll
      for (int ni = 0; ni < 4; ni++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const float sc = srow[ni][e][kb];
#pragma unroll
          for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
              acc[mi][ni][2 * h + e] += part[mi][ni][2 * h + e] * sc;
              part[mi][ni][2 * h + e] = 0.f;
            }
        }
    }
  }
  const bf16_t* bias = group_bias(p, brow);
  // Epilogue: c[0..1] row lane/4, c[2..3] row lane/4 + 8; columns 2 (lane % 4) + {0, 1} of each n8 tile.
#pragma unroll
  for (int mi = 0; mi < 2; mi++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int rl = wm * 32 + mi * 16 + (lane >> 2) + 8 * h;
      if (rl >= mrows) continue;
      int ir, orow;
      row_of(p, start, r0 + rl, &ir, &orow);
      if (EPI == EPI_SWIGLU) {
#pragma unroll
        for (int ni = 0; ni < 2; ni++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const int j = blockIdx.x * 32 + wn * 16 + ni * 8 + (lane & 3) * 2 + e;
            if (j >= p.O) continue;
            const float gb = bias ? bf2f(bias[gate_row(p, j)]) : 0.f, ub = bias ? bf2f(bias[up_row(p, j)]) : 0.f;
            p.y[(size_t)orow * p.ldy + j] = swiglu_act(p, acc[mi][ni][2 * h + e] + gb, acc[mi][ni + 2][2 * h + e] + ub);
          }
      } else {
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const int f = blockIdx.x * TC_BN + wn * 32 + ni * 8 + (lane & 3) * 2 + e;
            if (f < p.O) epi_store(p, EPI, orow, f, acc[mi][ni][2 * h + e], bias);
          }
      }
    }
}
