// GPT-2's byte-level alphabet (the `ByteLevel` pre-tokenizer and decoder of Hugging Face's
// tokenizers): each of the 256 byte values is one printable code point, so that byte strings
// can be vocabulary strings. Printable Latin-1 bytes map to themselves; the other 68 bytes
// map to U+0100 upwards in byte order (space is 'Ġ' U+0120, newline 'Ċ' U+010A).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace attnserve::server::text {

// The code point that stands for byte `b`.
char32_t ByteLevelCodePoint(uint8_t b);

// The bytes that a byte-level string (UTF-8 of alphabet code points) stands for; nullopt when
// it holds a code point outside the alphabet.
std::optional<std::string> ByteLevelToBytes(absl::string_view alphabet_text);

// The byte-level string of `bytes` (the inverse of ByteLevelToBytes).
std::string BytesToByteLevel(absl::string_view bytes);

}  // namespace attnserve::server::text
