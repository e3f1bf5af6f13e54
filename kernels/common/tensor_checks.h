// Validation of tensors at the kernel boundary, and the one place torch exceptions become
// absl::Status.
#pragma once

#include <ATen/core/Tensor.h>

#include <exception>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace attnserve::kernels {

// "(2, 3, 256)".
std::string ShapeString(at::IntArrayRef shape);

// "float32", "float64", "int64", ... (numpy's names, which users know).
std::string DTypeName(at::ScalarType dtype);

// Checks that `t` is a defined float32 tensor on `device` (a mixer passes the device its
// weights live on) with shape `shape`, where -1 matches any size. The message says what was
// expected and what came, e.g.
// "x: expected float32 cpu tensor of shape (?, ?, 256), got float32 cpu (2, 7, 128)".
absl::Status CheckFloatTensor(const at::Tensor& t, const char* what,
                              std::initializer_list<int64_t> shape,
                              const at::Device& device = at::Device(at::kCPU));
// The same with a shape held elsewhere (a vector).
absl::Status CheckFloatTensor(const at::Tensor& t, const char* what,
                              const std::vector<int64_t>& shape, const at::Device& device);
// The same for a tensor of element type `dtype` ("expected bfloat16 cpu tensor ...").
absl::Status CheckTensor(const at::Tensor& t, const char* what, at::ScalarType dtype,
                         std::initializer_list<int64_t> shape,
                         const at::Device& device = at::Device(at::kCPU));

// Runs `fn`, turning any exception thrown by torch into an Internal status, so that no
// exception escapes a kernel.
template <typename Fn>
auto GuardTorch(const char* what, Fn&& fn) -> decltype(fn()) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  }
}

}  // namespace attnserve::kernels
