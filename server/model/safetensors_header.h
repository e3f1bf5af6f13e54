// Parsing and validation of a safetensors file's header, without torch.
//
// The format (https://github.com/huggingface/safetensors): an 8-byte little-endian u64 N,
// then N bytes of UTF-8 JSON, then the data section. The JSON is an object mapping each
// tensor name to {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, offsets
// in bytes relative to the start of the data section, plus an optional "__metadata__"
// object of string to string.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnserve::model {

// The element types attnserve loads. Other safetensors dtypes (I64, F64, ...) are rejected
// as unsupported.
enum class SafetensorsDType { kF32, kF16, kBF16 };

// "F32", "F16", "BF16": the names the format uses.
const char* SafetensorsDTypeName(SafetensorsDType dtype);

// Bytes per element: 4 or 2.
int SafetensorsDTypeSize(SafetensorsDType dtype);

// One tensor of the file, as the header describes it and validation guarantees it:
// product(shape) * dtype size == byte_length, and [byte_offset, byte_offset + byte_length)
// lies inside the file and overlaps no other tensor's bytes.
struct SafetensorsEntry {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;  // Each size >= 0; empty for a scalar.
  uint64_t byte_offset = 0;    // From the start of the file (not of the data section).
  uint64_t byte_length = 0;
};

struct SafetensorsHeader {
  // Sorted by byte_offset, then by name (the JSON object's key order is not kept).
  std::vector<SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__"; empty when absent.
  uint64_t data_offset = 0;                     // 8 + N: where the data section starts.
};

// The largest header accepted, as in the reference implementation: a bound on the work and
// memory that parsing a hostile file can take. Parsing is linear in the header size but slow
// (protobuf's JSON parser: about 1 ms per 1000 bytes, i.e. ~50 us per tensor); real headers are
// tens of kilobytes.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Parses and validates the header of the complete file `file` (header and data section).
// Every inconsistency is InvalidArgument with a message that names the tensor and the
// numbers involved. Never reads outside `file`, whatever its contents; thread-safe.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view file);

}  // namespace attnserve::model
