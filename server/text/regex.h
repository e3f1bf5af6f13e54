// A compiled regular expression (PCRE2, UTF and Unicode properties on, JIT where the CPU has
// it) for the Split and ByteLevel pre-tokenizers. tokenizer.json patterns are written for the
// Oniguruma/Rust `regex`/fancy-regex dialects and use lookahead (`\s+(?!\S)`), which RE2 and
// std::regex cannot do; PCRE2's \s, \p{L}, \p{N} follow Unicode's properties as Rust's do.
// Immutable after Compile: Matches may be called from many threads at once.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnserve::server::text {

class Regex {
 public:
  // INVALID_ARGUMENT naming the pattern's error and its offset. `literal`: the pattern is a
  // plain string (tokenizer.json's {"String": ...}), matched as it is.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(absl::string_view pattern,
                                                        bool literal = false);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The non-empty, non-overlapping matches of the pattern in `text` (valid UTF-8), left to
  // right, as [begin, end) byte ranges; an empty match is skipped by one character, as Rust's
  // find_iter does. RESOURCE_EXHAUSTED when one match attempt passes PCRE2's match limit
  // (kMatchLimit steps: a pathological pattern cannot run unbounded).
  absl::Status Matches(absl::string_view text, std::vector<std::pair<size_t, size_t>>* out) const;

  static constexpr uint32_t kMatchLimit = 50'000'000;

 private:
  struct Impl;
  explicit Regex(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnserve::server::text
