#include "server/scheduler/token_sampler.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/common/vector_math.h"

namespace attnserve::server::scheduler {
namespace {

// log Σ exp(x[i]) for `top` = max x: float32 exponentials of x[i] - top (vector_math.h's,
// relative error below 2e-7), summed in float per block of 256 and the blocks in float64. A
// full log_softmax in float64 through ATen cost ~1.5 µs per thousand logits a token.
ATTNSERVE_MULTIVERSION
double LogSumExp(const float* x, int64_t n, float top) {
  using kernels::vec::Float16;
  using kernels::vec::kLanes;
  constexpr int64_t kBlock = 16 * kLanes;
  double total = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t end = std::min(n, b + kBlock);
    Float16 acc = Float16{};
    int64_t i = b;
    for (; i + kLanes <= end; i += kLanes) {
      acc += kernels::vec::Exp(kernels::vec::Load(x + i) - top);
    }
    double block = kernels::vec::Sum(acc);
    for (; i < end; ++i) block += std::exp(static_cast<double>(x[i]) - top);
    total += block;
  }
  return static_cast<double>(top) + std::log(total);
}

// std::max_element(x, x + n) - x, vectorised: the first of equal maxima under `<` (a NaN never
// wins, except at x[0], where max_element keeps it). The scalar scan took ~2.5% of a 64-session
// int8 server's samples (64 rows of 50280 logits a step).
ATTNSERVE_MULTIVERSION
int64_t FirstMaximum(const float* x, int64_t n) {
  using kernels::vec::Float16;
  using kernels::vec::kLanes;
  if (n <= 0 || x[0] != x[0]) return 0;
  Float16 top = kernels::vec::Broadcast(x[0]);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const Float16 v = kernels::vec::Load(x + i);
    top = v > top ? v : top;  // a NaN lane compares false and keeps top
  }
  float best = x[0];
  for (int l = 0; l < kLanes; ++l) best = top[l] > best ? top[l] : best;
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  for (int64_t j = 0; j < n; ++j) {
    if (x[j] == best) return j;  // best is a value of x, never NaN
  }
  return 0;
}

absl::Status OutOfRange(const char* field, double value, const char* range) {
  return absl::InvalidArgumentError(absl::StrCat(field, " = ", value, " is outside ", range));
}

}  // namespace

absl::Status ValidateSampling(const Sampling& s, int64_t vocab) {
  // `!(a <= x)` rather than `x < a`: a NaN is outside every range.
  if (!(s.temperature >= 0) || std::isinf(s.temperature)) {
    return OutOfRange("temperature", s.temperature, "[0, inf) (0: greedy)");
  }
  if (s.top_k < 0) return OutOfRange("top_k", s.top_k, "[0, vocab) (0: all)");
  if (!(s.top_p > 0 && s.top_p <= 1)) return OutOfRange("top_p", s.top_p, "(0, 1]");
  if (!(s.min_p >= 0 && s.min_p <= 1)) return OutOfRange("min_p", s.min_p, "[0, 1]");
  if (!(s.repetition_penalty > 0) || std::isinf(s.repetition_penalty)) {
    return OutOfRange("repetition_penalty", s.repetition_penalty, "(0, inf) (1: none)");
  }
  if (!(s.presence_penalty >= -2 && s.presence_penalty <= 2)) {
    return OutOfRange("presence_penalty", s.presence_penalty, "[-2, 2]");
  }
  if (!(s.frequency_penalty >= -2 && s.frequency_penalty <= 2)) {
    return OutOfRange("frequency_penalty", s.frequency_penalty, "[-2, 2]");
  }
  if (s.top_logprobs < 0 || s.top_logprobs > kMaxTopLogprobs) {
    return OutOfRange("top_logprobs", s.top_logprobs, "[0, 20]");
  }
  for (const auto& [id, bias] : s.logit_bias) {
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias: token id ", id, " is outside the vocabulary [0, ", vocab, ")"));
    }
    if (!(bias >= -100 && bias <= 100)) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias[", id, "] = ", bias, " is outside [-100, 100]"));
    }
  }
  return absl::OkStatus();
}

TokenSampler::TokenSampler(const Sampling& sampling, const std::vector<int64_t>& prompt)
    : sampling_(sampling), rng_(sampling.seed) {
  if (sampling_.repetition_penalty != 1) {
    for (const int64_t id : prompt) {
      if (in_repeated_.emplace(id, true).second) repeated_.push_back(id);
    }
  }
}

bool TokenSampler::penalized() const {
  return !sampling_.logit_bias.empty() || sampling_.repetition_penalty != 1 ||
         sampling_.presence_penalty != 0 || sampling_.frequency_penalty != 0;
}

void TokenSampler::Accept(int64_t token) {
  if (sampling_.presence_penalty != 0 || sampling_.frequency_penalty != 0) {
    ++generated_counts_[token];
  }
  if (sampling_.repetition_penalty != 1 && in_repeated_.emplace(token, true).second) {
    repeated_.push_back(token);
  }
}

