// Single-op kernels over plain buffers, built from the same device functions as the fused kernels: the
// conformance tests run these against the CPU twins (src/backend/cpu/ops.ts).
#include "common.cuh"
#include "route.cuh"

extern "C" __global__ void op_embed(const bf16_t* table, const int32_t* tokens, float* out, int rows, int H) {
  const int b = blockIdx.x;
  for (int i = threadIdx.x; i < H; i += blockDim.x) out[(size_t)b * H + i] = bf2f(table[(size_t)tokens[b] * H + i]);
}

// Y[rows][O] = X[rows][K] W^T, W bf16 [O][K]: grid (ceil(O / warps), rows), one warp per output.
extern "C" __global__ void op_gemm_bf16(const bf16_t* W, const float* X, float* Y, int rows, int O, int K) {
  const int r = blockIdx.y, o = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (o >= O) return;
  const float s = warp_dot_bf16(W + (size_t)o * K, X + (size_t)r * K, K);
  if ((threadIdx.x & 31) == 0) Y[(size_t)r * O + o] = s;
}

extern "C" __global__ void op_rmsnorm(const float* X, const bf16_t* w, float* Y, int n, float eps) {
  __shared__ float red[32];
  extern __shared__ float x[];
  const int r = blockIdx.x;
  for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = X[(size_t)r * n + i];
  __syncthreads();
  block_rmsnorm(x, w, x, n, eps, red);
  for (int i = threadIdx.x; i < n; i += blockDim.x) Y[(size_t)r * n + i] = x[i];
}

// q/k norm then RoPE on `heads` head vectors of one row at position pos[row] (one warp per head).
extern "C" __global__ void op_headnorm_rope(float* X, const bf16_t* w, const int32_t* pos, int heads, int d, float eps,
                                            float theta) {
  const int r = blockIdx.x, h = threadIdx.x >> 5;
  if (h >= heads) return;
  float* v = X + ((size_t)r * heads + h) * d;
  warp_rmsnorm(v, w, d, eps);
  warp_rope(v, d, pos[r], theta);
}

// Route-and-split for `rows` rows of router logits (one warp per row); counts when *count_flag != 0.
extern "C" __global__ void op_route(float* logits, int E, int K, int norm_topk, const int32_t* slots, int32_t* out_e,
                                    float* out_w, int32_t* out_slot, uint32_t* counter, const int32_t* count_flag) {
  const int r = blockIdx.x;
  warp_route(logits + (size_t)r * E, E, K, norm_topk, slots, out_e + r * K, out_w + r * K, out_slot + r * K,
             *count_flag ? counter : nullptr);
}
