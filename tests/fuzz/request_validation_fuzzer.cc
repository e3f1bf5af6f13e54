// libFuzzer target for request validation: the bytes as an InferRequest and as a
// StreamRequest (what gRPC would parse them into), run through every check the service makes
// before any lookup (server/request_validation.h, client_text.h). Crashes, sanitizer reports,
// and status messages that are long or carry the client's bytes unescaped are findings.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "attnserve/v1/inference.pb.h"
#include "server/client_text.h"
#include "server/request_validation.h"

namespace {

using attnserve::server::ClientText;

// ClientText's bound: kClientTextBytes bytes, each at most 4 characters escaped, the quotes
// and "... (N bytes)".
constexpr size_t kClientTextMax = 4 * attnserve::server::kClientTextBytes + 32;

// A status message stays short and has no control bytes (client text comes in escaped).
void CheckMessage(const absl::Status& status) {
  if (status.ok()) return;
  const absl::string_view message = status.message();
  if (message.size() > 400) std::abort();
  for (char c : message) {
    if (static_cast<unsigned char>(c) < 0x20) std::abort();
  }
}

void CheckOutputAndTokens(const attnserve::v1::OutputSpec& output,
                          const google::protobuf::RepeatedField<int64_t>& tokens) {
  CheckMessage(attnserve::server::ValidateOutputSpec(output));
  CheckMessage(attnserve::server::ValidateTokenCount(tokens, 65536));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  attnserve::v1::InferRequest infer;
  if (infer.ParseFromString(bytes)) {
    CheckOutputAndTokens(infer.output(), infer.tokens());
    if (!infer.session_id().empty()) {
      CheckMessage(attnserve::server::ValidateSessionId(infer.session_id()));
    }
    if (ClientText(infer.model()).size() > kClientTextMax) std::abort();
  }
  attnserve::v1::StreamRequest stream;
  if (stream.ParseFromString(bytes)) {
    if (stream.has_open()) {
      if (!stream.open().session_id().empty()) {
        CheckMessage(attnserve::server::ValidateSessionId(stream.open().session_id()));
      }
      if (ClientText(stream.open().model()).size() > kClientTextMax) std::abort();
    }
    if (stream.has_append()) {
      const attnserve::v1::StreamAppend& append = stream.append();
      CheckOutputAndTokens(append.output(), append.tokens());
      if (append.has_generate()) {
        CheckMessage(attnserve::server::ValidateGenerateSpec(append.generate(), 1024));
      }
    }
  }
  return 0;
}
