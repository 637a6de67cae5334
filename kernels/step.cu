// The step's entry points (src/backend/cuda/step/step-kernels.ts launches them): a decode or prefill step is, per layer, residual+norm,
// qkv product, q/k norm + RoPE + KV write, attention (+ merge of its splits), o product + residual, router
// product (after the post-attention norm), route + group, expert gate/up (SwiGLU fused), expert down; then
// the final norm of the rows whose logits are wanted and the LM head. Products: gemv (<= 16 rows a group,
// decode) or gemm_tc (tensor cores, prefill). See product.cuh for the conventions.
#include "product.cuh"
#include "gemv.cuh"
#include "gemm_tc.cuh"
#include "attention.cuh"
#include "moe.cuh"
#include "mla.cuh"
#include "host_exchange.cuh"

// Products: op_gemv_[fp8_|mxfp4_]b<B>_r<R>_<epilogue> and op_gemm_tc_[fp8_|mxfp4_]<epilogue>, bf16, block-FP8
// or MXFP4 weights.
#define GEMV_ENTRY(B, R, EPI, NAME, WF, WN) \
  extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32, GEMV_MIN_BLOCKS(B, WF)) op_gemv_##WN##b##B##_r##R##_##NAME(GemmProblem p) { gemv_body<B, R, EPI, WF>(p); }
#define GEMV_ENTRIES_WF(B, WF, WN) \
  GEMV_ENTRY(B, 1, EPI_STORE, store, WF, WN) GEMV_ENTRY(B, 2, EPI_STORE, store, WF, WN) GEMV_ENTRY(B, 1, EPI_ADD, add, WF, WN) \
  GEMV_ENTRY(B, 2, EPI_ADD, add, WF, WN) GEMV_ENTRY(B, 1, EPI_SWIGLU, swiglu, WF, WN) GEMV_ENTRY(B, 2, EPI_SWIGLU, swiglu, WF, WN)
#define GEMV_ENTRIES(B) GEMV_ENTRIES_WF(B, WF_BF16, ) GEMV_ENTRIES_WF(B, WF_FP8, fp8_) GEMV_ENTRIES_WF(B, WF_MXFP4, mxfp4_)
GEMV_ENTRIES(1)
GEMV_ENTRIES(2)
GEMV_ENTRIES(4)
GEMV_ENTRIES(8)
GEMV_ENTRIES(16)
// The batch-1 expert down product that adds its picks to the residual (EPI_COMBINE): op_gemv_[fp8_|mxfp4_]b1_r<R>_combine.
#define GEMV_COMBINE_ENTRIES(WF, WN) \
  GEMV_ENTRY(1, 1, EPI_COMBINE, combine, WF, WN) GEMV_ENTRY(1, 2, EPI_COMBINE, combine, WF, WN) GEMV_ENTRY(1, 4, EPI_COMBINE, combine, WF, WN)
GEMV_COMBINE_ENTRIES(WF_BF16, ) GEMV_COMBINE_ENTRIES(WF_FP8, fp8_) GEMV_COMBINE_ENTRIES(WF_MXFP4, mxfp4_)
// A batch-1 bf16 dense product that stores (q | k | v) with its features split evenly over the grid (gemv_body's EVEN),
// so the host can size the grid to one wave: op_gemv_b1_r<R>_store_even. (The expert gate/up is not: it ran slower so.)
#define GEMV_EVEN_ENTRY(R) \
  extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32, GEMV_MIN_BLOCKS(1, WF_BF16)) op_gemv_b1_r##R##_store_even(GemmProblem p) { gemv_body<1, R, EPI_STORE, WF_BF16, true>(p); }
GEMV_EVEN_ENTRY(1) GEMV_EVEN_ENTRY(2)

#define TC_ENTRY(EPI, NAME, WF, WN) \
  extern "C" __global__ void __launch_bounds__(128) op_gemm_tc_##WN##NAME(GemmProblem p) { pdl_enter(); gemm_tc_body<EPI, WF>(p); }
