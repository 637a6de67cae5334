// Reading one expert at batch 1, by storage format and placement (issue 14: "the time to read one cold expert
// in place, bf16 vs FP8 vs MXFP4"), llm.c style: a CPU reference, a validation, and the achieved bandwidth.
// An expert is SwiGLU gate|up [2I][H] then down [H][I]; a decode step computes act = silu(x Wg) * (x Wu) and
// y = act Wd for one token. Formats, as the checkpoints store them (src/model/quant.ts is the definition):
//   bf16;  block FP8 (e4m3 bytes, a float32 scale per 128x128 block); MXFP4 (two E2M1 a byte, low nibble
//   first, an E8M0 scale byte per 32 values of a row).
// Placements: device memory (HBM) or mapped pinned host memory read in place over PCIe (the cold bank).
//   nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/expert_read bench/kernels/expert_read.cu && /tmp/expert_read [H I]
// Default geometry: gpt-oss-120b (H = I = 2880) and Qwen3-30B-A3B (H 2048, I 768).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); exit(1); } } while (0)

enum Fmt { BF16 = 0, FP8 = 1, MXFP4 = 2 };
static const char* FMT_NAME[] = {"bf16", "fp8 (128x128 blocks)", "mxfp4 (32-groups)"};

// One matrix [O][K] in a format: its bytes and scales (device-addressable pointers).
struct Mat {
  const uint8_t* w;     // bf16: 2 B a value; fp8: 1 B; mxfp4: 0.5 B
  const void* scales;   // fp8: float [ceil(O/128)][ceil(K/128)]; mxfp4: uint8 [O][K/32]
  int O, K;
};

__device__ __forceinline__ float e2m1(uint32_t c) {
  const float v[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float m = v[c & 7];
  return (c & 8) ? -m : m;
}

// 16 bytes of a row at value index k0 (the lane's load) dotted with x[k0 ..]: bf16 8 values, fp8 16, mxfp4 32.
template <int F>
__device__ __forceinline__ float dot16(uint4 u, const float* x, int k0, const Mat& m, int o) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
  float s = 0.f;
  if (F == BF16) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
      s += __uint_as_float(w[i] << 16) * x[k0 + 2 * i] + __uint_as_float(w[i] & 0xffff0000u) * x[k0 + 2 * i + 1];
    }
  } else if (F == FP8) {
    const int nkb = (m.K + 127) / 128;
    const float sc = reinterpret_cast<const float*>(m.scales)[(o / 128) * nkb + k0 / 128];
#pragma unroll
    for (int i = 0; i < 4; i++) {
#pragma unroll
      for (int b = 0; b < 4; b++) {
        __nv_fp8_e4m3 q;
        q.__x = (w[i] >> (8 * b)) & 0xff;
        s += (float(q) * sc) * x[k0 + 4 * i + b];
      }
    }
  } else {
    const uint8_t e = reinterpret_cast<const uint8_t*>(m.scales)[(size_t)o * (m.K / 32) + k0 / 32];
    const float sc = ldexpf(1.f, (int)e - 127);
#pragma unroll
    for (int i = 0; i < 4; i++) {
#pragma unroll
      for (int b = 0; b < 8; b++) s += (e2m1((w[i] >> (4 * b)) & 15) * sc) * x[k0 + 8 * i + b];
    }
  }
  return s;
}

template <int F> constexpr int VALS16 = F == BF16 ? 8 : (F == FP8 ? 16 : 32); // values per 16 bytes
template <int F> __host__ __device__ constexpr size_t row_bytes(int K) { return F == BF16 ? 2 * (size_t)K : (F == FP8 ? (size_t)K : (size_t)K / 2); }

// y[o] = sum_k x[k] w[o][k]: a warp per output row, each lane 16-byte loads, 4 in flight; x staged in shared memory.
template <int F>
__global__ void gemv(Mat m, const float* __restrict__ x, float* __restrict__ y) {
  extern __shared__ float xs[];
  for (int k = threadIdx.x; k < m.K; k += blockDim.x) xs[k] = x[k];
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int o = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (o >= m.O) return;
  const uint4* row = reinterpret_cast<const uint4*>(m.w + (size_t)o * row_bytes<F>(m.K));
  const int chunks = (int)(row_bytes<F>(m.K) / 16);
  float acc = 0.f;
  for (int c0 = lane; c0 < chunks; c0 += 32 * 4) {
    uint4 u[4];
#pragma unroll
    for (int j = 0; j < 4; j++) u[j] = c0 + 32 * j < chunks ? __ldg(row + c0 + 32 * j) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < 4; j++) if (c0 + 32 * j < chunks) acc += dot16<F>(u[j], xs, (c0 + 32 * j) * VALS16<F>, m, o);
  }
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
  if (lane == 0) y[o] = acc;
}

