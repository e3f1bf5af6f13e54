#include "kernels/standard/kv_cache.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <vector>

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

MixerState EmptyKvCache(int64_t batch, int64_t heads, int64_t head_dim, at::Device device,
                        at::ScalarType dtype) {
  MixerState state;
  const at::Tensor empty =
      at::zeros({batch, heads, 0, head_dim}, at::TensorOptions(dtype).device(device));
  state.tensors = {empty, empty.clone()};
  return state;
}

absl::Status CheckKvCache(const MixerState& state, int64_t batch, int64_t h, int64_t d,
                          at::Device device, const char* mixer, at::ScalarType dtype) {
  for (size_t i = 0; i < state.shared.size(); ++i) {
    const KvSegment& s = state.shared[i];
    const std::string name = absl::StrCat(mixer, " state shared segment ", i);
    RETURN_IF_ERROR(CheckTensor(s.k, (name + " k").c_str(), dtype, {batch, h, -1, d}, device));
    RETURN_IF_ERROR(
        CheckTensor(s.v, (name + " v").c_str(), dtype, {batch, h, s.k.size(2), d}, device));
    if (s.length < 1 || s.length > s.k.size(2) || s.k.stride(3) != 1 || s.v.stride(3) != 1 ||
        s.k.stride(1) != s.k.size(2) * d || s.v.stride(1) != s.v.size(2) * d) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": length ", s.length, " outside [1, ",
                                                     s.k.size(2), "] or not laid out as a cache"));
    }
  }
  if (state.tensors.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        mixer, " state: expected 2 tensors (k_cache, v_cache), got ", state.tensors.size()));
  }
  RETURN_IF_ERROR(CheckTensor(state.tensors[0], absl::StrCat(mixer, " state k_cache").c_str(),
                              dtype, {-1, h, -1, d}, device));
  const at::Tensor& k_cache = state.tensors[0];
  if (k_cache.size(0) != batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        mixer, " state holds a batch of ", k_cache.size(0), " sequences, but x has ", batch));
  }
  RETURN_IF_ERROR(CheckTensor(state.tensors[1], absl::StrCat(mixer, " state v_cache").c_str(),
                              dtype, {batch, h, k_cache.size(2), d}, device));
  const int64_t shared = state.SharedLength();
  if (state.position < shared || state.position - shared > k_cache.size(2)) {
    return absl::InvalidArgumentError(absl::StrCat(mixer, " state: position ", state.position,
                                                   " is outside the KV cache capacity [", shared,
                                                   ", ", shared + k_cache.size(2), "]"));
  }
  return absl::OkStatus();
}

std::pair<at::Tensor, at::Tensor> AppendToKvCache(const MixerState& state, const at::Tensor& k,
                                                  const at::Tensor& v) {
  at::Tensor k_cache = state.tensors[0], v_cache = state.tensors[1];
  const int64_t position = state.position - state.SharedLength(), length = k.size(2);
  const int64_t needed = position + length;
  if (needed > k_cache.size(2) || !k_cache.is_contiguous() || !v_cache.is_contiguous()) {
    const int64_t capacity = std::max({needed, 2 * k_cache.size(2), kMinCacheCapacity});
    // Fresh memory, written at once: huge pages where large (kernels/common/huge_page_buffer.h).
    // The cache's element type, whatever k's.
    at::Tensor new_k =
        EmptyHugePageBuffer({k.size(0), k.size(1), capacity, k.size(3)}, k_cache.options());
    at::Tensor new_v = EmptyHugePageBuffer(new_k.sizes(), k_cache.options());
    new_k.narrow(2, 0, position).copy_(k_cache.narrow(2, 0, position));
    new_v.narrow(2, 0, position).copy_(v_cache.narrow(2, 0, position));
    k_cache = std::move(new_k);
    v_cache = std::move(new_v);
  }
  k_cache.narrow(2, position, length).copy_(k);
  v_cache.narrow(2, position, length).copy_(v);
  return {std::move(k_cache), std::move(v_cache)};
}

MixerState SharePrefix(const MixerState& state, int64_t reserve) {
  const at::Tensor& k_cache = state.tensors[0];
  if (!k_cache.is_cpu() || state.shared.size() + 1 > kMaxKvSegments) {
    MixerState copy = state;
    FlattenKvCache(copy, reserve);
    return copy;
  }
  MixerState out;
  out.position = state.position;
  out.shared = state.shared;
  const int64_t own = state.position - state.SharedLength();
  if (own > 0) out.shared.push_back({state.tensors[0], state.tensors[1], own});
  std::vector<int64_t> sizes = k_cache.sizes().vec();
  sizes[2] = reserve;
  at::Tensor k = EmptyHugePageBuffer(sizes, k_cache.options());
  out.tensors = {k, EmptyHugePageBuffer(sizes, k_cache.options())};
  return out;
}

at::Tensor KvCacheCopy(const MixerState& state, int index, int64_t reserve) {
  std::vector<int64_t> sizes = state.tensors[index].sizes().vec();
  sizes[2] = state.position + reserve;
  at::Tensor out = EmptyHugePageBuffer(sizes, state.tensors[index].options());
  out.narrow(2, 0, state.position).copy_(KvCachePrefix(state, index, state.position));
  return out;
}

void FlattenKvCache(MixerState& state, int64_t reserve) {
  at::Tensor k = KvCacheCopy(state, 0, reserve), v = KvCacheCopy(state, 1, reserve);
  state.tensors[0] = std::move(k);
  state.tensors[1] = std::move(v);
  state.shared.clear();
}

at::Tensor KvCachePrefix(const MixerState& state, int index, int64_t length) {
  const at::Tensor& own = state.tensors[index];
  if (state.shared.empty()) return own.narrow(2, 0, length);
  std::vector<at::Tensor> pieces;
  int64_t taken = 0;
  for (const KvSegment& s : state.shared) {
    if (taken == length) break;
    const int64_t n = std::min(s.length, length - taken);
    pieces.push_back((index == 0 ? s.k : s.v).narrow(2, 0, n));
    taken += n;
  }
  if (taken < length) pieces.push_back(own.narrow(2, 0, length - taken));
  return at::cat(pieces, 2);
}

DecodeAttentionRow DecodeRowOf(const KvCacheRow& r, std::vector<DecodeAttentionRow>* spans) {
  const auto pointers = [&r](const at::Tensor& k, const at::Tensor& v, int64_t length) {
    const int64_t stride = k.size(1) * k.size(2) * k.size(3);
    if (k.scalar_type() == at::kBFloat16) {
      DecodeAttentionRow row;
      row.k_bf16 = reinterpret_cast<const uint16_t*>(k.data_ptr<at::BFloat16>()) + r.row * stride;
      row.v_bf16 = reinterpret_cast<const uint16_t*>(v.data_ptr<at::BFloat16>()) + r.row * stride;
      row.length = length;
      row.capacity = k.size(2);
      return row;
    }
    return DecodeAttentionRow{k.data_ptr<float>() + r.row * stride,
                              v.data_ptr<float>() + r.row * stride, length, k.size(2)};
  };
  int64_t shared = 0;
  spans->clear();
  if (r.shared != nullptr) {
    for (const KvSegment& s : *r.shared) {
      spans->push_back(pointers(s.k, s.v, s.length));
      shared += s.length;
    }
  }
  DecodeAttentionRow row = pointers(r.k_cache, r.v_cache, r.length - shared);
  row.shared = spans->data();
  row.shared_count = static_cast<int64_t>(spans->size());
  return row;
}

}  // namespace attnserve::kernels
