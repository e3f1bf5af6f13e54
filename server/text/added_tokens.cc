#include "server/text/added_tokens.h"

#include "server/text/normalizer.h"
#include "server/text/utf8.h"

namespace attnserve::server::text {
namespace {

// The code point that ends just before byte `end` of valid UTF-8 `text`.
char32_t CodePointBefore(absl::string_view text, size_t end) {
  size_t begin = end - 1;
  while (begin > 0 && (static_cast<uint8_t>(text[begin]) & 0xC0) == 0x80) --begin;
  return NextCodePoint(text, &begin);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) : tokens_(tokens) {
  nodes_.emplace_back();
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& s = tokens_[t].content;
    if (s.empty()) continue;
    first_byte_[static_cast<uint8_t>(s[0])] = true;
    int32_t node = 0;
    for (const char c : s) {
      const uint64_t key = static_cast<uint64_t>(node) << 8 | static_cast<uint8_t>(c);
      const auto it = children_.find(key);
      if (it != children_.end()) {
        node = it->second;
      } else {
        nodes_.emplace_back();
        const auto child = static_cast<int32_t>(nodes_.size() - 1);
        children_.emplace(key, child);
        node = child;
      }
    }
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(t);
  }
}

int32_t AddedTokenMatcher::Child(int32_t node, uint8_t byte) const {
  const auto it = children_.find(static_cast<uint64_t>(node) << 8 | byte);
  return it == children_.end() ? -1 : it->second;
}

std::vector<AddedTokenMatcher::Match> AddedTokenMatcher::Find(absl::string_view text) const {
  std::vector<Match> matches;
  if (tokens_.empty()) return matches;
  size_t last_end = 0;  // no match may take bytes of an earlier one
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    // The longest token starting at pos.
    int32_t node = 0, found = -1;
    size_t found_end = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      node = Child(node, static_cast<uint8_t>(text[i]));
      if (node < 0) break;
      if (nodes_[node].token >= 0) {
        found = nodes_[node].token;
        found_end = i + 1;
      }
    }
    if (found < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[found];
    if (token.single_word) {
      const bool word_before = pos > 0 && IsWordCharacter(CodePointBefore(text, pos));
      size_t after = found_end;
      const bool word_after =
          found_end < text.size() && IsWordCharacter(NextCodePoint(text, &after));
      if (word_before || word_after) {
        ++pos;
        continue;
      }
    }
    size_t begin = pos, end = found_end;
    if (token.lstrip) {
      while (begin > last_end) {
        const size_t prev_begin = [&] {
          size_t b = begin - 1;
          while (b > last_end && (static_cast<uint8_t>(text[b]) & 0xC0) == 0x80) --b;
          return b;
        }();
        if (!IsUnicodeWhitespace(CodePointBefore(text, begin))) break;
        begin = prev_begin;
      }
    }
    if (token.rstrip) {
      while (end < text.size()) {
        size_t next = end;
        if (!IsUnicodeWhitespace(NextCodePoint(text, &next))) break;
        end = next;
      }
    }
    matches.push_back(Match{begin, end, token.id});
    last_end = end;
    pos = end;
  }
  return matches;
}

}  // namespace attnserve::server::text
