// kernels/common/blas_kernels.h: which OpenBLAS core to ask for, and that the server's
// process runs one with AVX2 kernels or better where the CPU has AVX2 (the start-up re-execution
// is checked over a real server in tests/integration/python_client_test.py).
#include "kernels/common/blas_kernels.h"

#include <gtest/gtest.h>

namespace attnserve::kernels {
namespace {

TEST(BlasKernelsTest, AsksForTheCpusCoreOnlyWhenOpenBlasFellBackToAnOldOne) {
  EXPECT_EQ(BetterOpenBlasCore("Prescott", /*avx512=*/true, /*avx2_fma=*/true), "SkylakeX");
  EXPECT_EQ(BetterOpenBlasCore("Prescott", false, true), "Haswell");
  EXPECT_EQ(BetterOpenBlasCore("Nehalem", false, true), "Haswell");
  EXPECT_EQ(BetterOpenBlasCore("Prescott", false, false), "");  // an old CPU: keep it
  for (const char* good : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"}) {
    EXPECT_EQ(BetterOpenBlasCore(good, true, true), "") << good;
  }
  EXPECT_EQ(BetterOpenBlasCore("", true, true), "");         // not OpenBLAS
  EXPECT_EQ(BetterOpenBlasCore("HASWELL", true, true), "");  // a single-core build's spelling
}

}  // namespace
}  // namespace attnserve::kernels
