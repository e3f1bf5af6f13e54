// LowRankAdapter (kernels/common/low_rank_adapter.h) against y + [B_i (A_i x)] in float64, on
// random shapes of one and of three parts, in every weight format; rows alone = rows together.
#include "kernels/common/low_rank_adapter.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

struct Shape {
  int64_t in, rows;
  std::vector<std::pair<int64_t, int64_t>> parts;  // (rank, out) each
};

class LowRankAdapterTest : public ::testing::TestWithParam<Shape> {};

TEST_P(LowRankAdapterTest, MatchesFloat64Reference) {
  const Shape& s = GetParam();
  at::manual_seed(11);
  std::vector<at::Tensor> downs, ups;
  int64_t out = 0;
  for (const auto& [rank, width] : s.parts) {
    downs.push_back(at::randn({rank, s.in}) / std::sqrt(static_cast<double>(s.in)));
    ups.push_back(at::randn({width, rank}) / std::sqrt(static_cast<double>(rank)));
    out += width;
  }
  const at::Tensor x = at::randn({s.rows, s.in});
  const at::Tensor y0 = at::randn({s.rows, out});
  std::vector<at::Tensor> parts;
  for (size_t i = 0; i < downs.size(); ++i) {
    parts.push_back(
        x.to(at::kDouble).matmul(downs[i].to(at::kDouble).t()).matmul(ups[i].to(at::kDouble).t()));
  }
  const at::Tensor want = y0.to(at::kDouble) + at::cat(parts, -1);
  for (WeightFormat format :
       {WeightFormat::kFloat32, WeightFormat::kBfloat16, WeightFormat::kInt8}) {
    std::vector<at::Tensor> d = downs, u = ups;
    if (IsBfloat16(format)) {  // the format's contract: bfloat16-exact values
      for (at::Tensor& t : d) t = t.to(at::kBFloat16).to(at::kFloat);
      for (at::Tensor& t : u) t = t.to(at::kBFloat16).to(at::kFloat);
    }
    const LowRankAdapter adapter(d, u, format);
    EXPECT_EQ(adapter.in_features(), s.in);
    EXPECT_EQ(adapter.out_features(), out);
    at::Tensor y = y0.clone();
    adapter.AddTo(x, y);
    const double bound = format == WeightFormat::kFloat32 ? 1e-5 : 3e-2;
    EXPECT_LE(testing::MaxRelativeError(y, want.to(at::kFloat)), bound) << static_cast<int>(format);
    // Each row alone gives its bits in the batch.
    for (int64_t r = 0; r < s.rows; ++r) {
      at::Tensor alone = y0.narrow(0, r, 1).clone();
      adapter.AddTo(x.narrow(0, r, 1).contiguous(), alone);
      EXPECT_TRUE(at::equal(alone, y.narrow(0, r, 1))) << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LowRankAdapterTest,
                         ::testing::Values(Shape{64, 5, {{6, 96}}}, Shape{32, 1, {{4, 8}}},
                                           Shape{128, 9, {{32, 128}, {32, 64}, {32, 64}}},
                                           Shape{96, 70, {{7, 96}, {5, 40}, {3, 40}}}));

}  // namespace
}  // namespace attnserve::kernels
