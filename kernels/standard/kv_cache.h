// The KV cache that the standard and sparse mixers stream with: MixerState.tensors =
// {k_cache, v_cache}, each (B, H, capacity, d) float32 (or bfloat16: the standard mixer with
// MixerConfig::kv_cache_dtype, keys and values rounded to it as they are written), of which the
// first `position` entries along dim 2 are valid (capacity >= position). The capacity grows by
// doubling so that a Step copies O(1) tokens amortised. New tokens are written in place beyond
// `position`, so a shallow copy of an earlier state still reads its own prefix; branching needs
// Clone().
//
// Shared prefixes (MixerState.shared, kernels/common/mixer.h): a state may hold its first
// SharedLength() positions in read-only segments that other states hold too (SharePrefix: a
// prefix-cache hit, a fork), and only the positions after them in its own k_cache and v_cache,
// from index 0. Because a cache's first `position` entries never change, a segment can be the
// valid part of another state's own cache, which that state goes on appending to past it.
// Nothing is copied; a hit on a 4000-token prefix held 8 MB of copied keys and values before
// (docs/benchmarks.md, issue #24). Mixers that read the keys in place (the
// standard mixer's CPU kernels) take the segments as they are; the others get a flat copy
// (FlattenKvCache).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "kernels/common/mixer.h"
#include "kernels/standard/decode_attention_cpu.h"

namespace attnserve::kernels {

// A fresh cache of capacity 0 for `batch` sequences: it holds no memory until the first write.
MixerState EmptyKvCache(int64_t batch, int64_t heads, int64_t head_dim, at::Device device,
                        at::ScalarType dtype = at::kFloat);

// Whether `state` is such a cache for a batch of `batch` with these heads, its caches and shared
// segments of element type `dtype`; messages start with `mixer` ("standard state: ...").
absl::Status CheckKvCache(const MixerState& state, int64_t batch, int64_t heads, int64_t head_dim,
                          at::Device device, const char* mixer, at::ScalarType dtype = at::kFloat);

// Writes k, v (B, H, L, d) float32 at positions [position, position + L) of the state's caches
// (own indices from position - SharedLength(); rounded to the caches' element type) and returns
// the caches to use from now on: the same tensors when they have room (and are plain contiguous
// tensors we may write into), otherwise new ones of the same element type with at least double
// the capacity holding the valid own entries. The state itself is not modified.
std::pair<at::Tensor, at::Tensor> AppendToKvCache(const MixerState& state, const at::Tensor& k,
                                                  const at::Tensor& v);

// The most segments a state shares; SharePrefix copies instead past it, so that a chain of
// hits on hits does not split the keys ever finer.
inline constexpr size_t kMaxKvSegments = 8;

// A state at `state`'s position whose positions are all shared with `state` (its segments,
// then its own valid entries as one more), with own caches of room `reserve` (uninitialised):
// nothing copied. Past kMaxKvSegments, or off the CPU, the keys and values are copied into own
// caches of capacity position + reserve instead (no segments). `state` must pass CheckKvCache;
// it is not modified, and goes on appending as before.
MixerState SharePrefix(const MixerState& state, int64_t reserve);

// Positions [0, position) of the cache's keys (index 0) or values (1), its shared segments' and
// its own, copied into one new buffer of capacity position + reserve (the rest uninitialised).
at::Tensor KvCacheCopy(const MixerState& state, int index, int64_t reserve);

// Replaces a state's caches by KvCacheCopy's and drops the segments: a state every KV reader
// takes.
void FlattenKvCache(MixerState& state, int64_t reserve = 0);

// Positions [0, length) of the cache's keys (index 0) or values (1), length <= position, as one
// (B, H, length, d) tensor: a view of the own cache without segments, a new one with them.
at::Tensor KvCachePrefix(const MixerState& state, int index, int64_t length);

// Batch row `row` of caches (B, H, capacity, d), its first `length` positions valid (>= 1: a
// decode step's query is the token at length - 1), counting the state's shared segments
// (`shared`, null: none) before the caches' own entries.
struct KvCacheRow {
  at::Tensor k_cache;
  at::Tensor v_cache;
  int64_t row = 0;
  int64_t length = 0;
  const std::vector<KvSegment>* shared = nullptr;
};

// The same row for the CPU decode kernel (pointers into the caches); the shared segments'
// spans go into `spans`, one vector per row, which must outlive the result's use.
DecodeAttentionRow DecodeRowOf(const KvCacheRow& row, std::vector<DecodeAttentionRow>* spans);

}  // namespace attnserve::kernels