TC_ENTRY(EPI_STORE, store, WF_BF16, ) TC_ENTRY(EPI_ADD, add, WF_BF16, ) TC_ENTRY(EPI_SWIGLU, swiglu, WF_BF16, )
TC_ENTRY(EPI_STORE, store, WF_FP8, fp8_) TC_ENTRY(EPI_ADD, add, WF_FP8, fp8_) TC_ENTRY(EPI_SWIGLU, swiglu, WF_FP8, fp8_)
TC_ENTRY(EPI_STORE, store, WF_MXFP4, mxfp4_) TC_ENTRY(EPI_ADD, add, WF_MXFP4, mxfp4_) TC_ENTRY(EPI_SWIGLU, swiglu, WF_MXFP4, mxfp4_)

// OLMoE's q/k norm over the whole q and k projections of each row, in place (before RoPE, which the attention
// kernels then apply with no per-head norm): grid (T, 2: q then k), any block size up to 1024.
extern "C" __global__ void op_qk_norm_whole(float* qkv, int ld, const bf16_t* q_norm, const bf16_t* k_norm, int QD, int KD, float eps) { pdl_enter();
  __shared__ float red[32];
  float* x = qkv + (size_t)blockIdx.x * ld + (blockIdx.y ? QD : 0);
  block_rmsnorm(x, blockIdx.y ? k_norm : q_norm, x, blockIdx.y ? KD : QD, eps, red);
}

extern "C" __global__ void op_qk_rope_kv(float* qkv, int ld, OpRows rows, AttnParams ap, int layer, int nh, int nkv, int hd) { pdl_enter();
  qk_rope_kv_body(qkv, ld, rows, ap, layer, nh, nkv, hd);
}

// 8 warps a block (4 at G = 16, whose shared partials would pass 48 KiB): the launch in src/backend/cuda/step/step-kernels.ts.
// op_attend_*: prefill rows (q and k already normalized by op_qk_rope_kv); op_attend_decode_*: decode rows,
// the norm, RoPE and KV write fused in.
#define ATTEND_ENTRY(HD, G)                                                                                          \
  extern "C" __global__ void __launch_bounds__(32 * ((G) == 16 ? 4 : 8))                                             \
      op_attend_hd##HD##_g##G(const float* qkv, int ld, OpRows rows, float* att, float* part, int layer, int nh, int nkv, \
                              AttnParams ap) { pdl_enter();                                                          \
    attend_body<HD, G, (G) == 16 ? 4 : 8, false>(qkv, ld, rows, att, part, layer, nh, nkv, ap);                     \
  }                                                                                                                  \
  extern "C" __global__ void __launch_bounds__(32 * ((G) == 16 ? 4 : 8))                                             \
      op_attend_decode_hd##HD##_g##G(const float* qkv, int ld, OpRows rows, float* att, float* part, int layer, int nh, \
                                     int nkv, AttnParams qn) { pdl_enter();                                                       \
    attend_body<HD, G, (G) == 16 ? 4 : 8, true>(qkv, ld, rows, att, part, layer, nh, nkv, qn);                      \
  }
ATTEND_ENTRY(32, 1) ATTEND_ENTRY(32, 2) ATTEND_ENTRY(32, 4) ATTEND_ENTRY(32, 8) ATTEND_ENTRY(32, 16)
ATTEND_ENTRY(64, 1) ATTEND_ENTRY(64, 2) ATTEND_ENTRY(64, 4) ATTEND_ENTRY(64, 8) ATTEND_ENTRY(64, 16)
ATTEND_ENTRY(128, 1) ATTEND_ENTRY(128, 2) ATTEND_ENTRY(128, 4) ATTEND_ENTRY(128, 8) ATTEND_ENTRY(128, 16)

extern "C" __global__ void op_attend_merge(const float* part, float* att, int nh, int hd, int S, const bf16_t* sinks) { pdl_enter();
  attend_merge_body(part, att, nh, hd, S, sinks);
}

