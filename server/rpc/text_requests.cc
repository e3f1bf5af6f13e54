#include "server/rpc/text_requests.h"

#include <ATen/ATen.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"

namespace attnserve::server {

absl::Status NoTokenizerError(const model::Model& model, absl::string_view instead) {
  return absl::FailedPreconditionError(absl::StrCat("model '", model.name(), "' has no tokenizer (",
                                                    model.missing_text_reason(), "): ", instead));
}

absl::StatusOr<std::vector<int64_t>> TokenizeForModel(const model::Model& model,
                                                      absl::string_view text,
                                                      bool add_special_tokens, int64_t max_tokens,
                                                      const TextLimits& limits,
                                                      absl::string_view what) {
  const model::ModelText* mt = model.text();
  if (mt == nullptr) {
    return NoTokenizerError(model, absl::StrCat("send token ids instead of ", what));
  }
  if (static_cast<int64_t>(text.size()) > limits.max_text_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, " is ", text.size(), " bytes, above --max_text_bytes=", limits.max_text_bytes));
  }
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  absl::StatusOr<std::vector<int64_t>> ids =
      mt->tokenizer->Encode(text, add_special_tokens, max_tokens, what);
  if (!ids.ok() && ids.status().code() == absl::StatusCode::kResourceExhausted) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " is more than ", max_tokens, " tokens (--max_tokens_per_request)"));
  }
  if (ids.ok() && ids->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " gives no tokens"));
  }
  return ids;
}

at::Tensor IdsTensor(const std::vector<int64_t>& ids) {
  return at::tensor(ids, at::kLong).reshape({1, static_cast<int64_t>(ids.size())});
}

absl::StatusOr<TextDecision> ResolveText(const Policy& policy, const std::string& name,
                                         absl::string_view text, bool add_special_tokens,
                                         bool stream, int64_t max_tokens,
                                         const TextLimits& limits) {
  const bool automatic = name.empty() || name == "auto";
  // Every byte-level token holds at least one byte: the bytes bound the token count.
  ASSIGN_OR_RETURN(PolicyDecision first,
                   policy.Resolve(name, automatic ? static_cast<int64_t>(text.size()) : 0, stream));
  ASSIGN_OR_RETURN(std::vector<int64_t> ids,
                   TokenizeForModel(*first.model, text, add_special_tokens, max_tokens, limits));
  if (!automatic) return TextDecision{std::move(first), std::move(ids)};
  ASSIGN_OR_RETURN(PolicyDecision chosen,
                   policy.Resolve(name, static_cast<int64_t>(ids.size()), stream));
  const model::ModelText* a = first.model->text();
  const model::ModelText* b = chosen.model->text();
  if (b == nullptr || a->tokenizer != b->tokenizer) {
    ASSIGN_OR_RETURN(ids,
                     TokenizeForModel(*chosen.model, text, add_special_tokens, max_tokens, limits));
  }
  return TextDecision{std::move(chosen), std::move(ids)};
}

absl::StatusOr<std::shared_ptr<text::GenerationText>> AttachGenerationText(
    const model::Model& model, const GenerationStops& stops, const TextLimits& limits,
    scheduler::Job* job) {
  const model::ModelText* mt = model.text();
  if (!stops.stop_strings.empty() && mt == nullptr) {
    return NoTokenizerError(model, "stop strings need one (use stop_token_ids)");
  }
  RETURN_IF_ERROR(text::CheckStopStrings(stops.stop_strings, limits.max_stop_strings,
                                         limits.max_stop_string_bytes));
  text::GenerationTextOptions options;
  options.stop_strings = stops.stop_strings;
  for (const int64_t id : stops.stop_token_ids) {
    if (id < 0 || id >= model.vocab_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop token id ", id, " is outside [0, ", model.vocab_size(), ")"));
    }
    options.stop_token_ids.insert(id);
  }
  if (stops.stop_token_ids.empty() && !stops.ignore_eos && stops.text_prompt && mt != nullptr) {
    options.stop_token_ids.insert(mt->end_of_text_ids.begin(), mt->end_of_text_ids.end());
  }
  job->sampling.stop_tokens.assign(options.stop_token_ids.begin(), options.stop_token_ids.end());
  if (stops.text_prompt && mt != nullptr && mt->tokenizer->vocab_size() < model.vocab_size()) {
    job->sampling.vocab_limit = mt->tokenizer->vocab_size();
  }
  auto generation = std::make_shared<text::GenerationText>(
      mt != nullptr ? mt->tokenizer.get() : nullptr, std::move(options));
  job->stop_requested = [generation] {
    return generation->stop_reason() == text::StopReason::kStopString;
  };
  return generation;
}

}  // namespace attnserve::server
