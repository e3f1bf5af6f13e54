// Reads token ids from text: integers separated by whitespace and/or commas. Reads lazily, so
// that a stream can send each chunk as soon as its tokens have arrived on a pipe.
#ifndef ATTNSERVE_CLIENT_CLI_TOKEN_READER_H_
#define ATTNSERVE_CLIENT_CLI_TOKEN_READER_H_

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace attnserve::cli {

class TokenReader {
 public:
  // `in` must outlive the reader.
  explicit TokenReader(std::istream& in) : in_(in) {}

  // Appends up to `n` ids to `out`, blocking until it has them or the input ends. Returns
  // the number appended (0: the input has ended), or an error for a malformed id.
  absl::StatusOr<int64_t> Next(int64_t n, std::vector<int64_t>& out);

 private:
  std::istream& in_;
  int64_t index_ = 0;  // ids read so far, for error messages
};

// All the ids in `text`.
absl::StatusOr<std::vector<int64_t>> ParseTokens(const std::string& text);

}  // namespace attnserve::cli

#endif  // ATTNSERVE_CLIENT_CLI_TOKEN_READER_H_
