// The tensor side of a request: token ids in, outputs (logits, hidden states, top-k) and
// sampled tokens out. Used by the service and the scheduler; nothing here touches gRPC.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "attnserve/v1/inference.pb.h"
#include "server/model/model.h"
#include "server/request_validation.h"
#include "server/scheduler/job.h"

namespace attnserve::server {

// (1, n) int64 tensor from request token ids. INVALID_ARGUMENT for none (unless
// `allow_empty`), RESOURCE_EXHAUSTED above `max_tokens` (--max_tokens_per_request).
absl::StatusOr<at::Tensor> TokensTensor(const google::protobuf::RepeatedField<int64_t>& tokens,
                                        int64_t max_tokens);

// What the model has to compute for `spec` (top-k and none need only the last logits).
model::OutputKind ModelOutputKind(const v1::OutputSpec& spec);

// Fills `out` from the model's `result` for `spec`: batch 1 is dropped from the tensor.
absl::Status FillOutputs(const at::Tensor& result, const v1::OutputSpec& spec, v1::Outputs* out);

// The scheduler's Sampling of a GenerateSpec (0 leaves top_p, min_p and repetition_penalty at
// their neutral values), checked against `vocab`: INVALID_ARGUMENT naming the field.
absl::StatusOr<scheduler::Sampling> SamplingOf(const v1::GenerateSpec& spec, int64_t vocab);

}  // namespace attnserve::server
