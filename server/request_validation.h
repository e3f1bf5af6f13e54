// Checks of what a client sends, before anything is looked up or computed: token lists,
// output and generate specs. Torch-free (the request-validation fuzzer links it alone:
// tests/fuzz/request_validation_fuzzer.cc); session ids are checked by client_text.h's
// ValidateSessionId. Every message is short: counts and limits, never the client's data.
#pragma once

#include <google/protobuf/repeated_field.h>

#include <cstdint>

#include "absl/status/status.h"
#include "attnserve/v1/inference.pb.h"

namespace attnserve::server {

// INVALID_ARGUMENT for none, RESOURCE_EXHAUSTED above `max_tokens` (--max_tokens_per_request).
// Ids are checked against a model's vocabulary later, by the scheduler.
absl::Status ValidateTokenCount(const google::protobuf::RepeatedField<int64_t>& tokens,
                                int64_t max_tokens);

// Checks the output spec (kind known, top_k in [0, 100]).
absl::Status ValidateOutputSpec(const v1::OutputSpec& spec);

// Checks a generate spec against --max_new_tokens.
absl::Status ValidateGenerateSpec(const v1::GenerateSpec& spec, int max_new_tokens);

}  // namespace attnserve::server
