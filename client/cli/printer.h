// Printer: attnserve-cli's output, either for people (text) or for programs (--json: one JSON
// object per line on stdout, protobuf's JSON mapping with the proto field names and every
// field, so a zero shows as 0 rather than being left out).
//
// Thread-safe: a stream prints responses from its reader thread while the main thread may
// report an error; each line is written whole, under a lock.
#ifndef ATTNSERVE_CLIENT_CLI_PRINTER_H_
#define ATTNSERVE_CLIENT_CLI_PRINTER_H_

#include <google/protobuf/message.h>
#include <grpcpp/support/status.h>

#include <mutex>
#include <string>

#include "attnserve/v1/inference.pb.h"

namespace attnserve::cli {

class Printer {
 public:
  explicit Printer(bool json) : json_(json) {}

  bool json() const { return json_; }

  // --json: the message as one line. Text: `text` (already formatted by the caller).
  void Message(const google::protobuf::Message& message, const std::string& text);
  // A line of text on stdout (text mode only; nothing with --json).
  void Text(const std::string& text);
  // A failed call: "attnserve-cli SUB: CODE: message" on stderr and, with --json, also
  // {"error":{"code":"CODE","code_number":N,"message":"..."}} on stdout.
  void Error(const std::string& subcommand, const grpc::Status& status);
  // A usage or input error (not a gRPC status): stderr only.
  void Problem(const std::string& subcommand, const std::string& message);

  static std::string ToJson(const google::protobuf::Message& message);

 private:
  bool json_;
  std::mutex mu_;
};

// Text renderings of the API's messages.
std::string FormatOutputs(const attnserve::v1::Outputs& outputs);
std::string FormatTimings(const attnserve::v1::Timings& timings);

}  // namespace attnserve::cli

#endif  // ATTNSERVE_CLIENT_CLI_PRINTER_H_
