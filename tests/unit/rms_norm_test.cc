// kernels/common/rms_norm.h against a float64 RMSNorm on random shapes, and a row's bits
// alone against the same row in a batch.
#include "kernels/common/rms_norm.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

namespace attnserve::kernels {
namespace {

TEST(RmsNormTest, MatchesFloat64OnRaggedShapes) {
  at::manual_seed(7);
  for (int64_t width : {1, 7, 16, 33, 256, 768, 1000}) {
    for (int64_t rows : {1, 3, 16, 200}) {
      // A stride wider than the row: the rows of a larger tensor.
      const at::Tensor base = at::randn({rows, width + 5}) * 3.0;
      const at::Tensor x = base.narrow(1, 0, width);
      const at::Tensor weight = at::randn({width});
      const float eps = 1e-5f;
      at::Tensor out = at::empty({rows, width});
      RmsNormRows(base.data_ptr<float>(), width + 5, rows, width, weight.data_ptr<float>(), eps,
                  out.data_ptr<float>());
      const at::Tensor x64 = x.to(at::kDouble);
      const at::Tensor want =
          x64 * at::rsqrt(x64.pow(2).mean(-1, true) + eps) * weight.to(at::kDouble);
      const double err =
          ((out.to(at::kDouble) - want).abs() / (want.abs() + 1e-6)).max().item<double>();
      EXPECT_LT(err, 2e-6) << "rows " << rows << " width " << width;
    }
  }
}

TEST(RmsNormTest, EachRowIsBitIdenticalAloneAndInAnyBatch) {
  at::manual_seed(11);
  const int64_t width = 768, rows = 37;
  const at::Tensor x = at::randn({rows, width});
  const at::Tensor weight = at::randn({width});
  at::Tensor batch = at::empty({rows, width});
  RmsNormRows(x.data_ptr<float>(), width, rows, width, weight.data_ptr<float>(), 1e-5f,
              batch.data_ptr<float>());
  for (int64_t r : {int64_t{0}, int64_t{17}, rows - 1}) {
    at::Tensor alone = at::empty({1, width});
    RmsNormRows(x[r].data_ptr<float>(), width, 1, width, weight.data_ptr<float>(), 1e-5f,
                alone.data_ptr<float>());
    EXPECT_TRUE(at::equal(alone[0], batch[r])) << "row " << r;
  }
}

TEST(RmsNormTest, WritesInPlace) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({4, 100});
  const at::Tensor weight = at::randn({100});
  at::Tensor expected = at::empty({4, 100});
  RmsNormRows(x.data_ptr<float>(), 100, 4, 100, weight.data_ptr<float>(), 1e-6f,
              expected.data_ptr<float>());
  at::Tensor y = x.clone();
  RmsNormRows(y.data_ptr<float>(), 100, 4, 100, weight.data_ptr<float>(), 1e-6f,
              y.data_ptr<float>());
  EXPECT_TRUE(at::equal(y, expected));
}

}  // namespace
}  // namespace attnserve::kernels
