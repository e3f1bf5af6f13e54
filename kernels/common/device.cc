#include "kernels/common/device.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "kernels/common/cuda_device.h"

namespace attnserve::kernels {
namespace {

// Why CUDA device `index` cannot be used, or "" when it can.
std::string CudaUnavailableReason(int index) {
  if (!CudaKernelsBuilt()) {
    if (!BuiltWithCuda()) {
      return "attnserve was built without its CUDA kernels (configure with "
             "-DATTNSERVE_CUDA=ON on a machine with nvcc)";
    }
    return "attnserve's LibTorch has no CUDA, so its CUDA kernels have no torch-facing "
           "wrappers (build against a CUDA LibTorch; Debian's libtorch is CPU-only)";
  }
  if (!at::hasCUDA()) return "LibTorch reports no usable CUDA (driver missing or too old?)";
  const int count = CudaDeviceCount();
  if (count == 0) return absl::StrCat("no CUDA device is visible: ", DescribeCudaDevices());
  if (index >= count) {
    return absl::StrCat("CUDA device ", index, " does not exist: ", DescribeCudaDevices());
  }
  return "";
}

std::string CpuDescription() {
  return absl::StrCat("LibTorch on ", at::get_num_threads(), " thread(s)");
}

}  // namespace

bool CudaKernelsBuilt() {
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
  return BuiltWithCuda();
#else
  return false;
#endif
}

absl::StatusOr<Device> ResolveDevice(const std::string& flag) {
  if (flag == "cpu")
    return Device{DeviceKind::kCpu, 0, absl::StrCat("cpu (", CpuDescription(), ")")};
  if (flag == "auto") {
    const std::string reason = CudaUnavailableReason(0);
    if (reason.empty()) {
      return Device{DeviceKind::kCuda, 0,
                    absl::StrCat("cuda:0 (auto; ", DescribeCudaDevices(), ")")};
    }
    return Device{DeviceKind::kCpu, 0,
                  absl::StrCat("cpu (auto: ", reason, "; ", CpuDescription(), ")")};
  }
  absl::string_view rest = flag;
  if (absl::ConsumePrefix(&rest, "cuda")) {
    int index = 0;
    if (!rest.empty() &&
        (!absl::ConsumePrefix(&rest, ":") || !absl::SimpleAtoi(rest, &index) || index < 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--device=", flag, ": expected auto, cpu, cuda or cuda:N"));
    }
    const std::string reason = CudaUnavailableReason(index);
    if (!reason.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--device=", flag, " cannot be used: ", reason, ". Use --device=cpu or --device=auto"));
    }
    return Device{DeviceKind::kCuda, index,
                  absl::StrCat("cuda:", index, " (", DescribeCudaDevices(), ")")};
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device=", flag, ": expected auto, cpu, cuda or cuda:N"));
}

}  // namespace attnserve::kernels
