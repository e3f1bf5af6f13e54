// UTF-8 helpers for the tokenizer and the text streams: validation that names the first bad
// byte, the length of a complete prefix (for streaming text that must not end inside a
// character), and WHATWG-style repair (each maximal invalid subpart becomes U+FFFD, as
// TextDecoder and Rust's from_utf8_lossy do). Pure functions on bytes; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace attnserve::server::text {

// The byte offset of the first byte that does not start or continue a valid UTF-8 sequence
// (overlong forms, surrogates and code points above U+10FFFF are invalid), or text.size()
// when all of `text` is valid.
size_t FirstInvalidUtf8(absl::string_view text);

// OK, or INVALID_ARGUMENT "<what> is not valid UTF-8 at byte N".
absl::Status CheckUtf8(absl::string_view text, absl::string_view what);

// The length of the longest prefix of `bytes` that does not end inside a UTF-8 sequence that
// could still be completed: at most 3 trailing bytes (a valid start of a longer sequence)
// are left out. Bytes that can never be valid do not wait (Utf8Repair turns them to U+FFFD).
size_t CompleteUtf8Prefix(absl::string_view bytes);

// `bytes` with each maximal invalid subpart replaced by U+FFFD (EF BF BD); valid UTF-8 is
// returned unchanged.
std::string Utf8Repair(absl::string_view bytes);

// Decodes the code point at text[*pos] (valid UTF-8 assumed) and advances *pos past it.
char32_t NextCodePoint(absl::string_view text, size_t* pos);

// Appends code point `cp` (< 0x110000, not a surrogate) as UTF-8.
void AppendUtf8(char32_t cp, std::string* out);

// The length of the UTF-8 sequence that lead byte `b` starts (1 for ASCII and for bytes that
// start no sequence).
inline int Utf8SequenceLength(uint8_t b) {
  if (b < 0xC2) return 1;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  if (b < 0xF5) return 4;
  return 1;
}

}  // namespace attnserve::server::text
