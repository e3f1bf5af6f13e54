// A ModelState as bytes and back, to write a session to disk or move it between servers.
// Format (little-endian), version 1:
//   "ASST" | u32 version | u64 model fingerprint | i64 position | u32 layer count |
//   per layer: i64 position | u32 tensor count | per tensor: u32 rank | i64 sizes... |
//              float32 data | ... | u32 CRC-32 of everything before it
// Only the valid part of a growing cache is written (what StateBytesPerSequence counts).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "server/model/model.h"

namespace attnserve::model {

std::string SerializeState(const Model& model, const ModelState& state);

// Refuses bytes that are truncated, corrupt (checksum), of another version, or of another
// model (fingerprint), each with its own message; the tensors must match the model's layers.
absl::StatusOr<ModelState> DeserializeState(const Model& model, std::string_view bytes);

// CRC-32 (IEEE 802.3), as zlib computes it.
uint32_t Crc32(std::string_view bytes);

}  // namespace attnserve::model
