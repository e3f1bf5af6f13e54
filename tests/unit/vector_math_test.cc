// The vectorised exp, log, softplus and silu against the C library in float64; Sum16 against Sum.
#include "kernels/common/vector_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#pragma GCC diagnostic ignored "-Wpsabi"

namespace attnserve::kernels::vec {
namespace {

template <typename VecFn, typename RefFn>
double MaxRelError(VecFn fn, RefFn ref, double lo, double hi, int n = 20000) {
  double worst = 0;
  for (int i = 0; i < n; i += kLanes) {
    float in[kLanes], out[kLanes];
    for (int j = 0; j < kLanes; ++j) in[j] = static_cast<float>(lo + (hi - lo) * (i + j) / n);
    Store(out, fn(Load(in)));
    for (int j = 0; j < kLanes; ++j) {
      const double want = ref(static_cast<double>(in[j]));
      const double err = std::abs(out[j] - want) / std::max(std::abs(want), 1e-30);
      worst = std::max(worst, err);
    }
  }
  return worst;
}

// Sum16 gives, lane by lane, Sum's bits: the same additions in the same order.
TEST(VectorMathTest, Sum16IsSumOfEachVector) {
  std::mt19937 gen(13);
  std::normal_distribution<float> normal;
  for (int trial = 0; trial < 200; ++trial) {
    Float16 v[16];
    for (auto& x : v) {
      for (int i = 0; i < kLanes; ++i) x[i] = normal(gen) * std::exp2(normal(gen) * 10);
    }
    const Float16 sums = Sum16(v);
    for (int k = 0; k < 16; ++k) {
      const float want = Sum(v[k]);
      ASSERT_EQ(std::memcmp(&want, &sums[k], sizeof(float)), 0)
          << "trial " << trial << " vector " << k << ": " << sums[k] << " != " << want;
    }
  }
}

TEST(VectorMathTest, ExpMatchesLibm) {
  EXPECT_LE(MaxRelError([](Float16 x) { return Exp(x); }, [](double x) { return std::exp(x); },
                        -87.0, 88.0),
            3e-7);
  // Below the clamp the result is a tiny positive number, never NaN or a garbage exponent.
  float out[kLanes];
  Store(out, Exp(Broadcast(-1e4f)));
  EXPECT_GE(out[0], 0.0f);
  EXPECT_LT(out[0], 1e-37f);
}

TEST(VectorMathTest, LogMatchesLibm) {
  EXPECT_LE(MaxRelError([](Float16 x) { return Log(x); }, [](double x) { return std::log(x); },
                        1e-3, 1e4),
            3e-7 * 1e3);  // relative to log(x), which passes through 0 at x = 1
  EXPECT_LE(
      MaxRelError([](Float16 x) { return Log(x); }, [](double x) { return std::log(x); }, 2.0, 1e6),
      3e-7);
}

TEST(VectorMathTest, SoftplusAndSiluMatchFloat64) {
  auto softplus = [](double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x))); };
  EXPECT_LE(MaxRelError([](Float16 x) { return Softplus(x); }, softplus, -30.0, 40.0), 1e-6);
  auto silu = [](double x) { return x / (1.0 + std::exp(-x)); };
  EXPECT_LE(MaxRelError([](Float16 x) { return Silu(x); }, silu, -20.0, 20.0), 1e-6);
}

// Which of the interleaved functions differ from one-at-a-time on x (4 vectors; Log on |x| +
// 1e-30): a bit mask, 0 when every vector's bits are equal. Compiled as the kernels are (one
// clone per instruction set, the CPU's chosen at load), so that a multiply-add the compiler
// fuses in one form and not in the other would show here.
ATTNSERVE_MULTIVERSION
int InterleavedMismatches(const float* in) {
  Float16 x[4], positive[4];
  for (int k = 0; k < 4; ++k) {
    x[k] = Load(in + k * kLanes);
    for (int i = 0; i < kLanes; ++i) positive[k][i] = std::abs(x[k][i]) + 1e-30f;
  }
  Float16 e[4], l[4], s[4], si[4];
  for (int k = 0; k < 4; ++k) e[k] = s[k] = si[k] = x[k], l[k] = positive[k];
  ExpN(e);
  LogN(l);
  SoftplusN(s);
  SiluN(si);
  auto differ = [](Float16 a, Float16 b) { return std::memcmp(&a, &b, sizeof(a)) != 0; };
  int mask = 0;
  for (int k = 0; k < 4; ++k) {
    mask |= differ(e[k], Exp(x[k])) ? 1 : 0;
    mask |= differ(l[k], Log(positive[k])) ? 2 : 0;
    mask |= differ(s[k], Softplus(x[k])) ? 4 : 0;
    mask |= differ(si[k], Silu(x[k])) ? 8 : 0;
  }
  return mask;
}

// ExpN, LogN, SoftplusN and SiluN of 4 vectors give each vector the bits of Exp, Log, Softplus
// and Silu (N = 1): a vector's bits do not depend on what it is computed with. Inputs past the
// clamps, around 0 and far out.
TEST(VectorMathTest, InterleavedFunctionsGiveEachVectorsBits) {
  std::mt19937 gen(5);
  std::normal_distribution<float> normal;
  for (int trial = 0; trial < 500; ++trial) {
    float in[4 * kLanes];
    for (float& v : in) v = normal(gen) * std::exp2(normal(gen) * 4);
    if (trial == 0) in[0] = 100.0f, in[1] = -100.0f, in[2] = 0.0f, in[3] = -0.0f;
    ASSERT_EQ(InterleavedMismatches(in), 0)
        << "trial " << trial << " (1 exp, 2 log, 4 softplus, 8 silu)";
  }
}

}  // namespace
}  // namespace attnserve::kernels::vec
