#include "server/model/state_serialization.h"

#include <ATen/ATen.h>

#include <array>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"

namespace attnserve::model {
namespace {

constexpr char kMagic[4] = {'A', 'S', 'S', 'T'};
constexpr uint32_t kVersion = 1;
constexpr int64_t kMaxRank = 8;

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  template <typename T>
  bool Get(T* v) {
    if (bytes_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetBytes(void* dst, size_t n) {
    if (bytes_.size() - pos_ < n) return false;
    std::memcpy(dst, bytes_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  size_t remaining() const { return bytes_.size() - pos_; }

 private:
  std::string_view bytes_;
  size_t pos_ = 0;
};

absl::Status Truncated() { return absl::InvalidArgumentError("session state is truncated"); }

}  // namespace

uint32_t Crc32(std::string_view bytes) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char b : bytes) crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

std::string SerializeState(const Model& model, const ModelState& state) {
  // A tensor that is empty along dim 2 in a fresh state is a growing cache: only its first
  // `position` entries are valid, the rest is spare capacity.
  const absl::StatusOr<ModelState> fresh = model.NewState(1);
  auto growing = [&](size_t layer, size_t k) {
    if (!fresh.ok() || layer >= fresh->layers.size()) return false;
    const auto& tensors = fresh->layers[layer].tensors;
    return k < tensors.size() && tensors[k].dim() > 2 && tensors[k].size(2) == 0;
  };
  std::string out(kMagic, sizeof(kMagic));
  Put<uint32_t>(&out, kVersion);
  Put<uint64_t>(&out, model.fingerprint());
  Put<int64_t>(&out, state.position);
  Put<uint32_t>(&out, static_cast<uint32_t>(state.layers.size()));
  for (size_t i = 0; i < state.layers.size(); ++i) {
    const kernels::MixerState& layer = state.layers[i];
    Put<int64_t>(&out, layer.position);
    Put<uint32_t>(&out, static_cast<uint32_t>(layer.tensors.size()));
    for (size_t k = 0; k < layer.tensors.size(); ++k) {
      const at::Tensor& t = layer.tensors[k];
      // .cpu(): a state on a GPU is copied to host memory (a no-op for CPU states).
      at::Tensor c = (growing(i, k) ? t.narrow(2, 0, layer.position) : t).cpu().contiguous();
      Put<uint32_t>(&out, static_cast<uint32_t>(c.dim()));
      for (int64_t s : c.sizes()) Put<int64_t>(&out, s);
      out.append(reinterpret_cast<const char*>(c.data_ptr<float>()), c.numel() * sizeof(float));
    }
  }
  Put<uint32_t>(&out, Crc32(out));
  return out;
}

absl::StatusOr<ModelState> DeserializeState(const Model& model, std::string_view bytes) {
  if (bytes.size() < sizeof(kMagic) + 4 + 8 + 8 + 4 + 4 ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError("not an attnserve session state (bad magic or too short)");
  }
  uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - 4, 4);
  const std::string_view body = bytes.substr(0, bytes.size() - 4);
  if (Crc32(body) != stored_crc) {
    return absl::DataLossError("session state is corrupt: checksum mismatch");
  }
  Reader r(body.substr(sizeof(kMagic)));
  uint32_t version, layers;
  uint64_t fingerprint;
  ModelState state;
  if (!r.Get(&version) || !r.Get(&fingerprint) || !r.Get(&state.position) || !r.Get(&layers)) {
    return Truncated();
  }
  if (version != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "session state version ", version, " is not supported (this server reads ", kVersion, ")"));
  }
  if (fingerprint != model.fingerprint()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session state belongs to another model (or other weights) than '", model.name(), "'"));
  }
  ASSIGN_OR_RETURN(ModelState fresh, model.NewState(1));
  if (layers != fresh.layers.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("session state has ", layers, " layers, the model has ", fresh.layers.size()));
  }
  for (uint32_t i = 0; i < layers; ++i) {
    kernels::MixerState layer;
    uint32_t count;
    if (!r.Get(&layer.position) || !r.Get(&count)) return Truncated();
    if (count != fresh.layers[i].tensors.size()) {
      return absl::InvalidArgumentError(absl::StrCat("session state layer ", i, " has ", count,
                                                     " tensors, expected ",
                                                     fresh.layers[i].tensors.size()));
    }
    for (uint32_t k = 0; k < count; ++k) {
      uint32_t rank;
      if (!r.Get(&rank)) return Truncated();
      const at::Tensor& like = fresh.layers[i].tensors[k];
      if (rank != static_cast<uint32_t>(like.dim()) || rank > kMaxRank) {
        return absl::InvalidArgumentError(absl::StrCat("session state layer ", i, " tensor ", k,
                                                       " has rank ", rank, ", expected ",
                                                       like.dim()));
      }
      std::vector<int64_t> sizes(rank);
      int64_t numel = 1;
      for (uint32_t d = 0; d < rank; ++d) {
        if (!r.Get(&sizes[d])) return Truncated();
        if (sizes[d] < 0 ||
            (sizes[d] > 0 && numel > static_cast<int64_t>(r.remaining() / 4) / sizes[d])) {
          return Truncated();
        }
        numel *= sizes[d];
        // Every size but a growing cache's length is fixed by the model.
        const bool cache_length = d == 2 && like.size(2) == 0;
        if (cache_length ? sizes[d] != layer.position : sizes[d] != like.size(d)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "session state layer ", i, " tensor ", k, " has shape ", kernels::ShapeString(sizes),
              ", expected ", kernels::ShapeString(like.sizes())));
        }
      }
      at::Tensor t = at::empty(sizes, at::kFloat);
      if (!r.GetBytes(t.data_ptr<float>(), numel * sizeof(float))) return Truncated();
      // The model's device (a copy for a GPU model; the same tensor on the CPU).
      layer.tensors.push_back(t.to(like.device()));
    }
    state.layers.push_back(std::move(layer));
  }
  if (r.remaining() != 0) {
    return absl::InvalidArgumentError("session state has trailing bytes");
  }
  return state;
}

}  // namespace attnserve::model
