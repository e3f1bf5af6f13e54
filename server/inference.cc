#include "server/inference.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/tensor_checks.h"
#include "kernels/common/vector_math.h"
#include "server/tensor_proto.h"

namespace attnserve::server {

absl::StatusOr<at::Tensor> TokensTensor(const google::protobuf::RepeatedField<int64_t>& tokens,
                                        int64_t max_tokens) {
  if (absl::Status count = ValidateTokenCount(tokens, max_tokens); !count.ok()) return count;
  return kernels::GuardTorch("TokensTensor", [&]() -> absl::StatusOr<at::Tensor> {
    at::Tensor t = at::empty({1, tokens.size()}, at::kLong);
    std::copy(tokens.begin(), tokens.end(), t.data_ptr<int64_t>());
    return t;
  });
}

model::OutputKind ModelOutputKind(const v1::OutputSpec& spec) {
  switch (spec.kind()) {
    case v1::OUTPUT_KIND_ALL_LOGITS:
      return model::OutputKind::kAllLogits;
    case v1::OUTPUT_KIND_HIDDEN:
      return model::OutputKind::kHidden;
    default:
      return model::OutputKind::kLastLogits;
  }
}

absl::Status FillOutputs(const at::Tensor& result, const v1::OutputSpec& spec, v1::Outputs* out) {
  switch (spec.kind()) {
    case v1::OUTPUT_KIND_NONE:
      return absl::OkStatus();
    case v1::OUTPUT_KIND_TOP_K:
      return kernels::GuardTorch("top-k", [&]() -> absl::Status {
        const int64_t k = std::min<int64_t>(spec.top_k() > 0 ? spec.top_k() : 5, result.size(-1));
        at::Tensor logprobs = at::log_softmax(result[0], -1);
        auto [values, indices] = at::topk(logprobs, k);
        for (int64_t i = 0; i < k; ++i) {
          v1::TokenProbability* p = out->add_top_k();
          p->set_token(indices[i].item<int64_t>());
          p->set_logprob(values[i].item<float>());
        }
        return absl::OkStatus();
      });
    default:
      return TensorToProto(result[0], out->mutable_tensor());
  }
}

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

}  // namespace

int64_t SampleToken(const at::Tensor& logits, float temperature, int top_k, std::mt19937_64& rng,
                    float* logprob) {
  const at::Tensor row = logits.reshape({-1}).to(at::kFloat).contiguous();
  const float* x = row.data_ptr<float>();
  const int64_t vocab = row.numel();
  const int64_t best = FirstMaximum(x, vocab);  // the first of equal maxima
  int64_t token = best;
  if (temperature != 0) {
    const int64_t k = top_k > 0 ? std::min<int64_t>(top_k, vocab) : vocab;
    std::vector<int64_t> order(vocab);
    for (int64_t i = 0; i < vocab; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int64_t a, int64_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
    // Probabilities of the k candidates at this temperature, computed in float64 from the
    // logits (exact in float64) so the draw is the same on every machine.
    std::vector<double> weights(k);
    const double top = static_cast<double>(x[order[0]]);
    double total = 0;
    for (int64_t i = 0; i < k; ++i) {
      weights[i] = std::exp((static_cast<double>(x[order[i]]) - top) / temperature);
      total += weights[i];
    }
    const double u = std::uniform_real_distribution<double>(0.0, total)(rng);
    double acc = 0;
    token = order[k - 1];
    for (int64_t i = 0; i < k; ++i) {
      acc += weights[i];
      if (u < acc) {
        token = order[i];
        break;
      }
    }
  }
  *logprob = static_cast<float>(static_cast<double>(x[token]) - LogSumExp(x, vocab, x[best]));
  return token;
}

}  // namespace attnserve::server
