// Reading and writing safetensors files: the weights of a model folder.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/model/safetensors_header.h"

namespace attnserve::model {

// A validated safetensors file, memory-mapped read-only (or held in memory, for tests).
// Tensors are copied out on request, so what LoadFloat32 returns owns its memory and
// outlives the file. Immutable after creation: all const methods are safe to call from any
// number of threads at once.
class SafetensorsFile {
 public:
  // Maps the file at `path` (read-only, private) and validates its header. Errors name the
  // path: NotFound / PermissionDenied / Internal with strerror when open, stat or mmap fails,
  // InvalidArgument for an empty file, a non-regular file or an invalid header.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  // The same over the complete file's bytes in memory.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBytes(std::string bytes);

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();  // Unmaps the file.

  // Tensor names in the order of their data in the file.
  std::vector<std::string> names() const;

  // The tensor's header entry, or null when the file has no tensor of that name. The pointer
  // lives as long as this object.
  const SafetensorsEntry* Find(absl::string_view name) const;

  // A new contiguous float32 CPU tensor with the tensor's shape: F32 copied, F16 and BF16
  // converted exactly. NotFound naming the tensor when the file has none of that name.
  absl::StatusOr<at::Tensor> LoadFloat32(const std::string& name) const;

  // The "__metadata__" strings; empty when the file has none.
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }

  // Where the bytes came from: the path, or "<memory>".
  const std::string& source() const { return source_; }

 private:
  SafetensorsFile() = default;
  absl::Status Init();  // Parses the header of data_[0, size_).

  std::string source_;
  std::string owned_;           // The bytes, for FromBytes.
  void* mapping_ = nullptr;     // The mmap region, for Open; null otherwise.
  const char* data_ = nullptr;  // Start of the file's bytes (into owned_ or mapping_).
  size_t size_ = 0;             // Bytes of the file.
  SafetensorsHeader header_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in header_.tensors.
};

// Writes `tensors` (float32, any layout and device; stored row-major as F32) in the given
// order, with `metadata` as "__metadata__", to `path`. The header is padded with spaces so
// that the data section starts 8-byte aligned, as the reference writer does. Written to a
// temporary file next to `path` and renamed over it, so readers see the old file or the
// whole new one. Names must be unique, valid UTF-8 and not "__metadata__"; a non-float32
// tensor is InvalidArgument naming it.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata);

}  // namespace attnserve::model
