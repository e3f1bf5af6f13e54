#include "kernels/common/cuda_device.h"

namespace attnserve::kernels {

bool BuiltWithCuda() { return false; }
int CudaDeviceCount() { return 0; }
std::string DescribeCudaDevices() { return "built without CUDA"; }

}  // namespace attnserve::kernels
