// The KV cache that the standard and sparse mixers stream with: MixerState.tensors =
// {k_cache, v_cache}, each (B, H, capacity, d) float32, of which the first `position` entries
// along dim 2 are valid (capacity >= position). The capacity grows by doubling so that a Step
// copies O(1) tokens amortised. New tokens are written in place beyond `position`, so a
// shallow copy of an earlier state still reads its own prefix; branching needs Clone().
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "kernels/common/mixer.h"
#include "kernels/standard/decode_attention_cpu.h"

namespace attnserve::kernels {

// A fresh cache of capacity 0 for `batch` sequences: it holds no memory until the first write.
MixerState EmptyKvCache(int64_t batch, int64_t heads, int64_t head_dim, at::Device device);

// Whether `state` is such a cache for a batch of `batch` with these heads; messages start
// with `mixer` ("standard state: ...").
absl::Status CheckKvCache(const MixerState& state, int64_t batch, int64_t heads, int64_t head_dim,
                          at::Device device, const char* mixer);

// Writes k, v (B, H, L, d) at positions [position, position + L) of the state's caches and
// returns the caches to use from now on: the same tensors when they have room (and are plain
// contiguous tensors we may write into), otherwise new ones with at least double the capacity
// holding the valid prefix. The state itself is not modified.
std::pair<at::Tensor, at::Tensor> AppendToKvCache(const MixerState& state, const at::Tensor& k,
                                                  const at::Tensor& v);

// Batch row `row` of caches (B, H, capacity, d), its first `length` positions valid (>= 1: a
// decode step's query is the token at length - 1).
struct KvCacheRow {
  at::Tensor k_cache;
  at::Tensor v_cache;
  int64_t row = 0;
  int64_t length = 0;
};

// The same row for the CPU decode kernel (pointers into the caches).
DecodeAttentionRow DecodeRowOf(const KvCacheRow& row);

}  // namespace attnserve::kernels
