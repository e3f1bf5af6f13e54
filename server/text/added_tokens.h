// Added tokens of tokenizer.json (special tokens such as <|endoftext|>, and others such as
// GPT-NeoX's runs of spaces): found in the text before the model sees it, leftmost first and
// longest at a position, as Hugging Face's tokenizers do. `lstrip`/`rstrip` take the
// whitespace on that side into the token; `single_word` matches only between non-word
// characters. Immutable after construction; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace attnserve::server::text {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;  // matched in the normalized text (else in the raw text)
};

class AddedTokenMatcher {
 public:
  // `tokens`: those this matcher finds, each by `content` (non-empty).
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  struct Match {
    size_t begin, end;  // bytes of the text that the token takes (with stripped whitespace)
    int32_t id;
  };
  // The matches in `text` (valid UTF-8), left to right, disjoint.
  std::vector<Match> Find(absl::string_view text) const;
  bool empty() const { return tokens_.empty(); }

 private:
  struct Node {
    int32_t token = -1;  // index into tokens_ of the token ending here
  };
  int32_t Child(int32_t node, uint8_t byte) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<uint64_t, int32_t> children_;  // (node << 8 | byte) -> child node
  bool first_byte_[256] = {};
};

}  // namespace attnserve::server::text
