#include "server/tensor_proto.h"

#include <ATen/ATen.h>

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/common/tensor_checks.h"

namespace attnserve::server {

absl::Status TensorToProto(const at::Tensor& tensor, v1::Tensor* out) {
  if (!tensor.defined()) return absl::InvalidArgumentError("tensor is undefined");
  if (tensor.scalar_type() != at::kFloat && tensor.scalar_type() != at::kLong) {
    return absl::InvalidArgumentError(absl::StrCat("tensor dtype must be float32 or int64, got ",
                                                   kernels::DTypeName(tensor.scalar_type())));
  }
  return kernels::GuardTorch("TensorToProto", [&]() -> absl::Status {
    at::Tensor t = tensor.to(at::kCPU).contiguous();
    out->Clear();
    for (int64_t s : t.sizes()) out->add_shape(s);
    const int64_t n = t.numel();
    if (t.scalar_type() == at::kFloat) {
      out->set_dtype(v1::DATA_TYPE_FLOAT32);
      out->mutable_float_data()->Resize(static_cast<int>(n), 0.0f);
      if (n > 0) std::memcpy(out->mutable_float_data()->mutable_data(), t.data_ptr<float>(), n * 4);
    } else {
      out->set_dtype(v1::DATA_TYPE_INT64);
      out->mutable_int64_data()->Resize(static_cast<int>(n), 0);
      if (n > 0) {
        std::memcpy(out->mutable_int64_data()->mutable_data(), t.data_ptr<int64_t>(), n * 8);
      }
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<at::Tensor> TensorFromProto(const v1::Tensor& proto, int64_t max_elements) {
  int64_t n = 1;
  std::vector<int64_t> shape;
  for (int64_t s : proto.shape()) {
    if (s < 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor shape has a negative size ", s));
    }
    if (s > 0 && n > max_elements / s) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "tensor of shape ",
          kernels::ShapeString(at::IntArrayRef(proto.shape().data(), proto.shape_size())),
          " exceeds the limit of ", max_elements, " elements"));
    }
    n *= s;
    shape.push_back(s);
  }
  if (n > max_elements) {
    return absl::ResourceExhaustedError(
        absl::StrCat("tensor has ", n, " elements, the limit is ", max_elements));
  }
  const int64_t floats = proto.float_data_size(), ints = proto.int64_data_size();
  auto count_error = [&](const char* field, int64_t got) {
    return absl::InvalidArgumentError(absl::StrCat("tensor of shape ", kernels::ShapeString(shape),
                                                   " needs ", n, " elements in ", field, ", got ",
                                                   got));
  };
  switch (proto.dtype()) {
    case v1::DATA_TYPE_FLOAT32:
      if (floats != n || ints != 0) return count_error("float_data", floats);
      return kernels::GuardTorch("TensorFromProto", [&]() -> absl::StatusOr<at::Tensor> {
        at::Tensor t = at::empty(shape, at::kFloat);
        if (n > 0) std::memcpy(t.data_ptr<float>(), proto.float_data().data(), n * 4);
        return t;
      });
    case v1::DATA_TYPE_INT64:
      if (ints != n || floats != 0) return count_error("int64_data", ints);
      return kernels::GuardTorch("TensorFromProto", [&]() -> absl::StatusOr<at::Tensor> {
        at::Tensor t = at::empty(shape, at::kLong);
        if (n > 0) std::memcpy(t.data_ptr<int64_t>(), proto.int64_data().data(), n * 8);
        return t;
      });
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor dtype must be DATA_TYPE_FLOAT32 or DATA_TYPE_INT64, got ",
          v1::DataType_Name(proto.dtype()).empty() ? std::to_string(proto.dtype())
                                                   : v1::DataType_Name(proto.dtype())));
  }
}

}  // namespace attnserve::server
