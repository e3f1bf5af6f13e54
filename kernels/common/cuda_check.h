// Error handling and small shared types for the CUDA launchers. No torch and no Abseil
// headers: the launchers compile with nvcc alone, and the GPU check (tests/gpu) links them
// with LibTorch only.
//
// Every launcher returns a CudaStatus. ATTNSERVE_CUDA_CHECK(expr) returns from the enclosing
// function with "file:line: expr: cudaErrorName (description)" when a CUDA runtime call
// fails; ATTNSERVE_CUDA_CHECK_LAUNCH() does the same with cudaGetLastError() after a kernel
// launch (a bad launch configuration is reported there; an error during execution surfaces at
// the next synchronising call, as usual with asynchronous launches).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>

namespace attnserve::kernels::cuda {

class CudaStatus {
 public:
  enum class Code { kOk, kInvalidArgument, kCudaError };

  CudaStatus() = default;

  static CudaStatus InvalidArgument(std::string message) {
    return CudaStatus(Code::kInvalidArgument, std::move(message));
  }
  static CudaStatus FromCuda(cudaError_t error, const char* expr, const char* file, int line);
  static CudaStatus FromCublas(cublasStatus_t status, const char* expr, const char* file, int line);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  CudaStatus(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  Code code_ = Code::kOk;
  std::string message_;
};

// Element type of the activations a kernel reads and writes (inputs and outputs). Recurrent
// states, parameters (A, D, biases, conv weights) and all accumulation are float32 whatever
// this is.
enum class DType { kFloat32, kBFloat16 };

inline const char* DTypeName(DType dtype) {
  return dtype == DType::kFloat32 ? "float32" : "bfloat16";
}

// Multiprocessor count of the current device (to size split-K grids).
CudaStatus CurrentDeviceSmCount(int* count);

// True when `p` is aligned to `bytes` (vector loads need 8 or 16).
inline bool IsAligned(const void* p, int bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % static_cast<std::uintptr_t>(bytes) == 0;
}

}  // namespace attnserve::kernels::cuda

#define ATTNSERVE_CUDA_CHECK(expr)                                                          \
  do {                                                                                      \
    const cudaError_t _attnserve_cuda_error = (expr);                                       \
    if (_attnserve_cuda_error != cudaSuccess) {                                             \
      return ::attnserve::kernels::cuda::CudaStatus::FromCuda(_attnserve_cuda_error, #expr, \
                                                              __FILE__, __LINE__);          \
    }                                                                                       \
  } while (0)

#define ATTNSERVE_CUDA_CHECK_LAUNCH() ATTNSERVE_CUDA_CHECK(cudaGetLastError())

#define ATTNSERVE_CUBLAS_CHECK(expr)                                                             \
  do {                                                                                           \
    const cublasStatus_t _attnserve_cublas_status = (expr);                                      \
    if (_attnserve_cublas_status != CUBLAS_STATUS_SUCCESS) {                                     \
      return ::attnserve::kernels::cuda::CudaStatus::FromCublas(_attnserve_cublas_status, #expr, \
                                                                __FILE__, __LINE__);             \
    }                                                                                            \
  } while (0)

// Propagates a non-ok CudaStatus from a nested launcher.
#define ATTNSERVE_CUDA_RETURN_IF_ERROR(expr)                                \
  do {                                                                      \
    ::attnserve::kernels::cuda::CudaStatus _attnserve_cuda_status = (expr); \
    if (!_attnserve_cuda_status.ok()) return _attnserve_cuda_status;        \
  } while (0)
