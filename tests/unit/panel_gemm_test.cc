// kernels/common/panel_gemm.h: bfloat16 and float32 weights in panels of 32 outputs against float64
// references on ragged shapes, the header's definition bit for bit, rows alone bit-identical to
// the same rows in any batch and on any thread count, and the layout's round trip.
#include "kernels/common/panel_gemm.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/common/linear.h"
#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

using testing::Bf16Exact;
using testing::MaxRelativeError;
using testing::RandomTensor;

// W's panels, bfloat16 (its values must be bfloat16-exact) or float32, as 32-bit words.
std::vector<uint32_t> Pack(const at::Tensor& w, bool f32 = false) {
  const int64_t out = w.size(0), in = w.size(1);
  if (f32) {
    std::vector<uint32_t> panels(static_cast<size_t>(F32PanelFloats(out, in)));
    const at::Tensor c = w.contiguous();
    PackF32Panels(c.data_ptr<float>(), out, in, reinterpret_cast<float*>(panels.data()));
    return panels;
  }
  const at::Tensor bits = w.to(at::kBFloat16).contiguous();
  std::vector<uint32_t> panels(static_cast<size_t>(Bf16PanelWords(out, in)));
  PackBf16Panels(reinterpret_cast<const uint16_t*>(bits.data_ptr()), out, in, panels.data());
  return panels;
}

// y (rows, out) on a poisoned output: every element must be written, none past it.
at::Tensor Product(const std::vector<uint32_t>& panels, int64_t out, const at::Tensor& x,
                   bool f32 = false) {
  at::Tensor y = at::full({x.size(0) * out + 1}, std::nanf(""));
  if (f32) {
    PanelGemmF32(reinterpret_cast<const float*>(panels.data()), out, x.size(1), x.data_ptr<float>(),
                 x.stride(0), x.size(0), y.data_ptr<float>());
  } else {
    PanelGemmBf16(panels.data(), out, x.size(1), x.data_ptr<float>(), x.stride(0), x.size(0),
                  y.data_ptr<float>());
  }
  EXPECT_TRUE(std::isnan(y[x.size(0) * out].item<float>())) << "written past the output";
  return y.narrow(0, 0, x.size(0) * out).view({x.size(0), out});
}

TEST(PanelGemmTest, MatchesFloat64OnRaggedShapes) {
  uint64_t seed = 1;
  // Outputs around the 32-row panels, columns around the pairs, rows around the 6-row blocks;
  // X a strided view (a narrowed wider matrix).
  for (bool f32 : {false, true}) {
    for (int64_t out : {1, 31, 32, 33, 100}) {
      for (int64_t in : {1, 2, 3, 15, 64, 101, 768}) {
        for (int64_t rows : {1, 2, 5, 6, 7, 13, 64, 130}) {
          SCOPED_TRACE(::testing::Message() << (f32 ? "f32 " : "bf16 ") << out << " x " << in
                                            << ", " << rows << " rows");
          const at::Tensor w = f32 ? RandomTensor({out, in}, seed++) : Bf16Exact({out, in}, seed++);
          const at::Tensor x = RandomTensor({rows, in + 5}, seed++).narrow(1, 3, in);
          const at::Tensor y = Product(Pack(w, f32), out, x, f32);
          const at::Tensor want = at::mm(x.to(at::kDouble), w.to(at::kDouble).t());
          EXPECT_FALSE(y.isnan().any().item<bool>());
          EXPECT_LE(MaxRelativeError(y, want), 1e-5);
        }
      }
    }
  }
}

// The header's definition: even and odd columns in two chains of fused multiply-adds, then
// added. Every x86-64-v3/v4 CPU has FMA; without it the kernel rounds each product.
TEST(PanelGemmTest, GivesTheDefinitionsBits) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (!__builtin_cpu_supports("fma")) GTEST_SKIP() << "no FMA: products rounded apart";
#endif
  uint64_t seed = 40;
  for (int64_t in : {1, 2, 7, 96, 333}) {
    const int64_t out = 45, rows = 9;
    const bool f32 = in % 2 == 0;  // float32 panels on some widths, bfloat16 on the others
    const at::Tensor w = f32 ? RandomTensor({out, in}, seed++) : Bf16Exact({out, in}, seed++);
    const at::Tensor x = RandomTensor({rows, in}, seed++);
    const at::Tensor y = Product(Pack(w, f32), out, x, f32);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < out; ++j) {
        float even = 0.0f, odd = 0.0f;
        for (int64_t k = 0; k < in; ++k) {
          const float a = w[j][k].item<float>(), b = x[r][k].item<float>();
          if (k % 2 == 0) {
            even = std::fma(a, b, even);
          } else {
            odd = std::fma(a, b, odd);
          }
        }
        const float want = even + odd, got = y[r][j].item<float>();
        ASSERT_EQ(std::memcmp(&want, &got, sizeof(float)), 0)
            << in << " columns, row " << r << ", output " << j << ": " << got << " != " << want;
      }
    }
  }
}

