// Conversion between ATen tensors and attnserve.v1.Tensor messages.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "attnserve/v1/tensor.pb.h"

namespace attnserve::server {

// Copies a float32 or int64 tensor (any layout) into `out`, row-major. Other dtypes are
// InvalidArgument.
absl::Status TensorToProto(const at::Tensor& tensor, v1::Tensor* out);

// A new contiguous CPU tensor from `proto`. The shape must be non-negative, the data field
// that matches dtype must hold product(shape) elements, and the other must be empty; the
// element count is capped by `max_elements` (RESOURCE_EXHAUSTED beyond).
absl::StatusOr<at::Tensor> TensorFromProto(const v1::Tensor& proto, int64_t max_elements);

}  // namespace attnserve::server
