// The host expert lane's GPU side (native/host_experts.c is the host's): at a decode step of at most HOST_MAX_PICKS
// picks (rows x top-k: one warp groups them) the routing hands a share of the layer's cold experts, each with every
// row that picked it, to the host's threads, which compute them from the cold bank in host DRAM (an expert's weights
// read once for all its rows) while the GPU computes the rest (hot picks from HBM, other cold picks read in place
// over the bus). The routing posts the request in a mailbox of mapped memory (host_post: the rows' inputs, each
// pick's slot or -1, then the sequence number), its groups leave those picks out, and after the GPU's own down
// product op_host_collect waits for the answer and copies each host pick's output row into the step's partial rows,
// where op_residual_norm combines every pick in router order as before. The host sums in the gemv's order, so the
// picks it computes have the bits the GPU would give them.
// The share is counted in parts of an expert (1..HOST_PARTS a expert, the state's HOST_PARTS_AT): besides whole
// experts one more may be split, the host computing the first units of its gate | up and the first features of its
// down product, the GPU the rest. Each side needs the other's units for its down features, so they exchange them
// through the mailbox after gate | up (op_host_exchange); every unit and every feature is still summed whole on one
// side in the gemv's order, so a split expert has the same bits too.
#pragma once
#include "product.cuh"

#define HOST_MAX_PICKS 32
// The most parts an expert is counted in (a split table entry is at most HOST_PARTS x HOST_MAX_PICKS).
#define HOST_PARTS 4
#define HOST_MAX_TAKE (HOST_PARTS * HOST_MAX_PICKS)
// host_experts.c's HeMailbox: request line, answer line, x [HOST_MAX_PICKS][H] at 512, y [HOST_MAX_PICKS][H] after
// it, then act [HOST_MAX_PICKS][I]: the split expert's units, pick p's at row p (the host's first, then the GPU's).
struct HostMailbox {
  uint32_t req_seq;
  int32_t layer, n, k;
  int32_t slot[HOST_MAX_PICKS];
  // The split expert's slot (-1: none; its picks' slots are in slot[] too): the host computes units [0, split_units)
  // of its gate | up and features [0, split_features) of its down product, the GPU the rest.
  int32_t split_slot, split_units, split_features;
  uint32_t gpu_act_seq; // written by the GPU: its units of the split expert are in act
  uint8_t pad1[96];
  uint32_t done_seq;
  int32_t refused;
  uint32_t gpu_timeouts;
  uint32_t host_act_seq; // written by the host: its units of the split expert are in act
  uint8_t pad2[240];
};
static_assert(sizeof(HostMailbox) == 512 && offsetof(HostMailbox, split_slot) == 144 && offsetof(HostMailbox, gpu_act_seq) == 156 &&
              offsetof(HostMailbox, done_seq) == 256 && offsetof(HostMailbox, gpu_timeouts) == 264 && offsetof(HostMailbox, host_act_seq) == 268,
              "host_experts.c HeMailbox");
#define HOST_X 512
// Nanoseconds of the GPU's global timer.
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ size_t host_y_offset(int H) { return HOST_X + (((size_t)4 * H * HOST_MAX_PICKS + 63) & ~(size_t)63); }
__device__ __forceinline__ size_t host_act_offset(int H) { return host_y_offset(H) + (((size_t)4 * H * HOST_MAX_PICKS + 63) & ~(size_t)63); }

