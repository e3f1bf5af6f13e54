#include "client/cli/token_reader.h"

#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace attnserve::cli {
namespace {

bool IsSeparator(int c) { return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

absl::StatusOr<int64_t> TokenReader::Next(int64_t n, std::vector<int64_t>& out) {
  int64_t got = 0;
  while (got < n) {
    int c = in_.peek();
    while (c != EOF && IsSeparator(c)) {
      in_.get();
      c = in_.peek();
    }
    if (c == EOF) break;
    std::string word;
    while (c != EOF && !IsSeparator(c)) {
      word += static_cast<char>(in_.get());
      c = in_.peek();
    }
    int64_t id = 0;
    if (!absl::SimpleAtoi(word, &id) || id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", index_ + 1, ": '", word, "' is not a token id"));
    }
    out.push_back(id);
    ++got;
    ++index_;
  }
  return got;
}

absl::StatusOr<std::vector<int64_t>> ParseTokens(const std::string& text) {
  std::istringstream in(text);
  TokenReader reader(in);
  std::vector<int64_t> out;
  absl::StatusOr<int64_t> n = reader.Next(INT64_MAX, out);
  if (!n.ok()) return n.status();
  return out;
}

}  // namespace attnserve::cli