__global__ void swiglu(const float* gu, float* act, int I) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < I) { const float g = gu[i]; act[i] = g / (1.f + expf(-g)) * gu[I + i]; }
}

// ---- host: random weights in each format, the reference dequantization, the reference products ----
static uint32_t rng_state = 12345;
static uint32_t next_u32() { return rng_state = rng_state * 1664525u + 1013904223u; }
static float frand() { return ((next_u32() >> 8) / 16777216.f) * 2.f - 1.f; }

static float e4m3_value(uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  if ((b & 0x7f) == 0x7f) return NAN;
  const float v = e == 0 ? (m / 8.f) * ldexpf(1.f, -6) : (1 + m / 8.f) * ldexpf(1.f, e - 7);
  return s ? -v : v;
}

struct HostMat { std::vector<uint8_t> w; std::vector<uint8_t> scales; int O, K, F; };

static HostMat make_mat(int F, int O, int K) {
  HostMat h{{}, {}, O, K, F};
  if (F == BF16) {
    h.w.resize((size_t)O * K * 2);
    for (size_t i = 0; i < (size_t)O * K; i++) { const float v = 0.05f * frand(); uint32_t u; memcpy(&u, &v, 4); const uint16_t b = u >> 16; memcpy(&h.w[2 * i], &b, 2); }
  } else if (F == FP8) {
    h.w.resize((size_t)O * K);
    for (auto& b : h.w) { do b = (uint8_t)(next_u32() >> 13); while ((b & 0x7f) == 0x7f); } // no NaN codes
    const int nob = (O + 127) / 128, nkb = (K + 127) / 128;
    h.scales.resize((size_t)nob * nkb * 4);
    for (int i = 0; i < nob * nkb; i++) { const float s = 1e-3f * (1.5f + frand()); memcpy(&h.scales[4 * i], &s, 4); }
  } else {
    h.w.resize((size_t)O * K / 2);
    for (auto& b : h.w) b = (uint8_t)(next_u32() >> 17);
    h.scales.resize((size_t)O * K / 32);
    for (auto& e : h.scales) e = (uint8_t)(120 + (next_u32() >> 28) % 4);
  }
  return h;
}