// DeepSeek-V3's multi-head latent attention, absorbed (mla.cuh): norms + RoPE + latent cache write, the
// query into latent space, attention over the latent cache, the values out of it.
extern "C" __global__ void op_mla_norm_rope_kv(float* a, int lda, OpRows rows, MlaParams m) { pdl_enter();
  mla_norm_rope_kv_body(a, lda, rows, m);
}
// The absorb kernels read kv_b_proj as stored: bf16, or block FP8 (the _fp8 entries).
#define MLA_ABSORB_ENTRIES(WF, WN)                                                                                         \
  extern "C" __global__ void __launch_bounds__(64 * MLA_QG) op_mla_q_absorb##WN(const float* q, OpRows rows, float* qlat, MlaParams m, \
                                                                                int T) { pdl_enter();                        \
    mla_q_absorb_body<MLA_QROWS, WF>(q, rows, qlat, m, T);                                                                 \
  }                                                                                                                        \
  extern "C" __global__ void __launch_bounds__(256) op_mla_o_absorb##WN(const float* olat, float* att, MlaParams m, int T) { pdl_enter(); \
    mla_o_absorb_body<WF>(olat, att, m, T);                                                                                \
  }
MLA_ABSORB_ENTRIES(WF_BF16, ) MLA_ABSORB_ENTRIES(WF_FP8, _fp8)
extern "C" __global__ void __launch_bounds__(32 * MLA_WARPS) op_mla_attend(const float* qlat, OpRows rows, float* olat, MlaParams m) { pdl_enter();
  mla_attend_body(qlat, rows, olat, m);
}

// Decode steps (T <= 16 rows): route every row (a warp each) and group the picks, in one block and its
// shared memory (up to 32 picks, warp 0 alone groups them). blockDim.x >= T * K.
// The slot table is copied to shared memory before the wait for the kernel before (only the host writes it, between
// steps), so a pick's slot is no global round trip after its top-k.
// With a host expert lane (hp.mb; steps of at most 32 picks) a share of the cold experts goes to the host
// (host_exchange.cuh): the groups leave their picks out and the request is posted after them.
extern "C" __global__ void op_route_group(OpRoute r, OpGroups g, HostPost hp) {
  extern __shared__ __align__(16) float sm[]; // [warps][route_scratch] logits | se | sw | ss [T*K] | slots | cnt | cur [E]
  __shared__ unsigned long long red[33];
  __shared__ HostChoice host;
  if (threadIdx.x == 0) host = HostChoice{0u, 0u, -1, 0, 0}; // (group_picks_small's steps post nothing: the lane takes steps of <= 32 picks)
  const int warp = threadIdx.x >> 5, nw = blockDim.x >> 5, rs = route_scratch(r), TK = r.T * r.K;
  int32_t* se = reinterpret_cast<int32_t*>(sm + nw * rs);
  float* sw = reinterpret_cast<float*>(se + TK);
  int32_t* ss = reinterpret_cast<int32_t*>(sw + TK);
  int32_t* slots = ss + TK;
  int* cnt = slots + r.E;
  for (int e = threadIdx.x; e < r.E; e += blockDim.x) slots[e] = r.slots[e];
  pdl_enter();
  __syncthreads();
  for (int t = warp; t < r.T; t += nw) route_row(r, t, sm + warp * rs, se, sw, ss, slots);
  __syncthreads();
  const int P = r.header[0] * r.K;
  if (P > 32) group_picks_small(r, g, se, ss, cnt, cnt + r.E, red);
  else if (warp == 0) {
    const HostChoice ch = host_picks(hp, ss, P);
    group_picks_warp(r, g, se, ss, P, ch.whole); // (the split expert's picks stay: the GPU computes the rest of it)
    if (threadIdx.x == 0) host = ch;
  }
  if (hp.mb) {
    __syncthreads();
    host_post(hp, ss, host, P, r.K);
  }
}

