#include <string>

#include "kernels/common/cuda_check.h"

namespace attnserve::kernels::cuda {

CudaStatus CudaStatus::FromCuda(cudaError_t error, const char* expr, const char* file, int line) {
  return CudaStatus(Code::kCudaError, std::string(file) + ":" + std::to_string(line) + ": " + expr +
                                          ": " + cudaGetErrorName(error) + " (" +
                                          cudaGetErrorString(error) + ")");
}

CudaStatus CudaStatus::FromCublas(cublasStatus_t status, const char* expr, const char* file,
                                  int line) {
  return CudaStatus(Code::kCudaError, std::string(file) + ":" + std::to_string(line) + ": " + expr +
                                          ": cuBLAS status " + std::to_string(status) + " (" +
                                          cublasGetStatusString(status) + ")");
}

CudaStatus CurrentDeviceSmCount(int* count) {
  int device = 0;
  ATTNSERVE_CUDA_CHECK(cudaGetDevice(&device));
  ATTNSERVE_CUDA_CHECK(cudaDeviceGetAttribute(count, cudaDevAttrMultiProcessorCount, device));
  return CudaStatus();
}

}  // namespace attnserve::kernels::cuda
