#include <cuda_runtime.h>

#include <string>

#include "kernels/common/cuda_device.h"

namespace attnserve::kernels {

bool BuiltWithCuda() { return true; }

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error of a machine without a driver
    return 0;
  }
  return count;
}

std::string DescribeCudaDevices() {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  std::string out = "cuda " + std::to_string(runtime / 1000) + "." +
                    std::to_string((runtime % 1000) / 10) + ", ";
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return out + "no device: " + cudaGetErrorString(err);
  }
  out += std::to_string(count) + " device(s)";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    out += (i == 0 ? ": " : "; ") + std::string(prop.name) + " (sm_" +
           std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
           std::to_string(prop.totalGlobalMem >> 30) + " GiB)";
  }
  return out;
}

}  // namespace attnserve::kernels