// Waits for the mailbox word at `seq_at` (or the answer, done_seq: a request the host refused) to reach seq, 2 s at most
// (then gpu_timeouts counts it and the lane stalls: the routing posts nothing more until the host has answered).
// Thread 0; returns whether it came, and adds the wait to the {layers, ns} pair at `stats`.
__device__ __forceinline__ bool host_wait(HostMailbox* mb, int32_t* state, const uint32_t* seq_at, uint32_t seq, uint64_t* stats) {
  const uint64_t t0 = global_ns();
  for (;;) {
    if (*reinterpret_cast<volatile const uint32_t*>(seq_at) == seq || *reinterpret_cast<volatile uint32_t*>(&mb->done_seq) == seq) break;
    __nanosleep(128);
    if (global_ns() - t0 > 2000000000ull) {
      volatile uint32_t* to = &mb->gpu_timeouts;
      *to = *to + 1u;
      state[HOST_STALLED] = 1;
      return false;
    }
  }
  __threadfence_system(); // what the host wrote before the sequence number is read after it
  stats[0] += 1ull;
  stats[1] += global_ns() - t0;
  return true;
}

// Between a lane step's expert gate | up and down products, when the routing split an expert with the host: posts the
// GPU's units of it (from the split, for each of its picks) to the mailbox, waits for the host's (below the split) and
// copies them into the step's units, so each side's down product reads the whole expert's. One block.
extern "C" __global__ void op_host_exchange(HostMailbox* mb, int32_t* state, float* act, int H, int I) { pdl_enter();
  const unsigned split = (unsigned)state[HOST_SPLIT_MASK];
  if (!split || state[HOST_STALLED]) return;
  const int units = state[HOST_SPLIT_GU + 1];
  const uint32_t seq = (uint32_t)state[0];
  float* xa = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(mb) + host_act_offset(H));
  for (unsigned m = split; m; m &= m - 1) {
    const size_t p = (size_t)(__ffs(m) - 1) * I;
    for (int i = units + threadIdx.x; i < I; i += blockDim.x) xa[p + i] = act[p + i];
  }
  __threadfence_system();
  __syncthreads();
  __shared__ bool came;
  if (threadIdx.x == 0) {
    *reinterpret_cast<volatile uint32_t*>(&mb->gpu_act_seq) = seq;
    came = host_wait(mb, state, &mb->host_act_seq, seq, reinterpret_cast<uint64_t*>(state + HOST_WAIT_STATS) + 2) &&
           *reinterpret_cast<volatile uint32_t*>(&mb->host_act_seq) == seq; // (not a refusal's answer)
  }
  __syncthreads();
  if (!came) return;
  for (unsigned m = split; m; m &= m - 1) {
    const size_t p = (size_t)(__ffs(m) - 1) * I;
    for (int i = threadIdx.x; i < units; i += blockDim.x) act[p + i] = __ldcv(xa + p + i);
  }
}