static double ref_value(const HostMat& h, int o, int k) {
  if (h.F == BF16) { uint16_t b; memcpy(&b, &h.w[2 * ((size_t)o * h.K + k)], 2); const uint32_t u = (uint32_t)b << 16; float v; memcpy(&v, &u, 4); return v; }
  if (h.F == FP8) {
    float s; memcpy(&s, &h.scales[4 * ((o / 128) * ((h.K + 127) / 128) + k / 128)], 4);
    return (double)(float)(e4m3_value(h.w[(size_t)o * h.K + k]) * s);
  }
  const uint8_t byte = h.w[((size_t)o * h.K + k) / 2];
  const uint32_t c = (k & 1) ? byte >> 4 : byte & 15;
  const float vals[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float m = (c & 8) ? -vals[c & 7] : vals[c & 7];
  return m * ldexp(1.0, (int)h.scales[(size_t)o * (h.K / 32) + k / 32] - 127);
}

struct Placed { Mat m; void* w_alloc; void* s_alloc; bool host; };

static Placed place(const HostMat& h, bool host) {
  Placed p{};
  p.host = host;
  auto put = [&](const std::vector<uint8_t>& src, void** alloc) -> const void* {
    if (src.empty()) { *alloc = nullptr; return nullptr; }
    if (host) {
      CK(cudaHostAlloc(alloc, src.size(), cudaHostAllocMapped | cudaHostAllocPortable));
      memcpy(*alloc, src.data(), src.size());
      void* dev = nullptr;
      CK(cudaHostGetDevicePointer(&dev, *alloc, 0));
      return dev;
    }
    CK(cudaMalloc(alloc, src.size()));
    CK(cudaMemcpy(*alloc, src.data(), src.size(), cudaMemcpyHostToDevice));
    return *alloc;
  };
  p.m.w = static_cast<const uint8_t*>(put(h.w, &p.w_alloc));
  p.m.scales = put(h.scales, &p.s_alloc);
  p.m.O = h.O;
  p.m.K = h.K;
  return p;
}

static void release(Placed& p) {
  for (void* a : {p.w_alloc, p.s_alloc}) if (a) { if (p.host) CK(cudaFreeHost(a)); else CK(cudaFree(a)); }
}

template <int F>
static void launch(const Mat& m, const float* x, float* y, cudaStream_t st) {
  const int warps = 8;
  gemv<F><<<(m.O + warps - 1) / warps, 32 * warps, m.K * sizeof(float), st>>>(m, x, y);
}

static void launch_fmt(int F, const Mat& m, const float* x, float* y, cudaStream_t st) {
  if (F == BF16) launch<BF16>(m, x, y, st);
  else if (F == FP8) launch<FP8>(m, x, y, st);
  else launch<MXFP4>(m, x, y, st);
}

int main(int argc, char** argv) {
  std::vector<std::pair<int, int>> geos = {{2880, 2880}, {2048, 768}};
  if (argc == 3) geos = {{atoi(argv[1]), atoi(argv[2])}};
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  printf("| H | I | format | expert bytes | placement | us / expert (gate_up + down) | GB/s | max rel err vs reference |\n|---|---|---|---|---|---|---|---|\n");
  for (const auto& geo : geos) {
    const int H = geo.first, I = geo.second;
    for (int F = 0; F < 3; F++) {
      const HostMat gu = make_mat(F, 2 * I, H), dn = make_mat(F, H, I);
      const size_t bytes = gu.w.size() + gu.scales.size() + dn.w.size() + dn.scales.size();
      std::vector<float> x(H);
      for (auto& v : x) v = frand();
      float *dx, *dgu, *dact, *dy;
      CK(cudaMalloc(&dx, H * 4)); CK(cudaMalloc(&dgu, 2 * I * 4)); CK(cudaMalloc(&dact, I * 4)); CK(cudaMalloc(&dy, H * 4));
      CK(cudaMemcpy(dx, x.data(), H * 4, cudaMemcpyHostToDevice));
      for (int host = 0; host < 2; host++) {
        Placed pg = place(gu, host), pd = place(dn, host);
        auto step = [&]() {
          launch_fmt(F, pg.m, dx, dgu, st);
          swiglu<<<(I + 255) / 256, 256, 0, st>>>(dgu, dact, I);
          launch_fmt(F, pd.m, dact, dy, st);
        };
        step();
        CK(cudaStreamSynchronize(st));
        // Validate against the reference on the CPU (double sums of the formats' float32 values).
        std::vector<float> gotGu(2 * I), gotY(H), act(I);
        CK(cudaMemcpy(gotGu.data(), dgu, 2 * I * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gotY.data(), dy, H * 4, cudaMemcpyDeviceToHost));
        double err = 0, scale = 0;
        for (int o = 0; o < 2 * I; o += 7) {
          double s = 0;
          for (int k = 0; k < H; k++) s += ref_value(gu, o, k) * x[k];
          err = fmax(err, fabs(s - gotGu[o])); scale = fmax(scale, fabs(s));
        }
        for (int i = 0; i < I; i++) { const float g = gotGu[i]; act[i] = g / (1.f + expf(-g)) * gotGu[I + i]; }
        double erry = 0, scaley = 0;
        for (int o = 0; o < H; o += 5) {
          double s = 0;
          for (int k = 0; k < I; k++) s += ref_value(dn, o, k) * act[k];
          erry = fmax(erry, fabs(s - gotY[o])); scaley = fmax(scaley, fabs(s));
        }
        const double rel = fmax(err / fmax(scale, 1e-30), erry / fmax(scaley, 1e-30));
        const int reps = host ? 20 : 200;
        CK(cudaEventRecord(e0, st));
        for (int r = 0; r < reps; r++) step();
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        const double us = 1000.0 * ms / reps;
        printf("| %d | %d | %s | %.2f MB | %s | %.1f | %.1f | %.2e |\n", H, I, FMT_NAME[F], bytes / 1e6, host ? "host, in place (PCIe)" : "HBM", us, bytes / (us * 1e3), rel);
        release(pg);
        release(pd);
      }
      CK(cudaFree(dx)); CK(cudaFree(dgu)); CK(cudaFree(dact)); CK(cudaFree(dy));
    }
  }
  return 0;
}
