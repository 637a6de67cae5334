// The op path's shared pieces: one kernel per op spread over every SM (real shapes: hidden 2048-7168, experts
// of 256-2048 rows, 4-128 heads), as opposed to the row path (layer.cu), which gives one block to one token's
// whole layer and is fast only for tiny models. Weights are bf16 as stored; activations and sums are fp32.
// Mirrored by src/backend/cuda/op/layout.ts (GemmProblem's bytes).
#pragma once
#include "common.cuh"

// One matrix product of the step: y[out row][o] = epi(x[in row] . w[o]) for every row of every group.
// Dense (grp_n == null): one group, rows 0..rows-1, weights `w` [O][K], in row = out row = r.
// Grouped (the experts): group g = the picks of expert grp_expert[g]; its rows are pick indices
// p = grp_rows[grp_start[g] + i]; in row = p / x_div (the token for gate/up, the pick for down), out row = p;
// weights: the bank row of the expert (slot table -> hot or cold bank) + w_off elements.
struct GemmProblem {
  const float* x;       // [in rows][ldx]
  float* y;             // [out rows][ldy]
  const float* res;     // EPI_ADD: y = res + acc (may alias y); else null
  const bf16_t* w;      // dense weights [O][K] (null when grouped)
  const int32_t* grp_n; // device: number of groups (null = dense)
  const int32_t* grp_expert;
  const int32_t* grp_start; // [groups + 1]
  const int32_t* grp_rows;  // [picks]
  const int32_t* slots;     // [E] expert -> bank slot
  const bf16_t* hot;
  const bf16_t* cold;
  const int32_t* tile_n;     // TC grouped: number of 64-row tiles (device)
  const int32_t* tile_group; // [tiles] group of each tile
  const int32_t* tile_row0;  // [tiles] first row (within the group) of each tile
  long long row_elems;       // elements of one bank row (3 * I * H)
  long long w_off;           // offset of this product's matrix inside a bank row
  int32_t ldx, ldy, O, K, rows, x_div, hot_rows, pad;
  // Dense gemv only, K staged whole: the input rows are RMSNorm'ed (times norm_w) in shared memory first,
  // and block (0, 0) writes the normalized rows to norm_out (the post-attention norm fused into the router).
  const bf16_t* norm_w;
  float* norm_out;
  float eps;
  int32_t pad2;
};

enum { EPI_STORE = 0, EPI_ADD = 1, EPI_SWIGLU = 2 };

// Programmatic dependent launch: every op kernel is launched with programmatic stream serialization, so it
// may start while the kernel before it finishes. It waits here for that kernel (and so, transitively, for every
// earlier one) to complete and flush before reading or writing anything, then lets the next one launch.
// Without PDL at launch both are no-ops.
__device__ __forceinline__ void pdl_enter() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// Rows of one tensor-core tile (the routing builds the grouped tiles of this size).
#define TC_TILE_ROWS 64

// The weights of group g (grouped) or the dense matrix.
__device__ __forceinline__ const bf16_t* group_weights(const GemmProblem& p, int g) {
  if (!p.grp_n) return p.w;
  const int slot = p.slots[p.grp_expert[g]];
  const bf16_t* row = slot < p.hot_rows ? p.hot + (size_t)slot * p.row_elems : p.cold + (size_t)(slot - p.hot_rows) * p.row_elems;
  return row + p.w_off;
}

// Rows of group g: count and the i-th row's (in row, out row).
__device__ __forceinline__ int group_rows(const GemmProblem& p, int g, int* start) {
  if (!p.grp_n) { *start = 0; return p.rows; }
  *start = p.grp_start[g];
  return p.grp_start[g + 1] - *start;
}

__device__ __forceinline__ void row_of(const GemmProblem& p, int start, int i, int* in_row, int* out_row) {
  if (!p.grp_n) { *in_row = i; *out_row = i; return; }
  const int pk = p.grp_rows[start + i];
  *in_row = pk / p.x_div;
  *out_row = pk;
}

// The epilogue of one output (o, acc) of one row; SWIGLU gets the gate and up sums of output j.
__device__ __forceinline__ void epi_store(const GemmProblem& p, int epi, int out_row, int o, float acc) {
  float* y = p.y + (size_t)out_row * p.ldy + o;
  if (epi == EPI_ADD) *y = p.res[(size_t)out_row * p.ldy + o] + acc;
  else *y = acc;
}