// After a lane step's expert down product (partial rows of the GPU's picks, and of the split expert's features from
// the split): waits for the host lane's answer to this layer's request, if one was posted (host_wait; a timeout leaves
// the rows as they are), and copies each host pick's output into its partial row (the split expert's below the split).
// One block. Its thread 0 also counts how long the layer's cold experts took on both sides (from the routing to the
// answer, by the layer's cold experts and the host's parts of them: the times the split table is chosen from,
// host-lane/split.ts) and how long it waited for the host.
extern "C" __global__ void op_host_collect(HostMailbox* mb, int32_t* state, float* partial, int H) { pdl_enter();
  __shared__ unsigned whole, split;
  if (threadIdx.x == 0) {
    whole = (unsigned)state[1];
    split = (unsigned)state[HOST_SPLIT_MASK];
    bool gave_up = state[HOST_STALLED] != 0; // this layer's wait (the exchange's) gave up
    if (gave_up) whole = split = 0u;
    if ((whole | split) && !host_wait(mb, state, &mb->done_seq, (uint32_t)state[0], reinterpret_cast<uint64_t*>(state + HOST_WAIT_STATS))) {
      whole = split = 0u;
      gave_up = true;
    }
    // The statistics the host chooses the split from (host_exchange.cuh's state): one thread, one kernel at a time. A layer
    // whose wait gave up (2 s) is no measure of its split.
    const int c = state[3], h = state[4];
    if (!gave_up && c > 0 && c <= HOST_MAX_PICKS && h >= 0 && h <= HOST_MAX_TAKE) {
      uint64_t* cell = reinterpret_cast<uint64_t*>(state + HOST_CELLS) + HOST_CELL_WORDS / 2 * (c * (HOST_MAX_TAKE + 1) + h);
      const uint64_t ns = global_ns() - *reinterpret_cast<const uint64_t*>(state + 6), q = ns >> 10;
      cell[0] += 1ull;
      cell[1] += ns;
      cell[2] += q * q;
    }
    state[3] = -1;
  }
  __syncthreads();
  const float* y = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(mb) + host_y_offset(H));
  const int features = state[HOST_SPLIT_DOWN + 1];
  for (unsigned m = whole | split; m; m &= m - 1) {
    const int p = __ffs(m) - 1, n = (whole >> p) & 1u ? H : features;
    for (int i = threadIdx.x; i < n; i += blockDim.x) partial[(size_t)p * H + i] = __ldcv(y + (size_t)p * H + i);
  }
}

// Prefill steps: route (a warp per row, grid over rows: op_route_rows), then op_group in one block.
extern "C" __global__ void op_route_rows(OpRoute r) { pdl_enter();
  extern __shared__ __align__(16) float sm[]; // [warps][route_scratch]
  const int warp = threadIdx.x >> 5, t = blockIdx.x * (blockDim.x >> 5) + warp;
  if (t < r.T) route_row(r, t, sm + warp * route_scratch(r));
}

extern "C" __global__ void op_group(OpRoute r, OpGroups g) { pdl_enter();
  extern __shared__ __align__(16) int smi[]; // cnt[E] | cur[E]
  __shared__ unsigned long long red[33];
  group_picks(r, g, smi, smi + r.E, red);
}

// Each row's argmax over its V logits (StepInput.argmaxOnly), ARGMAX_BLOCKS blocks a row: block (j, i) writes
// the best argmax_key of its slice of row i to keys[i * gridDim.x + j] (and to mapped host memory, keys_host, when
// given: no copy back after it); the host takes a row's best (backend.ts bestArgmaxKey). No atomics, nothing to
// reset. Grid (blocks a row, rows), up to 1,024 threads.
extern "C" __global__ void op_argmax_rows(const float* logits, int V, unsigned long long* keys, unsigned long long* keys_host) { pdl_enter();
  __shared__ unsigned long long red[32];
  const int i = blockIdx.y, per = (V + gridDim.x - 1) / gridDim.x, o0 = blockIdx.x * per, o1 = min(V, o0 + per);
  const float* x = logits + (size_t)i * V;
  unsigned long long key = 0ull;
  for (int o = o0 + threadIdx.x; o < o1; o += blockDim.x) {
    const unsigned long long k = argmax_key(x[o], o);
    key = k > key ? k : key;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  key = warp_max_key(key);
  if (lane == 0) red[warp] = key;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < nw; w++) key = red[w] > key ? red[w] : key;
    keys[(size_t)i * gridDim.x + blockIdx.x] = key;
    if (keys_host) keys_host[(size_t)i * gridDim.x + blockIdx.x] = key;
  }
}

