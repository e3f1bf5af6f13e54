#include "server/inference.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/tensor_checks.h"
#include "server/scheduler/token_sampler.h"
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

absl::StatusOr<scheduler::Sampling> SamplingOf(const v1::GenerateSpec& spec, int64_t vocab) {
  scheduler::Sampling s;
  s.temperature = spec.temperature();
  s.top_k = spec.top_k();
  s.seed = spec.seed();
  if (spec.top_p() != 0) s.top_p = spec.top_p();
  s.min_p = spec.min_p();
  if (spec.repetition_penalty() != 0) s.repetition_penalty = spec.repetition_penalty();
  s.presence_penalty = spec.presence_penalty();
  s.frequency_penalty = spec.frequency_penalty();
  for (const auto& [id, bias] : spec.logit_bias()) s.logit_bias.emplace_back(id, bias);
  std::sort(s.logit_bias.begin(), s.logit_bias.end());  // a map's order is unspecified
  s.top_logprobs = spec.top_logprobs();
  if (s.top_logprobs != 0 && spec.stream_interval() > 1) {
    return absl::InvalidArgumentError(
        "top_logprobs needs stream_interval 0 or 1 (GeneratedTokens carry no alternatives)");
  }
  if (absl::Status valid = scheduler::ValidateSampling(s, vocab); !valid.ok()) return valid;
  return s;
}

}  // namespace attnserve::server
