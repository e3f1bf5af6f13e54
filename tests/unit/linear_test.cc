// kernels/common/linear.h and bf16_gemv.h: single-row products against float64 references and
// against the multi-row path on the same weights.
#include "kernels/common/linear.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "kernels/common/bf16_gemv.h"
#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

using testing::MaxRelativeError;
using testing::RandomTensor;

// Float32 values that bfloat16 holds exactly, as --weight_precision=bf16 makes them.
at::Tensor Bf16Exact(std::vector<int64_t> shape, uint64_t seed) {
  return RandomTensor(std::move(shape), seed).to(at::kBFloat16).to(at::kFloat);
}

TEST(Bf16GemvTest, MatchesFloat64OnRaggedShapes) {
  uint64_t seed = 1;
  // Rows around the 4-row blocks, columns around the 16-lane vectors.
  for (int64_t rows : {1, 3, 4, 5, 37, 1024}) {
    for (int64_t cols : {1, 15, 16, 17, 100, 768}) {
      SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
      const at::Tensor w = Bf16Exact({rows, cols}, seed++);
      const at::Tensor x = RandomTensor({cols}, seed++);
      const at::Tensor w_bf16 = w.to(at::kBFloat16).contiguous();
      at::Tensor y = at::full({rows}, std::nanf(""));  // poisoned: every row must be written
      Bf16Gemv(reinterpret_cast<const uint16_t*>(w_bf16.data_ptr()), rows, cols,
               x.data_ptr<float>(), y.data_ptr<float>());
      const at::Tensor want = at::mv(w.to(at::kDouble), x.to(at::kDouble));
      EXPECT_FALSE(y.isnan().any().item<bool>());
      EXPECT_LE(MaxRelativeError(y, want), 1e-5);
    }
  }
}

TEST(LinearTest, OneRowEqualsManyRowsOnTheSameWeights) {
  const at::Tensor w = Bf16Exact({300, 200}, 7);
  const at::Tensor x = RandomTensor({5, 1, 200}, 8);
  for (bool bf16_copy : {false, true}) {
    SCOPED_TRACE(bf16_copy);
    const LinearWeight linear(w, bf16_copy);
    const at::Tensor all_rows = linear(x);  // a matrix product
    ASSERT_EQ(all_rows.sizes(), at::IntArrayRef({5, 1, 300}));
    for (int64_t i = 0; i < 5; ++i) {
      const at::Tensor one = linear(x[i]);  // (1, 200): one row, a matrix-vector product
      ASSERT_EQ(one.sizes(), at::IntArrayRef({1, 300}));
      EXPECT_LE(MaxRelativeError(one, all_rows[i]), 1e-5);
    }
    EXPECT_LE(MaxRelativeError(Linear(x[0], w), at::linear(x[0], w)), 1e-5);
  }
}

TEST(LinearTest, WrongFeatureCountIsAnErrorNotAWildRead) {
  const LinearWeight linear(Bf16Exact({8, 32}, 3), /*bf16_copy=*/true);
  EXPECT_THROW(linear(at::zeros({1, 31})), c10::Error);
  EXPECT_THROW(linear(at::zeros({4, 31})), c10::Error);
}

}  // namespace
}  // namespace attnserve::kernels
