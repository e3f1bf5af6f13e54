// Text in requests, as every protocol door handles it (protocol-neutral: ids and strings in,
// ids, tensors and GenerationText out): prompts given as text, the policy's choice for a text,
// and a generation's stop conditions and text pieces (server/text/generation_text.h).
//
// Threads: called on a gRPC thread for a small text, on the request work pool's for a large
// one (request_work_pool.h); never on the scheduler's thread. A text is refused above
// TextLimits::max_text_bytes before any work, and tokenizing stops as soon as it passes the
// token limit: one request costs at most ~175 ms of one core per MiB (a 1 MiB word without a
// space, bench/tokenizer_worst_case.py; prose: ~27 ms).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/model/model.h"
#include "server/policy.h"
#include "server/scheduler/job.h"
#include "server/text/generation_text.h"

namespace attnserve::server {

struct TextLimits {
  int64_t max_text_bytes = int64_t{1} << 20;  // --max_text_bytes
  int max_stop_strings = 16;                  // --max_stop_strings
  int max_stop_string_bytes = 256;            // --max_stop_string_bytes
};

// FAILED_PRECONDITION for a text request to a model without a tokenizer: "model 'NAME' has no
// tokenizer (REASON): INSTEAD", REASON the model's missing_text_reason().
absl::Status NoTokenizerError(const model::Model& model, absl::string_view instead);

// The ids of `text` with `model`'s tokenizer. FAILED_PRECONDITION naming the model when it has
// none; RESOURCE_EXHAUSTED above limits.max_text_bytes (before tokenizing) or above
// `max_tokens` ids; INVALID_ARGUMENT for invalid UTF-8 (with the byte offset) or an empty text.
// `what` names the field in messages, e.g. "text".
absl::StatusOr<std::vector<int64_t>> TokenizeForModel(const model::Model& model,
                                                      absl::string_view text,
                                                      bool add_special_tokens, int64_t max_tokens,
                                                      const TextLimits& limits,
                                                      absl::string_view what = "text");

// (1, n) int64 tensor of `ids` (n >= 1).
at::Tensor IdsTensor(const std::vector<int64_t>& ids);

// The policy's choice for a prompt given as text (`name` a model or "auto"), with the ids:
// for "auto", the text's bytes bound its length for a first choice, whose tokenizer counts the
// tokens; the policy then chooses with that count (and the text is tokenized again if that
// variant's tokenizer is another).
struct TextDecision {
  PolicyDecision decision;
  std::vector<int64_t> ids;
};
absl::StatusOr<TextDecision> ResolveText(const Policy& policy, const std::string& name,
                                         absl::string_view text, bool add_special_tokens,
                                         bool stream, int64_t max_tokens, const TextLimits& limits);

// A generation's stop conditions, as a request gives them.
struct GenerationStops {
  std::vector<std::string> stop_strings;
  // Empty: for a text prompt the model's end-of-text ids, unless ignore_eos; for a prompt of
  // token ids none (such clients stop on ids of their own, as before text existed).
  std::vector<int64_t> stop_token_ids;
  bool ignore_eos = false;
  // The prompt came as text: the model's end-of-text stops by default, and only ids the
  // tokenizer has are sampled (a token-id client keeps every id of the vocabulary).
  bool text_prompt = false;
};

// The GenerationText of a generation on `model`, also set on `job`: its sampling's stop tokens,
// for a text prompt its vocabulary limit (ids the tokenizer has), and its stop_requested hook
// (a stop string).
// INVALID_ARGUMENT for bad stop strings or stop ids outside the vocabulary; FAILED_PRECONDITION for
// stop strings on a model without a tokenizer. The job holds a reference; the door reads pieces
// from it in on_token.
absl::StatusOr<std::shared_ptr<text::GenerationText>> AttachGenerationText(
    const model::Model& model, const GenerationStops& stops, const TextLimits& limits,
    scheduler::Job* job);

}  // namespace attnserve::server
