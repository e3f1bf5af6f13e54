#include "kernels/standard/kv_cache.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/common/huge_page_buffer.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"

namespace attnserve::kernels {
namespace {

// Smallest capacity a cache grows to, so that decoding from an empty state does not
// reallocate on each of its first tokens.
constexpr int64_t kMinCacheCapacity = 64;

}  // namespace

MixerState EmptyKvCache(int64_t batch, int64_t heads, int64_t head_dim, at::Device device) {
  MixerState state;
  const at::Tensor empty =
      at::zeros({batch, heads, 0, head_dim}, at::TensorOptions(at::kFloat).device(device));
  state.tensors = {empty, empty.clone()};
  return state;
}

absl::Status CheckKvCache(const MixerState& state, int64_t batch, int64_t h, int64_t d,
                          at::Device device, const char* mixer) {
  if (state.tensors.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        mixer, " state: expected 2 tensors (k_cache, v_cache), got ", state.tensors.size()));
  }
  RETURN_IF_ERROR(CheckFloatTensor(state.tensors[0], absl::StrCat(mixer, " state k_cache").c_str(),
                                   {-1, h, -1, d}, device));
  const at::Tensor& k_cache = state.tensors[0];
  if (k_cache.size(0) != batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        mixer, " state holds a batch of ", k_cache.size(0), " sequences, but x has ", batch));
  }
  RETURN_IF_ERROR(CheckFloatTensor(state.tensors[1], absl::StrCat(mixer, " state v_cache").c_str(),
                                   {batch, h, k_cache.size(2), d}, device));
  if (state.position < 0 || state.position > k_cache.size(2)) {
    return absl::InvalidArgumentError(absl::StrCat(mixer, " state: position ", state.position,
                                                   " is outside the KV cache capacity [0, ",
                                                   k_cache.size(2), "]"));
  }
  return absl::OkStatus();
}

std::pair<at::Tensor, at::Tensor> AppendToKvCache(const MixerState& state, const at::Tensor& k,
                                                  const at::Tensor& v) {
  at::Tensor k_cache = state.tensors[0], v_cache = state.tensors[1];
  const int64_t position = state.position, length = k.size(2);
  const int64_t needed = position + length;
  if (needed > k_cache.size(2) || !k_cache.is_contiguous() || !v_cache.is_contiguous()) {
    const int64_t capacity = std::max({needed, 2 * k_cache.size(2), kMinCacheCapacity});
    // Fresh memory, written at once: huge pages where large (kernels/common/huge_page_buffer.h).
    at::Tensor new_k =
        EmptyHugePageBuffer({k.size(0), k.size(1), capacity, k.size(3)}, k.options());
    at::Tensor new_v = EmptyHugePageBuffer(new_k.sizes(), k.options());
    new_k.narrow(2, 0, position).copy_(k_cache.narrow(2, 0, position));
    new_v.narrow(2, 0, position).copy_(v_cache.narrow(2, 0, position));
    k_cache = std::move(new_k);
    v_cache = std::move(new_v);
  }
  k_cache.narrow(2, position, length).copy_(k);
  v_cache.narrow(2, position, length).copy_(v);
  return {std::move(k_cache), std::move(v_cache)};
}

DecodeAttentionRow DecodeRowOf(const KvCacheRow& r) {
  const int64_t stride = r.k_cache.size(1) * r.k_cache.size(2) * r.k_cache.size(3);
  return {r.k_cache.data_ptr<float>() + r.row * stride,
          r.v_cache.data_ptr<float>() + r.row * stride, r.length, r.k_cache.size(2)};
}

}  // namespace attnserve::kernels
