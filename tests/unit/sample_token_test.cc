// SampleToken (server/inference.h) against a plain float64 rendering: the greedy token is the
// first maximum, the log-probability equals float64 log_softmax, and a draw at a temperature
// follows softmax(logits / temperature) over the top k.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "server/inference.h"
#include "tests/unit/test_util.h"

namespace attnserve::server {
namespace {

// log_softmax(x)[i] in float64, summed plainly.
double ReferenceLogprob(const at::Tensor& logits, int64_t i) {
  const at::Tensor x = logits.reshape({-1}).to(at::kDouble);
  const double* v = x.data_ptr<double>();
  double top = v[0], sum = 0;
  for (int64_t j = 0; j < x.numel(); ++j) top = std::max(top, v[j]);
  for (int64_t j = 0; j < x.numel(); ++j) sum += std::exp(v[j] - top);
  return v[i] - top - std::log(sum);
}

TEST(SampleTokenTest, GreedyIsTheFirstMaximumWithItsFloat64Logprob) {
  for (const int64_t vocab : {1, 7, 16, 255, 4096, 50280}) {
    for (const double scale : {1.0, 8.0, 30.0}) {
      at::Tensor logits = testing::RandomTensor({1, vocab}, 17 + vocab, scale);
      std::mt19937_64 rng(1);
      float logprob = 1;
      const int64_t token = SampleToken(logits, 0.0f, 0, rng, &logprob);
      EXPECT_EQ(token, logits.reshape({-1}).argmax().item<int64_t>()) << vocab;
      EXPECT_NEAR(logprob, ReferenceLogprob(logits, token), 2e-6 * (1 + std::fabs(logprob)))
          << "vocab " << vocab << " scale " << scale;
    }
  }
  // Equal maxima: the first.
  at::Tensor tied = at::zeros({1, 40});
  tied.index_put_({0, 9}, 3.0f);
  tied.index_put_({0, 31}, 3.0f);
  std::mt19937_64 rng(1);
  float logprob = 0;
  EXPECT_EQ(SampleToken(tied, 0.0f, 0, rng, &logprob), 9);
  EXPECT_NEAR(logprob, ReferenceLogprob(tied, 9), 1e-6);
}

// The greedy token is std::max_element's on any logits: ties, infinities, NaNs (skipped, except
// a NaN first, which max_element keeps), lengths around the vector width.
TEST(SampleTokenTest, GreedyIsMaxElementsChoiceOnAnyLogits) {
  std::mt19937 gen(23);
  std::uniform_int_distribution<int> small(-3, 3), kind(0, 9);
  const float inf = std::numeric_limits<float>::infinity();
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t vocab = 1 + trial % 70;
    at::Tensor logits = at::empty({1, vocab});
    float* x = logits.data_ptr<float>();
    for (int64_t i = 0; i < vocab; ++i) {
      switch (kind(gen)) {
        case 0:
          x[i] = std::nanf("");
          break;
        case 1:
          x[i] = -inf;
          break;
        case 2:
          x[i] = trial % 3 == 0 ? inf : -0.0f;
          break;
        default:
          x[i] = static_cast<float>(small(gen));  // many ties
      }
    }
    std::mt19937_64 rng(1);
    float logprob = 0;
    EXPECT_EQ(SampleToken(logits, 0.0f, 0, rng, &logprob), std::max_element(x, x + vocab) - x)
        << "trial " << trial;
  }
}

TEST(SampleTokenTest, DrawsFollowTheTemperatureSoftmaxOverTheTopK) {
  const std::vector<float> values = {2.0f, 0.5f, 1.5f, -1.0f, 1.0f, -3.0f};
  const at::Tensor logits = at::tensor(values).reshape({1, -1});
  const float temperature = 0.7f;
  const int top_k = 4;  // tokens 0, 2, 4, 1
  std::vector<double> want(values.size(), 0.0);
  double total = 0;
  for (const int i : {0, 2, 4, 1}) total += want[i] = std::exp(values[i] / temperature);
  for (double& w : want) w /= total;
  std::mt19937_64 rng(7);
  std::vector<int> counts(values.size(), 0);
  constexpr int kDraws = 40000;
  for (int d = 0; d < kDraws; ++d) {
    float logprob = 0;
    const int64_t token = SampleToken(logits, temperature, top_k, rng, &logprob);
    ASSERT_GE(token, 0);
    ASSERT_LT(token, static_cast<int64_t>(values.size()));
    ++counts[token];
    ASSERT_NEAR(logprob, ReferenceLogprob(logits, token), 1e-6);
  }
  for (size_t i = 0; i < values.size(); ++i) {
    // Within 5 standard deviations of the binomial count.
    const double sd = std::sqrt(kDraws * want[i] * (1 - want[i]));
    EXPECT_NEAR(counts[i], kDraws * want[i], 5 * sd + 1) << "token " << i;
  }
  EXPECT_EQ(counts[3], 0);
  EXPECT_EQ(counts[5], 0);
}

}  // namespace
}  // namespace attnserve::server
