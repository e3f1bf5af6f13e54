// libFuzzer target for request validation: the bytes as an InferRequest and as a
// StreamRequest (what gRPC would parse them into), run through every check the service makes
// before any lookup (server/request_validation.h, client_text.h), and as an Open Inference
// Protocol ModelInferRequest through its parser (server/rpc/oip/infer_request.h: tensors,
// raw and BYTES contents, parameters, outputs), and as raw BYTES contents. Crashes, sanitizer
// reports, and status messages that are long or carry the client's bytes unescaped are
// findings.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "attnserve/v1/inference.pb.h"
#include "inference/grpc_predict_v2.pb.h"
#include "server/client_text.h"
#include "server/request_validation.h"
#include "server/rpc/oip/infer_request.h"

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
  inference::ModelInferRequest oip;
  if (oip.ParseFromString(bytes)) {
    attnserve::server::oip::InferLimits limits;
    limits.max_tokens_per_request = 4096;
    limits.max_new_tokens = 64;
    absl::StatusOr<attnserve::server::oip::ParsedInfer> parsed =
        attnserve::server::oip::ParseInferRequest(oip, limits);
    CheckMessage(parsed.status());
    if (parsed.ok()) {
      // What the parser accepted is within the limits and consistent.
      if (static_cast<int64_t>(parsed->input_ids.size()) > limits.max_tokens_per_request ||
          parsed->max_tokens > limits.max_new_tokens || parsed->outputs.empty() ||
          (parsed->input_ids.empty() != parsed->has_text)) {
        std::abort();
      }
    }
  }
  // The bytes as one raw BYTES tensor of 0 to 3 elements.
  for (int64_t expected = 0; expected < 4; ++expected) {
    CheckMessage(attnserve::server::oip::DecodeRawBytes(bytes, expected, "text_input").status());
  }
  return 0;
}
