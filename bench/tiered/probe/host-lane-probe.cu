// Hardware probe for a host-compute lane (issue 12): how fast the host CPU computes bf16 experts read from pinned
// memory (the cold bank's memory), how long a GPU <-> host flag round trip takes through mapped memory, and how the
// host's reads and the GPU's in-place reads of pinned memory share the host's DRAM. Not product code: it measures the
// machine to decide the lane's shape.
//   nvcc -O3 -arch=sm_90 -Xcompiler -O3,-march=native,-pthread host-lane-probe.cu -o probe && ./probe
#include <cuda_runtime.h>
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <atomic>
#include <math.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("cuda %s at %d\n", cudaGetErrorString(e), __LINE__); exit(1); } } while (0)
static const int H = 2048, I = 768;
static const size_t EXPERT = (size_t)3 * H * I * 2;
static double now() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

static inline float dot_bf16(const uint16_t* w, const float* x, int n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 32) {
    __m512i u0 = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(w + i)));
    __m512i u1 = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(w + i + 16)));
    a0 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(u0, 16)), _mm512_loadu_ps(x + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(u1, 16)), _mm512_loadu_ps(x + i + 16), a1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

struct Job { std::atomic<int> seq{0}; std::atomic<int> arrive{0}; std::atomic<int> done{0}; int picks; const uint16_t* rows[8]; };
static Job job;
static int NT;
static float X[H] __attribute__((aligned(64)));
static float Hbuf[8][I] __attribute__((aligned(64)));
static float Y[8][H] __attribute__((aligned(64)));
static std::atomic<int> bar_count{0}, bar_gen{0};
static void barrier() {
  int g = bar_gen.load(std::memory_order_acquire);
  if (bar_count.fetch_add(1) == NT - 1) { bar_count.store(0); bar_gen.fetch_add(1, std::memory_order_release); }
  else while (bar_gen.load(std::memory_order_acquire) == g) _mm_pause();
}
static void* worker(void* arg) {
  int t = (int)(intptr_t)arg;
  cpu_set_t s; CPU_ZERO(&s); CPU_SET(t, &s); pthread_setaffinity_np(pthread_self(), sizeof s, &s);
  int seen = 0;
  for (;;) {
    int q;
    while ((q = job.seq.load(std::memory_order_acquire)) == seen) _mm_pause();
    if (q < 0) return nullptr;
    seen = q;
    int P = job.picks;
    // gate|up rows: P * 2I rows over NT threads
    int n1 = P * I; // units: (pick, j) computing gate and up of unit j
    for (int u = t; u < n1; u += NT) {
      int p = u / I, j = u % I;
      const uint16_t* W = job.rows[p];
      float g = dot_bf16(W + (size_t)j * H, X, H), up = dot_bf16(W + (size_t)(I + j) * H, X, H);
      Hbuf[p][j] = g / (1.f + expf(-g)) * up;
    }
    barrier();
    int n2 = P * H;
    for (int u = t; u < n2; u += NT) {
      int p = u / H, f = u % H;
      Y[p][f] = dot_bf16(job.rows[p] + (size_t)2 * I * H + (size_t)f * I, Hbuf[p], I);
    }
    barrier();
    if (t == 0) job.done.store(q, std::memory_order_release);
  }
}

__global__ void stream_read(const uint4* p, size_t n, unsigned long long* sink, int reps) {
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (int r = 0; r < reps; r++)
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
      uint4 v = p[i]; acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
    }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x12345) *sink = 1;
}
__global__ void pingpong(volatile int* out, volatile int* in, int n, long long* cycles) {
  long long t0 = clock64();
  for (int i = 1; i <= n; i++) {
    *out = i; __threadfence_system();
    while (*in != i) {}
  }
  *cycles = clock64() - t0;
}