// RMSNorm of x [n] in place, the sum of squares in the order a gemv's staged norm takes it (norm_staged, GEMV_WARPS
// warps): thread t of the first GEMV_WARPS x 32 adds the values t, t + 256, ... (a fused multiply-add each), each warp
// its 32 by the butterfly, then the warps' sums in turn; the others add nothing. So a batch-1 step's input norm has
// the same bits here as inside the q | k | v gemv (fuseResidual), and the host expert lane's steps, which combine
// here, equal those that do not. red: GEMV_WARPS floats. Ends with a barrier.
__device__ __forceinline__ void norm_in_gemv_order(float* x, const bf16_t* __restrict__ w, int n, float eps, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float ss = 0.f;
  if (warp < GEMV_WARPS) {
    for (int k = threadIdx.x; k < n; k += GEMV_WARPS * 32) ss = __fmaf_rn(x[k], x[k], ss);
    ss = warp_sum(ss);
    if (lane == 0) red[warp] = ss;
  }
  __syncthreads();
  ss = 0.f;
  for (int v = 0; v < GEMV_WARPS; v++) ss += red[v];
  const float inv = 1.0f / sqrtf(ss / (float)n + eps);
  for (int k = threadIdx.x; k < n; k += blockDim.x) x[k] = bf2f(w[k]) * (x[k] * inv);
  __syncthreads();
}

// Row i of the output: x = the residual of input row rows[i] (or i): mode 0 the embedding of its token (a fed
// token, negative, the argmax the step before left in fed_keys),
// mode 1 hidden + the previous MoE layer's picks combined in router order (fp32), mode 2 hidden as it is;
// x goes back to hidden (modes 0, 1), and xn[i] = RMSNorm(x) * w (norm_in_gemv_order). Grid (rows), up to 1,024 threads
// (launched at 1,024, which holds while ptxas gives it <= 64 registers: 40 today).
extern "C" __global__ void op_residual_norm(int mode, float* hidden, const float* partial, const float* pick_weight, int LK,
                                            int prev_layer, int K, const int32_t* rows, const int32_t* tokens,
                                            const unsigned long long* fed_keys, const bf16_t* embed, const bf16_t* w, float* xn, int H,
                                            float eps) { pdl_enter();
  extern __shared__ __align__(16) float x[]; // [H] | red[32]
  float* red = x + ((H + 3) & ~3);
  const int i = blockIdx.x, r = rows ? rows[i] : i;
  float* h = hidden + (size_t)r * H;
  if (mode == 0) {
    __shared__ int tok;
    if (threadIdx.x < 32) {
      int t = tokens[r];
      if (t < 0) {
        // A fed token (run-ahead decoding): the argmax of row -1 - t of the step just before, from its
        // ARGMAX_BLOCKS (32) keys still in fed_keys (op_argmax_rows; decoded as backend.ts bestArgmaxKey).
        t = argmax_key_index(warp_max_key(fed_keys[(size_t)(-1 - t) * 32 + threadIdx.x]));
      }
      if (threadIdx.x == 0) tok = t;
    }
    __syncthreads();
    const bf16_t* e = embed + (size_t)tok * H;
    for (int c = threadIdx.x; c < H; c += blockDim.x) { x[c] = bf2f(e[c]); h[c] = x[c]; }
  } else if (mode == 1) {
    // The out rows are padded by repeating the last one: only its first block writes the row back, so the picks are
    // added to hidden once (a padding block may read it either side of that write; its output is never read).
    const bool writer = !rows || i == 0 || rows[i - 1] != r;
    const float* wk = pick_weight + (size_t)r * LK + (size_t)prev_layer * K;
    for (int c = threadIdx.x; c < H; c += blockDim.x) {
      float acc = 0.f;
      for (int k = 0; k < K; k++) acc = __fmaf_rn(wk[k], partial[((size_t)r * K + k) * H + c], acc); // as the fused combine (gemv.cuh)
      x[c] = h[c] + acc;
      if (writer) h[c] = x[c];
    }
  } else {
    for (int c = threadIdx.x; c < H; c += blockDim.x) x[c] = h[c];
  }
  __syncthreads();
  norm_in_gemv_order(x, w, H, eps, red);
  for (int c = threadIdx.x; c < H; c += blockDim.x) xn[(size_t)i * H + c] = x[c];
}
