#include "kernels/common/tensor_checks.h"

#include <ATen/ATen.h>

#include "absl/strings/str_join.h"

namespace attnserve::kernels {

std::string ShapeString(at::IntArrayRef shape) {
  return absl::StrCat("(", absl::StrJoin(shape.begin(), shape.end(), ", "), ")");
}

std::string DTypeName(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kLong:
      return "int64";
    case at::kInt:
      return "int32";
    default:
      return c10::toString(dtype);
  }
}

absl::Status CheckFloatTensor(const at::Tensor& t, const char* what,
                              std::initializer_list<int64_t> shape, const at::Device& device) {
  return CheckTensor(t, what, at::kFloat, shape, device);
}

namespace {

// CheckTensor over any range of sizes.
template <typename Shape>
absl::Status CheckShapedTensor(const at::Tensor& t, const char* what, at::ScalarType dtype,
                               const Shape& shape, const at::Device& device) {
  bool ok = t.defined() && t.scalar_type() == dtype && t.device() == device &&
            t.dim() == static_cast<int64_t>(shape.size());
  if (ok) {
    int64_t i = 0;
    for (int64_t s : shape) {
      if (s >= 0 && t.size(i) != s) ok = false;
      ++i;
    }
  }
  // The message only on failure: a decode step checks every layer's input and state, and
  // building it every time was ~2% of a 64-session int8 server's samples.
  if (ok) return absl::OkStatus();
  const std::string expected = absl::StrCat(
      "(",
      absl::StrJoin(shape, ", ",
                    [](std::string* out, int64_t s) {
                      absl::StrAppend(out, s < 0 ? std::string("?") : std::to_string(s));
                    }),
      ")");
  if (!t.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected ", DTypeName(dtype), " ",
                                                   device.str(), " tensor of shape ", expected,
                                                   ", got none"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": expected ", DTypeName(dtype), " ", device.str(), " tensor of shape ", expected,
      ", got ", DTypeName(t.scalar_type()), " ", t.device().str(), " ", ShapeString(t.sizes())));
}

}  // namespace

absl::Status CheckTensor(const at::Tensor& t, const char* what, at::ScalarType dtype,
                         std::initializer_list<int64_t> shape, const at::Device& device) {
  return CheckShapedTensor(t, what, dtype, shape, device);
}

absl::Status CheckFloatTensor(const at::Tensor& t, const char* what,
                              const std::vector<int64_t>& shape, const at::Device& device) {
  return CheckShapedTensor(t, what, at::kFloat, shape, device);
}

}  // namespace attnserve::kernels