int main(int argc, char** argv) {
  int nexp = 128; // 1.2 GB cycled: well past the LLC
  uint16_t* bank; CK(cudaHostAlloc(&bank, EXPERT * nexp, cudaHostAllocMapped));
  for (size_t i = 0; i < EXPERT * nexp / 2; i++) bank[i] = (uint16_t)(0x3c00 + (i * 2654435761u >> 20) % 512) ^ ((i & 1) << 15);
  for (int i = 0; i < H; i++) X[i] = sinf(i);
  system("nproc; lscpu | grep -E 'Model name|Socket|Thread|Core|NUMA node|L3' ");
  printf("\n== host lane: expert FFN (gate|up, silu, down) of P picks, bf16 rows from pinned memory, AVX-512 fp32 ==\n");
  printf("threads picks us/job GB/s\n");
  int tcounts[] = {4, 8, 12, 14, 16};
  pthread_t th[64];
  int seq = 0;
  for (int ti = 0; ti < 5; ti++) {
    NT = tcounts[ti];
    job.seq.store(seq);
    for (int t = 0; t < NT; t++) pthread_create(&th[t], nullptr, worker, (void*)(intptr_t)t);
    for (int P = 1; P <= 3; P++) {
      int e = 0; double tot = 0; int reps = 200;
      for (int r = 0; r < reps + 10; r++) {
        job.picks = P;
        for (int p = 0; p < P; p++) { job.rows[p] = bank + (EXPERT / 2) * (e % nexp); e += 7; }
        double t0 = now();
        job.seq.store(++seq, std::memory_order_release);
        while (job.done.load(std::memory_order_acquire) != seq) _mm_pause();
        if (r >= 10) tot += now() - t0;
      }
      double us = tot / reps * 1e6;
      printf("%d %d %.1f %.1f\n", NT, P, us, P * EXPERT / (us * 1e-6) / 1e9);
    }
    job.seq.store(-1); for (int t = 0; t < NT; t++) pthread_join(th[t], nullptr);
    seq = 0; job.done.store(0);
  }

  printf("\n== GPU <-> host flag round trip through mapped memory ==\n");
  int *hout, *hin; CK(cudaHostAlloc(&hout, 64, cudaHostAllocMapped)); CK(cudaHostAlloc(&hin, 64, cudaHostAllocMapped));
  *hout = 0; *hin = 0;
  int *dout, *din; CK(cudaHostGetDevicePointer(&dout, hout, 0)); CK(cudaHostGetDevicePointer(&din, hin, 0));
  long long* cyc; CK(cudaMallocManaged(&cyc, 8));
  int N = 2000;
  double t0 = now();
  pingpong<<<1, 1>>>(dout, din, N, cyc);
  volatile int* vo = hout; volatile int* vi = hin;
  for (int i = 1; i <= N; i++) { while (*vo != i) _mm_pause(); *vi = i; }
  CK(cudaDeviceSynchronize());
  printf("round trip: %.2f us (host clock, %d trips)\n", (now() - t0) / N * 1e6, N);

  printf("\n== contention: GPU in-place reads of pinned memory while the host computes ==\n");
  size_t gbytes = (size_t)2 << 30;
  uint4* gbuf; CK(cudaHostAlloc(&gbuf, gbytes, cudaHostAllocMapped)); memset(gbuf, 1, gbytes);
  uint4* dg; CK(cudaHostGetDevicePointer(&dg, gbuf, 0));
  unsigned long long* sink; CK(cudaMalloc(&sink, 8));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  int reps = 4;
  cudaEventRecord(e0); stream_read<<<132 * 4, 512>>>(dg, gbytes / 16, sink, reps); cudaEventRecord(e1); CK(cudaEventSynchronize(e1));
  float ms; cudaEventElapsedTime(&ms, e0, e1);
  printf("GPU alone: %.1f GB/s\n", gbytes * (double)reps / (ms * 1e-3) / 1e9);
  for (int nt : {8, 14}) {
    NT = nt; job.seq.store(0); job.done.store(0); seq = 0;
    for (int t = 0; t < NT; t++) pthread_create(&th[t], nullptr, worker, (void*)(intptr_t)t);
    cudaEventRecord(e0); stream_read<<<132 * 4, 512>>>(dg, gbytes / 16, sink, reps); cudaEventRecord(e1);
    double h0 = now(); int jobs = 0, e = 0;
    while (cudaEventQuery(e1) == cudaErrorNotReady) {
      job.picks = 2; for (int p = 0; p < 2; p++) { job.rows[p] = bank + (EXPERT / 2) * (e % nexp); e += 7; }
      job.seq.store(++seq, std::memory_order_release);
      while (job.done.load(std::memory_order_acquire) != seq) _mm_pause();
      jobs++;
    }
    double hs = now() - h0;
    cudaEventElapsedTime(&ms, e0, e1);
    printf("threads %d: GPU %.1f GB/s, host %.1f GB/s at the same time\n", nt, gbytes * (double)reps / (ms * 1e-3) / 1e9, jobs * 2 * EXPERT / hs / 1e9);
    job.seq.store(-1); for (int t = 0; t < NT; t++) pthread_join(th[t], nullptr);
  }
  return 0;
}
