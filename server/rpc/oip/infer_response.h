// Output tensors of an Open Inference Protocol ModelInferResponse: in raw_output_contents
// (flattened row-major, little endian; BYTES as 4-byte length-prefixed elements) or in typed
// contents, one or the other for a whole response. A response's outputs are added in the
// order the request named them.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "inference/grpc_predict_v2.pb.h"

namespace attnserve::server::oip {

// `logits`: a float32 CPU tensor (1, vocab) or (1, L, vocab), as output "logits".
absl::Status AddLogits(const at::Tensor& logits, bool raw, inference::ModelInferResponse* out);

// `ids` as output "output_ids", INT64 [1, n].
void AddOutputIds(const std::vector<int64_t>& ids, bool raw, inference::ModelInferResponse* out);

// `texts` as output "text_output", BYTES [n].
void AddTextOutput(const std::vector<std::string>& texts, bool raw,
                   inference::ModelInferResponse* out);

// Sets a response parameter.
void SetBoolParameter(const std::string& name, bool value, inference::ModelInferResponse* out);
void SetStringParameter(const std::string& name, const std::string& value,
                        inference::ModelInferResponse* out);
void SetIntParameter(const std::string& name, int64_t value, inference::ModelInferResponse* out);

}  // namespace attnserve::server::oip
