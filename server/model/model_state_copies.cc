// Model's copies of a state: shallow with growing caches shared (CloneSharingCaches), compact
// (CompactClone), sharing a KV prefix (CloneSharingPrefix), and the caches' room reserved ahead
// (ReserveCaches). Contracts in model.h.
#include <ATen/ATen.h>

#include <vector>

#include "kernels/common/huge_page_buffer.h"
#include "kernels/common/tensor_checks.h"
#include "kernels/standard/kv_cache.h"
#include "server/model/model.h"

namespace attnserve::model {

namespace {

// Whether tensor k of layer i is a growing cache by `flags` (Model::growing_caches()).
bool IsGrowing(const std::vector<std::vector<bool>>& flags, size_t i, size_t k) {
  return i < flags.size() && k < flags[i].size() && flags[i][k];
}

// A growing cache `t` (B, H, capacity, d) with its first `position` entries along dim 2 copied
// into a new buffer of capacity position + reserve (the rest uninitialised).
at::Tensor WithCapacity(const at::Tensor& t, int64_t position, int64_t reserve) {
  std::vector<int64_t> sizes = t.sizes().vec();
  sizes[2] = position + reserve;
  at::Tensor out = kernels::EmptyHugePageBuffer(sizes, t.options());
  out.narrow(2, 0, position).copy_(t.narrow(2, 0, position));
  return out;
}

}  // namespace

ModelState Model::CloneSharingCaches(const ModelState& state, const BlockSource& block) const {
  ModelState copy = state;  // shallow: every tensor shared
  auto copied = [&](size_t i, size_t k) {
    return !IsGrowing(growing_caches_, i, k) && copy.layers[i].tensors[k].defined();
  };
  constexpr int64_t kAlign = 64;
  auto bytes_of = [](const at::Tensor& t) {
    return (t.numel() * static_cast<int64_t>(t.element_size()) + kAlign - 1) / kAlign * kAlign;
  };
  at::Tensor memory;
  if (block) {
    int64_t total = 0;
    for (size_t i = 0; i < copy.layers.size(); ++i) {
      for (size_t k = 0; k < copy.layers[i].tensors.size(); ++k) {
        if (copied(i, k)) total += bytes_of(copy.layers[i].tensors[k]);
      }
    }
    if (total > 0) memory = block(total);
  }
  int64_t offset = 0;
  for (size_t i = 0; i < copy.layers.size(); ++i) {
    std::vector<at::Tensor>& tensors = copy.layers[i].tensors;
    for (size_t k = 0; k < tensors.size(); ++k) {
      if (!copied(i, k)) continue;
      const at::Tensor& t = tensors[k];
      if (!memory.defined()) {
        tensors[k] = t.clone();
        continue;
      }
      const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
      at::Tensor out = memory.narrow(0, offset, bytes).view(t.scalar_type()).view(t.sizes());
      out.copy_(t);
      tensors[k] = out;
      offset += bytes_of(t);
    }
  }
  return copy;
}

ModelState Model::CompactClone(const ModelState& state, int64_t reserve) const {
  ModelState copy;
  copy.position = state.position;
  for (size_t i = 0; i < state.layers.size(); ++i) {
    const kernels::MixerState& layer = state.layers[i];
    kernels::MixerState& out = copy.layers.emplace_back();
    out.position = layer.position;
    for (size_t k = 0; k < layer.tensors.size(); ++k) {
      const at::Tensor& t = layer.tensors[k];
      if (!IsGrowing(growing_caches_, i, k) || !t.defined() ||
          (layer.shared.empty() && t.size(2) == layer.position + reserve)) {
        out.tensors.push_back(t.defined() ? t.clone() : t);
        continue;
      }
      out.tensors.push_back(kernels::KvCacheCopy(layer, static_cast<int>(k), reserve));
    }
  }
  return copy;
}

absl::StatusOr<ModelState> Model::CloneSharingPrefix(const ModelState& state,
                                                     int64_t reserve) const {
  return kernels::GuardTorch("copying a state", [&]() -> absl::StatusOr<ModelState> {
    ModelState copy;
    copy.position = state.position;
    for (size_t i = 0; i < state.layers.size(); ++i) {
      const kernels::MixerState& layer = state.layers[i];
      const bool kv_cache = layer.tensors.size() == 2 && IsGrowing(growing_caches_, i, 0) &&
                            IsGrowing(growing_caches_, i, 1) && layer.tensors[0].defined() &&
                            layer.tensors[1].defined();
      copy.layers.push_back(kv_cache ? kernels::SharePrefix(layer, reserve) : layer.Clone());
    }
    return copy;
  });
}

absl::Status Model::ReserveCaches(ModelState& state, int64_t tokens) const {
  return kernels::GuardTorch("reserving KV caches", [&]() -> absl::Status {
    for (size_t i = 0; i < state.layers.size(); ++i) {
      kernels::MixerState& layer = state.layers[i];
      for (size_t k = 0; k < layer.tensors.size(); ++k) {
        at::Tensor& t = layer.tensors[k];
        const int64_t own = layer.position - layer.SharedLength();  // valid own entries
        if (IsGrowing(growing_caches_, i, k) && t.defined() && t.size(2) < own + tokens) {
          t = WithCapacity(t, own, tokens);
        }
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace attnserve::model
