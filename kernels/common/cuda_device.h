// What the CUDA runtime sees. Built from cuda_device.cu when CUDA is on, and from
// cuda_device_without_cuda.cc otherwise, so callers need no #ifdef.
#pragma once

#include <string>

namespace attnserve::kernels {

// True when attnserve was built with its CUDA kernels.
bool BuiltWithCuda();

// Number of CUDA devices visible now (0 without CUDA, without a driver or without a GPU).
int CudaDeviceCount();

// "cuda 13.0, 1 device(s): NVIDIA H200 (sm_90, 139 GiB)" or why there is none.
std::string DescribeCudaDevices();

}  // namespace attnserve::kernels
