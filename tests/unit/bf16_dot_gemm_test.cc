// kernels/common/bf16_dot_gemm.h and LinearWeight's kBfloat16Dot: the bfloat16 × bfloat16
// products against a plain rendering of their definition (bit for bit, on every instruction set
// this CPU has: on one with AVX512_BF16 this checks vdpbf16ps itself), against float64, a row's
// result independent of its batch, and the rounding of activations.
#include "kernels/common/bf16_dot_gemm.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/linear.h"
#include "kernels/common/panel_gemm.h"
#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

using testing::MaxRelativeError;
using testing::RandomTensor;

float Widen(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof(f));
  return f;
}

// (out, in) bfloat16 bits of `w` (RoundToBf16 flushes denormals, as LinearWeight does).
std::vector<uint16_t> Bits(const at::Tensor& w) {
  const at::Tensor c = w.contiguous();
  std::vector<uint16_t> out(c.numel());
  for (int64_t i = 0; i < c.numel(); ++i) out[i] = RoundToBf16(c.data_ptr<float>()[i]);
  return out;
}

// The header's definition, one scalar operation at a time: per output, one sum over the pairs
// of columns (an odd last one padded with zeros), odd element first.
std::vector<float> Definition(const std::vector<uint16_t>& w, int64_t out, int64_t in,
                              const at::Tensor& x) {
  const int64_t rows = x.size(0);
  std::vector<float> y(rows * out);
  const int64_t padded = (in + 1) / 2 * 2;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> xr(padded, 0.0f);
    for (int64_t c = 0; c < in; ++c) xr[c] = Widen(RoundToBf16(x[r][c].item<float>()));
    for (int64_t j = 0; j < out; ++j) {
      float acc = 0.0f;
      for (int64_t e = 0; e < padded; e += 2) {
        const int64_t o = e + 1;
        const float we = Widen(w[j * in + e]);
        const float wo = o < in ? Widen(w[j * in + o]) : 0.0f;
        const volatile float po = wo * xr[o], pe = we * xr[e];  // exact products
        const volatile float t = acc + po;
        acc = t + pe;
      }
      y[r * out + j] = acc;
    }
  }
  return y;
}

std::vector<float> Gemm(const std::vector<uint16_t>& w, int64_t out, int64_t in,
                        const at::Tensor& x, Bf16DotIsa isa) {
  std::vector<uint32_t> panels(static_cast<size_t>(Bf16PanelWords(out, in)));
  PackBf16Panels(w.data(), out, in, panels.data());
  std::vector<float> y(x.size(0) * out, std::nanf(""));
  Bf16DotGemm(panels.data(), out, in, x.data_ptr<float>(), x.stride(0), x.size(0), y.data(), isa);
  return y;
}

std::vector<Bf16DotIsa> SupportedIsas() {
  std::vector<Bf16DotIsa> isas = {Bf16DotIsa::kPortable};
  if (Bf16DotIsaSupported(Bf16DotIsa::kAvx512Bf16)) isas.push_back(Bf16DotIsa::kAvx512Bf16);
  return isas;
}

TEST(Bf16DotGemmTest, EveryInstructionSetGivesTheDefinitionsBits) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 12; ++trial) {
    // Odd and even widths, outputs around the 32-row panels, rows around the 6-row blocks.
    const int64_t out = 1 + rng() % 70, in = 1 + rng() % 240, rows = 1 + rng() % 14;
    SCOPED_TRACE("out " + std::to_string(out) + " in " + std::to_string(in) + " rows " +
                 std::to_string(rows));
    // Mixed magnitudes, so that the additions round (a sum of exact products would not).
    const at::Tensor w =
        RandomTensor({out, in}, trial) * at::exp(RandomTensor({out, in}, 50 + trial));
    const at::Tensor x = RandomTensor({rows, in}, 100 + trial) * 30.0;
    const std::vector<uint16_t> bits = Bits(w);
    const std::vector<float> want = Definition(bits, out, in, x);
    for (Bf16DotIsa isa : SupportedIsas()) {
      SCOPED_TRACE(Bf16DotIsaName(isa));
      const std::vector<float> got = Gemm(bits, out, in, x, isa);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
    }
  }
}

TEST(Bf16DotGemmTest, AgreesWithFloat64OnTheRoundedOperandsAndARowIgnoresItsBatch) {
  const int64_t out = 70, in = 300;
  const at::Tensor w = RandomTensor({out, in}, 1);
  const at::Tensor x = RandomTensor({13, in}, 2);
  const std::vector<uint16_t> bits = Bits(w);
  at::Tensor wd = at::empty({out, in}, at::kDouble), xd = at::empty({13, in}, at::kDouble);
  for (int64_t i = 0; i < out * in; ++i) wd.data_ptr<double>()[i] = Widen(bits[i]);
  for (int64_t i = 0; i < 13 * in; ++i) {
    xd.data_ptr<double>()[i] = Widen(RoundToBf16(x.data_ptr<float>()[i]));
  }
  const at::Tensor ref = at::matmul(xd, wd.t()).to(at::kFloat);
  for (Bf16DotIsa isa : SupportedIsas()) {
    SCOPED_TRACE(Bf16DotIsaName(isa));
    std::vector<float> got = Gemm(bits, out, in, x, isa);
    EXPECT_LT(MaxRelativeError(at::from_blob(got.data(), {13, out}).clone(), ref), 1e-5);
    // Row 7 alone: the same bits as in the batch of 13.
    std::vector<float> alone = Gemm(bits, out, in, x.narrow(0, 7, 1).contiguous(), isa);
    EXPECT_EQ(std::memcmp(alone.data(), got.data() + 7 * out, out * sizeof(float)), 0);
  }
}