// What op_route_group needs to post (mb null: no lane, or a step the lane does not take). state (device, host-lane/lane.ts
// HOST_STATE): words [0] the last request's sequence number, [1] this layer's whole host picks as a mask of pick
// indices, [HOST_STALLED] set when the GPU stopped waiting for an answer: nothing more is posted until the host has
// answered it; [3] this layer's distinct cold experts c (-1: no stamp), [4] the parts the host takes h, [5] the layers
// routed (for the exploring ones), [6..7] the routing's time (ns); the split expert: [8] its slot (-1: none) and [9]
// its first unit the GPU computes (GemmProblem.part of gate | up), [10] its slot again and [11] its first feature the
// GPU computes (the down product's), [12] its picks as a mask; [HOST_PARTS_AT] the parts an expert counts (1 ..
// HOST_PARTS). The split table at HOST_TAKE: of c cold experts the host takes take[c] parts, but every HOST_EXPLORE-th
// layer one more or one fewer, so the neighbours of each choice are measured too; the host moves the table toward the
// faster one between steps (host-lane/split.ts). 64-bit sums of what the GPU measured: at HOST_WAIT_STATS {layers, ns}
// op_host_collect waited for the answer, then {layers, ns} op_host_exchange waited for the host's units; at HOST_CELLS
// [c][h] (h < HOST_MAX_TAKE + 1) {layers, ns from the routing to the end of the wait: the layer's cold experts on both
// sides, the sum of (ns / 1024)^2: their spread, so a neighbour wins only by more than the noise}.
#define HOST_STALLED 2
#define HOST_SPLIT_GU 8
#define HOST_SPLIT_DOWN 10
#define HOST_SPLIT_MASK 12
#define HOST_PARTS_AT 13
// HOST_EXPLORE is prime: a model's MoE layer count (16, 24, 32, 36, 48, 58, 94 in the families here) is no multiple of
// it, so the exploring layers rotate through every layer (at 16 the first version's period 16 explored layer 0 alone).
#define HOST_EXPLORE 17
#define HOST_TAKE 16
#define HOST_WAIT_STATS 64
#define HOST_CELLS 72
#define HOST_CELL_WORDS 6
#define HOST_STATE_WORDS (HOST_CELLS + HOST_CELL_WORDS * (HOST_MAX_PICKS + 1) * (HOST_MAX_TAKE + 1))
struct HostPost {
  HostMailbox* mb;   // device address of the mapped mailbox
  int32_t* state;
  const float* x;    // the experts' input rows [T][H] (the post-attention norm's, xn)
  int32_t hot_rows;  // physical slots below are hot
  int32_t I;         // the experts' intermediate size
  int32_t H, layer;
};
static_assert(sizeof(HostPost) == 40, "HostPost: layout.ts encodeHostPost");

// What the host computes of a layer: its whole experts' picks and the split expert's (masks of pick indices), the
// split expert's slot (-1: none) and the units and features of it the host computes (from 0).
struct HostChoice {
  unsigned whole, split;
  int slot, units, features;
};

