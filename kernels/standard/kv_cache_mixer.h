// An attention mixer that streams with a KV cache (kv_cache.h): the standard and sparse
// mixers. It owns the q/k/v/o projections, the cache and the checks; a subclass says how a
// chunk's queries attend to keys (Attend) and how one decode step per row reads its cache
// (AttendCaches).
//
// config.causal = true: Prefill continues a state (the chunk's keys appended to the cache, its
//   queries the last of the cache's positions), Step and StepBatch append one token per row;
//   StateBytesPerSequence(position) = 2·Hkv·position·d·(4 or 2) bytes, the cache's valid part
//   (Hkv: the key/value heads, MixerConfig::kv_heads()).
// Rotary positions (MixerConfig::rope): queries and keys are rotated after the projections, a
//   token at the state's position plus its index in the chunk (each StepBatch row at its own
//   state's); the cache holds rotated keys, so nothing is rotated twice.
//   A bfloat16 cache holds keys and values rounded to bfloat16; every path attends over the
//   rounded ones (Prefill without a state too), so that a whole pass, chunks and steps agree.
// config.causal = false: bidirectional; only Prefill with a null state works, InitialState,
//   Step and Prefill with a state return FailedPrecondition.
// StepBatch on the CPU: the projections once over B rows, each row appending to its own cache
// and AttendCaches over every row at its own length; other devices take Mixer::StepBatch.
// Shared segments (kv_cache.h): a subclass that reads them (ReadsSharedSegments) gets them in
// AttendCaches' rows, and Prefill attends over them in place with the fused CPU kernel where it
// takes the shapes; otherwise the state is flattened (FlattenKvCache) first, once.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/common/attention_projections.h"
#include "kernels/common/mixer.h"
#include "kernels/common/rotary_positions.h"
#include "kernels/standard/kv_cache.h"

namespace attnserve::kernels {

class KvCacheAttentionMixer : public Mixer {
 public:
  // `name` starts messages ("standard": "standard state: ...", "standard attention is ...").
  // `cache_dtype`: the caches' element type, at::kFloat or at::kBFloat16 (CPU only).
  KvCacheAttentionMixer(const MixerConfig& config, AttentionProjections projections,
                        const char* name, at::ScalarType cache_dtype = at::kFloat);

  const MixerConfig& config() const final { return config_; }
  bool can_stream() const final { return config_.causal; }
  absl::StatusOr<MixerState> InitialState(int64_t batch) const final;
  absl::StatusOr<at::Tensor> Prefill(const at::Tensor& x, MixerState* state) const final;
  absl::StatusOr<at::Tensor> Step(const at::Tensor& x_t, MixerState* state) const final;
  absl::StatusOr<at::Tensor> StepBatch(const at::Tensor& x_t,
                                       const std::vector<MixerState*>& states) const final;
  int64_t StateBytesPerSequence(int64_t position) const final;
  int64_t StepKeysRead(int64_t position) const override {
    if (!config_.causal) return 0;
    return config_.attention_window > 0 ? std::min(position + 1, config_.attention_window)
                                        : position + 1;
  }

 protected:
  // q (B, H, Lq, d), k, v (B, Hkv, Lk, d) -> (B, H, Lq, d). causal: the queries are the last Lq
  // of the Lk positions; config().attention_window applies.
  virtual absl::StatusOr<at::Tensor> Attend(const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v, bool causal) const = 0;
  // q (B, H, 1, d), row b's query over rows[b] (caches of Hkv heads) -> (B, H, 1, d). Step
  // passes B rows of one batch cache at one length; StepBatch (CPU) one row of each state.
  virtual absl::StatusOr<at::Tensor> AttendCaches(const at::Tensor& q,
                                                  const std::vector<KvCacheRow>& rows) const = 0;
  // Whether AttendCaches reads rows' shared segments (KvCacheRow::shared), and Attend is
  // softmax attention over every key (what the fused kernel computes). Default: no.
  virtual bool ReadsSharedSegments() const { return false; }

 private:
  at::Device device() const { return projections_.device(); }
  absl::Status CheckCanStream(const char* operation) const;
  absl::Status CheckState(const MixerState& state, int64_t batch) const;

  // Keys and values as the cache holds them, as float32 for the attention kernels: k itself for
  // a float32 cache, rounded to bfloat16 and widened back for a bfloat16 one.
  at::Tensor AsCached(const at::Tensor& k) const;

  const MixerConfig config_;
  const AttentionProjections projections_;
  const char* const name_;
  const at::ScalarType cache_dtype_;
  const RotaryPositions rope_;  // disabled without rotary positions
};

}  // namespace attnserve::kernels
