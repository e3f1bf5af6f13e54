// libFuzzer target for the safetensors header parser: any bytes as a whole file. Beyond "no
// crash, no out-of-bounds read, no undefined behaviour" (the sanitizers), it checks what a
// successful parse promises, since the loader relies on it to read the data unchecked.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "server/model/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using attnserve::model::ParseSafetensorsHeader;
  using attnserve::model::SafetensorsDTypeSize;
  auto header =
      ParseSafetensorsHeader(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!header.ok()) return 0;
  if (header->data_offset < 8 || header->data_offset > size) __builtin_trap();
  uint64_t previous_end = header->data_offset;
  for (const auto& e : header->tensors) {
    // Inside the data section, sorted, not overlapping (empty ranges aside).
    if (e.byte_offset < header->data_offset || e.byte_offset > size) __builtin_trap();
    if (e.byte_length > size - e.byte_offset) __builtin_trap();
    if (e.byte_length > 0) {
      if (e.byte_offset < previous_end) __builtin_trap();
      previous_end = e.byte_offset + e.byte_length;
    }
    // byte_length == product(shape) * dtype size, computed without overflow: every size is
    // at most byte_length unless some size is zero.
    uint64_t elements = 1;
    bool zero = false;
    for (int64_t d : e.shape) {
      if (d < 0) __builtin_trap();
      if (d == 0) zero = true;
    }
    if (zero) {
      if (e.byte_length != 0) __builtin_trap();
      continue;
    }
    for (int64_t d : e.shape) {
      if (static_cast<uint64_t>(d) > e.byte_length) __builtin_trap();
      elements *= static_cast<uint64_t>(d);
      if (elements > e.byte_length) __builtin_trap();
    }
    if (elements * SafetensorsDTypeSize(e.dtype) != e.byte_length) __builtin_trap();
  }
  return 0;
}
