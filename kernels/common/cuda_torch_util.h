// Helpers for the thin torch-facing wrappers of the CUDA launchers (the *_cuda_torch.cc
// files, built only when LibTorch has CUDA). They check devices, shapes and dtypes with
// TORCH_CHECK, so errors are c10::Error exceptions with a message that says what was
// expected and what came; the mixers turn them into absl::Status with GuardTorch
// (tensor_checks.h). No Abseil here: the GPU check (tests/gpu) links these files with LibTorch
// and CUDA only.
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "kernels/common/cuda_check.h"

namespace attnserve::kernels::cuda {

// Throws c10::Error carrying the launcher's message when `status` is not ok.
inline void ThrowIfError(const CudaStatus& status) { TORCH_CHECK(status.ok(), status.message()); }

inline std::string ShapeOf(const at::Tensor& t) {
  std::string s = "(";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + ")";
}

// Checks that `t` is a defined CUDA tensor on `device` with shape `shape` (-1: any size) and
// one of the dtypes allowed.
inline void CheckCudaTensor(const at::Tensor& t, const char* name, const at::Device& device,
                            std::initializer_list<int64_t> shape,
                            std::initializer_list<at::ScalarType> dtypes) {
  TORCH_CHECK(t.defined(), name, ": expected a CUDA tensor, got none");
  TORCH_CHECK(t.is_cuda() && t.device() == device, name, ": expected a tensor on ", device,
              ", got one on ", t.device());
  bool dtype_ok = false;
  for (at::ScalarType d : dtypes) dtype_ok = dtype_ok || t.scalar_type() == d;
  TORCH_CHECK(dtype_ok, name, ": unsupported dtype ", t.scalar_type());
  bool shape_ok = t.dim() == static_cast<int64_t>(shape.size());
  int64_t i = 0;
  for (int64_t s : shape) {
    if (shape_ok && s >= 0 && t.size(i) != s) shape_ok = false;
    ++i;
  }
  if (!shape_ok) {
    std::string expected = "(";
    i = 0;
    for (int64_t s : shape) expected += (i++ ? ", " : "") + (s < 0 ? "?" : std::to_string(s));
    TORCH_CHECK(false, name, ": expected shape ", expected, ", got ", ShapeOf(t));
  }
}

inline DType ToDType(at::ScalarType t) {
  TORCH_CHECK(t == at::kFloat || t == at::kBFloat16, "expected float32 or bfloat16, got ", t);
  return t == at::kFloat ? DType::kFloat32 : DType::kBFloat16;
}

// `t` itself when its last dimension is contiguous and its rows are aligned for 4-element
// vector loads (16 bytes for float32, 8 for bfloat16); otherwise a contiguous copy.
inline at::Tensor RowsForVectorLoads(const at::Tensor& t) {
  bool ok = t.dim() == 0 || t.stride(-1) == 1 || t.size(-1) <= 1;
  for (int64_t i = 0; ok && i + 1 < t.dim(); ++i) ok = t.stride(i) % 4 == 0 || t.size(i) == 1;
  ok = ok && IsAligned(t.data_ptr(), static_cast<int>(t.element_size() * 4));
  return ok ? t : t.contiguous();
}

// `t` itself when its last dimension is contiguous, else a contiguous copy.
inline at::Tensor LastDimContiguous(const at::Tensor& t) {
  return t.dim() == 0 || t.stride(-1) == 1 || t.size(-1) <= 1 ? t : t.contiguous();
}

// A device array of the tensors' data pointers (int64 on `device`), for the kernels that
// take one state pointer per session. The array is allocated on the current stream, so the
// caching allocator does not reuse it before the kernels queued after it on that stream
// are done.
inline at::Tensor DevicePointerArray(const std::vector<at::Tensor>& tensors,
                                     const at::Device& device) {
  at::Tensor host = at::empty({static_cast<int64_t>(tensors.size())}, at::kLong);
  int64_t* p = host.data_ptr<int64_t>();
  for (size_t i = 0; i < tensors.size(); ++i) {
    p[i] = static_cast<int64_t>(reinterpret_cast<std::uintptr_t>(tensors[i].data_ptr()));
  }
  return host.to(device);
}

inline cudaStream_t CurrentStream() { return at::cuda::getCurrentCUDAStream().stream(); }

// `out` when defined (checked: `shape`, `dtype`, on `device`, contiguous), else a new one.
inline at::Tensor OutputOrNew(const at::Tensor& out, const char* name, at::IntArrayRef shape,
                              const at::TensorOptions& options) {
  if (!out.defined()) return at::empty(shape, options);
  TORCH_CHECK(out.device() == options.device() && out.dtype() == options.dtype() &&
                  out.sizes() == shape && out.is_contiguous(),
              name, ": expected a contiguous ", options.dtype(), " tensor of shape ", shape, " on ",
              options.device(), ", got ", out.scalar_type(), " ", ShapeOf(out), " on ",
              out.device(), out.is_contiguous() ? "" : " (not contiguous)");
  return out;
}

}  // namespace attnserve::kernels::cuda