void TokenSampler::ApplyBiasAndPenalties(float* x, int64_t n) const {
  for (const auto& [id, bias] : sampling_.logit_bias) {
    if (id < n) x[id] += bias;
  }
  const float r = sampling_.repetition_penalty;
  if (r != 1) {
    for (const int64_t id : repeated_) {
      if (id >= 0 && id < n) x[id] = x[id] > 0 ? x[id] / r : x[id] * r;
    }
  }
  for (const auto& [id, count] : generated_counts_) {
    if (id >= 0 && id < n) {
      x[id] -= static_cast<float>(count) * sampling_.frequency_penalty + sampling_.presence_penalty;
    }
  }
}

SampledToken TokenSampler::Next(const at::Tensor& logits) {
  const at::Tensor row = logits.reshape({-1}).to(at::kFloat).contiguous();
  int64_t vocab = row.numel();
  if (sampling_.vocab_limit > 0) vocab = std::min(vocab, sampling_.vocab_limit);
  const float* x = row.data_ptr<float>();
  if (penalized()) {
    work_.assign(x, x + vocab);
    ApplyBiasAndPenalties(work_.data(), vocab);
    x = work_.data();
  }
  SampledToken out;
  const int top_n = std::min<int64_t>(sampling_.top_logprobs, vocab);
  if (sampling_.temperature == 0) {
    out.token = FirstMaximum(x, vocab);
    const double log_total = LogSumExp(x, vocab, x[out.token]);
    out.logprob = static_cast<float>(static_cast<double>(x[out.token]) - log_total);
    if (top_n > 0) {
      order_.resize(vocab);
      for (int64_t i = 0; i < vocab; ++i) order_[i] = i;
      std::partial_sort(
          order_.begin(), order_.begin() + top_n, order_.end(),
          [&](int64_t a, int64_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
      for (int i = 0; i < top_n; ++i) {
        out.top.push_back(
            {order_[i], static_cast<float>(static_cast<double>(x[order_[i]]) - log_total)});
      }
    }
    return out;
  }
  // Weights exp((x - max) / T) in float64: exact inputs, the same result on every machine.
  const double inv_t = 1.0 / static_cast<double>(sampling_.temperature);
  const double top = static_cast<double>(x[FirstMaximum(x, vocab)]);
  weights_.resize(vocab);
  double total = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    total += weights_[i] = std::exp((static_cast<double>(x[i]) - top) * inv_t);
  }
  auto more_likely = [&](int64_t a, int64_t b) {
    return weights_[a] > weights_[b] || (weights_[a] == weights_[b] && a < b);
  };
  order_.resize(vocab);
  for (int64_t i = 0; i < vocab; ++i) order_[i] = i;
  // The candidates: order_[0, kept), sorted most likely first as far as `sorted`.
  int64_t kept = vocab, sorted = 0;
  if (sampling_.top_k > 0 && sampling_.top_k < vocab) {
    kept = sampling_.top_k;
    std::partial_sort(order_.begin(), order_.begin() + kept, order_.end(), more_likely);
    sorted = kept;
    total = 0;
    for (int64_t i = 0; i < kept; ++i) total += weights_[order_[i]];
  }
  if (sampling_.top_p < 1) {
    // Sorts as far as the nucleus reaches: 64 candidates, then 4x more until it is covered.
    const double want = static_cast<double>(sampling_.top_p) * total;
    int64_t span = std::min<int64_t>(kept, 64);
    for (;;) {
      if (span > sorted) {
        std::partial_sort(order_.begin() + sorted, order_.begin() + span, order_.begin() + kept,
                          more_likely);
        sorted = span;
      }
      double sum = 0;
      int64_t i = 0;
      for (; i < sorted; ++i) {
        sum += weights_[order_[i]];
        if (sum >= want) break;
      }
      if (i < sorted) {
        kept = i + 1;
        total = sum;
        break;
      }
      if (sorted == kept) break;  // float64 sums can fall short of `want` by rounding: keep all
      span = std::min(kept, span * 4);
    }
  }
  if (sampling_.min_p > 0) {
    // The most likely candidate's weight is exp(0) = 1 before any cut (it always stays).
    const double floor = static_cast<double>(sampling_.min_p);
    int64_t w = 0;
    total = 0;
    for (int64_t i = 0; i < kept; ++i) {
      if (weights_[order_[i]] >= floor) {
        order_[w++] = order_[i];
        total += weights_[order_[i]];
      }
    }
    kept = w;
    sorted = std::min(sorted, kept);  // a sorted prefix stays sorted and in front
  }
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
  double acc = 0;
  out.token = order_[kept - 1];
  for (int64_t i = 0; i < kept; ++i) {
    acc += weights_[order_[i]];
    if (u < acc) {
      out.token = order_[i];
      break;
    }
  }
  const double log_total = std::log(total);
  out.logprob = static_cast<float>(std::log(weights_[out.token]) - log_total);
  if (top_n > 0) {
    const int64_t n = std::min<int64_t>(top_n, kept);
    if (sorted < n) {
      std::partial_sort(order_.begin() + sorted, order_.begin() + n, order_.begin() + kept,
                        more_likely);
    }
    for (int64_t i = 0; i < n; ++i) {
      out.top.push_back({order_[i], static_cast<float>(std::log(weights_[order_[i]]) - log_total)});
    }
  }
  return out;
}

}  // namespace attnserve::server::scheduler
