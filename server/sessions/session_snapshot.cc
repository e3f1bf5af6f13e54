#include "server/sessions/session_snapshot.h"

#include <ATen/ATen.h>
#include <xxhash.h>

#include <cstring>
#include <memory>
#include <new>

#include "absl/strings/str_cat.h"
#include "attnserve/v1/session_snapshot.pb.h"
#include "kernels/common/tensor_checks.h"
#include "kernels/standard/kv_cache.h"
#include "server/client_text.h"

namespace attnserve::server {
namespace {

// A state tensor's element type in a snapshot: float32, or a bfloat16 KV cache's.
v1::DataType SnapshotDataType(at::ScalarType dtype) {
  return dtype == at::kBFloat16 ? v1::DATA_TYPE_BFLOAT16 : v1::DATA_TYPE_FLOAT32;
}

constexpr char kMagic[4] = {'A', 'T', 'S', 'N'};
constexpr size_t kPrefixBytes = sizeof(kMagic) + 4 + 4;  // magic, version, header length
constexpr size_t kChecksumBytes = 8;

template <typename T>
T LoadLittleEndian(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // x86-64 and aarch64 Linux: little-endian already
  return v;
}

absl::Status Corrupt(const std::string& why) {
  return absl::DataLossError(absl::StrCat("session snapshot is corrupt: ", why));
}

}  // namespace

std::string EncodeSessionSnapshot(const Session& session) {
  const model::Model& m = *session.model();
  const model::ModelState& state = session.state;
  const std::vector<std::vector<bool>>& growing_caches = m.growing_caches();
  v1::SessionSnapshotHeader header;
  header.set_session_id(session.id());
  header.set_owner(session.owner());
  header.set_model(m.name());
  header.set_model_fingerprint(m.fingerprint());
  header.set_ttl_seconds(static_cast<int32_t>(absl::ToInt64Seconds(session.ttl())));
  const absl::Time now = absl::Now();
  header.set_saved_unix_ms(absl::ToUnixMillis(now));
  header.set_idle_ms(std::max<int64_t>(0, absl::ToInt64Milliseconds(now - session.last_used())));
  header.set_position(state.position);
  header.set_last_sequence_number(session.last_sequence_number);
  for (const Session::StoredResult& stored : session.recent_results) {
    v1::StoredAppendResult* r = header.add_recent_results();
    r->set_request_hash(stored.request_hash);
    *r->mutable_result() = stored.result;
  }
  // The tensors to write: views of the state (a KV cache's valid part), copied once, straight
  // into the snapshot (from a GPU too).
  std::vector<at::Tensor> tensors;
  int64_t payload = 0;
  for (size_t i = 0; i < state.layers.size(); ++i) {
    const kernels::MixerState& layer = state.layers[i];
    v1::LayerState* out = header.add_layers();
    out->set_position(layer.position);
    for (size_t k = 0; k < layer.tensors.size(); ++k) {
      const at::Tensor& t = layer.tensors[k];
      const bool growing =
          i < growing_caches.size() && k < growing_caches[i].size() && growing_caches[i][k];
      // A KV cache's valid part: a view, or one copy of its shared segments and own entries.
      at::Tensor view =
          growing ? kernels::KvCachePrefix(layer, static_cast<int>(k), layer.position) : t;
      v1::StateTensor* desc = out->add_tensors();
      desc->set_dtype(SnapshotDataType(view.scalar_type()));
      for (int64_t s : view.sizes()) desc->add_shape(s);
      payload += view.numel() * static_cast<int64_t>(view.element_size());
      tensors.push_back(std::move(view));
    }
  }
  header.set_payload_bytes(payload);
  const std::string header_bytes = header.SerializeAsString();
  // Appended piece by piece (no zero-filled buffer first), each piece hashed while it is still
  // in cache.
  std::string out;
  out.reserve(kPrefixBytes + header_bytes.size() + payload + kChecksumBytes);
  struct FreeState {
    void operator()(XXH3_state_t* state) const { XXH3_freeState(state); }
  };
  const std::unique_ptr<XXH3_state_t, FreeState> hash_state(XXH3_createState());
  if (hash_state == nullptr) throw std::bad_alloc();
  XXH3_state_t* hash = hash_state.get();
  XXH3_64bits_reset(hash);
  auto append = [&](const void* data, size_t n) {
    out.append(static_cast<const char*>(data), n);
    XXH3_64bits_update(hash, out.data() + out.size() - n, n);
  };
  const uint32_t version = kSessionSnapshotVersion;
  const uint32_t header_size = static_cast<uint32_t>(header_bytes.size());
  append(kMagic, sizeof(kMagic));
  append(&version, 4);
  append(&header_size, 4);
  append(header_bytes.data(), header_bytes.size());
  for (const at::Tensor& t : tensors) {
    const size_t element = t.element_size();
    if (t.is_cpu() && t.is_contiguous()) {
      append(t.data_ptr(), t.numel() * element);
    } else if (t.is_cpu() && t.dim() == 4 && t.stride(3) == 1 && t.stride(2) == t.size(3)) {
      // A KV cache's valid part, (B, H, position, d) of (B, H, capacity, d): a run of
      // position * d elements per (b, h).
      const char* base = static_cast<const char*>(t.data_ptr());
      for (int64_t b = 0; b < t.size(0); ++b) {
        for (int64_t h = 0; h < t.size(1); ++h) {
          append(base + (b * t.stride(0) + h * t.stride(1)) * element,
                 t.size(2) * t.size(3) * element);
        }
      }
    } else {  // on a GPU, or another layout: one copy to the host first
      const at::Tensor c = t.cpu().contiguous();
      append(c.data_ptr(), c.numel() * element);
    }
  }
  const uint64_t checksum = XXH3_64bits_digest(hash);
  out.append(reinterpret_cast<const char*>(&checksum), kChecksumBytes);
  return out;
}

absl::StatusOr<SessionSnapshot> DecodeSessionSnapshot(std::string_view bytes,
                                                      const model::ModelRepository& models,
                                                      absl::Time now) {
  if (bytes.size() < kPrefixBytes || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(absl::StrCat("not an attnserve session snapshot (",
                                            bytes.size() < kPrefixBytes ? "too short" : "bad magic",
                                            ", ", bytes.size(), " bytes)"));
  }
  const uint32_t version = LoadLittleEndian<uint32_t>(bytes.data() + 4);
  if (version != kSessionSnapshotVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("session snapshot format version ", version,
                     " is not supported: this server reads version ", kSessionSnapshotVersion));
  }
  const uint64_t header_size = LoadLittleEndian<uint32_t>(bytes.data() + 8);
  if (bytes.size() < kPrefixBytes + header_size + kChecksumBytes) {
    return absl::DataLossError(absl::StrCat("session snapshot is truncated: ", bytes.size(),
                                            " bytes, its header alone needs ",
                                            kPrefixBytes + header_size + kChecksumBytes));
  }
  v1::SessionSnapshotHeader header;
  const bool parsed =
      header.ParseFromArray(bytes.data() + kPrefixBytes, static_cast<int>(header_size));
  if (parsed && header.payload_bytes() >= 0 &&
      static_cast<uint64_t>(header.payload_bytes()) !=
          bytes.size() - kPrefixBytes - header_size - kChecksumBytes) {
    const uint64_t expected = kPrefixBytes + header_size + header.payload_bytes() + kChecksumBytes;
    if (bytes.size() < expected) {
      return absl::DataLossError(
          absl::StrCat("session snapshot is truncated: ", bytes.size(), " bytes of ", expected));
    }
    return Corrupt(absl::StrCat(bytes.size() - expected, " bytes after its end"));
  }
  const uint64_t stored = LoadLittleEndian<uint64_t>(bytes.data() + bytes.size() - kChecksumBytes);
  if (XXH3_64bits(bytes.data(), bytes.size() - kChecksumBytes) != stored) {
    return Corrupt("checksum mismatch");
  }
  if (!parsed) return Corrupt("its header does not parse");
  if (!ValidateSessionId(header.session_id()).ok()) return Corrupt("bad session id");

