// Loading: a finite check of every weight as it arrives on the device (or in mapped host memory), so a
// corrupt checkpoint is refused naming the tensor before anything is served (TensorUploader).
#include "common.cuh"

// Loading: flags[idx] = 1 if any of the n bf16 values is NaN or infinite (exponent all ones).
extern "C" __global__ void op_check_finite_bf16(const bf16_t* v, long long n, uint32_t* flags, int idx) {
  bool bad = false;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    bad |= (v[i] & 0x7f80u) == 0x7f80u;
  if (__syncthreads_or(bad) && threadIdx.x == 0) flags[idx] = 1u;
}

// Loading: flags[idx] = 1 if any of the n float8_e4m3fn bytes is NaN (0x7F or 0xFF; e4m3fn has no infinities).
extern "C" __global__ void op_check_finite_fp8(const uint8_t* v, long long n, uint32_t* flags, int idx) {
  bool bad = false;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    bad |= (v[i] & 0x7fu) == 0x7fu;
  if (__syncthreads_or(bad) && threadIdx.x == 0) flags[idx] = 1u;
}
