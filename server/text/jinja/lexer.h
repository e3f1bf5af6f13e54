// The Jinja lexer: template source -> tokens, with Hugging Face's whitespace settings applied
// (trim_blocks, lstrip_blocks, `-`/`+` modifiers, one trailing newline dropped, \r\n -> \n).
//
// Threads: pure function. Positions are 1-based line/column of the token's first byte.
#ifndef ATTNSERVE_SERVER_TEXT_JINJA_LEXER_H_
#define ATTNSERVE_SERVER_TEXT_JINJA_LEXER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace attnserve::server::text::jinja {

enum class TokenType {
  kText,        // literal template text (value)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifier or keyword (value)
  kString,      // string literal, unescaped (value)
  kInt,         // integer literal (value: digits)
  kFloat,       // float literal (value: text)
  kOp,          // operator or punctuation (value)
  kEof,
};

struct Token {
  TokenType type;
  std::string value;
  int line = 1;
  int column = 1;
};

// INVALID_ARGUMENT with line/column for unterminated tags, strings or comments and bad characters.
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source);

}  // namespace attnserve::server::text::jinja

#endif  // ATTNSERVE_SERVER_TEXT_JINJA_LEXER_H_