  const model::Model* m = models.Find(header.model());
  if (m == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("session snapshot is of model ",
                                                      ClientText(header.model()),
                                                      ", which this server does not serve"));
  }
  if (header.model_fingerprint() != m->fingerprint()) {
    return absl::FailedPreconditionError(
        absl::StrCat("session snapshot is of another model '", m->name(),
                     "' (other architecture or weights: fingerprint ", header.model_fingerprint(),
                     ", served ", m->fingerprint(), ")"));
  }
  absl::StatusOr<model::ModelState> fresh = m->NewState(1);
  if (!fresh.ok()) return fresh.status();
  if (header.layers_size() != static_cast<int>(fresh->layers.size())) {
    return Corrupt(absl::StrCat(header.layers_size(), " layers, model '", m->name(), "' has ",
                                fresh->layers.size()));
  }
  if (header.position() < 0 || header.position() > m->max_sequence_length() ||
      header.ttl_seconds() <= 0 || header.idle_ms() < 0 || header.last_sequence_number() < 0) {
    return Corrupt("position, ttl, idle time or sequence number out of range");
  }
  // Shapes first: nothing is allocated for a snapshot that does not fit its model.
  int64_t payload = 0;
  for (int i = 0; i < header.layers_size(); ++i) {
    const v1::LayerState& layer = header.layers(i);
    const std::vector<at::Tensor>& like = fresh->layers[i].tensors;
    if (layer.tensors_size() != static_cast<int>(like.size())) {
      return Corrupt(absl::StrCat("layer ", i, " has ", layer.tensors_size(), " tensors, expected ",
                                  like.size()));
    }
    if (layer.position() != header.position()) {
      return Corrupt(absl::StrCat("layer ", i, " is at position ", layer.position(), ", not ",
                                  header.position()));
    }
    for (int k = 0; k < layer.tensors_size(); ++k) {
      const v1::StateTensor& t = layer.tensors(k);
      std::vector<int64_t> expected(like[k].sizes().begin(), like[k].sizes().end());
      if (m->growing_caches()[i][k]) expected[2] = layer.position();  // its valid part
      const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
      if (t.dtype() != SnapshotDataType(like[k].scalar_type()) || shape != expected) {
        return Corrupt(absl::StrCat("layer ", i, " tensor ", k, " has shape ",
                                    kernels::ShapeString(shape), " ", v1::DataType_Name(t.dtype()),
                                    ", expected ", kernels::ShapeString(expected), " ",
                                    kernels::DTypeName(like[k].scalar_type())));
      }
      int64_t numel = 1;
      for (int64_t s : shape) numel *= s;
      payload += numel * static_cast<int64_t>(like[k].element_size());
    }
  }
  if (payload != header.payload_bytes()) {
    return Corrupt(
        absl::StrCat("tensors of ", payload, " bytes, header says ", header.payload_bytes()));
  }

  SessionSnapshot snapshot;
  snapshot.session_id = header.session_id();
  snapshot.owner = header.owner();
  snapshot.model = m;
  snapshot.ttl = absl::Seconds(header.ttl_seconds());
  const absl::Duration since_saved =
      std::max(absl::ZeroDuration(), now - absl::FromUnixMillis(header.saved_unix_ms()));
  snapshot.idle = absl::Milliseconds(header.idle_ms()) + since_saved;
  snapshot.last_sequence_number = header.last_sequence_number();
  for (const v1::StoredAppendResult& r : header.recent_results()) {
    snapshot.recent_results.push_back({r.request_hash(), r.result()});
  }
  snapshot.state.position = header.position();
  const char* p = bytes.data() + kPrefixBytes + header_size;
  for (int i = 0; i < header.layers_size(); ++i) {
    kernels::MixerState layer;
    layer.position = header.layers(i).position();
    const std::vector<at::Tensor>& like = fresh->layers[i].tensors;
    for (int k = 0; k < header.layers(i).tensors_size(); ++k) {
      const auto& shape = header.layers(i).tensors(k).shape();
      at::Tensor t =
          at::empty(std::vector<int64_t>(shape.begin(), shape.end()), like[k].scalar_type());
      const size_t n = t.numel() * t.element_size();
      std::memcpy(t.data_ptr(), p, n);
      p += n;
      layer.tensors.push_back(t.to(like[k].device()));
    }
    snapshot.state.layers.push_back(std::move(layer));
  }
  return snapshot;
}

}  // namespace attnserve::server