TEST(Bf16DotGemmTest, RoundToBf16RoundsToNearestEvenAndFlushesDenormals) {
  EXPECT_EQ(RoundToBf16(1.0f), 0x3F80);
  // Halfway between two bfloat16 values (their step at 1 is 2^-7): to the even one.
  EXPECT_EQ(RoundToBf16(1.0f + 1.0f / 256), 0x3F80);
  EXPECT_EQ(RoundToBf16(Widen(0x3F81) + 1.0f / 256), 0x3F82);
  EXPECT_EQ(RoundToBf16(Widen(0x3F81) + 1.0f / 512), 0x3F81);         // below halfway
  EXPECT_EQ(RoundToBf16(-1e-40f), 0x8000);                            // a denormal: -0
  EXPECT_EQ(RoundToBf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to infinity
  EXPECT_TRUE(std::isnan(Widen(RoundToBf16(std::nanf("")))));
}

// The vector conversion of X's rows gives RoundToBf16's bits for every kind of float: random
// bit patterns (NaNs, infinities, denormals, ties), rows whose word count leaves a scalar tail,
// rows read with a stride.
TEST(Bf16DotGemmTest, RoundRowsToBf16PairsGivesRoundToBf16sBits) {
  std::mt19937 gen(5);
  const std::vector<float> specials = {0.0f,
                                       -0.0f,
                                       1.0f + 1.0f / 256,
                                       -1e-40f,
                                       1e-45f,
                                       std::numeric_limits<float>::max(),
                                       std::numeric_limits<float>::infinity(),
                                       -std::numeric_limits<float>::infinity(),
                                       std::nanf(""),
                                       -std::nanf("")};
  for (int64_t in : {1, 2, 31, 32, 33, 34, 96, 777, 778}) {
    const int64_t rows = 3, stride = in + 7, words = (in + 1) / 2;
    std::vector<float> x(rows * stride);
    for (size_t i = 0; i < x.size(); ++i) {
      if (i % 5 == 0) {
        x[i] = specials[(i / 5) % specials.size()];
      } else {
        const uint32_t bits = gen();
        std::memcpy(&x[i], &bits, sizeof(bits));
      }
    }
    std::vector<uint32_t> got(rows * words);
    RoundRowsToBf16Pairs(x.data(), stride, rows, in, got.data());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < words; ++c) {
        const uint32_t odd =
            2 * c + 1 < in ? static_cast<uint32_t>(RoundToBf16(x[r * stride + 2 * c + 1])) : 0u;
        const uint32_t want = RoundToBf16(x[r * stride + 2 * c]) | odd << 16;
        ASSERT_EQ(got[r * words + c], want) << "in " << in << " row " << r << " word " << c;
      }
    }
  }
}

// LinearWeight with kBfloat16Dot: decode rows through these products (activations rounded),
// within bfloat16's rounding of the float32 product, an odd `in` too.
TEST(Bf16DotGemmTest, LinearWeightUsesThemForDecodeRows) {
  const at::Tensor w = RandomTensor({64, 96}, 3).to(at::kBFloat16).to(at::kFloat);
  const at::Tensor x = RandomTensor({5, 96}, 4);
  const LinearWeight dot(w, WeightFormat::kBfloat16Dot), exact(w, WeightFormat::kBfloat16);
  const at::Tensor y_dot = dot(x), y_exact = exact(x);
  const at::Tensor x_rounded = x.to(at::kBFloat16).to(at::kFloat);
  EXPECT_LT(MaxRelativeError(y_dot, at::matmul(x_rounded, w.t())), 1e-5);
  EXPECT_GT(MaxRelativeError(y_dot, y_exact), 1e-5) << "activations were not rounded";
  // A prefill chunk (more rows than a step has, in tiles of 64) through the same products: each
  // row has the bits it has alone.
  const at::Tensor chunk = RandomTensor({1, 150, 96}, 7);
  const at::Tensor y_chunk = dot(chunk);
  EXPECT_LT(MaxRelativeError(y_chunk, at::matmul(chunk.to(at::kBFloat16).to(at::kFloat), w.t())),
            1e-5);
  for (int64_t r : {0, 63, 64, 149}) {
    EXPECT_TRUE(at::equal(y_chunk[0][r], dot(chunk[0].narrow(0, r, 1))[0])) << "row " << r;
  }
  const at::Tensor w_odd = RandomTensor({8, 33}, 5).to(at::kBFloat16).to(at::kFloat);
  const at::Tensor x_odd = RandomTensor({2, 33}, 6);
  EXPECT_LT(MaxRelativeError(LinearWeight(w_odd, WeightFormat::kBfloat16Dot)(x_odd),
                             at::matmul(x_odd.to(at::kBFloat16).to(at::kFloat), w_odd.t())),
            1e-5);
}

}  // namespace
}  // namespace attnserve::kernels