TEST(PanelGemmTest, EachRowIsBitIdenticalAloneAndInAnyBatchOnAnyThreads) {
  const at::Tensor w = Bf16Exact({203, 300}, 5);
  const at::Tensor x = RandomTensor({23, 300}, 6);
  for (bool f32 : {false, true}) {
    SCOPED_TRACE(f32 ? "f32" : "bf16");
    const std::vector<uint32_t> panels = Pack(w, f32);
    const int threads = at::get_num_threads();
    at::set_num_threads(1);
    const at::Tensor batch = Product(panels, 203, x, f32);
    at::set_num_threads(3);
    EXPECT_TRUE(at::equal(Product(panels, 203, x, f32), batch));
    at::set_num_threads(threads);
    const at::Tensor tail = Product(panels, 203, x.narrow(0, 7, 9), f32);
    EXPECT_TRUE(at::equal(tail, batch.narrow(0, 7, 9)));
    for (int64_t i = 0; i < x.size(0); ++i) {
      const at::Tensor alone = Product(panels, 203, x.narrow(0, i, 1), f32);
      EXPECT_TRUE(at::equal(alone[0], batch[i])) << "row " << i;
    }
  }
}

TEST(PanelGemmTest, UnpacksAnyRowsExactly) {
  for (int64_t in : {1, 6, 77}) {
    const at::Tensor w = Bf16Exact({70, in}, 9 + in);
    const std::vector<uint32_t> panels = Pack(w), f32_panels = Pack(w, true);
    EXPECT_EQ(static_cast<int64_t>(panels.size()), 96 * ((in + 1) / 2));  // 3 panels of 32
    EXPECT_EQ(f32_panels.size(), 2 * panels.size());
    for (auto [first, count] : {std::pair<int64_t, int64_t>{0, 70}, {31, 2}, {69, 1}}) {
      at::Tensor rows = at::empty({count, in});
      UnpackBf16PanelRows(panels.data(), in, first, count, rows.data_ptr<float>());
      EXPECT_TRUE(at::equal(rows, w.narrow(0, first, count))) << in << " " << first;
      rows.fill_(0);
      UnpackF32PanelRows(reinterpret_cast<const float*>(f32_panels.data()), in, first, count,
                         rows.data_ptr<float>());
      EXPECT_TRUE(at::equal(rows, w.narrow(0, first, count))) << in << " " << first;
    }
  }
}

// LinearWeight with --weight_precision=bf16 multiplies every row count through the panels: a
// prefill chunk's rows have the bits of the same rows stepped one at a time.
TEST(PanelGemmTest, LinearWeightPrefillRowsEqualStepRows) {
  const at::Tensor w = Bf16Exact({130, 96}, 31);
  const LinearWeight linear(w, WeightFormat::kBfloat16);
  const at::Tensor chunk = RandomTensor({1, 150, 96}, 32);
  const at::Tensor y = linear(chunk);
  ASSERT_EQ(y.sizes(), at::IntArrayRef({1, 150, 130}));
  for (int64_t i = 0; i < 150; i += 37) {
    EXPECT_TRUE(at::equal(linear(chunk.select(1, i)), y.select(1, i))) << "row " << i;
  }
  EXPECT_LE(MaxRelativeError(y, at::linear(chunk.to(at::kDouble), w.to(at::kDouble))), 1e-5);
  EXPECT_THROW(linear.Rows(at::tensor({130}, at::kLong)), c10::Error);
  EXPECT_THROW(linear.Rows(at::tensor({-1}, at::kLong)), c10::Error);
}

}  // namespace
}  // namespace attnserve::kernels
