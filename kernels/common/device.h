// Where the kernels run, from the server's --device=auto|cpu|cuda flag (also cuda:N).
//   cpu:  the LibTorch CPU kernels, always available.
//   cuda: the CUDA kernels on GPU N (0 for plain "cuda"); an error that says what is
//         missing when this binary was built without its CUDA kernels, when its LibTorch has
//         no CUDA (Debian's libtorch is CPU-only), or when no device is visible.
//   auto: cuda:0 when all of that is there, otherwise cpu (the description says why).
// Thread-safe; it queries the CUDA runtime, so call it once at start-up and keep the result.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace attnserve::kernels {

enum class DeviceKind { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;  // CUDA device ordinal; 0 for the CPU
  // For logs, e.g. "cuda:0 (cuda 13.0, 1 device(s): NVIDIA H200 (sm_90, 139 GiB))" or
  // "cpu (auto: attnserve was built without its CUDA kernels; LibTorch 16 threads)".
  std::string description;

  bool is_cuda() const { return kind == DeviceKind::kCuda; }
};

// True when this binary contains the CUDA kernels and their torch-facing wrappers (built
// with ATTNSERVE_CUDA and a LibTorch that has CUDA).
bool CudaKernelsBuilt();

// InvalidArgument for an unknown flag value; FailedPrecondition for cuda[:N] when CUDA
// cannot be used here, with the reason.
absl::StatusOr<Device> ResolveDevice(const std::string& flag);

}  // namespace attnserve::kernels
