#include "server/inference.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/common/tensor_checks.h"
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

int64_t SampleToken(const at::Tensor& logits, float temperature, int top_k, std::mt19937_64& rng,
                    float* logprob) {
  at::Tensor row = logits.reshape({-1}).to(at::kDouble).contiguous();
  at::Tensor logprobs = at::log_softmax(row, 0);
  const double* lp = logprobs.data_ptr<double>();
  const int64_t vocab = row.numel();
  int64_t token = 0;
  if (temperature == 0) {
    token = std::max_element(lp, lp + vocab) - lp;
  } else {
    const int64_t k = top_k > 0 ? std::min<int64_t>(top_k, vocab) : vocab;
    std::vector<int64_t> order(vocab);
    for (int64_t i = 0; i < vocab; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
      return lp[a] > lp[b] || (lp[a] == lp[b] && a < b);
    });
    // Probabilities of the k candidates at this temperature, computed in float64 so the
    // draw is the same on every machine.
    std::vector<double> weights(k);
    const double top = lp[order[0]] / temperature;
    double total = 0;
    for (int64_t i = 0; i < k; ++i) {
      weights[i] = std::exp(lp[order[i]] / temperature - top);
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
  *logprob = static_cast<float>(lp[token]);
  return token;
}

}  // namespace attnserve::server
