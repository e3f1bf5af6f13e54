// One decode step of softmax attention for B sequences whose KV caches have lengths of their
// own, in one call (no padding of every row to the longest): for row b and head h,
//   out[b,h] = Σ_{t < length_b} softmax_t(q[b,h] · k_b[h,t] / √d) v_b[h,t].
// Each row's caches are where its own state keeps them: (H, capacity_b, d) contiguous, the
// first length_b positions valid, after the positions of its shared spans, if any. Queries and
// outputs float32, caches float32 or bfloat16 (widened exactly as they are read, the sums in
// float32), on the CPU; parallel over (row, head) with ATen's intra-op threads. A (row, head) is
// computed the same way whatever the other rows.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace attnserve::kernels {

struct DecodeAttentionRow {
  // (H, capacity, d) each: k and v for a float32 cache, or k_bf16 and v_bf16 (below) for a
  // bfloat16 one, the other pair null. A row and its shared spans are of one type.
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t length = 0;    // valid positions (>= 1 with the shared ones)
  int64_t capacity = 0;  // positions allocated, >= length
  // The positions before these, in order, held elsewhere (a KV cache's shared segments,
  // kv_cache.h): `shared_count` rows of their own k, v, length and capacity (their `shared`
  // unused), owned by the caller. Null: none.
  const DecodeAttentionRow* shared = nullptr;
  int64_t shared_count = 0;
  // A bfloat16 cache's keys and values (their bits), (H, capacity, d) each.
  const uint16_t* k_bf16 = nullptr;
  const uint16_t* v_bf16 = nullptr;
};

// q (B, H, d) contiguous, rows[B], out (B, H, d) contiguous. Grouped-query attention: the rows'
// caches hold kv_heads heads (0: heads; heads a multiple of it), query head h reading cache head
// h / (heads / kv_heads). The heads of one group are computed one after the other on one thread,
// so that the second and later ones find the group's keys and values in the core's caches.
void DecodeAttentionCpu(const float* q, const DecodeAttentionRow* rows, int64_t batch,
                        int64_t heads, int64_t head_dim, float* out, int64_t kv_heads = 0);

// The same for q (B, H, 1, d) float32 on the CPU (any strides): a new (B, H, 1, d) tensor of
// the heads' outputs, row b from rows[b] (the mixers' Step and StepBatch).
at::Tensor DecodeAttentionHeads(const at::Tensor& q, const std::vector<DecodeAttentionRow>& rows,
                                int64_t kv_heads = 0);

// The row as a query at its last position sees it through a window of the `window` latest
// positions (0 or >= the row's length: all): the spans and positions before the window dropped,
// the pointers of the first one kept moved past its dropped positions. `head_dim` is the caches'.
// The spans it keeps are copied into `spans` (owned by the caller; it must outlive the result's
// use), which the result points to.
DecodeAttentionRow LastPositionsOf(const DecodeAttentionRow& row, int64_t window, int64_t head_dim,
                                   std::vector<DecodeAttentionRow>* spans);

}  // namespace attnserve::kernels
