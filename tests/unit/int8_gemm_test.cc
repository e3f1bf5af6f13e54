// kernels/common/int8_gemm.h and LinearWeight's kInt8: the int8 products against a float64
// evaluation of their definition, the same bits from every instruction set, a row's result
// independent of its batch, and the quantization error against the float64 product itself.
#include "kernels/common/int8_gemm.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/common/linear.h"
#include "kernels/common/skinny_gemm.h"
#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

using testing::MaxRelativeError;
using testing::RandomTensor;

struct Quantized {
  int64_t out = 0, in = 0;
  at::Tensor q, scales;  // the panels' biased bytes and their scales (int8_gemm.h)
  // Row j's scales (out, in / 32), out of the panels.
  at::Tensor RowScales() const {
    at::Tensor s = at::empty({out, in / kInt8Block});
    for (int64_t j = 0; j < out; ++j) {
      for (int64_t b = 0; b < in / kInt8Block; ++b) {
        s[j][b] = scales.data_ptr<float>()[Int8PanelScaleIndex(in, j, b)];
      }
    }
    return s;
  }
};

Quantized Quantize(const at::Tensor& w, bool per_row = false) {
  const int64_t out = w.size(0), in = w.size(1);
  Quantized r{out, in, at::full({Int8PanelBytes(out, in)}, 7, at::kByte),
              at::full({Int8PanelScaleCount(out, in)}, std::nanf(""))};
  QuantizeWeightInt8(w.data_ptr<float>(), out, in, per_row, r.q.data_ptr<uint8_t>(),
                     r.scales.data_ptr<float>());
  return r;
}

at::Tensor Dequantize(const Quantized& w) {
  at::Tensor out = at::empty({w.out, w.in}, at::kFloat);
  DequantizeWeightInt8(w.q.data_ptr<uint8_t>(), w.scales.data_ptr<float>(), w.in, 0, w.out,
                       out.data_ptr<float>());
  return out;
}

at::Tensor Gemm(const Quantized& w, const at::Tensor& x, Int8Isa isa) {
  at::Tensor y = at::full({x.size(0), w.out}, std::nanf(""));
  Int8Gemm(w.q.data_ptr<uint8_t>(), w.scales.data_ptr<float>(), w.out, w.in, x.data_ptr<float>(),
           x.stride(0), x.size(0), y.data_ptr<float>(), isa);
  return y;
}

// Blocks of 32 of a (rows, in) tensor as the header's rounding makes them, from an independent
// rendering of it (d = amax / 127, q = round(v / d) in float32): q (as doubles) and d per block.
struct BlockInts {
  at::Tensor q;  // (rows, in) float64 integers
  at::Tensor d;  // (rows, in / 32) float64
};
BlockInts RoundBlocks(const at::Tensor& v) {
  const at::Tensor c = v.contiguous();
  BlockInts r{at::empty(c.sizes(), at::kDouble),
              at::empty({c.size(0), c.size(1) / kInt8Block}, at::kDouble)};
  const float* p = c.data_ptr<float>();
  double* q = r.q.data_ptr<double>();
  for (int64_t b = 0; b < c.numel() / kInt8Block; ++b) {
    float amax = 0;
    for (int k = 0; k < kInt8Block; ++k) amax = std::max(amax, std::fabs(p[b * 32 + k]));
    const float d = amax / 127.0f;
    const float id = d > 0 ? 1.0f / d : 0.0f;
    for (int k = 0; k < kInt8Block; ++k) q[b * 32 + k] = std::round(p[b * 32 + k] * id);
    r.d.data_ptr<double>()[b] = d;
  }
  return r;
}

// X's blocks dequantized in float64, q times the least-squares scale Σ v q / Σ q² rounded to
// float32: the values the integer products multiply.
at::Tensor DequantizeBlocksDouble(const at::Tensor& v) {
  const BlockInts r = RoundBlocks(v);
  const at::Tensor q = r.q.view({v.size(0), -1, kInt8Block});
  const at::Tensor vd = v.to(at::kDouble).view({v.size(0), -1, kInt8Block});
  const at::Tensor qq = (q * q).sum(2);
  const at::Tensor fit = at::where(qq > 0, (vd * q).sum(2) / qq.clamp_min(1), r.d);
  return (q * fit.to(at::kFloat).to(at::kDouble).unsqueeze(2)).view(v.sizes());
}