// Warp 0 of op_route_group, lanes p < P holding pick p's slot (P <= 32): of the c distinct cold experts, in order of
// their first pick, the host takes h parts (take[c], or a neighbour when exploring): the first h / parts whole, every
// pick of each, and h % parts parts of the next (the split expert). Nothing without a lane. Stamps c, h and the time
// for op_host_collect's statistics (every lane gets the choice).
__device__ __forceinline__ HostChoice host_picks(const HostPost& hp, const int32_t* ss, int P) {
  HostChoice ch = {0u, 0u, -1, 0, 0};
  if (!hp.mb) return ch;
  const int lane = threadIdx.x & 31;
  if (hp.state[HOST_STALLED]) {
    // A request the GPU gave up on: the host may still be reading it, so the GPU computes this layer's picks itself
    // until the host has answered (the mailbox is not written under it).
    int answered = 0;
    if (lane == 0) answered = *reinterpret_cast<volatile uint32_t*>(&hp.mb->done_seq) == (uint32_t)hp.state[0];
    if (!__shfl_sync(0xffffffffu, answered, 0)) return ch;
    if (lane == 0) hp.state[HOST_STALLED] = 0;
  }
  const bool cold = lane < P && ss[lane] >= hp.hot_rows;
  // The picks of my expert (a cold pick's slot; a distinct key for the others), the first of them its leader.
  const unsigned peers = __match_any_sync(0xffffffffu, cold ? ss[lane] : -1 - lane);
  const int leader = __ffs(peers) - 1;
  const unsigned firsts = __ballot_sync(0xffffffffu, cold && leader == lane);
  const int c = __popc(firsts);
  const uint32_t routed = (uint32_t)hp.state[5];
  const int parts = min(HOST_PARTS, max(1, hp.state[HOST_PARTS_AT]));
  int want = hp.state[HOST_TAKE + c];
  if (routed % HOST_EXPLORE == 0) want += (routed / HOST_EXPLORE) & 1u ? 1 : -1;
  want = min(c * parts, max(0, want));
  const int whole = want / parts, part = want % parts;
  unsigned chosen = 0u, rest = firsts;
  for (int i = 0; i < whole; i++) { const unsigned low = rest & (0u - rest); chosen |= low; rest ^= low; }
  const unsigned split_first = part ? rest & (0u - rest) : 0u; // the next expert's first pick (part > 0: one is left)
  ch.whole = __ballot_sync(0xffffffffu, cold && ((chosen >> leader) & 1u));
  ch.split = __ballot_sync(0xffffffffu, cold && ((split_first >> leader) & 1u));
  if (ch.split) {
    ch.slot = __shfl_sync(0xffffffffu, lane < P ? ss[lane] : 0, __ffs(split_first) - 1);
    ch.units = part * hp.I / parts;
    ch.features = part * hp.H / parts;
  }
  __syncwarp();
  if (lane == 0) {
    hp.state[3] = c;
    hp.state[4] = want;
    hp.state[5] = (int32_t)(routed + 1u);
    *reinterpret_cast<uint64_t*>(hp.state + 6) = global_ns();
  }
  return ch;
}

// The whole block of op_route_group, after the groups: keeps the choice in the state (for the products, op_host_exchange
// and op_host_collect) and posts the host's picks (ch from host_picks, in every thread; P picks of K a row). Every
// field is written, then fenced to the system, then the sequence number.
__device__ __forceinline__ void host_post(const HostPost& hp, const int32_t* ss, const HostChoice& ch, int P, int K) {
  if (!hp.mb) return;
  if (threadIdx.x == 0) {
    hp.state[1] = (int32_t)ch.whole;
    hp.state[HOST_SPLIT_GU] = hp.state[HOST_SPLIT_DOWN] = ch.slot;
    hp.state[HOST_SPLIT_GU + 1] = ch.units;
    hp.state[HOST_SPLIT_DOWN + 1] = ch.features;
    hp.state[HOST_SPLIT_MASK] = (int32_t)ch.split;
  }
  const unsigned mask = ch.whole | ch.split;
  if (mask == 0u) return;
  // The inputs of the rows the host's picks belong to.
  float* x = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(hp.mb) + HOST_X);
  const unsigned row_picks = K >= 32 ? 0xffffffffu : (1u << K) - 1u;
  for (int r = 0; r * K < P; r++) {
    if (!((mask >> (r * K)) & row_picks)) continue;
    for (int i = threadIdx.x; i < hp.H; i += blockDim.x) x[(size_t)r * hp.H + i] = hp.x[(size_t)r * hp.H + i];
  }
  if (threadIdx.x < P) hp.mb->slot[threadIdx.x] = (mask >> threadIdx.x) & 1u ? ss[threadIdx.x] : -1;
  if (threadIdx.x == 0) {
    hp.mb->n = P;
    hp.mb->k = K;
    hp.mb->layer = hp.layer;
    hp.mb->split_slot = ch.slot;
    hp.mb->split_units = ch.units;
    hp.mb->split_features = ch.features;
  }
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t seq = (uint32_t)hp.state[0] + 1u;
    hp.state[0] = (int32_t)seq;
    *reinterpret_cast<volatile uint32_t*>(&hp.mb->req_seq) = seq;
  }
}
