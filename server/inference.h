// The tensor side of a request: token ids in, outputs (logits, hidden states, top-k) and
// sampled tokens out. Used by the service and the scheduler; nothing here touches gRPC.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <random>

#include "absl/status/statusor.h"
#include "attnserve/v1/inference.pb.h"
#include "server/model/model.h"
#include "server/request_validation.h"

namespace attnserve::server {

// (1, n) int64 tensor from request token ids. INVALID_ARGUMENT for none (unless
// `allow_empty`), RESOURCE_EXHAUSTED above `max_tokens` (--max_tokens_per_request).
absl::StatusOr<at::Tensor> TokensTensor(const google::protobuf::RepeatedField<int64_t>& tokens,
                                        int64_t max_tokens);

// What the model has to compute for `spec` (top-k and none need only the last logits).
model::OutputKind ModelOutputKind(const v1::OutputSpec& spec);

// Fills `out` from the model's `result` for `spec`: batch 1 is dropped from the tensor.
absl::Status FillOutputs(const at::Tensor& result, const v1::OutputSpec& spec, v1::Outputs* out);

// Samples the next token from last-position `logits` (1, vocab): greedy at `temperature` 0,
// else from softmax(logits / temperature) over the `top_k` most likely (0: all), drawing from
// `rng`. `logprob` gets the token's log-probability under the unscaled logits.
int64_t SampleToken(const at::Tensor& logits, float temperature, int top_k, std::mt19937_64& rng,
                    float* logprob);

}  // namespace attnserve::server