std::vector<Int8Isa> SupportedIsas() {
  std::vector<Int8Isa> isas;
  for (Int8Isa isa : {Int8Isa::kAvx512Vnni, Int8Isa::kAvxVnni, Int8Isa::kAvx2, Int8Isa::kScalar}) {
    if (Int8IsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

TEST(Int8GemmTest, MatchesItsDefinitionInFloat64OnRaggedShapes) {
  uint64_t seed = 100;
  // Weight rows around the 16-row panels (a short last panel, one alone); 1 to 25 blocks; X
  // rows around the row blocks (8 with AVX512-VNNI, 3 or 2 on 256 bits: 9 = 5 + 4 and 3 + 3 + 3),
  // up to the skinny limit.
  for (int64_t out : {1, 3, 16, 37, 260}) {
    for (int64_t in : {32, 64, 96, 160, 512, 768, 800}) {
      for (int64_t rows : {1, 2, 3, 5, 9, 16, 64}) {
        const at::Tensor w = RandomTensor({out, in}, seed++);
        const at::Tensor x = RandomTensor({rows, in}, seed++);
        const Quantized q = Quantize(w);
        // Both quantized operands in float64: what the int8 product approximates to float32
        // rounding of the scale products and their sum.
        const at::Tensor want =
            at::mm(DequantizeBlocksDouble(x), Dequantize(q).to(at::kDouble).t());
        const at::Tensor exact = at::mm(x.to(at::kDouble), w.to(at::kDouble).t());
        for (Int8Isa isa : SupportedIsas()) {
          SCOPED_TRACE(::testing::Message()
                       << Int8IsaName(isa) << " " << out << " x " << in << ", " << rows << " rows");
          const at::Tensor y = Gemm(q, x, isa);
          ASSERT_FALSE(y.isnan().any().item<bool>());
          EXPECT_LE((y.to(at::kDouble) - want).abs().max().item<double>(),
                    2e-6 * want.abs().max().item<double>() + 1e-12);
          // And the quantization error itself: under 2.5% (about 1% on average) of an output's
          // typical size
          // (|x| |w| / sqrt(in)) for Gaussian data.
          const double typical =
              x.norm().item<double>() * w.norm().item<double>() / std::sqrt(double(in));
          EXPECT_LE((y.to(at::kDouble) - exact).norm().item<double>() / typical, 0.025);
        }
      }
    }
  }
}

// The panels hold each element of W once, pad with zero bytes of scale 0, and give the weights
// back as d · q in the natural order.
TEST(Int8GemmTest, PanelsHoldEachElementOnceAndDequantizeToTheirBlocks) {
  for (int64_t out : {1, 7, 16, 37}) {
    for (int64_t in : {32, 96, 768}) {
      SCOPED_TRACE(::testing::Message() << out << " x " << in);
      const int64_t bytes = Int8PanelBytes(out, in), nb = in / kInt8Block;
      ASSERT_EQ(bytes, (out + 15) / 16 * 16 * in);
      std::vector<int> seen(bytes, 0), seen_scale(Int8PanelScaleCount(out, in), 0);
      for (int64_t j = 0; j < (out + 15) / 16 * 16; ++j) {
        for (int64_t k = 0; k < in; ++k) ++seen[Int8PanelIndex(in, j, k)];
        for (int64_t b = 0; b < nb; ++b) ++seen_scale[Int8PanelScaleIndex(in, j, b)];
      }
      EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), bytes);
      EXPECT_EQ(std::count(seen_scale.begin(), seen_scale.end(), 1),
                static_cast<int64_t>(seen_scale.size()));
      // Element k of row j: panel j / 16, block k / 32, step k % 32 / 4, lane j % 16.
      EXPECT_EQ(Int8PanelIndex(in, 17, 37), 16 * in + 512 + 64 + 4 + 1);
      const at::Tensor w = RandomTensor({out, in}, 60 + in + out);
      const Quantized q = Quantize(w);
      // d · q is exact in float64; rounded to float32 it is the float32 product.
      const at::Tensor want =
          RoundBlocks(w).q.view({out, nb, kInt8Block}) * q.RowScales().to(at::kDouble).unsqueeze(2);
      EXPECT_TRUE(at::equal(Dequantize(q), want.view({out, in}).to(at::kFloat)));
      // Padding rows: the biased zero byte, scale 0.
      for (int64_t j = out; j < (out + 15) / 16 * 16; ++j) {
        for (int64_t k = 0; k < in; ++k) {
          ASSERT_EQ(q.q.data_ptr<uint8_t>()[Int8PanelIndex(in, j, k)], 128);
        }
        for (int64_t b = 0; b < nb; ++b) {
          ASSERT_EQ(q.scales.data_ptr<float>()[Int8PanelScaleIndex(in, j, b)], 0.0f);
        }
      }
    }
  }
}

// A weight block's q are Q8_0's (round(w / (amax / 127))); its scale is their least-squares fit
// Σ w q / Σ q², whose error is never above amax / 127's (and here, on Gaussian rows, lower in
// total).
TEST(Int8GemmTest, WeightScalesFitTheirIntegersInLeastSquares) {
  const at::Tensor w = RandomTensor({64, 256}, 70);
  w[3].zero_();  // an all-zero row keeps scale 0
  const Quantized q = Quantize(w);
  const BlockInts r = RoundBlocks(w);
  const at::Tensor ints = r.q.view({64, 8, kInt8Block});
  const at::Tensor wd = w.to(at::kDouble).view({64, 8, kInt8Block});
  const at::Tensor fit = (wd * ints).sum(2) / (ints * ints).sum(2).clamp_min(1e-300);
  const at::Tensor scales = q.RowScales().to(at::kDouble);
  EXPECT_LE(((scales - fit).abs() - 1e-7 * fit.abs()).max().item<double>(), 0.0);
  EXPECT_TRUE(at::equal(q.RowScales()[3], at::zeros({8})));
  const at::Tensor fit_error = (wd - ints * scales.unsqueeze(2)).pow(2).sum(2);
  const at::Tensor amax_error = (wd - ints * r.d.view({64, 8}).unsqueeze(2)).pow(2).sum(2);
  EXPECT_TRUE((fit_error <= amax_error * (1 + 1e-6) + 1e-30).all().item<bool>());
  EXPECT_LT(fit_error.sum().item<double>(), amax_error.sum().item<double>());
}

// X's vector quantizer against the scalar definition (QuantizeBlockInt8Scalar), bit for
// bit: random bit patterns (NaNs, infinities, denormals), ties at one half, zero blocks,
// blocks whose amax is so small that 1 / d overflows to infinity.
TEST(Int8GemmTest, ActivationsQuantizeToTheDefinitionsBits) {
  std::mt19937 gen(9);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  // Four whole sets of 16 blocks (the vector code's unit) and a ragged 7.
  const int64_t blocks = 71;
  std::vector<float> v(blocks * kInt8Block);
  for (int64_t b = 0; b < blocks; ++b) {
    float* p = v.data() + b * kInt8Block;
    for (int64_t k = 0; k < kInt8Block; ++k) {
      switch (b % 8) {
        case 0: {  // any bits
          const uint32_t bits = gen();
          std::memcpy(&p[k], &bits, sizeof(bits));
          break;
        }
        case 1:  // zeros
          p[k] = k % 2 ? 0.0f : -0.0f;
          break;
        case 2:  // 1 / d overflows
          p[k] = k == 0 ? 1e-40f : unit(gen) * 1e-40f;
          break;
        case 3:  // exact halves: amax 127 gives d = 1
          p[k] = k == 0 ? 127.0f : static_cast<float>(static_cast<int>(k) - 16) + 0.5f;
          break;
        case 4:  // a NaN or an infinity among ordinary values
          p[k] = k == 5 ? (b % 16 ? std::nanf("") : std::numeric_limits<float>::infinity())
                        : unit(gen);
          break;
        default:
          p[k] = unit(gen) * std::exp(8.0f * unit(gen));
      }
    }
  }
  std::vector<int8_t> want_q(v.size()), got_q(v.size(), 99);
  std::vector<float> want_d(blocks), got_d(blocks, -1.0f);
  for (int64_t b = 0; b < blocks; ++b) {
    QuantizeBlockInt8Scalar(v.data() + b * kInt8Block, kInt8Block, want_q.data() + b * kInt8Block,
                            &want_d[b]);
  }
  QuantizeBlocksInt8(v.data(), blocks, got_q.data(), got_d.data());
  for (int64_t b = 0; b < blocks; ++b) {
    EXPECT_EQ(std::memcmp(&want_d[b], &got_d[b], sizeof(float)), 0) << "block " << b;
    for (int64_t k = 0; k < kInt8Block; ++k) {
      ASSERT_EQ(got_q[b * kInt8Block + k], want_q[b * kInt8Block + k])
          << "block " << b << " element " << k << " value " << v[b * kInt8Block + k];
    }
  }
}

TEST(Int8GemmTest, EveryInstructionSetGivesTheSameBits) {
  const std::vector<Int8Isa> isas = SupportedIsas();
  if (isas.size() < 2) GTEST_SKIP() << "only the scalar path on this CPU";
  uint64_t seed = 300;
  for (int64_t in : {32, 96, 800, 1536}) {
    for (int64_t rows : {1, 3, 16, 64}) {
      const at::Tensor w = RandomTensor({203, in}, seed++);
      // Zero blocks (scale 0) and large values next to small ones.
      const at::Tensor magnitude = at::exp(RandomTensor({rows, in}, seed++));
      at::Tensor x = RandomTensor({rows, in}, seed++) * magnitude;
      x.narrow(1, 0, 32).zero_();
      const Quantized q = Quantize(w);
      const at::Tensor reference = Gemm(q, x, Int8Isa::kScalar);
      for (Int8Isa isa : isas) {
        SCOPED_TRACE(::testing::Message() << Int8IsaName(isa) << " " << in << ", " << rows);
        EXPECT_TRUE(at::equal(Gemm(q, x, isa), reference));
      }
    }
  }
  EXPECT_EQ(Int8IsaInUse(), isas.front());
}

TEST(Int8GemmTest, EachRowIsBitIdenticalAloneAndInAnyBatch) {
  const at::Tensor w = RandomTensor({203, 320}, 5);
  const at::Tensor x = RandomTensor({23, 320}, 6);
  const Quantized q = Quantize(w);
  for (Int8Isa isa : SupportedIsas()) {
    SCOPED_TRACE(Int8IsaName(isa));
    const at::Tensor batch = Gemm(q, x, isa);
    EXPECT_TRUE(at::equal(Gemm(q, x.narrow(0, 7, 9).contiguous(), isa), batch.narrow(0, 7, 9)));
    for (int64_t i = 0; i < x.size(0); ++i) {
      EXPECT_TRUE(at::equal(Gemm(q, x.narrow(0, i, 1).contiguous(), isa)[0], batch[i]))
          << "row " << i;
    }
  }
}

// One outlier per row: a scale per block keeps the other blocks' resolution, a scale per row
// does not (the case for kInt8's granularity).
TEST(Int8GemmTest, BlockScalesBeatRowScalesOnOutliers) {
  at::Tensor w = RandomTensor({64, 512}, 7);
  w.select(1, 3).mul_(8);
  const at::Tensor exact = w.to(at::kDouble);
  auto error = [&](bool per_row) {
    const at::Tensor d = Dequantize(Quantize(w, per_row)).to(at::kDouble);
    return (d - exact).norm().item<double>() / exact.norm().item<double>();
  };
  EXPECT_LT(error(false), error(true) / 2);
}

TEST(LinearInt8Test, StepsAndPrefillChunksUseTheIntegerProducts) {
  const at::Tensor w = RandomTensor({96, 128}, 11);
  const LinearWeight linear(w, WeightFormat::kInt8);
  ASSERT_TRUE(linear.int8());
  const Quantized q = Quantize(w);
  // Float32Weight() is d · q exactly.
  const at::Tensor dequantized = Dequantize(q);
  EXPECT_TRUE(at::equal(linear.Float32Weight(), dequantized));
  for (int64_t rows : {int64_t{1}, int64_t{7}, kSkinnyGemmMaxRows}) {
    const at::Tensor x = RandomTensor({rows, 128}, 12 + rows);
    EXPECT_TRUE(at::equal(linear(x), Gemm(q, x, Int8Isa::kAuto)));
    EXPECT_TRUE(at::equal(linear(x.unsqueeze(1)).squeeze(1), Gemm(q, x, Int8Isa::kAuto)));
    // A strided view gives the same rows.
    const at::Tensor wide = RandomTensor({rows, 200}, 40 + rows);
    EXPECT_TRUE(at::equal(linear(wide.narrow(1, 50, 128)),
                          Gemm(q, wide.narrow(1, 50, 128).contiguous(), Int8Isa::kAuto)));
  }
  // Beyond the skinny rows (a prefill chunk, tiles of 64 rows): the same integer products, so
  // each row has the bits it has alone.
  const at::Tensor many = RandomTensor({2 * kSkinnyGemmMaxRows + 3, 128}, 99);
  EXPECT_TRUE(at::equal(linear(many), Gemm(q, many, Int8Isa::kAuto)));
  EXPECT_TRUE(at::equal(linear(many.unsqueeze(0)).squeeze(0), Gemm(q, many, Int8Isa::kAuto)));
  EXPECT_TRUE(at::equal(linear(many)[kSkinnyGemmMaxRows + 1],
                        linear(many.narrow(0, kSkinnyGemmMaxRows + 1, 1))[0]));
}

TEST(LinearInt8Test, WidthsThatAreNotBlocksOf32StayFloat32) {
  const at::Tensor w = RandomTensor({40, 48}, 13);
  const LinearWeight linear(w, WeightFormat::kInt8);
  EXPECT_FALSE(linear.int8());
  EXPECT_TRUE(at::equal(linear.Float32Weight(), w));
  const at::Tensor x = RandomTensor({3, 48}, 14);
  EXPECT_LE(MaxRelativeError(linear(x), at::linear(x, w)), 1e-5);
}

}  // namespace
}  // namespace attnserve::kernels
