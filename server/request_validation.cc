#include "server/request_validation.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace attnserve::server {

absl::Status ValidateTokenCount(const google::protobuf::RepeatedField<int64_t>& tokens,
                                int64_t max_tokens) {
  if (tokens.empty()) return absl::InvalidArgumentError("no tokens given; send at least one id");
  if (tokens.size() > max_tokens) {
    return absl::ResourceExhaustedError(absl::StrCat(tokens.size(),
                                                     " tokens in one request; the "
                                                     "limit is --max_tokens_per_request=",
                                                     max_tokens));
  }
  return absl::OkStatus();
}

absl::Status ValidateOutputSpec(const v1::OutputSpec& spec) {
  if (!v1::OutputKind_IsValid(spec.kind())) {
    return absl::InvalidArgumentError(absl::StrCat("output.kind ", spec.kind(), " is unknown"));
  }
  if (spec.top_k() < 0 || spec.top_k() > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("output.top_k must be in [0, 100] (0: 5), got ", spec.top_k()));
  }
  return absl::OkStatus();
}

absl::Status ValidateGenerateSpec(const v1::GenerateSpec& spec, int max_new_tokens) {
  if (spec.max_new_tokens() < 1 || spec.max_new_tokens() > max_new_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("generate.max_new_tokens must be in [1, ",
                                                   max_new_tokens, "] (--max_new_tokens), got ",
                                                   spec.max_new_tokens()));
  }
  if (!(spec.temperature() >= 0) || !std::isfinite(spec.temperature())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "generate.temperature must be finite and >= 0 (0: greedy), got ", spec.temperature()));
  }
  if (spec.top_k() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("generate.top_k must be >= 0 (0: all tokens), got ", spec.top_k()));
  }
  if (spec.stream_interval() < 0 || spec.stream_interval() > max_new_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "generate.stream_interval must be in [0, ", max_new_tokens,
        "] (tokens per streamed message; --max_new_tokens), got ", spec.stream_interval()));
  }
  return absl::OkStatus();
}

}  // namespace attnserve::server
