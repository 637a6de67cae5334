// The host expert lane's GPU side (native/host_experts.c is the host's): at a batch-1 decode step the routing
// hands a share of the layer's cold picks to the host's threads, which compute them from the cold bank in host
// DRAM while the GPU computes the rest (hot picks from HBM, other cold picks read in place over the bus). The
// routing posts the request in a mailbox of mapped memory (host_post: the experts' input row, the picks' slots,
// then the sequence number), its groups leave those picks out, and after the GPU's own down product
// op_host_collect waits for the answer and copies each host pick's output row into the step's partial rows,
// where op_residual_norm combines every pick in router order as before. The host sums in the gemv's order, so
// the picks it computes have the bits the GPU would give them.
#pragma once
#include "op_common.cuh"

#define HOST_MAX_PICKS 8
// host_experts.c's HeMailbox: request line, answer line, x [H] at 256, y [HOST_MAX_PICKS][H] after it.
struct HostMailbox {
  uint32_t req_seq;
  int32_t layer, n, pad0;
  int32_t slot[HOST_MAX_PICKS];
  uint8_t pad1[80];
  uint32_t done_seq;
  int32_t refused;
  uint32_t gpu_timeouts;
  uint8_t pad2[116];
};
static_assert(sizeof(HostMailbox) == 256 && offsetof(HostMailbox, done_seq) == 128 && offsetof(HostMailbox, gpu_timeouts) == 136, "host_experts.c HeMailbox");
// Nanoseconds of the GPU's global timer.
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ size_t host_y_offset(int H) { return 256 + (((size_t)4 * H + 63) & ~(size_t)63); }

// What op_route_group needs to post (mb null: no lane, or not a batch-1 step). state (device): [0] the last request's
// sequence number, [1] this layer's host picks (0: none posted), [2 + j] the pick index of host pick j, [HOST_STALLED]
// set when op_host_collect stopped waiting for an answer: nothing more is posted until the host has answered it.
#define HOST_STALLED 10
struct HostPost {
  HostMailbox* mb;   // device address of the mapped mailbox
  int32_t* state;
  const float* x;    // the experts' input row (the post-attention norm's, xn)
  int32_t hot_rows;  // physical slots below are hot
  int32_t share;     // of the cold picks, the host takes ceil(cold x share / 1000)
  int32_t H, layer;
};
static_assert(sizeof(HostPost) == 40, "HostPost: layout.ts encodeHostPost");

// Warp 0 of op_route_group at a batch-1 step, lanes k < P holding pick k's slot: which picks the host takes (the
// first of the cold picks in router order), as a mask; 0 when there is no lane.
__device__ __forceinline__ unsigned host_picks(const HostPost& hp, const int32_t* ss, int P) {
  if (!hp.mb) return 0u;
  const int lane = threadIdx.x & 31;
  if (hp.state[HOST_STALLED]) {
    // A request the GPU gave up on: the host may still be reading it, so the GPU computes this layer's picks itself
    // until the host has answered (the mailbox is not written under it).
    int answered = 0;
    if (lane == 0) answered = *reinterpret_cast<volatile uint32_t*>(&hp.mb->done_seq) == (uint32_t)hp.state[0];
    if (!__shfl_sync(0xffffffffu, answered, 0)) return 0u;
    if (lane == 0) hp.state[HOST_STALLED] = 0;
  }
  const unsigned cold = __ballot_sync(0xffffffffu, lane < P && ss[lane] >= hp.hot_rows);
  const int want = min(HOST_MAX_PICKS, (__popc(cold) * hp.share + 999) / 1000);
  unsigned mask = 0u, rest = cold;
  for (int i = 0; i < want; i++) { const unsigned low = rest & (0u - rest); mask |= low; rest ^= low; }
  return mask;
}

// The whole block of op_route_group, after the groups: posts the host's picks (mask from host_picks, in every
// thread). Every field is written, then fenced to the system, then the sequence number.
__device__ __forceinline__ void host_post(const HostPost& hp, const int32_t* ss, unsigned mask) {
  if (!hp.mb) return;
  const int n = __popc(mask);
  if (threadIdx.x == 0) hp.state[1] = n;
  if (n == 0) return;
  float* x = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(hp.mb) + 256);
  for (int i = threadIdx.x; i < hp.H; i += blockDim.x) x[i] = hp.x[i];
  if (threadIdx.x == 0) {
    int j = 0;
    for (unsigned m = mask; m; m &= m - 1, j++) {
      const int k = __ffs(m) - 1;
      hp.mb->slot[j] = ss[k];
      hp.state[2 + j] = k;
    }
    hp.mb->n = n;
    hp.mb->layer = hp.layer;
  }
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t seq = (uint32_t)hp.state[0] + 1u;
    hp.state[0] = (int32_t)seq;
    *reinterpret_cast<volatile uint32_t*>(&hp.mb->req_seq) = seq;
  }
}
