// TokenSampler (server/scheduler/token_sampler.h) against a plain float64 rendering: the greedy
// token is the first maximum, the log-probability equals float64 log_softmax, and a draw
// follows the distribution that bias, penalties, temperature, top-k, top-p and min-p leave, on
// random shapes; its reported log-probabilities are that distribution's.
#include "server/scheduler/token_sampler.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tests/unit/test_util.h"

namespace attnserve::server::scheduler {
namespace {

// What SampleToken was: a sampler of temperature and top-k alone.
int64_t SampleToken(const at::Tensor& logits, float temperature, int top_k, uint64_t seed,
                    float* logprob) {
  Sampling s;
  s.temperature = temperature;
  s.top_k = top_k;
  s.seed = seed;
  TokenSampler sampler(s, {});
  const SampledToken t = sampler.Next(logits);
  *logprob = t.logprob;
  return t.token;
}

// log_softmax(x)[i] in float64, summed plainly.
double ReferenceLogprob(const at::Tensor& logits, int64_t i) {
  const at::Tensor x = logits.reshape({-1}).to(at::kDouble);
  const double* v = x.data_ptr<double>();
  double top = v[0], sum = 0;
  for (int64_t j = 0; j < x.numel(); ++j) top = std::max(top, v[j]);
  for (int64_t j = 0; j < x.numel(); ++j) sum += std::exp(v[j] - top);
  return v[i] - top - std::log(sum);
}

TEST(TokenSamplerTest, GreedyIsTheFirstMaximumWithItsFloat64Logprob) {
  for (const int64_t vocab : {1, 7, 16, 255, 4096, 50280}) {
    for (const double scale : {1.0, 8.0, 30.0}) {
      at::Tensor logits = testing::RandomTensor({1, vocab}, 17 + vocab, scale);
      float logprob = 1;
      const int64_t token = SampleToken(logits, 0.0f, 0, 1, &logprob);
      EXPECT_EQ(token, logits.reshape({-1}).argmax().item<int64_t>()) << vocab;
      EXPECT_NEAR(logprob, ReferenceLogprob(logits, token), 2e-6 * (1 + std::fabs(logprob)))
          << "vocab " << vocab << " scale " << scale;
    }
  }
  // Equal maxima: the first.
  at::Tensor tied = at::zeros({1, 40});
  tied.index_put_({0, 9}, 3.0f);
  tied.index_put_({0, 31}, 3.0f);
  float logprob = 0;
  EXPECT_EQ(SampleToken(tied, 0.0f, 0, 1, &logprob), 9);
  EXPECT_NEAR(logprob, ReferenceLogprob(tied, 9), 1e-6);
}

// The greedy token is std::max_element's on any logits: ties, infinities, NaNs (skipped, except
// a NaN first, which max_element keeps), lengths around the vector width.
TEST(TokenSamplerTest, GreedyIsMaxElementsChoiceOnAnyLogits) {
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
    float logprob = 0;
    EXPECT_EQ(SampleToken(logits, 0.0f, 0, 1, &logprob), std::max_element(x, x + vocab) - x)
        << "trial " << trial;
  }
}

// The distribution the sampler draws from, in float64, step by step as token_sampler.h lists
// them (a full sort instead of the sampler's partial ones): probability per id, 0 for those cut.
std::vector<double> ReferenceDistribution(const std::vector<float>& logits, const Sampling& s,
                                          const std::vector<int64_t>& prompt,
                                          const std::vector<int64_t>& generated) {
  int64_t vocab = static_cast<int64_t>(logits.size());
  if (s.vocab_limit > 0) vocab = std::min(vocab, s.vocab_limit);
  std::vector<double> x(logits.begin(), logits.begin() + vocab);
  // Ids past the (limited) vocabulary take no part, as in the sampler.
  auto in = [vocab](int64_t id) { return id >= 0 && id < vocab; };
  for (const auto& [id, bias] : s.logit_bias) {
    if (in(id)) x[id] += bias;
  }
  std::vector<bool> seen(vocab, false);
  for (const int64_t id : prompt) {
    if (in(id)) seen[id] = true;
  }
  for (const int64_t id : generated) {
    if (in(id)) seen[id] = true;
  }
  for (int64_t i = 0; i < vocab; ++i) {
    if (seen[i] && s.repetition_penalty != 1) {
      x[i] = x[i] > 0 ? x[i] / s.repetition_penalty : x[i] * s.repetition_penalty;
    }
  }
  std::vector<int> count(vocab, 0);
  for (const int64_t id : generated) {
    if (in(id)) ++count[id];
  }
  for (int64_t i = 0; i < vocab; ++i) {
    if (count[i] > 0) x[i] -= count[i] * s.frequency_penalty + s.presence_penalty;
  }
  std::vector<double> p(vocab);
  const double t = s.temperature == 0 ? 1.0 : s.temperature;
  const double top = *std::max_element(x.begin(), x.end());
  double total = 0;
  for (int64_t i = 0; i < vocab; ++i) total += p[i] = std::exp((x[i] - top) / t);
  for (double& v : p) v /= total;
  if (s.temperature == 0) return p;
  std::vector<int64_t> order(vocab);
  for (int64_t i = 0; i < vocab; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
  std::vector<bool> keep(vocab, true);
  if (s.top_k > 0) {
    for (int64_t r = s.top_k; r < vocab; ++r) keep[order[r]] = false;
  }
  double in_k = 0;
  for (int64_t i = 0; i < vocab; ++i) in_k += keep[i] ? p[i] : 0;
  if (s.top_p < 1) {
    double sum = 0;
    bool reached = false;
    for (const int64_t id : order) {
      if (!keep[id]) continue;
      if (reached) {
        keep[id] = false;
        continue;
      }
      sum += p[id];
      reached = sum >= s.top_p * in_k;
    }
  }
  const double most = p[order[0]];
  for (int64_t i = 0; i < vocab; ++i) {
    if (p[i] < s.min_p * most) keep[i] = false;
  }
  double kept = 0;
  for (int64_t i = 0; i < vocab; ++i) kept += keep[i] ? p[i] : 0;
  for (int64_t i = 0; i < vocab; ++i) p[i] = keep[i] ? p[i] / kept : 0;
  return p;
}

struct SamplerCase {
  int64_t vocab;
  Sampling sampling;
};

// Random shapes and settings: each step's draws follow the reference distribution (within 5
// standard deviations of the binomial counts), and the reported log-probabilities of the token
// and of the top alternatives are that distribution's.
TEST(TokenSamplerTest, DrawsFollowTheFloat64ReferenceDistribution) {
  std::vector<SamplerCase> cases;
  auto add = [&](int64_t vocab, auto&& set) {
    SamplerCase c{vocab, {}};
    set(c.sampling);
    cases.push_back(c);
  };
  add(6, [](Sampling& s) { s.temperature = 0.7f, s.top_k = 4; });
  add(50, [](Sampling& s) { s.temperature = 1.0f, s.top_p = 0.8f; });
  add(300, [](Sampling& s) { s.temperature = 1.3f, s.top_p = 0.5f, s.top_logprobs = 5; });
  add(64, [](Sampling& s) { s.temperature = 0.9f, s.min_p = 0.1f, s.top_logprobs = 20; });
  add(40, [](Sampling& s) {
    s.temperature = 1.0f, s.top_k = 20, s.top_p = 0.9f, s.min_p = 0.05f, s.top_logprobs = 3;
  });
  add(33, [](Sampling& s) {
    s.temperature = 0.8f, s.repetition_penalty = 1.3f, s.presence_penalty = 0.5f;
    s.frequency_penalty = 0.7f, s.logit_bias = {{3, 2.5f}, {7, -100.0f}}, s.top_logprobs = 4;
  });
  add(90, [](Sampling& s) { s.temperature = 1.1f, s.vocab_limit = 60, s.top_p = 0.95f; });
  constexpr int kDraws = 20000;
  for (size_t c = 0; c < cases.size(); ++c) {
    const SamplerCase& sc = cases[c];
    const at::Tensor logits = testing::RandomTensor({1, sc.vocab}, 100 + c, 1.5);
    const std::vector<float> values(logits.data_ptr<float>(), logits.data_ptr<float>() + sc.vocab);
    const std::vector<int64_t> prompt = {1, 3, 3, 5};
    const std::vector<int64_t> generated = {5, 2, 2, 9};
    Sampling s = sc.sampling;
    s.seed = 11 + c;
    TokenSampler sampler(s, prompt);
    for (const int64_t g : generated) sampler.Accept(g);
    const std::vector<double> want = ReferenceDistribution(values, s, prompt, generated);
    std::vector<int> counts(want.size(), 0);
    for (int d = 0; d < kDraws; ++d) {
      const SampledToken t = sampler.Next(logits);
      ASSERT_GE(t.token, 0);
      ASSERT_LT(t.token, static_cast<int64_t>(want.size()));
      ASSERT_GT(want[t.token], 0) << "case " << c << " drew a token it should have cut";
      ++counts[t.token];
      if (d < 3) {
        EXPECT_NEAR(t.logprob, std::log(want[t.token]), 1e-5) << "case " << c;
        ASSERT_LE(t.top.size(), static_cast<size_t>(s.top_logprobs));
        std::vector<double> sorted = want;
        std::sort(sorted.rbegin(), sorted.rend());
        for (size_t r = 0; r < t.top.size(); ++r) {
          EXPECT_NEAR(t.top[r].logprob, std::log(sorted[r]), 1e-5) << "case " << c << " rank " << r;
          EXPECT_NEAR(want[t.top[r].token], sorted[r], 1e-12) << "case " << c << " rank " << r;
        }
        int64_t positive = 0;
        for (const double w : want) positive += w > 0;
        EXPECT_EQ(static_cast<int64_t>(t.top.size()), std::min<int64_t>(positive, s.top_logprobs));
      }
    }
    for (size_t i = 0; i < want.size(); ++i) {
      const double sd = std::sqrt(kDraws * want[i] * (1 - want[i]));
      EXPECT_NEAR(counts[i], kDraws * want[i], 5 * sd + 1) << "case " << c << " token " << i;
    }
  }
}

// Greedy with bias and penalties: the first maximum of the processed logits, its log-probability
// and the alternatives' under their softmax at temperature 1.
TEST(TokenSamplerTest, GreedyTakesTheProcessedLogitsMaximum) {
  const at::Tensor logits = testing::RandomTensor({1, 120}, 5, 2.0);
  const std::vector<float> values(logits.data_ptr<float>(), logits.data_ptr<float>() + 120);
  const int64_t best = logits.argmax().item<int64_t>();
  Sampling s;
  s.logit_bias = {{best, -100.0f}, {17, 1.0f}};
  s.frequency_penalty = 1.5f;
  s.repetition_penalty = 2.0f;
  s.top_logprobs = 20;
  TokenSampler sampler(s, {4, 8});
  sampler.Accept(30);
  const std::vector<double> want = ReferenceDistribution(values, s, {4, 8}, {30});
  const SampledToken t = sampler.Next(logits);
  EXPECT_EQ(t.token, std::max_element(want.begin(), want.end()) - want.begin());
  EXPECT_NE(t.token, best);
  EXPECT_NEAR(t.logprob, std::log(want[t.token]), 2e-6);
  ASSERT_EQ(t.top.size(), 20u);
  EXPECT_EQ(t.top[0].token, t.token);
  for (size_t r = 1; r < t.top.size(); ++r) EXPECT_LE(t.top[r].logprob, t.top[r - 1].logprob);
  for (const TokenLogprob& a : t.top) EXPECT_NEAR(a.logprob, std::log(want[a.token]), 2e-6);
}

// The same seed draws the same tokens; another seed other ones.
TEST(TokenSamplerTest, SeedsAreReproducible) {
  const at::Tensor logits = testing::RandomTensor({1, 500}, 9, 0.5);
  auto draw = [&](uint64_t seed) {
    Sampling s;
    s.temperature = 1.0f;
    s.top_p = 0.95f;
    s.seed = seed;
    TokenSampler sampler(s, {});
    std::vector<int64_t> out;
    for (int i = 0; i < 50; ++i) {
      out.push_back(sampler.Next(logits).token);
      sampler.Accept(out.back());
    }
    return out;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
}

TEST(TokenSamplerTest, ValidateNamesTheField) {
  auto error = [](auto&& set) {
    Sampling s;
    set(s);
    return std::string(ValidateSampling(s, 100).message());
  };
  EXPECT_EQ(error([](Sampling&) {}), "");
  EXPECT_THAT(error([](Sampling& s) { s.top_p = 0; }), ::testing::HasSubstr("top_p"));
  EXPECT_THAT(error([](Sampling& s) { s.min_p = 1.5f; }), ::testing::HasSubstr("min_p"));
  EXPECT_THAT(error([](Sampling& s) { s.temperature = -1; }), ::testing::HasSubstr("temperature"));
  EXPECT_THAT(error([](Sampling& s) { s.temperature = std::nanf(""); }),
              ::testing::HasSubstr("temperature"));
  EXPECT_THAT(error([](Sampling& s) { s.presence_penalty = 3; }),
              ::testing::HasSubstr("presence_penalty"));
  EXPECT_THAT(error([](Sampling& s) { s.repetition_penalty = 0; }),
              ::testing::HasSubstr("repetition_penalty"));
  EXPECT_THAT(error([](Sampling& s) { s.top_logprobs = 21; }),
              ::testing::HasSubstr("top_logprobs"));
  EXPECT_THAT(error([](Sampling& s) {
                s.logit_bias = {{100, 1.0f}};
              }),
              ::testing::HasSubstr("logit_bias: token id 100 is outside the vocabulary"));
  EXPECT_THAT(error([](Sampling& s) {
                s.logit_bias = {{5, 101.0f}};
              }),
              ::testing::HasSubstr("logit_bias[5]"));
}

}  // namespace
}  // namespace attnserve::server::scheduler
