// What a request carries, from the flags: its output spec (--output, --top_k) and its token
// ids (--tokens, --random_tokens or --tokens_file, "-" for stdin).
#ifndef ATTNSERVE_CLIENT_CLI_REQUEST_INPUT_H_
#define ATTNSERVE_CLIENT_CLI_REQUEST_INPUT_H_

#include <fstream>
#include <istream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "attnserve/v1/inference.grpc.pb.h"
#include "client/cli/calls.h"
#include "client/cli/printer.h"
#include "client/cli/token_reader.h"

namespace attnserve::cli {

// The --output and --top_k flags as an OutputSpec; false (after printing why) when invalid.
bool OutputSpecFromFlags(Printer& out, const std::string& sub, v1::OutputSpec* spec);

// Where the token ids come from: --tokens, --random_tokens (ids below the vocabulary of
// --model, which Open asks `stub` for), or --tokens_file (stdin: "-").
class TokenSource {
 public:
  // False (after printing why) when the source cannot be opened.
  bool Open(Printer& out, const std::string& sub, Stub& stub);

  TokenReader& reader() { return *reader_; }

  // Every remaining id; false (after printing why) on a malformed one.
  bool ReadAll(Printer& out, const std::string& sub, std::vector<int64_t>* ids);

 private:
  std::unique_ptr<std::istringstream> text_;
  std::unique_ptr<std::ifstream> file_;
  std::istream* in_ = nullptr;
  std::unique_ptr<TokenReader> reader_;
};

}  // namespace attnserve::cli

#endif  // ATTNSERVE_CLIENT_CLI_REQUEST_INPUT_H_
