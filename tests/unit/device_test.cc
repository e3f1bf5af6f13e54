// --device=auto|cpu|cuda resolution (kernels/common/device.h) and the argument checks of the
// CUDA launchers, which return before any CUDA call and so run without a GPU.
#include "kernels/common/device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kernels/common/cuda_device.h"

#if defined(ATTNSERVE_WITH_CUDA)
#include "kernels/linear/linear_attention_cuda.h"
#include "kernels/mamba/causal_conv1d_cuda.h"
#include "kernels/mamba/selective_scan_cuda.h"
#include "kernels/standard/flash_attention_cuda.h"
#endif

namespace attnserve::kernels {
namespace {

using ::testing::HasSubstr;

TEST(DeviceTest, CpuAlwaysResolves) {
  absl::StatusOr<Device> device = ResolveDevice("cpu");
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_FALSE(device->is_cuda());
  EXPECT_THAT(device->description, HasSubstr("cpu"));
}

TEST(DeviceTest, UnknownValuesAreInvalid) {
  for (const char* flag : {"", "gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cudax"}) {
    absl::StatusOr<Device> device = ResolveDevice(flag);
    EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument) << flag;
  }
}

TEST(DeviceTest, AutoAndCudaAgree) {
  absl::StatusOr<Device> automatic = ResolveDevice("auto");
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  absl::StatusOr<Device> cuda = ResolveDevice("cuda");
  if (automatic->is_cuda()) {
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    EXPECT_TRUE(cuda->is_cuda());
    EXPECT_EQ(cuda->index, 0);
  } else {
    // No usable CUDA here: auto falls back to the CPU and says why; cuda is an error that
    // says the same.
    EXPECT_THAT(automatic->description, HasSubstr("cpu (auto: "));
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(cuda.status().message(), HasSubstr("--device=cuda cannot be used"));
  }
  if (!CudaKernelsBuilt()) {
    EXPECT_FALSE(automatic->is_cuda());
  }
  // A device index past the last one is never usable.
  EXPECT_FALSE(ResolveDevice("cuda:4096").ok());
}

#if defined(ATTNSERVE_WITH_CUDA)
using cuda::CudaStatus;

TEST(CudaLauncherTest, UnsupportedHeadDimsAreClearErrors) {
  standard::FlashAttentionCudaParams flash;
  flash.batch = 1;
  flash.heads = 1;
  flash.seqlen_q = flash.seqlen_k = 8;
  flash.head_dim = 96;
  CudaStatus status = standard::LaunchFlashAttention(flash, nullptr);
  EXPECT_EQ(status.code(), CudaStatus::Code::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("head_dim must be 64 or 128, got 96"));

  linear::LinearAttentionCudaParams lin;
  lin.batch = lin.heads = 1;
  lin.seqlen = 8;
  lin.head_dim = 32;
  status = linear::LaunchLinearAttention(lin, nullptr);
  EXPECT_EQ(status.code(), CudaStatus::Code::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("head_dim must be 64 or 128, got 32"));
}

TEST(CudaLauncherTest, BadShapesAndNullPointersAreRejected) {
  standard::FlashAttentionCudaParams flash;
  flash.batch = flash.heads = 1;
  flash.head_dim = 64;
  flash.seqlen_q = 16;
  flash.seqlen_k = 8;  // causal needs Lk >= Lq
  EXPECT_THAT(standard::LaunchFlashAttention(flash, nullptr).message(),
              HasSubstr("seqlen_k >= seqlen_q"));

  mamba::CausalConv1dCudaParams conv;
  conv.batch = conv.seqlen = conv.dim = 1;
  conv.width = 9;
  EXPECT_THAT(mamba::LaunchCausalConv1d(conv, nullptr).message(), HasSubstr("width"));

  mamba::SelectiveScanCudaParams scan;
  scan.batch = scan.seqlen = scan.dim = 1;
  scan.dstate = 65;
  EXPECT_THAT(mamba::LaunchSelectiveScan(scan, nullptr).message(), HasSubstr("dstate <= 64"));
  scan.dstate = 16;  // pointers still null
  EXPECT_EQ(mamba::LaunchSelectiveScan(scan, nullptr).code(), CudaStatus::Code::kInvalidArgument);
}

TEST(CudaLauncherTest, EmptyWorkIsOkWithoutTouchingTheDevice) {
  mamba::SelectiveScanCudaParams scan;
  scan.dim = 8;
  scan.dstate = 16;
  int dummy = 0;
  scan.u = scan.delta = scan.B = scan.C = &dummy;
  scan.A = reinterpret_cast<const float*>(&dummy);
  scan.out = &dummy;
  scan.state = reinterpret_cast<float*>(&dummy);
  scan.batch = 0;  // nothing to do: no launch, so no GPU is needed
  EXPECT_TRUE(mamba::LaunchSelectiveScan(scan, nullptr).ok());
}
#endif  // ATTNSERVE_WITH_CUDA

}  // namespace
}  // namespace attnserve::kernels
