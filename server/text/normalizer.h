// Normalizers of tokenizer.json: Unicode normalization forms (NFC, NFD, NFKC, NFKD, through
// Debian's libutf8proc) and Sequence. Immutable; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace attnserve::server::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `text` (valid UTF-8) normalized; the result is valid UTF-8.
  virtual std::string Normalize(absl::string_view text) const = 0;
};

enum class UnicodeForm { kNfc, kNfd, kNfkc, kNfkd };
std::unique_ptr<Normalizer> MakeUnicodeNormalizer(UnicodeForm form);
std::unique_ptr<Normalizer> MakeNormalizerSequence(std::vector<std::unique_ptr<Normalizer>> steps);

// Whether `cp` has Unicode's White_Space property (Rust's char::is_whitespace).
bool IsUnicodeWhitespace(char32_t cp);
// Whether `cp` is a letter, mark, digit or connector punctuation ('_'), as word characters.
bool IsWordCharacter(char32_t cp);

}  // namespace attnserve::server::text
